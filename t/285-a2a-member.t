# t/285-a2a-member.t -- A2A agents as members: ioa-agent --a2a in front of
# a third-party A2A server built with @a2a-js/sdk (t/node/a2a-agent.mjs,
# the version pinned in t/node/package-lock.json), recruited for goals
# beside a native ioa agent.  The card is fetched and checked at start
# (name, description and skills' tags become the registration), each task
# is an A2A message (streamed, or sent and polled), the agent's status
# messages are progress envelopes, its artifacts and final message the
# result; failed, input-required, a --timeout, the goal's cancel and the
# agent's shutdown all end as results, the last three after tasks/cancel
# reached the A2A server.  A2A 1.0 and 0.3 (the SDK's compat layer).
#
#   make all node-deps && \
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/285-a2a-member.t
#
# IOA_AGENT_BIN and IOA_WORKER_BIN run other builds (ASan ones, say).
# The A2A servers print every execute and cancel as a JSON line; the
# blocks read them from the servers' output files in the scratch
# directory.

use strict;
use warnings;

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(json fresh_hub);
use IoaTest::Api;
use IoaTest::Port ();
use IoaTest::Goals qw($COORD worker stop_workers launch state_of meta room
                      worker_logs);
use IoaTest::Runtime;   # agent, alice_room, assign, recv_from, strip, ...
use Cwd qw(abs_path);
use FindBin;
use IO::Socket::INET ();
use IPC::Run ();
use POSIX ();
use Time::HiRes qw(sleep time);

no_root_location();
no_shuffle();
log_level('info');

our $Repo = abs_path("$FindBin::Bin/..");
our $Server = "$Repo/t/node/a2a-agent.mjs";

die "t/node/node_modules is missing: make node-deps\n"
    unless -d "$Repo/t/node/node_modules/\@a2a-js/sdk";
die "$AgentBin is not built: make -C workers/agent\n" unless -x $AgentBin;

# ------------------------------------------------------------------ helpers

sub free_port { IoaTest::Port::free_port() }

# Starts t/node/a2a-agent.mjs with @flags; returns ($port, $pid, $out):
# its JSON lines go to $out.  Stopped by stop_child() (its own process
# group, see _server_child in IoaTest::Runtime).
sub a2a_server {
    my ($tag, @flags) = @_;
    my $port = free_port();
    my $out = scratch('a2a') . "/$tag.out";
    my $pid = fork // die "fork: $!\n";
    if ($pid == 0) {
        POSIX::setpgid(0, 0);
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $out;
        open STDERR, '>', "$out.err";
        exec '/usr/bin/node', $Server, $port, @flags or POSIX::_exit(127);
    }
    $Children{$pid} = "a2a server $tag";
    wait_until(sub { (slurp($out) // '') =~ /"listening"/ }, 15)
        or die "a2a server $tag did not start: " . (slurp("$out.err") // '') . "\n";
    return ($port, $pid, $out);
}

# What the server printed: its execute and cancel records, in order.
sub a2a_events {
    my ($out, $kind) = @_;
    my @ev = map { json()->decode($_) } grep { /^\{/ } split /\n/, slurp($out) // '';
    return grep { $_->{event} eq $kind } @ev;
}

# ioa-agent run to its end, for start-up errors: (exit status, stderr)
sub agent_run {
    my ($ctx, @args) = @_;
    my ($out, $err) = ('', '');
    IPC::Run::run([$AgentBin, '--hub', 'http://127.0.0.1:' . $ctx->port,
                   '--backoff-max', 1, @args],
                  '<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(30));
    return ($? >> 8, $err);
}

run_tests();

__DATA__

=== TEST 1: a goal with a streamed A2A 1.0 agent and a native agent concludes with both
a goal with an A2A agent (1.0, streamed) and a native agent: progress from its
status messages, both results in the conclusion.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    my ($port, $srv, $out) = a2a_server('goal');
    my $sh = agent($ctx, name => 'Shouter', a2a => "http://127.0.0.1:$port",
                   from_card => 1);
    my $rv = agent($ctx, name => 'Reverser', desc => 'reverses the letters of words',
                   exec => ['rev']);
    ok wait_online($ctx, 'Shouter', 1, 10), 'the A2A agent is online' or diag $sh->log;
    ok wait_online($ctx, 'Reverser'), 'the native agent is online' or diag $rv->log;

    my (undef, $reg) = api($ctx, POST => '/query_assistant', { name => 'Shouter' });
    is $reg->{desc}, 'shouts words and texts back in capital letters, an A2A agent',
        'registered with the card\'s description';
    is_deeply $reg->{tags}, [qw(shouting uppercase echo)],
        'and its skills\' tags, each once';
    is $reg->{a2a_url}, "http://127.0.0.1:$port/.well-known/agent-card.json",
        'the registry keeps the card it stands for (a2a_url)';
    my (undef, $native) = api($ctx, POST => '/query_assistant', { name => 'Reverser' });
    ok !exists $native->{a2a_url}, 'a native agent has none';
    like $sh->log, qr{A2A agent "Shouter" at http://127\.0\.0\.1:$port/\.well-known/agent-card\.json: JSON-RPC http://127\.0\.0\.1:$port/rpc \(streaming\), A2A 1\.0},
        'the card\'s JSON-RPC interface, A2A 1.0 of the two offered';

    worker($ctx, 'w1');
    my $gid = launch(goal => 'Shout the words hello world. '
                           . 'Reverse the letters of the word stressed.');
    ok wait_until(sub { state_of($gid) =~ /^(?:concluded|failed|cancelled)$/ }, 30),
        'the goal ended' or diag worker_logs($ctx) . $sh->log;
    my $m = meta($gid);
    is $m->{state}, 'concluded', 'concluded';
    like $m->{conclusion}, qr/2 of 2 parts done/, 'both parts done' or diag $m->{conclusion};
    like $m->{conclusion}, qr/Shouter: SHOUT THE WORDS HELLO WORLD\n\nshouted as asked/,
        'the A2A agent\'s artifact, then its final message';
    like $m->{conclusion}, qr/Reverser: .*desserts drow eht fo srettel eht esreveR/s,
        'the native agent\'s result';

    my @env = room($m->{comm_id});
    my ($assign) = grep { $_->{sender} eq $COORD && $_->{type} == 6 } @env;
    my $task = $assign->{tasks}{Shouter};
    ok $task, 'the coordinator assigned the A2A agent a task';
    my @mine = grep { $_->{sender} eq 'Shouter' } @env;
    is_deeply [map { $_->{type} } @mine], [8, 8, 8, 7],
        'three INFORM_TASK_PROGRESS, then INFORM_TASK_RESULT';
    my $abstract = $mine[0]{task_abstract};
    is_deeply [map { $_->{content} } @mine[0 .. 2]],
        [progress_text($abstract), progress_text($abstract) . "\nreading the task",
         progress_text($abstract) . "\nchecking the result"],
        'the first at once, then one per status message of the A2A task';
    is $mine[3]{task_status}, 'completed', 'completed';
    is $mine[3]{task_id}, $task->{task_id}, 'under the task id it was given';
    is $mine[3]{task_conclusion}, "SHOUT THE WORDS HELLO WORLD\n\nshouted as asked",
        'the conclusion: the artifact\'s text, then the final status message';

    my @exec = a2a_events($out, 'execute');
    is scalar(@exec), 1, 'one A2A task';
    is $exec[0]{version}, '1.0', 'sent with A2A-Version: 1.0';
    is $exec[0]{text}, "# $abstract\n## Task Description\n$task->{task_desc}\n",
        'the task as ioa hands it to its agents';
    is_deeply [a2a_events($out, 'cancel')], [], 'nothing cancelled';

    stop_workers();
    is $sh->stop, 0, 'the A2A agent stops: exit 0';
    is $rv->stop, 0, 'the native agent too';
    stop_child($srv);
--- no_error_log
[error]
[alert]
[crit]



=== TEST 2: A2A failed, input-required, --timeout and SIGTERM map back to results
failed, input-required, --timeout and SIGTERM map back to results, the last
three after tasks/cancel.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    my ($port, $srv, $out) = a2a_server('fail');
    my $ag = agent($ctx, name => 'Shouter', a2a => "http://127.0.0.1:$port/",
                   from_card => 1, timeout => 2);
    ok wait_online($ctx, 'Shouter', 1, 10), 'online' or diag $ag->log;
    my ($alice, $cid) = alice_room($ctx, 'Shouter');
    my $cancelled = "; CancelTask sent to the A2A agent: the task is now canceled";

    my @cases = (
        [ Fail => 'please fail', 'failed',
          'the A2A agent reports the task failed: the shouting machine is broken' ],
        [ Question => 'a question please', 'failed',
          'the A2A agent needs more input, which an ioa task cannot give: '
          . "Which ocean do you mean?$cancelled" ],
        [ Hang => 'hang on', 'timed_out', "no result within 2 s$cancelled" ],
    );
    for my $c (@cases) {
        my ($abstract, $text, $status, $why) = @$c;
        my $t0 = time;
        assign($alice, $cid, ['Shouter'], $text, task_abstract => $abstract);
        my ($p0, $p1, $r) = recv_from($alice, 'Shouter', 3, 10, $ag);
        is $p0->{content}, progress_text($abstract), "$abstract: progress at once";
        is $p1->{content}, progress_text($abstract) . "\nreading the task",
            "$abstract: then the A2A agent's status message";
        is_deeply strip($r), {
            sender => 'Shouter', comm_id => $cid,
            content => result_text($abstract, $status eq 'failed' ? 'failed' : 'timed out'),
            next_speaker => '', state => 1, type => 7, task_id => $p0->{task_id},
            task_desc => $text, task_abstract => $abstract,
            task_conclusion => $why, task_status => $status,
        }, "$abstract: task_status $status, saying why" or diag $r->{_raw};
        if ($abstract eq 'Hang') {
            my $took = time - $t0;
            ok $took > 1.8 && $took < 5, "after the 2 s timeout ($took s)";
        }
    }
    my %task = map { ($_->{text} =~ /(fail|question|hang)/)[0] => $_->{taskId} }
               a2a_events($out, 'execute');
    is_deeply [map { $_->{taskId} } a2a_events($out, 'cancel')], [$task{question}, $task{hang}],
        'the A2A server saw tasks/cancel for the question and the hung task, not the failed one';

    # shutdown with an A2A task running
    assign($alice, $cid, ['Shouter'], 'hang again', task_abstract => 'Again');
    my @p = recv_from($alice, 'Shouter', 2, 10, $ag);
    is $ag->stop('TERM'), 0, 'SIGTERM with the task running: exit 0';
    my ($r) = recv_from($alice, 'Shouter', 1, 5, $ag);
    is $r->{task_status}, 'failed', 'the task is reported failed';
    is $r->{task_conclusion}, "cancelled: the agent is shutting down$cancelled",
        'cancelled at the A2A agent first';
    is scalar(a2a_events($out, 'cancel')), 3, 'the A2A server saw that cancel';
    stop_child($srv);
--- no_error_log
[error]
[alert]
[crit]



=== TEST 3: A2A 0.3 streamed and polled and 1.0 polled give the same results
A2A 0.3 (a 0.3 card, the SDK's compat layer) streamed and polled, 1.0 polled:
the same results.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    my @servers = (
        [ 'Streamer03', '0.3', 'streaming', '--v03' ],
        [ 'Poller03', '0.3', 'polled', '--v03', '--no-stream' ],
        [ 'Poller10', '1.0', 'polled', '--no-stream' ],
    );
    for my $s (@servers) {
        my ($name, $version, $how, @flags) = @$s;
        my ($port, $srv, $out) = a2a_server($name, '--name', $name, @flags);
        # the card's own URL this time
        my $ag = agent($ctx, name => $name, from_card => 1,
                       a2a => "http://127.0.0.1:$port/.well-known/agent-card.json");
        ok wait_online($ctx, $name, 1, 10), "$name: online" or diag $ag->log;
        like $ag->log, qr{JSON-RPC http://127\.0\.0\.1:$port/rpc\Q@{[ $how eq 'streaming' ? ' (streaming)' : '' ]}\E, A2A \Q$version\E},
            "$name: A2A $version, $how";
        my ($alice, $cid) = alice_room($ctx, $name);
        assign($alice, $cid, [$name], 'shout hello', task_abstract => 'Shout');
        my @got = recv_from($alice, $name, 1, 10, $ag);
        push @got, recv_from($alice, $name, 1, 10, $ag) while $got[-1]{type} != 7;
        my $r = pop @got;
        is $r->{task_status}, 'completed', "$name: completed";
        is $r->{task_conclusion}, "SHOUT HELLO\n\nshouted as asked",
            "$name: the artifact and the final message";
        is $got[0]{content}, progress_text('Shout'), "$name: progress first";
        if ($how eq 'streaming') {
            is_deeply [map { $_->{content} } @got[1 .. $#got]],
                [progress_text('Shout') . "\nreading the task",
                 progress_text('Shout') . "\nchecking the result"],
                "$name: each status message once";
        } else {
            like $_->{content}, qr/\n(?:reading the task|checking the result)$/,
                "$name: a polled status message" for @got[1 .. $#got];
        }
        my @exec = a2a_events($out, 'execute');
        is $exec[0]{version}, $version, "$name: requests say A2A-Version: $version";
        is $ag->stop, 0, "$name: exit 0";
        stop_child($srv);
    }
--- no_error_log
[error]
[alert]
[crit]



=== TEST 4: the goal's cancel sends tasks/cancel for its running A2A task
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    my ($port, $srv, $out) = a2a_server('cancel');
    my $sh = agent($ctx, name => 'Shouter', a2a => "http://127.0.0.1:$port",
                   from_card => 1);
    ok wait_online($ctx, 'Shouter', 1, 10), 'online' or diag $sh->log;
    worker($ctx, 'w1');
    my $gid = launch(goal => 'Shout and hang', team_member_names => ['Shouter']);
    ok wait_until(sub { a2a_events($out, 'execute') }, 20),
        'the A2A agent got its task' or diag worker_logs($ctx) . $sh->log;
    my $res = $ctx->http(POST => "/goals/$gid/cancel");
    is $res->code, 202, 'POST /goals/{id}/cancel: 202';
    ok wait_until(sub { state_of($gid) eq 'cancelled' }, 20), 'the goal is cancelled'
        or diag worker_logs($ctx);
    ok wait_until(sub { a2a_events($out, 'cancel') }, 10),
        'the A2A server got tasks/cancel' or diag $sh->log;
    my ($exec) = a2a_events($out, 'execute');
    my ($cancel) = a2a_events($out, 'cancel');
    is $cancel->{taskId}, $exec->{taskId}, 'for the running task';
    my $cid = meta($gid)->{comm_id};
    my $r;
    ok wait_until(sub {
        ($r) = grep { $_->{sender} eq 'Shouter' && $_->{type} == 7 } room($cid);
        $r;
    }, 10), 'a result follows' or diag $sh->log;
    is $r->{task_status}, 'failed', 'failed';
    is $r->{task_conclusion}, 'cancelled: the goal ended before the task did; '
        . 'CancelTask sent to the A2A agent: the task is now canceled', 'saying why';
    stop_workers();
    is $sh->stop, 0, 'exit 0';
    stop_child($srv);
--- no_error_log
[error]
[alert]
[crit]



=== TEST 5: a bad card, an unreachable URL, a 404: exit 2 at start, one line saying why
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    my ($port, $srv) = a2a_server('bad', '--bad-card');
    my ($st, $err) = agent_run($ctx, '--a2a', "http://127.0.0.1:$port");
    is $st, 2, 'a card without a name: exit 2';
    is $err, "ioa-agent: --a2a http://127.0.0.1:$port: the card at "
           . "http://127.0.0.1:$port/.well-known/agent-card.json has no \"name\"\n",
        'saying so';

    my $dead = free_port();
    my $t0 = time;
    ($st, $err) = agent_run($ctx, '--a2a', "http://127.0.0.1:$dead");
    is $st, 2, 'nothing listening: exit 2';
    like $err, qr{trying again in 1000 ms.*trying again in 2000 ms}s, 'after three tries';
    like $err, qr{\nioa-agent: --a2a http://127\.0\.0\.1:$dead: cannot fetch the card at http://127\.0\.0\.1:$dead/\.well-known/agent-card\.json: [^\n]*\n\z},
        'the last line says why';
    ok time - $t0 < 10, 'within seconds';

    ($st, $err) = agent_run($ctx, '--a2a', "http://127.0.0.1:$port/nope.json");
    is $st, 2, 'a card URL that answers 404: exit 2 at once';
    like $err, qr{^ioa-agent: --a2a http://127\.0\.0\.1:$port/nope\.json: HTTP 404 from http://127\.0\.0\.1:$port/nope\.json \(is --a2a the agent's base URL},
        'saying which URL';

    ($st, $err) = agent_run($ctx, '--a2a', "http://127.0.0.1:$port", '--exec', 'cat');
    is $st, 2, '--a2a and --exec: exit 2';
    like $err, qr/give exactly one of --exec, --http and --a2a/, 'a usage error';

    my ($code, $d) = api($ctx, POST => '/query_assistant', { name => 'Shouter' });
    ok !($d && $d->{online}), 'nothing registered meanwhile';
    stop_child($srv);
--- no_error_log
[error]
[alert]
[crit]
