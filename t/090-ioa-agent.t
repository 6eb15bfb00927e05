# t/090-ioa-agent.t -- workers/build/ioa-agent, the reference agent runtime,
# against a real hub: it registers, follows its SSE inbox, answers IoA task
# assignments with INFORM_TASK_PROGRESS then INFORM_TASK_RESULT (with
# "task_status"), through its exec adapter (a program, the task on stdin)
# or its http adapter (IoA's tool-agent POST /run), and resumes after the
# hub went away without missing or repeating anything.
#
#   make -C workers/agent  # builds workers/build/ioa-agent (this file does not)
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/090-ioa-agent.t
#
# IOA_AGENT_BIN=/path/to/ioa-agent runs another build (e.g. a sanitizer one,
# see workers/agent/Makefile).
#
# Each block starts from an empty Redis, starts its agents as child
# processes (their logs go to a scratch directory, and are shown when a block
# fails), and drives the conversation from "Alice", a WebSocket agent as IoA
# clients are.  Envelopes are compared whole: every field the agent writes,
# with the hub's id, sender and timestamp.  Agents are stopped by PID at the
# end of each block (a guard object), and in END whatever is left.

use strict;
use warnings;

use Cwd ();
use File::Basename ();
use File::Path ();

our $AgentBin;

BEGIN {
    $AgentBin = $ENV{IOA_AGENT_BIN}
                || Cwd::abs_path(File::Basename::dirname(__FILE__)
                                 . '/../workers') . '/build/ioa-agent';
    if (!-x $AgentBin) {
        require Test::More;
        Test::More::plan(skip_all => "$AgentBin is not built; run "
                                   . "`make -C workers/agent` first");
    }
}

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(register teamup envelope wait_health json fresh_hub);
use IoaTest::Api;
use IoaTest::Instance;
use IoaTest::Runtime;   # agent, alice_room, assign, recv_from, strip, ...: see there
use IO::Select ();
use IO::Socket::INET ();
use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

no_root_location();
log_level('info');

# ------------------------------------------------------------------ helpers
# (scenarios are compiled in package main, so they call these directly)

sub fresh { fresh_hub(shift) }

# $n envelopes not from Alice, grouped by sender: { name => [envelopes] }.
sub recv_by_sender {
    my ($alice, $n, $secs, @agents) = @_;
    my %by;
    my ($got, $deadline) = (0, time + ($secs // 10));
    while ($got < $n) {
        my $left = $deadline - time;
        my $m = $left > 0 ? $alice->recv($left) : undef;
        if (!$m) {
            Test::More::diag("agent log:\n" . $_->log) for @agents;
            die "recv_by_sender: got $got of $n\n";
        }
        next if ($m->{sender} // '') eq 'Alice';
        push @{ $by{ $m->{sender} // '?' } }, $m;
        $got++;
    }
    return \%by;
}

sub log_key { "ioa:{room:$_[0]}:log" }

# [[id, sender, type], ...] of the room log, in Stream order.
sub room_log {
    my ($cid) = @_;
    my $r = redis_cmd('XRANGE', log_key($cid), '-', '+');
    return [ map {
        my $e = json->decode({ @{ $_->[1] } }->{e});
        [ $_->[0], $e->{sender}, $e->{type}, $e->{task_id} // '' ]
    } @$r ];
}

# A tiny IoA tool agent (POST /run) for the http adapter: forks, serves
# each connection in its own child, records every request to $dir/req-N.
# What it answers depends on the task text:
#   "json"   -> 200 application/json {"task_id":..,"conclusion":"json says: <uid>"}
#   "string" -> 200 application/json "a JSON string"
#   "plain"  -> 200 text/plain "plain answer\n"
#   "fail"   -> 500 text/plain "internal trouble"
#   "slow"   -> after 3 s, 200 "too late"
sub tool_server {
    my ($dir) = @_;
    File::Path::remove_tree($dir);
    mkdir $dir;
    my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Listen => 16, ReuseAddr => 1, Proto => 'tcp')
        or die "tool server: $!\n";
    my $port = $l->sockport;
    my $pid = fork // die "fork: $!\n";
    if ($pid == 0) {
        _server_child();
        my $n = 0;
        while (my $c = $l->accept) {
            $n++;
            my $kid = fork;
            if (defined $kid && $kid == 0) {
                _tool_serve($c, "$dir/req-$n");
                POSIX::_exit(0);
            }
            close $c;
        }
        POSIX::_exit(0);
    }
    close $l;
    $Children{$pid} = 'tool server';
    return ($port, $pid);
}

sub _tool_serve {
    my ($c, $file) = @_;
    binmode $c;
    my $in = '';
    while ($in !~ /\r\n\r\n/) {
        sysread($c, $in, 65536, length $in) or return;
    }
    my ($head, $body) = split /\r\n\r\n/, $in, 2;
    my ($len) = $head =~ /^Content-Length:\s*(\d+)/mi;
    while (length $body < ($len // 0)) {
        sysread($c, $body, 65536, length $body) or last;
    }
    open my $fh, '>', "$file.tmp";
    binmode $fh;
    print $fh "$head\r\n\r\n$body";
    close $fh;
    rename "$file.tmp", $file;
    my $req = eval { json->decode($body) } || {};
    my $desc = $req->{task_desc} // '';
    my ($code, $type, $out) = (200, 'text/plain', "plain answer\n");
    if ($desc =~ /json/) {
        ($type, $out) = ('application/json', json->encode({
            task_id => 'ignored', steps => [], conclusion => "json says: $req->{uid}" }));
    } elsif ($desc =~ /string/) {
        ($type, $out) = ('application/json', '"a JSON string"');
    } elsif ($desc =~ /fail/) {
        ($code, $out) = (500, 'internal trouble');
    } elsif ($desc =~ /slow/) {
        sleep 3;
        $out = 'too late';
    }
    print $c "HTTP/1.1 $code X\r\nContent-Type: $type\r\nContent-Length: "
           . length($out) . "\r\nConnection: close\r\n\r\n$out";
    close $c;
}

# A scripted stand-in for the hub, for what a real one does not do on
# demand: events cut at every byte, CR and CRLF line ends, a re-sent
# envelope, a post that was stored although its answer was lost.  Every
# connection is served by its own child; state is kept in files in $dir:
#   inbox-N     the head of the N-th inbox request
#   post-N      the N-th POST /agents/.../messages body (all "stored")
#   record-N    the N-th POST /fetch_chat_record body
# $inbox->($conn, $n) writes the N-th inbox stream (after the 200 head).
# The first post is answered 503, the way a hub whose Redis answered too
# late does: stored, but the agent cannot know.
sub fake_hub {
    my ($dir, $inbox) = @_;
    File::Path::remove_tree($dir);
    mkdir $dir;
    my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Listen => 16, ReuseAddr => 1, Proto => 'tcp')
        or die "fake hub: $!\n";
    my $port = $l->sockport;
    my $pid = fork // die "fork: $!\n";
    if ($pid == 0) {
        _server_child();
        while (my $c = $l->accept) {
            my $kid = fork;
            if (defined $kid && $kid == 0) {
                $SIG{PIPE} = 'IGNORE';
                _fake_serve($c, $dir, $inbox);
                POSIX::_exit(0);
            }
            close $c;
        }
        POSIX::_exit(0);
    }
    close $l;
    $Children{$pid} = 'fake hub';
    return ($port, $pid);
}

# the next number of a counter file (flock: connections run in parallel)
sub _fake_next {
    my ($file) = @_;
    open my $fh, '+>>', $file or die "$file: $!";
    flock $fh, 2;
    seek $fh, 0, 0;
    my $n = (<$fh> // 0) + 1;
    truncate $fh, 0;
    print $fh $n;
    close $fh;
    return $n;
}

sub _fake_write {
    my ($file, $data) = @_;
    open my $fh, '>', "$file.tmp" or die;
    binmode $fh;
    print $fh $data;
    close $fh;
    rename "$file.tmp", $file;
}

sub _fake_serve {
    my ($c, $dir, $inbox) = @_;
    binmode $c;
    $c->autoflush(1);
    my $in = '';
    while ($in !~ /\r\n\r\n/) {
        sysread($c, $in, 65536, length $in) or return;
    }
    my ($head, $body) = split /\r\n\r\n/, $in, 2;
    my ($method, $path) = $head =~ m{^(\S+) (\S+)};
    my ($len) = $head =~ /^Content-Length:\s*(\d+)/mi;
    while (length $body < ($len // 0)) {
        sysread($c, $body, 65536, length $body) or last;
    }
    my $reply = sub {
        my ($code, $out) = @_;
        print $c "HTTP/1.1 $code X\r\nContent-Type: application/json\r\nContent-Length: "
               . length($out) . "\r\nConnection: close\r\n\r\n$out";
    };
    if ($path eq '/register') {
        $reply->(200, '{"status":"created","created_at":"2025-01-01-00-00-00"}');
    } elsif ($path =~ m{^/agents/[^/]+/inbox}) {
        my $n = _fake_next("$dir/inbox.n");
        _fake_write("$dir/inbox-$n", $head);
        print $c "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
               . "Connection: close\r\n\r\n";
        $inbox->($c, $n);
    } elsif ($path =~ m{^/agents/[^/]+/messages$}) {
        my $n = _fake_next("$dir/post.n");
        _fake_write("$dir/post-$n", $body);
        my $e = eval { json->decode($body) } || {};
        $reply->($n == 1 ? 503 : 200,
                 $n == 1 ? '{"op":"error","code":"redis_unavailable","message":"late"}'
                         : qq({"id":"$n-0","comm_id":"$e->{comm_id}"}));
    } elsif ($path eq '/fetch_chat_record') {
        my $n = _fake_next("$dir/record.n");
        _fake_write("$dir/record-$n", $body);
        my $cid = (eval { json->decode($body) } || {})->{comm_id} // '';
        my @rec;
        for my $i (1 .. 100) {
            my $p = slurp("$dir/post-$i") // last;
            my $e = json->decode($p);
            push @rec, { %$e, id => "$i-0", sender => 'Fake', timestamp => 1 }
                if $e->{comm_id} eq $cid;
        }
        $reply->(200, json->encode({ $cid => { comm_id => $cid, agent_names => [],
                                               team_name => undef, chat_record => \@rec } }));
    } else {
        $reply->(404, '{"op":"error","code":"unknown_endpoint"}');
    }
    close $c;
}

package main;

run_tests();

__DATA__

=== TEST 1: exec adapter: an async assignment gets progress, then the program's result
Exec adapter, async assignment from a WebSocket agent: progress then result
(uppercased by `tr a-z A-Z`, task_status completed), exact envelopes, in
Stream order.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = agent($ctx, name => 'Shouter', desc => 'uppercases any text',
                   tags => ['uppercase', 'text'], exec => ['tr', 'a-z', 'A-Z']);
    ok wait_online($ctx, 'Shouter'), 'the agent is online' or diag $ag->log;

    my ($alice, $cid) = alice_room($ctx, 'Shouter');
    assign($alice, $cid, ['Shouter'], 'Shouter, please shout: hello world',
           task_abstract => 'Shout');
    my ($a1) = recv_from($alice, 'Alice', 1, 5);
    my ($p, $r) = recv_from($alice, 'Shouter', 2, 10, $ag);

    my $tid = $p->{task_id} // '';
    like $tid, qr/^[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}$/, 'task_id is a uuid4 hex';
    is_deeply strip($p), {
        sender => 'Shouter', comm_id => $cid, content => progress_text('Shout'),
        next_speaker => ['Alice'], state => 1, type => 8, task_id => $tid,
        task_desc => 'Shouter, please shout: hello world', task_abstract => 'Shout',
    }, 'INFORM_TASK_PROGRESS to the assigner' or diag $p->{_raw};
    is_deeply strip($r), {
        sender => 'Shouter', comm_id => $cid, content => result_text('Shout', 'is completed'),
        next_speaker => '', state => 1, type => 7, task_id => $tid,
        task_desc => 'Shouter, please shout: hello world', task_abstract => 'Shout',
        task_conclusion => "# SHOUT\n## TASK DESCRIPTION\nSHOUTER, PLEASE SHOUT: HELLO WORLD",
        task_status => 'completed',
    }, 'INFORM_TASK_RESULT: the program\'s stdout, next_speaker "" (async)' or diag $r->{_raw};
    like $r->{_raw}, qr/^\{"id":"[^"]+","sender":"Shouter","timestamp":\d+,"comm_id":/,
        'the hub stamped it';

    is_deeply room_log($cid), [ [ $a1->{id}, 'Alice', 6, '' ], [ $p->{id}, 'Shouter', 8, $tid ],
                                [ $r->{id}, 'Shouter', 7, $tid ] ],
        'the room log: assignment, progress, result, in this order';
    ok $alice->quiet(0.5), 'nothing else arrives';
    like $ag->log, qr/ info ioa-agent\[\d+\] Shouter: task $tid completed after \d+ ms/,
        'one-line log records';
    is $ag->stop, 0, 'SIGTERM: exit status 0';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 1b: an agent with a spaced or CJK name is registered, reached and named in results
An agent named as IoA's users name them ("Open Interpreter (v2)",
王小明的助手): registered, reached over its percent-encoded inbox, and
its result carries its name.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    for my $name ('Open Interpreter (v2)', "\x{738b}\x{5c0f}\x{660e}\x{7684}\x{52a9}\x{624b}") {
        my $ag = agent($ctx, name => $name, desc => 'uppercases any text', exec => ['tr', 'a-z', 'A-Z']);
        ok wait_online($ctx, $name), "$name is online" or diag $ag->log;
        my ($alice, $cid) = alice_room($ctx, $name);
        assign($alice, $cid, [$name], 'shout: hello', task_abstract => 'Shout');
        my ($a1) = recv_from($alice, 'Alice', 1, 5);
        my ($p, $r) = recv_from($alice, $name, 2, 10, $ag);
        is $r && $r->{task_status}, 'completed', "... its result comes back from $name";
        like $r && $r->{task_conclusion}, qr/SHOUT: HELLO/, '... with the program\'s output';
        is $ag->stop, 0, '... and it stops cleanly';
        $alice->close;
    }
--- no_error_log
[error]
[alert]
[crit]



=== TEST 2: a sync assignment to two agents returns each result to the assigner
Sync assignment to two agents with per-assignee task ids ("tasks" extension):
the result goes back to the assigner; envelopes not addressed to the agent, or
not assignments, are left alone.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = agent($ctx, name => 'Shouter', exec => ['tr', 'a-z', 'A-Z']);
    ok wait_online($ctx, 'Shouter'), 'online' or diag $ag->log;
    register($ctx, 'Bob');
    my ($alice, $cid) = alice_room($ctx, 'Shouter', 'Bob');

    # not for the agent: a discussion naming it (it does not speak the
    # protocol), an assignment to Bob, one naming it only as a substring
    $alice->post(envelope(comm_id => $cid, content => 'what do you think?',
                          next_speaker => ['Shouter'], type => 4));
    assign($alice, $cid, ['Bob'], 'Bob only');
    assign($alice, $cid, 'Shouters', 'someone else', sync => 1);

    assign($alice, $cid, ['Bob', 'Shouter'], 'split the work', sync => 1,
           task_desc => 'shared description',
           extra => [tasks => { Shouter => { task_id => 't-shouter-1',
                                             task_desc => 'make this loud',
                                             task_abstract => 'Loud' },
                                Bob => { task_id => 't-bob-1', task_desc => 'count' } }]);
    my @a = recv_from($alice, 'Alice', 4, 5);
    my ($p, $r) = recv_from($alice, 'Shouter', 2, 10, $ag);
    is_deeply strip($p), {
        sender => 'Shouter', comm_id => $cid, content => progress_text('Loud'),
        next_speaker => ['Alice'], state => 1, type => 8, task_id => 't-shouter-1',
        task_desc => 'make this loud', task_abstract => 'Loud',
    }, 'progress: its own task id and description from "tasks"' or diag $p->{_raw};
    is_deeply strip($r), {
        sender => 'Shouter', comm_id => $cid, content => result_text('Loud', 'is completed'),
        next_speaker => ['Alice'], state => 1, type => 7, task_id => 't-shouter-1',
        task_desc => 'make this loud', task_abstract => 'Loud',
        task_conclusion => "# LOUD\n## TASK DESCRIPTION\nMAKE THIS LOUD",
        task_status => 'completed',
    }, 'sync: the result is addressed to the assigner' or diag $r->{_raw};

    # a sole assignee keeps the envelope's own task_id; without task_desc,
    # the content is the task and its first line the abstract
    assign($alice, $cid, 'Shouter', "first line\nsecond line", task_id => 'given-id');
    recv_from($alice, 'Alice', 1, 5);
    ($p, $r) = recv_from($alice, 'Shouter', 2, 10, $ag);
    is "$p->{task_id} $r->{task_id}", 'given-id given-id', 'the envelope\'s task_id';
    is $r->{task_abstract}, 'first line', 'abstract: the first line';
    is $r->{task_conclusion}, "# FIRST LINE\n## TASK DESCRIPTION\nFIRST LINE\nSECOND LINE",
        'the content as the task';
    is $r->{next_speaker}, '', 'async again: next_speaker ""';
    ok $alice->quiet(0.5), 'nothing else from the agent';
    is scalar(grep { $_->[1] eq 'Shouter' } @{ room_log($cid) }), 4,
        'four envelopes of the agent in the room log';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 3: --timeout stops the program with SIGTERM and reports task_status timed_out
With --timeout 1 and `sleep 5`: SIGTERM to the program, task_status timed_out
about a second later; a task that ends in time is not affected.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = agent($ctx, name => 'Sleeper', exec => ['sleep', '5'], timeout => 1);
    ok wait_online($ctx, 'Sleeper'), 'online' or diag $ag->log;
    my ($alice, $cid) = alice_room($ctx, 'Sleeper');
    my $t0 = time;
    assign($alice, $cid, ['Sleeper'], 'take your time', task_abstract => 'Nap');
    my ($p, $r) = recv_from($alice, 'Sleeper', 2, 10, $ag);
    my $took = time - $t0;
    ok $took >= 0.9 && $took < 3.5, "the result came after the timeout (${took}s)";
    is_deeply strip($r), {
        sender => 'Sleeper', comm_id => $cid, content => result_text('Nap', 'timed out'),
        next_speaker => '', state => 1, type => 7, task_id => $p->{task_id},
        task_desc => 'take your time', task_abstract => 'Nap',
        task_conclusion => 'no result within 1 s; the program was stopped',
        task_status => 'timed_out',
    }, 'INFORM_TASK_RESULT with task_status timed_out' or diag $r->{_raw};
    like $ag->log, qr/no result within 1 s, stopping pid (\d+) \(SIGTERM\)/, 'logged';
    my ($pid) = $ag->log =~ /started "sleep" \(pid (\d+)\)/;
    ok $pid && !kill(0, $pid), "the program (pid $pid) is gone";
--- no_error_log
[error]
[alert]
[crit]



=== TEST 4: a failing or missing program still sends a result, failed or partial
Failures are results too: `false` (exit 1), a program that writes to stderr
and exits 3, a program that does not exist; stderr is logged by the agent;
with --partial-exit 3 that status is partial.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my %ag = (
        Falsy   => agent($ctx, name => 'Falsy', exec => ['false']),
        Breaker => agent($ctx, name => 'Breaker',
                         exec => ['sh', '-c', 'cat >/dev/null; echo partial; echo "step 1 ok" >&2; echo "it broke: disk full" >&2; exit 3']),
        Missing => agent($ctx, name => 'Missing', exec => ['/nonexistent/tool', '--flag']),
    );
    ok wait_online($ctx, $_), "$_ online" or diag $ag{$_}->log for sort keys %ag;
    my ($alice, $cid) = alice_room($ctx, sort keys %ag);
    assign($alice, $cid, [$_], "job for $_", task_abstract => "Job $_") for sort keys %ag;

    my %conclusion = (
        Falsy   => 'exit status 1',
        Breaker => "exit status 3\nstep 1 ok\nit broke: disk full",
        Missing => 'cannot run "/nonexistent/tool": No such file or directory',
    );
    my $by = recv_by_sender($alice, 6, 10, values %ag);
    for my $n (sort keys %ag) {
        my ($p, $r) = @{ $by->{$n} || [] };
        is $p->{type}, 8, "$n: progress first";
        is_deeply strip($r), {
            sender => $n, comm_id => $cid, content => result_text("Job $n", 'failed'),
            next_speaker => '', state => 1, type => 7, task_id => $p->{task_id},
            task_desc => "job for $n", task_abstract => "Job $n",
            task_conclusion => $conclusion{$n}, task_status => 'failed',
        }, "$n: task_status failed, the reason in task_conclusion" or diag $r->{_raw};
    }
    like $ag{Breaker}->log, qr/Breaker: task \w+ stderr: it broke: disk full$/m,
        'the program\'s stderr is in the agent\'s log, line by line';
    ok $ag{$_}->alive, "$_ keeps running" for sort keys %ag;

    # with --partial-exit the same status means "done in part"
    my $half = agent($ctx, name => 'Halfway', args => ['--partial-exit', 3],
                     exec => ['sh', '-c', 'cat >/dev/null; echo "the first half"; exit 3']);
    ok wait_online($ctx, 'Halfway'), 'Halfway online' or diag $half->log;
    my ($bob, $cid2) = alice_room($ctx, 'Halfway');
    assign($bob, $cid2, ['Halfway'], 'job for Halfway', task_abstract => 'Job Halfway');
    my ($p, $r) = @{ recv_by_sender($bob, 2, 10, $half)->{Halfway} || [] };
    is_deeply strip($r), {
        sender => 'Halfway', comm_id => $cid2,
        content => result_text('Job Halfway', 'is partly done'),
        next_speaker => '', state => 1, type => 7, task_id => $p->{task_id},
        task_desc => 'job for Halfway', task_abstract => 'Job Halfway',
        task_conclusion => 'the first half', task_status => 'partial',
    }, 'Halfway: task_status partial, stdout the result so far' or diag $r->{_raw};
--- no_error_log
[error]
[alert]
[crit]



=== TEST 5: tasks run concurrently, and the program's argv is passed without a shell
Tasks run concurrently (three 1-second tasks take about a second, every
progress before any result), and the program's argv is passed as given,
without a shell.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $slow = agent($ctx, name => 'Slow', exec => ['sh', '-c', 'sleep 1; tr a-z A-Z']);
    my $lit = agent($ctx, name => 'Literal',
                    exec => ['printf', '%s|', '$HOME', '*', '`id`', '$(id)', 'a b', "it's"]);
    ok wait_online($ctx, $_), "$_ online" for qw(Slow Literal);
    my ($alice, $cid) = alice_room($ctx, 'Slow', 'Literal');

    my $t0 = time;
    assign($alice, $cid, ['Slow'], "task $_", task_abstract => "T$_") for 1 .. 3;
    my @m = recv_from($alice, 'Slow', 6, 10, $slow);
    my $took = time - $t0;
    is_deeply [ map { $_->{type} } @m ], [ 8, 8, 8, 7, 7, 7 ],
        'three progress notices, then three results';
    is_deeply [ sort map { $_->{task_conclusion} } @m[3 .. 5] ],
              [ map { "# T$_\n## TASK DESCRIPTION\nTASK $_" } 1 .. 3 ], 'three results';
    ok $took < 2.5, "all three within ${took}s (one at a time would take 3 s)";

    assign($alice, $cid, ['Literal'], 'print your arguments; $(rm -rf /) is just text');
    my (undef, $r) = recv_from($alice, 'Literal', 2, 10, $lit);
    is $r->{task_conclusion}, q{$HOME|*|`id`|$(id)|a b|it's|},
        'arguments reach the program untouched' or diag $r->{_raw};
    is $r->{task_status}, 'completed', 'completed';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 6: http adapter: the answers of IoA's POST <url>/run become results
The http adapter follows IoA's tool-agent convention, POST <url>/run
{"task_desc","uid","model"}: a JSON "conclusion", a JSON string, plain text,
an HTTP 500 (failed) and a slow answer (timed_out).
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $dir = scratch('tool');
    my ($port, $srv) = tool_server($dir);
    my $ag = agent($ctx, name => 'Tool', http => "http://127.0.0.1:$port/", timeout => 1);
    ok wait_online($ctx, 'Tool'), 'online' or diag $ag->log;
    my ($alice, $cid) = alice_room($ctx, 'Tool');

    my @cases = (
        [ json   => 'completed', undef ],
        [ string => 'completed', 'a JSON string' ],
        [ plain  => 'completed', 'plain answer' ],
        [ fail   => 'failed',    "HTTP 500 from http://127.0.0.1:$port/run: internal trouble" ],
        [ slow   => 'timed_out', "no answer from http://127.0.0.1:$port/run within 1 s" ],
    );
    for my $c (@cases) {
        my ($what, $status, $want) = @$c;
        assign($alice, $cid, ['Tool'], "answer $what", task_abstract => ucfirst $what);
        my ($p, $r) = recv_from($alice, 'Tool', 2, 10, $ag);
        $want //= "json says: $p->{task_id}";
        is_deeply strip($r), {
            sender => 'Tool', comm_id => $cid,
            content => result_text(ucfirst $what,
                $status eq 'completed' ? 'is completed' : $status eq 'failed' ? 'failed' : 'timed out'),
            next_speaker => '', state => 1, type => 7, task_id => $p->{task_id},
            task_desc => "answer $what", task_abstract => ucfirst $what,
            task_conclusion => $want, task_status => $status,
        }, "$what: task_status $status" or diag $r->{_raw};
        if ($what eq 'json') {
            my $req = slurp("$dir/req-1") // '';
            my ($head, $body) = split /\r\n\r\n/, $req, 2;
            like $head, qr{^POST /run HTTP/1\.1\r\n}, 'POST /run';
            like $head, qr{^Content-Type: application/json\r?$}mi, 'a JSON body';
            is_deeply json->decode($body // '{}'),
                { task_desc => "# Json\n## Task Description\nanswer json\n",
                  uid => $p->{task_id}, model => '' },
                'the body: task_desc (IoA\'s markdown), uid (ReAct) and model (Open Interpreter)';
        }
    }
    stop_child($srv);
--- no_error_log
[error]
[alert]
[crit]



=== TEST 7: assignments posted while the hub is away are handled exactly once on reconnect
Resume: the agent's hub goes away (before the agent has a position, and
after); assignments posted meanwhile through another hub instance are handled
exactly once after it reconnects (with Last-Event-ID once it has one), and a
result finished while the hub is down is posted once it is back.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my %hub = (dir => scratch('hub-b'), log_level => 'info',
               http_config => 'ioa_redis 127.0.0.1:' . $ctx->redis_port . ';',
               config => 'location / { ioa_api; }');
    my $b = IoaTest::Instance->start(%hub);
    my $bport = $b->port;
    # "slowly" in the task makes the program take 2 s
    my $ag = agent($ctx, name => 'Shouter', port => $bport,
                   exec => ['sh', '-c', 'in=$(cat); case "$in" in *slowly*) sleep 2;; esac; printf %s "$in" | tr a-z A-Z']);
    ok wait_online($ctx, 'Shouter'), 'online through hub B' or diag $ag->log;
    my ($alice, $cid) = alice_room($ctx, 'Shouter');     # Alice is on hub A

    # away before any envelope reached the agent: it has no position yet
    my $mark = length $ag->log;
    $b->stop;
    ok $ag->wait_log(qr/cannot (?:open the inbox|register)/, 10, $mark), 'the agent lost its hub';
    assign($alice, $cid, ['Shouter'], 'zero', task_abstract => 'Zero');
    $b = IoaTest::Instance->start(%hub, port => $bport);
    ok $ag->wait_log(qr/inbox open, resuming since \d+-0 \(no envelope received yet\)/, 10, $mark),
        'without a position it resumes from when its last stream opened';
    my ($p0, $r0) = recv_from($alice, 'Shouter', 2, 10, $ag);
    is $r0->{task_conclusion}, "# ZERO\n## TASK DESCRIPTION\nZERO", 'the assignment is handled';

    assign($alice, $cid, ['Shouter'], 'one', task_abstract => 'One');
    my ($p1, $r1) = recv_from($alice, 'Shouter', 2, 10, $ag);
    is $r1->{task_conclusion}, "# ONE\n## TASK DESCRIPTION\nONE", 'first task done';
    ok $ag->wait_log(qr/posted result/), 'the agent saw its result posted';
    sleep 0.3;          # and its echo arrive: the position is past it

    $mark = length $ag->log;
    $b->stop;
    ok $ag->wait_log(qr/inbox closed|cannot open the inbox/, 10, $mark), 'the agent lost its hub again';
    ok $ag->wait_log(qr/cannot (?:open the inbox|register)/, 5, $mark), 'and cannot reconnect';

    assign($alice, $cid, ['Shouter'], 'two, sent while you were away', task_abstract => 'Two');
    sleep 1.5;          # several reconnect attempts fail meanwhile
    $b = IoaTest::Instance->start(%hub, port => $bport);
    my ($resumed) = $ag->wait_log(qr/inbox open, resuming after "([^"]+)"/, 10, $mark);
    is $resumed, "$cid:$r1->{id}", 'Last-Event-ID: the position after the first result\'s echo';
    my ($p2, $r2) = recv_from($alice, 'Shouter', 2, 10, $ag);
    is "$p2->{type} $r2->{type}", '8 7', 'the missed assignment: progress and result';
    is $r2->{task_conclusion}, "# TWO\n## TASK DESCRIPTION\nTWO, SENT WHILE YOU WERE AWAY", 'its result';

    # a result that is ready while the hub is down waits in the outbox
    assign($alice, $cid, ['Shouter'], 'three, slowly', task_abstract => 'Three');
    my ($p3) = recv_from($alice, 'Shouter', 1, 10, $ag);
    $mark = length $ag->log;
    $b->stop;
    ok $ag->wait_log(qr/cannot post result/, 10, $mark), 'the result cannot be posted yet';
    $b = IoaTest::Instance->start(%hub, port => $bport);
    my ($r3) = recv_from($alice, 'Shouter', 1, 15, $ag);
    is "$r3->{type} $r3->{task_id}", "7 $p3->{task_id}", 'posted once the hub is back';

    ok $alice->quiet(1.5), 'nothing else arrives';
    my @log = @{ room_log($cid) };
    is_deeply [ map { "$_->[1] $_->[2]" } @log ],
              [ ('Alice 6', 'Shouter 8', 'Shouter 7') x 4 ],
        'the room log: each assignment answered exactly once, in order';
    $b->stop;
--- no_error_log
[error]
[alert]
[crit]



=== TEST 7b: an agent in 251 rooms resumes by a compact cursor, and from oldest if it expired
An agent in 251 rooms resumes through a compact cursor (not a 12 KB
Last-Event-ID); when the hub no longer knows the position (its cursor expired)
the 400 does not make the agent exit: it resumes every room from its oldest
position, says so, and handles the assignment posted while it was away.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_teamup_rate off;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my %hub = (dir => scratch('hub-big'), log_level => 'info',
               http_config => 'ioa_redis 127.0.0.1:' . $ctx->redis_port . ';',
               config => 'location / { ioa_api; }');
    my $b = IoaTest::Instance->start(%hub);
    my $bport = $b->port;
    my $ag = agent($ctx, name => 'Shouter', port => $bport, exec => ['tr', 'a-z', 'A-Z']);
    ok wait_online($ctx, 'Shouter'), 'online through hub B' or diag $ag->log;
    my ($alice, $cid) = alice_room($ctx, 'Shouter');
    teamup($ctx, 'Alice', ['Shouter']) for 1 .. 250;
    is redis_cmd('SCARD', 'ioa:{reg}:rooms:Shouter'), 251, 'Shouter is in 251 rooms';

    # the agent's stream must know every room: reconnect it once
    my $mark = length $ag->log;
    $b->stop;
    $b = IoaTest::Instance->start(%hub, port => $bport);
    ok $ag->wait_log(qr/inbox open/, 10, $mark), 'reconnected';
    assign($alice, $cid, ['Shouter'], 'one', task_abstract => 'One');
    my ($p1, $r1) = recv_from($alice, 'Shouter', 2, 10, $ag);
    is $r1->{task_conclusion}, "# ONE\n## TASK DESCRIPTION\nONE", 'a task done: the agent has a position';
    sleep 0.5;

    # a reconnect resumes through the cursor
    $mark = length $ag->log;
    $b->stop;
    ok $ag->wait_log(qr/inbox closed|cannot open the inbox/, 10, $mark), 'the agent lost its hub';
    $b = IoaTest::Instance->start(%hub, port => $bport);
    my ($pos) = $ag->wait_log(qr/inbox open, resuming after "([^"]+)"/, 15, $mark);
    like $pos // '', qr/^~[0-9a-f]{16}\.\d+(?:\+|$)/, 'its position is a cursor';
    ok length($pos // '') < 1200, 'a short one (' . length($pos // '') . ' bytes)';

    # the cursor is gone (expired) while the agent is away
    $mark = length $ag->log;
    $b->stop;
    ok $ag->wait_log(qr/inbox closed|cannot open the inbox/, 10, $mark), 'the agent lost its hub again';
    assign($alice, $cid, ['Shouter'], 'two, while you were away', task_abstract => 'Two');
    redis_cmd('DEL', @{ redis_cmd('KEYS', 'ioa:{pos:*') });
    sleep 0.5;
    $b = IoaTest::Instance->start(%hub, port => $bport);
    ok $ag->wait_log(qr/the hub refused the resume position \(HTTP 400, \d+ bytes\): .*unknown_position/, 15, $mark),
        'the hub refuses the position it no longer knows' or diag $ag->log;
    ok $ag->wait_log(qr/resuming every room since \d+-0/, 5, $mark), 'the agent says where it resumes';
    my ($p2, $r2) = recv_from($alice, 'Shouter', 2, 15, $ag);
    is $r2->{task_conclusion}, "# TWO\n## TASK DESCRIPTION\nTWO, WHILE YOU WERE AWAY",
        'the assignment posted while it was away is handled';
    ok $ag->alive, 'the agent is still running';
    ok $alice->quiet(1.5), 'nothing twice';
    $b->stop;
--- no_error_log
[alert]
[crit]



=== TEST 8: the agent is online while it runs; SIGTERM sends a failed result and exits 0
While it runs the agent is registered as given and online in
/retrieve_assistant; SIGTERM with a task running: the program is stopped, a
"failed" result still reaches the assigner, exit 0, and the agent goes
offline.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = agent($ctx, name => 'Translator', desc => 'translates French poetry into English',
                   tags => ['translation', 'french'], exec => ['sleep', '30']);
    ok wait_online($ctx, 'Translator'), 'online' or diag $ag->log;
    register($ctx, 'Alice');
    $ctx->{alice_registered} = 1;
    my ($code, $d) = api($ctx, POST => '/retrieve_assistant',
                         { sender => 'Alice', capabilities => ['translate french poetry'] });
    is $code, 200, 'retrieve_assistant: 200';
    my ($me) = grep { $_->{name} eq 'Translator' } @{ $d || [] };
    ok $me, 'the agent is found by its description' or diag jenc($d);
    is_deeply [ @{ $me // {} }{qw(name type desc)}, $me->{tags}, $me->{online} ? 1 : 0,
                $me->{speaks_protocol} ? 1 : 0 ],
              [ 'Translator', 'Thing Assistant', 'translates French poetry into English',
                ['translation', 'french'], 1, 0 ],
        'as registered (type, desc, tags), online, not speaking the protocol';

    my ($alice, $cid) = alice_room($ctx, 'Translator');
    assign($alice, $cid, ['Translator'], 'a long poem', task_abstract => 'Poem', sync => 1);
    my ($p) = recv_from($alice, 'Translator', 1, 10, $ag);
    my ($pid) = $ag->log =~ /started "sleep" \(pid (\d+)\)/;
    ok $pid && kill(0, $pid), 'the program runs';

    my $t0 = time;
    my $st = $ag->stop('TERM', 8);
    is $st, 0, 'SIGTERM: exit status 0';
    ok time - $t0 < 4, 'within seconds';
    my ($r) = recv_from($alice, 'Translator', 1, 5);
    is_deeply strip($r), {
        sender => 'Translator', comm_id => $cid, content => result_text('Poem', 'failed'),
        next_speaker => ['Alice'], state => 1, type => 7, task_id => $p->{task_id},
        task_desc => 'a long poem', task_abstract => 'Poem',
        task_conclusion => 'cancelled: the agent is shutting down', task_status => 'failed',
    }, 'the assigner learns the task failed' or diag $r->{_raw};
    ok !kill(0, $pid), 'the program was stopped';
    like $ag->log, qr/shutting down \(SIGTERM\): cancelling 1 running task/, 'logged';
    ok wait_online($ctx, 'Translator', 0), 'offline once the agent is gone';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 9: --speaks-protocol: a DISCUSSION to the agent is answered with reply_to
With --speaks-protocol the agent is registered as such, and a DISCUSSION
addressed to the agent is answered through the adapter, back to the speaker,
with reply_to.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = agent($ctx, name => 'Talker', type => 'Human Assistant',
                   args => ['--speaks-protocol'], exec => ['tr', 'a-z', 'A-Z']);
    ok wait_online($ctx, 'Talker'), 'online' or diag $ag->log;
    my ($code, $d) = api($ctx, POST => '/query_assistant', { name => 'Talker' });
    is_deeply [ $d->{type}, $d->{speaks_protocol} ? 1 : 0 ], [ 'Human Assistant', 1 ],
        'registered as a Human Assistant that speaks the protocol';

    my ($alice, $cid) = alice_room($ctx, 'Talker');
    $alice->post(envelope(comm_id => $cid, content => 'what do you think?',
                          next_speaker => ['Talker'], type => 4, goal => 'write a haiku'));
    my ($q) = recv_from($alice, 'Alice', 1, 5);
    my ($m) = recv_from($alice, 'Talker', 1, 10, $ag);
    is_deeply strip($m), {
        sender => 'Talker', comm_id => $cid,
        content => "# DISCUSSION TURN\n## GOAL\nWRITE A HAIKU\n## MESSAGE FROM ALICE\nWHAT DO YOU THINK?",
        next_speaker => ['Alice'], state => 1, type => 4, reply_to => $q->{id},
    }, 'a DISCUSSION reply to the speaker' or diag $m->{_raw};
    assign($alice, $cid, ['Talker'], 'still does tasks', task_abstract => 'Task');
    my ($p, $r) = recv_from($alice, 'Talker', 2, 10, $ag);
    is "$p->{type} $r->{type} $r->{task_status}", '8 7 completed', 'and still does tasks';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 10: configuration errors exit 2 with a message; a name the hub refuses exits 1
Configuration errors: bad options exit 2 with a message, a --name outside the
hub's built-in rule too; a name the hub refuses (its stricter
ioa_agent_name_pattern) exits 1 saying why.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_agent_name_pattern "^[A-Za-z]+$";
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $run = sub {
        my $out = qx{$main::AgentBin @_ 2>&1};
        return ($? >> 8, $out);
    };
    my ($rc, $out) = $run->('--name', 'X', '--desc', 'x');
    is $rc, 2, 'no adapter: exit 2';
    like $out, qr/give exactly one of --exec, --http and --a2a/, '... saying so';
    ($rc, $out) = $run->('--name', 'X', '--desc', 'x', '--type', 'Robot', '--exec', 'true');
    is $rc, 2, 'a bad --type: exit 2';
    like $out, qr/--type is "Thing Assistant" or "Human Assistant", not "Robot"/, '... saying so';
    ($rc, $out) = $run->('--name', 'X', '--desc', 'x', '--timeout', 'soon', '--exec', 'true');
    is $rc, 2, 'a bad --timeout: exit 2';
    ($rc, $out) = $run->('--help');
    is $rc, 0, '--help: exit 0';
    like $out, qr/--exec PROGRAM \[ARG\.\.\.\]/, '--help documents --exec';

    # the hub's built-in name rule is checked before anything is sent
    # (bytes: "a" + U+0308 is not NFC; U+200B and U+202E render as nothing)
    for my $bad ('B{ad}', 'a/b', ' Lead', "Tab\tbed", 'x' x 65,
                 "Pla\xcc\x88", "Lk-x\xe2\x80\x8b", "Lk\xe2\x80\xae-x") {
        ($rc, $out) = $run->('--name', quotemeta $bad, '--desc', 'x', '--exec', 'true');
        is $rc, 2, "--name \"$bad\": exit 2";
        like $out, qr/is not a name the hub accepts: 1 to 64 characters of UTF-8/, '... stating the rule';
    }

    # a stricter ioa_agent_name_pattern is the hub's to say
    my $ag = agent($ctx, name => 'Not Plain', exec => ['true']);
    ok wait_until(sub { !$ag->alive }, 5), 'a name the hub refuses: the agent exits';
    is $ag->stop >> 8, 1, '... with status 1';
    like $ag->log, qr/the hub refused the registration \(HTTP 400\): .*"field":"name"/,
        '... logging the hub\'s answer';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 11: against a scripted hub, SSE is parsed across any cut and nothing is sent twice
Against a scripted hub: SSE parsed across any cut (a BOM, CR, CRLF, comments,
multi-line data, one byte per write), named events are not envelopes,
Last-Event-ID is the last id even from an id-only block, a re-sent envelope is
not handled twice, and a post stored although its answer was lost is not sent
again.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $env = sub {
        my ($id, $content) = @_;
        return json->encode({ id => $id, sender => 'Boss', timestamp => 1, comm_id => 'c1',
                              content => $content, next_speaker => ['Fake'], state => 1,
                              type => 6, task_abstract => ucfirst $content });
    };
    my $alpha = $env->('1-0', 'alpha');
    my $beta = $env->('2-0', 'beta');
    my $inbox = sub {
        my ($c, $n) = @_;
        if ($n == 1) {
            # the envelope's JSON split over two data: lines (joined by \n)
            my ($x, $y) = $alpha =~ /^(.*?"content":)(.*)$/;
            my $stream = "\xef\xbb\xbfretry: 500\r\n\r\n: a comment\r\n"
                . "id: c1:1-0\r\ndata: $x\r\ndata: $y\r\n\r\n"
                . "event: ping\ndata: keepalive\n\n"
                . qq(event: ioa\rdata: {"op":"error","code":"test_code","message":"just a test"}\r\r)
                . "id: c1:1-5\n\n";
            for my $byte (split //, $stream) {
                syswrite $c, $byte;
                sleep 0.001;
            }
            sleep 0.5;
            return;         # the stream ends: the agent reconnects
        }
        # the second stream repeats alpha (a hub must not, but if it does)
        syswrite $c, "retry: 500\n\nid: c1:1-0\ndata: $alpha\n\nid: c1:2-0\ndata: $beta\n\n";
        sleep 30;
    };
    my $dir = scratch('fake-hub');
    my ($port, $pid) = fake_hub($dir, $inbox);
    my $ag = agent($ctx, name => 'Fake', port => $port, exec => ['tr', 'a-z', 'A-Z']);

    ok wait_until(sub { -e "$dir/post-4" }, 10), 'four posts' or diag $ag->log;
    sleep 0.5;
    my @posts = map { json->decode(slurp("$dir/post-$_")) } grep { -e "$dir/post-$_" } 1 .. 9;
    is_deeply [ map { "$_->{type} $_->{task_abstract}" } @posts ],
              [ '8 Alpha', '7 Alpha', '8 Beta', '7 Beta' ],
        'alpha and beta, each answered once: the lost-answer progress was not re-sent'
        or diag $ag->log;
    is $posts[1]{task_conclusion}, "# ALPHA\n## TASK DESCRIPTION\nALPHA", 'alpha parsed whole';
    is $posts[0]{task_id}, $posts[1]{task_id}, 'progress and result of one task';
    is_deeply json->decode(slurp("$dir/record-1") // '{}'), { comm_id => 'c1' },
        'after the lost answer the agent read the room log';
    ok !-e "$dir/record-2", 'once';
    like slurp("$dir/inbox-2") // '', qr/^Last-Event-ID: c1:1-5\r?$/mi,
        'reconnected with Last-Event-ID: the id of the id-only block';
    unlike slurp("$dir/inbox-1") // '', qr/Last-Event-ID/i, 'none the first time';
    my $log = $ag->log;
    like $log, qr/envelope 1-0 in c1 was already handled, skipped/, 'the repeat is skipped';
    like $log, qr/the hub reports an error: test_code: just a test/, 'ioa events are logged';
    like $log, qr/progress \(task_id \w+\) had been stored as 1-0 although its answer was lost/,
        'the lost answer, found in the room log';
    unlike $log, qr/ (?:error|warn) .*(?:not a JSON object|keepalive)/, 'pings are not envelopes';
    stop_child($pid);
--- no_error_log
[error]
[alert]
[crit]



=== TEST 12: output is made JSON-safe: invalid UTF-8 becomes U+FFFD, long results are cut
Output is made safe for JSON and the hub: invalid UTF-8 becomes U+FFFD, and a
long result is cut to --max-result bytes of JSON with a note.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $bin = agent($ctx, name => 'Binary', exec => ['printf', '\377ok \342\202\254 \001\n']);
    my $long = agent($ctx, name => 'Long', args => ['--max-result', 256],
                     exec => ['sh', '-c', 'cat >/dev/null; yes abcdefgh | head -c 5000']);
    ok wait_online($ctx, $_), "$_ online" for qw(Binary Long);
    my ($alice, $cid) = alice_room($ctx, 'Binary', 'Long');
    assign($alice, $cid, ['Binary'], 'bytes please');
    my (undef, $r) = recv_from($alice, 'Binary', 2, 10, $bin);
    is $r->{task_conclusion}, "\x{FFFD}ok \x{20AC} \x{1}", 'invalid UTF-8 replaced, valid kept, control escaped'
        or diag $r->{_raw};
    assign($alice, $cid, ['Long'], 'a lot please');
    (undef, $r) = recv_from($alice, 'Long', 2, 10, $long);
    is $r->{task_conclusion}, ("abcdefgh\n" x 25) . "abcdef\n[truncated: 231 of 5000 bytes]",
        'cut at 256 bytes of JSON, with a note' or diag $r->{_raw};
    is $r->{task_status}, 'completed', 'still completed';
--- no_error_log
[error]
[alert]
[crit]
