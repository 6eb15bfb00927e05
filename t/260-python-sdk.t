# t/260-python-sdk.t -- the Python SDK (clients/python/ioa) against a real
# nginx, Redis and ioa-worker: each block runs Python scripts from
# t/lib/pysdk with Debian's /usr/bin/python3 and PYTHONPATH=clients/python,
# and checks what they print against the hub's answers and the room's Redis
# Stream.
#
#   make all && TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/260-python-sdk.t
#
# The resume block follows a second nginx (IoaTest::Instance) on the same
# Redis, which it stops and starts again on the same port while envelopes
# are posted through the runner's nginx.  The README block takes the
# example agent out of README.md and runs it, so the README cannot rot.

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(register teamup fresh_hub json);
use IoaTest::Api;
use IoaTest::Goals qw($COORD worker stop_workers worker_log names_in id_lt);
use IoaTest::Instance;
use IoaTest::Facade qw(online);
use IoaTest::Proc qw(bg bg_wait bg_stop slurp lines_of wait_lines);
use IoaTest::JWT;
use Cwd qw(abs_path);
use File::Temp ();
use FindBin;
use IPC::Run ();
use Time::HiRes qw(sleep time);

no_root_location();
log_level('info');

our $Repo = abs_path("$FindBin::Bin/..");
our $Py = '/usr/bin/python3';
our $Scratch = File::Temp::tempdir('pysdk-t-XXXXXX', TMPDIR => 1, CLEANUP => 1);
our $K = jwt_keys("$Scratch/keys");
$ENV{TEST_NGINX_PYSDK_KEYS} = "$Scratch/keys";
$ENV{PYTHONPATH} = "$Repo/clients/python";
$ENV{PYTHONDONTWRITEBYTECODE} = 1;


# ------------------------------------------------------------------ helpers

sub token {
    my ($sub, $scope) = @_;
    return jwt($K, 'HS256', { sub => $sub, scope => $scope // 'agent',
                              exp => time + 600 });
}

# py($script, @args): runs t/lib/pysdk/$script to its end; (exit status,
# stdout, stderr)
sub py {
    my ($script, @args) = @_;
    my ($out, $err) = ('', '');
    IPC::Run::run([$Py, "$Repo/t/lib/pysdk/$script", @args], '<', \undef,
                  '>', \$out, '2>', \$err, IPC::Run::timeout(60));
    return ($? >> 8, $out, $err);
}

# a Python program in the background, its stdout and stderr in files
sub py_bg { my ($name, $file, @args) = @_; bg($name, $Py, $file, @args) }

sub post {
    my ($ctx, $sender, $cid, $content) = @_;
    my ($code, $doc, $res) = api($ctx, POST => "/agents/$sender/messages",
        { comm_id => $cid, content => $content });
    die "post: " . $res->status_line . ' ' . $res->content . "\n"
        unless $code == 200;
    return $doc->{id};
}

sub log_ids {
    return map { $_->[0] } @{ redis_cmd('XRANGE', "ioa:{room:$_[0]}:log", '-', '+') };
}

# waits for the goal to end; its record
sub goal_end {
    my ($ctx, $gid) = @_;
    my $g;
    wait_until(sub {
        (undef, $g) = api($ctx, GET => "/goals/$gid");
        $g && $g->{state} =~ /^(?:concluded|failed|cancelled)$/;
    }, 60);
    return $g;
}

run_tests();

__DATA__

=== TEST 1: two SDK agents connect with JWTs and talk; refused tokens raise AuthError
register, connect with a JWT, room traffic between two SDK agents; refused
tokens raise AuthError with the hub's code.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_PYSDK_KEYS/hs256.key; }
--- ioa_scenario
    fresh_hub($ctx);
    my $bad = jwt($::K, 'HS256', { sub => 'Ben', scope => 'agent', exp => time + 600 },
                  secret => 'not the key');
    my ($rc, $out, $err) = py('room_traffic.py', 'http://127.0.0.1:' . $ctx->port,
                              token('Ann'), token('Ben'), $bad);
    is $rc, 0, 'the script ran to its end' or diag $err;
    my $r = json()->decode($out);
    is_deeply $r->{register}, ['created', 'created'], 'both registered';
    my $cid = $r->{comm_id};
    my @log = @{ redis_cmd('XRANGE', "ioa:{room:$cid}:log", '-', '+') };
    my @ids = map { $_->[0] } @log;
    is scalar @ids, 2, 'two envelopes in the room\'s Stream';
    is $ids[1], $r->{posted_id}, 'Client.post answered the id Redis gave';
    for my $who (qw(ann_got ben_got)) {
        is_deeply [map { $_->{id} } @{ $r->{$who} }], \@ids,
            "$who: both envelopes, in the Stream's order, with its ids";
    }
    my ($hello, $back) = @{ $r->{ben_got} };
    is $hello->{sender}, 'Ann', 'the sender is the token\'s subject';
    is $hello->{content}, 'hello Ben', 'content';
    is $hello->{mood}, 'cheerful', 'an unknown field is kept (Envelope.extra)';
    is $back->{type}, 8, 'the type goes out and comes back as IoA\'s integer';
    is_deeply $r->{types}, ['NoneType', 'MessageType'], 'and parses into MessageType';
    is $r->{duplicates}, 0, 'no duplicates';
    my $e = $r->{errors};
    is_deeply $e->{post_as_other}, [403, 'forbidden', undef],
        'posting as another agent: AuthError 403 forbidden';
    is_deeply $e->{ws_as_other}, [403, 'forbidden'],
        'connecting as another agent: AuthError 403 forbidden, from the handshake';
    is $e->{ws_bad_token}[0], 401, 'a bad token on the WebSocket: 401';
    is $e->{ws_bad_token}[1], 'unauthorized', 'AuthError code unauthorized';
    like $e->{ws_bad_token}[2], qr/signature/i, 'with the hub\'s reason';
    like $e->{http_bad_token}[2], qr/^401 unauthorized: /, 'over HTTP the same, as text';
    is_deeply $e->{unknown_agent}, [404, 'unknown_agent', 'name', 0],
        'an unknown agent: HubError 404 unknown_agent naming the field, not AuthError';
--- no_error_log
[alert]
[crit]



=== TEST 2: resume across a hub restart delivers each room's missed envelopes once, in order
resume across a hub restart: each room's envelopes posted while it was down
arrive once, in the Stream's order.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, qw(Ann Ben Cat));
    my $one = teamup($ctx, 'Ann', ['Ben'], 'one');
    my $two = teamup($ctx, 'Cat', ['Ben'], 'two');
    post($ctx, 'Ann', $one, 'before the follower');
    my %inst = (dir => $ctx->servroot . '/hub-b', workers => 1, log_level => 'info',
                http_config => 'ioa_redis 127.0.0.1:' . redis_port() . ';',
                config => 'location / { ioa_api; }');
    my $hub = IoaTest::Instance->start(%inst);
    my $port = $hub->port;
    my $f = py_bg('follow2', "$::Repo/t/lib/pysdk/follow.py", "http://127.0.0.1:$port",
                  'Ben', 2);
    is((wait_lines($f->{out}, 1))[0], 'connected', 'the follower is connected');

    my %want;
    push @{ $want{$one} }, post($ctx, 'Ann', $one, "live $_") for 1 .. 3;
    push @{ $want{$two} }, post($ctx, 'Cat', $two, 'live in two');
    my @got = wait_lines($f->{out}, 5);
    is scalar @got, 5, 'live envelopes arrived';

    $hub->stop;
    push @{ $want{$one} }, post($ctx, 'Ann', $one, "while down $_") for 1 .. 3;
    push @{ $want{$two} }, post($ctx, 'Cat', $two, "while down $_") for 1 .. 2;
    $hub = IoaTest::Instance->start(%inst, port => $port);
    push @{ $want{$one} }, post($ctx, 'Ann', $one, "after $_") for 1 .. 2;
    push @{ $want{$one} }, post($ctx, 'Ann', $one, 'the end');
    push @{ $want{$two} }, post($ctx, 'Cat', $two, 'the end');
    is bg_wait($f, 30), 0, 'the follower saw "the end" in both rooms' or diag slurp($f->{err});
    @got = lines_of($f->{out});
    my $stats = json()->decode(pop @got);
    shift @got;
    is scalar @got, @{ $want{$one} } + @{ $want{$two} }, 'as many envelopes as were posted';
    for my $cid ($one, $two) {
        my @ids = map { (split / /)[1] } grep { (split / /)[0] eq $cid } @got;
        is_deeply \@ids, $want{$cid},
            ($cid eq $one ? 'room one' : 'room two') . ': every envelope once, in order, across the restart'
            or diag slurp($f->{err});
    }
    my @log_one = log_ids($one);
    shift @log_one;
    is_deeply $want{$one}, \@log_one, 'room one: the Stream after the follower connected (XRANGE): no gap';
    is_deeply $want{$two}, [log_ids($two)], 'room two: its whole Stream (XRANGE)';
    ok $stats->{connects} >= 2, "it reconnected ($stats->{connects} connections)";
    is $stats->{duplicates}, 0, 'and the hub sent nothing twice';
    $hub->stop;
--- no_error_log
[alert]
[crit]



=== TEST 3: an SDK task handler completes a goal launched with POST /launch_goal
a task handler written with the SDK completes a goal launched with POST
/launch_goal; the goal concludes with its result.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1');
    my $agent = py_bg('counter3', "$::Repo/t/lib/pysdk/counter.py",
                      'http://127.0.0.1:' . $ctx->port, 'Counter');
    ok online($ctx, undef, 'Counter'), 'the SDK agent is registered and online'
        or diag slurp($agent->{err});
    my ($code, $doc) = api($ctx, POST => '/launch_goal',
        { goal => 'Count the words of "the quick brown fox"' });
    is $code, 202, 'launched';
    my $g = goal_end($ctx, $doc->{goal_id});
    is $g->{state}, 'concluded', 'the goal concluded';
    like $g->{conclusion}, qr/'the quick brown fox' has 4 words/,
        'with the handler\'s result';
    like $g->{conclusion}, qr/1 of 1 part done/, 'the part counted as done';
    my @mine = grep { $_->{sender} eq 'Counter' } IoaTest::Goals::room($g->{comm_id});
    is_deeply [map { $_->{type} } @mine], [8, 7], 'progress, then the result';
    is $mine[1]{task_status}, 'completed', 'task_status completed';
    is $mine[0]{task_id}, $mine[1]{task_id}, 'both under the task\'s id';
    like $mine[0]{content}, qr/^Team, the following task is being executed in the background by myself\./,
        'IoA\'s progress marker, as ioa-agent sends it';
    my (undef, $rec) = api($ctx, POST => '/query_assistant', { name => 'Counter' });
    is $rec->{record}{completed}, 1, 'the agent\'s record counts one completed task';
    bg_stop($agent);
    stop_workers();
--- no_error_log
[alert]
[crit]



=== TEST 4: the README's example agent, taken out of README.md, completes a goal
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    my $readme = slurp("$::Repo/README.md");
    my ($section) = $readme =~ /^## Python SDK\n(.*?)^## /ms;
    ok defined $section, 'README.md has a "Python SDK" section';
    my ($code_text) = ($section // '') =~ /^```python\n(.*?)^```$/ms;
    ok defined $code_text, 'with a Python example';
    my $lines = () = ($code_text // '') =~ /\n/g;
    ok $lines <= 30, "that fits on one screen ($lines lines)";
    open my $fh, '>', "$::Scratch/readme_agent.py" or die;
    print {$fh} $code_text // '';
    close $fh;
    worker($ctx, 'w1');
    local $ENV{IOA_HUB} = 'http://127.0.0.1:' . $ctx->port;
    my $agent = py_bg('readme4', "$::Scratch/readme_agent.py");
    ok online($ctx, undef, 'Shouter'), 'the example agent is online' or diag slurp($agent->{err});
    my ($code, $doc) = api($ctx, POST => '/launch_goal',
        { goal => 'Shout the words "hello world"' });
    is $code, 202, 'launched';
    my $g = goal_end($ctx, $doc->{goal_id});
    is $g->{state}, 'concluded', 'the goal concluded';
    like $g->{conclusion}, qr/HELLO WORLD/, 'with the example agent\'s result';
    bg_stop($agent);
    stop_workers();
--- no_error_log
[alert]
[crit]



=== TEST 5: @agent.turn: an SDK agent takes its DISCUSSION turn in a real goal
@agent.turn: an SDK agent registered with speaks_protocol takes its DISCUSSION
turn in a real goal; its reply is stored in the room, addressed back to the
coordinator.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1', turn_timeout => 60);
    my $agent = py_bg('talker5', "$::Repo/t/lib/pysdk/behave.py",
                      'http://127.0.0.1:' . $ctx->port, 'Talker', 'turn');
    ok online($ctx, undef, 'Talker'), 'the SDK agent is online' or diag slurp($agent->{err});
    my (undef, $found) = api($ctx, POST => '/retrieve_assistant',
        { sender => 'x', capabilities => ['counts words'] });
    my ($me) = grep { $_->{name} eq 'Talker' } @{ $found // [] };
    ok $me && $me->{speaks_protocol}, 'registered with speaks_protocol (a @agent.turn handler)';
    my ($code, $doc) = api($ctx, POST => '/launch_goal',
        { goal => 'Count the words of "one two three"' });
    is $code, 202, 'launched';
    my $g = goal_end($ctx, $doc->{goal_id});
    is $g->{state}, 'concluded', 'the goal concluded';
    like $g->{conclusion}, qr/'one two three' has 3 words/, 'with the task handler\'s result';
    my @room = IoaTest::Goals::room($g->{comm_id});
    my ($plan) = grep { ($_->{ioa_step} // 0) == 1 && $_->{sender} eq $COORD } @room;
    ok $plan, 'the coordinator posted the plan';
    is_deeply [names_in($plan->{next_speaker})], ['Talker'], 'the plan gives Talker the floor';
    my @turns = grep { $_->{sender} eq 'Talker' && $_->{type} == 4 } @room;
    is scalar @turns, 1, 'Talker answered with one DISCUSSION (XRANGE of the room)';
    my $t = $turns[0] // {};
    is $t->{content}, 'Talker takes the turn: the plan suits me', 'the turn handler\'s text';
    is_deeply $t->{next_speaker}, [$COORD], 'addressed back to the coordinator, as a list';
    is $t->{reply_to}, $plan->{id}, 'reply_to names the plan';
    is $t->{state}, 1, 'state DISCUSSION';
    ok id_lt($plan->{id}, $t->{id} // '0-0'), 'after the plan';
    my ($assign) = grep { $_->{sender} eq $COORD && $_->{type} == 6 } @room;
    ok $assign && id_lt($t->{id} // '9999999999999-0', $assign->{id}),
        'the coordinator assigned the task after the turn, not after the turn timeout';
    ok !(grep { ($_->{on_behalf_of} // '') eq 'Talker' } @room),
        'the coordinator did not speak on Talker\'s behalf';
    my @got = map { json()->decode($_) } lines_of($agent->{out});
    my ($turn) = grep { $_->{kind} eq 'turn' } @got;
    is $turn->{assigner}, $COORD, 'Task.assigner of the turn is the coordinator';
    is $turn->{desc}, $plan->{content}, 'Task.desc of the turn is the plan\'s text';
    unlike worker_log($ctx, 'w1'), qr/did not take the turn/, 'the worker did not give up waiting';
    bg_stop($agent);
    stop_workers();
--- no_error_log
[alert]
[crit]



=== TEST 6: a handler that outlives task_timeout reports timed_out
task_timeout: a handler that sleeps 30 s under task_timeout=1 reports
timed_out; the agent's record counts it.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1', task_timeout => 120);
    my $agent = py_bg('sloth6', "$::Repo/t/lib/pysdk/behave.py",
                      'http://127.0.0.1:' . $ctx->port, 'Sloth', 'slow', 1);
    ok online($ctx, undef, 'Sloth'), 'the SDK agent is online' or diag slurp($agent->{err});
    my ($code, $doc) = api($ctx, POST => '/launch_goal',
        { goal => 'Count the words of "slow and steady"' });
    is $code, 202, 'launched';
    my $g = goal_end($ctx, $doc->{goal_id});
    ok $g->{state} =~ /^(?:concluded|failed)$/, "the goal ended ($g->{state})";
    my @mine = grep { $_->{sender} eq 'Sloth' } IoaTest::Goals::room($g->{comm_id});
    is_deeply [map { $_->{type} } @mine], [8, 7], 'progress, then a result';
    my $r = $mine[1] // {};
    is $r->{task_status}, 'timed_out', 'task_status timed_out';
    like $r->{task_conclusion} // '', qr/^no result within 1(?:\.0)? s$/, 'the conclusion says why';
    like $r->{content} // '', qr/^Just a quick interruption to our current discussion\. The task ".*" timed out\.$/,
        'IoA\'s result marker, "timed out"';
    is $r->{next_speaker}, '', 'an async task\'s result names nobody';
    is $r->{task_id}, $mine[0]{task_id}, 'under the task\'s id';
    unlike $g->{conclusion} // '', qr/slow and steady' has/, 'the late answer is not in the conclusion';
    my $rec;
    ok wait_until(sub {
        (undef, $rec) = api($ctx, POST => '/query_assistant', { name => 'Sloth' });
        ($rec->{record}{timed_out} // 0) >= 1;
    }, 15), 'the agent\'s record counts a timed-out task';
    is $rec->{record}{completed}, 0, 'and no completed one';
    is $rec->{record}{failed}, 0, 'and no failed one';
    bg_stop($agent);
    stop_workers();
--- no_error_log
[alert]
[crit]



=== TEST 7: a handler that raises reports a failed result with the exception's text
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1');
    my $agent = py_bg('raiser7', "$::Repo/t/lib/pysdk/behave.py",
                      'http://127.0.0.1:' . $ctx->port, 'Raiser', 'raise');
    ok online($ctx, undef, 'Raiser'), 'the SDK agent is online' or diag slurp($agent->{err});
    my ($code, $doc) = api($ctx, POST => '/launch_goal',
        { goal => 'Count the words of "this will break"' });
    is $code, 202, 'launched';
    my $g = goal_end($ctx, $doc->{goal_id});
    ok $g->{state} =~ /^(?:concluded|failed)$/, "the goal ended ($g->{state})";
    my @mine = grep { $_->{sender} eq 'Raiser' } IoaTest::Goals::room($g->{comm_id});
    is_deeply [map { $_->{type} } @mine], [8, 7], 'progress, then a result';
    my $r = $mine[1] // {};
    is $r->{task_status}, 'failed', 'task_status failed';
    is $r->{task_conclusion}, 'ValueError: no words in this text', 'the exception\'s type and text';
    like $r->{content} // '', qr/^Just a quick interruption to our current discussion\. The task ".*" failed\.$/,
        'IoA\'s result marker, "failed"';
    my $rec;
    ok wait_until(sub {
        (undef, $rec) = api($ctx, POST => '/query_assistant', { name => 'Raiser' });
        ($rec->{record}{failed} // 0) >= 1;
    }, 15), 'the agent\'s record counts a failed task';
    is $rec->{record}{completed}, 0, 'and no completed one';
    like slurp($agent->{err}), qr/ValueError/, 'the SDK logged the failure';
    bg_stop($agent);
    stop_workers();
--- no_error_log
[alert]
[crit]



=== TEST 8: the SDK answers the built-in planner's SYNC_TASK_ASSIGNMENTs as ioa-agent does
sync tasks: the built-in planner's "..., then ..." sends
SYNC_TASK_ASSIGNMENTs; the SDK answers each as ioa-agent does, the result
addressed to the assigner.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1');
    my $agent = py_bg('sync8', "$::Repo/t/lib/pysdk/behave.py",
                      'http://127.0.0.1:' . $ctx->port, 'Counter', 'count');
    ok online($ctx, undef, 'Counter'), 'the SDK agent is online' or diag slurp($agent->{err});
    my ($code, $doc) = api($ctx, POST => '/launch_goal',
        { goal => 'Count the words of "alpha beta", then count the words of "gamma delta epsilon"' });
    is $code, 202, 'launched';
    my $g = goal_end($ctx, $doc->{goal_id});
    is $g->{state}, 'concluded', 'the goal concluded';
    like $g->{conclusion}, qr/'alpha beta' has 2 words/, 'the first result';
    like $g->{conclusion}, qr/'gamma delta epsilon' has 3 words/, 'the second result';
    my @room = IoaTest::Goals::room($g->{comm_id});
    my @sync = grep { $_->{sender} eq $COORD && $_->{type} == 5 } @room;
    is scalar @sync, 2, 'two SYNC_TASK_ASSIGNMENTs (type 5)';
    my @mine = grep { $_->{sender} eq 'Counter' } @room;
    is_deeply [map { $_->{type} } @mine], [8, 7, 8, 7], 'each: progress, then the result';
    for my $i (0, 1) {
        my $as = $sync[$i] // {};
        my ($p, $r) = @mine[2 * $i, 2 * $i + 1];
        my $tid = $as->{tasks}{Counter}{task_id};
        ok defined $tid, "assignment $i carries tasks.Counter.task_id";
        is $p->{task_id}, $tid, "progress $i under the assigner's task id";
        is $r->{task_id}, $tid, "result $i under the assigner's task id";
        is_deeply $p->{next_speaker}, [$COORD], "progress $i to the assigner";
        is_deeply $r->{next_speaker}, [$COORD], "result $i addressed to the assigner (a sync task: it waits)";
        is $r->{task_status}, 'completed', "result $i completed";
        ok id_lt($as->{id}, $p->{id}) && id_lt($p->{id}, $r->{id}), "assignment $i, progress, result in order";
        ok !$sync[$i + 1] || id_lt($r->{id}, $sync[$i + 1]{id}), "result $i before the next assignment";
    }
    my @got = grep { $_->{kind} eq 'task' } map { json()->decode($_) } lines_of($agent->{out});
    is_deeply [map { $_->{sync} ? 1 : 0 } @got], [1, 1], 'the handler saw Task.sync true twice';
    is_deeply [map { $_->{assigner} } @got], [$COORD, $COORD], 'assigned by the coordinator';
    bg_stop($agent);
    stop_workers();
--- no_error_log
[alert]
[crit]



=== TEST 9: a turn handler that raises replies "(no reply: failed)", as ioa-agent does
a turn handler that raises: the reply says there is no reply and why, as
ioa-agent's "(no reply: failed)", instead of passing the exception off as the
agent's words.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1', turn_timeout => 60);
    my $agent = py_bg('mumbler9', "$::Repo/t/lib/pysdk/behave.py",
                      'http://127.0.0.1:' . $ctx->port, 'Mumbler', 'turnfail');
    ok online($ctx, undef, 'Mumbler'), 'the SDK agent is online' or diag slurp($agent->{err});
    my ($code, $doc) = api($ctx, POST => '/launch_goal',
        { goal => 'Count the words of "four five"' });
    is $code, 202, 'launched';
    my $g = goal_end($ctx, $doc->{goal_id});
    is $g->{state}, 'concluded', 'the goal concluded';
    like $g->{conclusion}, qr/'four five' has 2 words/, 'the task still ran';
    my @room = IoaTest::Goals::room($g->{comm_id});
    my ($plan) = grep { ($_->{ioa_step} // 0) == 1 && $_->{sender} eq $COORD } @room;
    my @turns = grep { $_->{sender} eq 'Mumbler' && $_->{type} == 4 } @room;
    is scalar @turns, 1, 'one DISCUSSION from Mumbler';
    my $t = $turns[0] // {};
    is $t->{content}, '(no reply: failed) RuntimeError: cannot discuss now',
        'marked as no reply, with the exception';
    is_deeply $t->{next_speaker}, [$COORD], 'addressed back to the coordinator';
    is $t->{reply_to}, $plan->{id}, 'reply_to names the plan';
    bg_stop($agent);
    stop_workers();
--- no_error_log
[alert]
[crit]
