# t/125-engine.t -- one ioa-worker process runs many goals at once
# (workers/worker/engine.c): each goal a state machine whose waits hold
# nothing but its memory, so a goal that waits for a model, an agent, a
# person or a sub-goal never holds up another one.  Real processes: Redis,
# nginx with the module, ioa-worker, ioa-agent --exec, and a scripted
# OpenAI-compatible model (t/lib/IoaTest/ScriptedLLM.pm).
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/125-engine.t
#
# IOA_WORKER_BIN and IOA_AGENT_BIN run other builds (ASan ones, say).

use strict;
use warnings;

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Api;
use IoaTest::Goals;
use IoaTest::Runtime;   # agent, wait_online
use IoaTest::ScriptedLLM;
use JSON::PP ();
use Time::HiRes qw(sleep time);

no_root_location();
repeat_each(1);
run_tests();

__DATA__

=== TEST 1: a model hung on one goal's call holds up no other goal nor the hung one's cancel
one worker, a model that hangs on one goal's call: 50 other goals conclude
meanwhile, and the hung goal's cancel is heard at once.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $echo = agent($ctx, name => 'Echo', desc => 'echoes the text back',
                     exec => ['cat']);
    ok wait_online($ctx, 'Echo', 1, 10), 'Echo is online' or diag $echo->log;
    # every call is answered "{}" (the built-in planner's part stands),
    # but the plan of the goal that says "hang" is never answered
    my $llm = scripted_llm(sub {
        my ($req) = @_;
        my $user = $req->{messages}[1]{content} // '';
        return { hang => 1 } if $user =~ /Goal: Hang on/;
        return '{}';
    });
    worker($ctx, 'w1', env => { IOA_LLM_BASE_URL => $llm->{url},
                                IOA_LLM_TIMEOUT => 120,
                                IOA_LLM_MAX_ATTEMPTS => 1 });
    my $hung = launch(goal => 'Hang on to this.', team_member_names => ['Echo']);
    ok wait_until(sub { grep { ($_->{messages}[1]{content} // '') =~ /Hang on/ }
                        scripted_requests($llm) }, 10),
       'the hung goal asked the model' or diag worker_logs($ctx);
    my $t0 = time;
    my @g = map { launch(goal => "Echo line $_.", team_member_names => ['Echo']) } 1 .. 50;
    ok wait_until(sub { !grep { state_of($_) ne 'concluded' } @g }, 60),
       'the 50 goals concluded' or diag join ' ', map { state_of($_) } @g;
    my $took = time - $t0;
    diag sprintf '50 goals beside a hung model call: %.1f s', $took;
    my $right = grep { (meta($_)->{conclusion} // '') =~ /1 of 1 part done/ } @g;
    is $right, 50, 'each with its part done';
    is state_of($hung), 'forming', 'the hung goal still waits for its plan';
    ok fsm($hung)->{owner}, 'and is still held by w1' ;

    my $c0 = time;
    my $res = $ctx->http(POST => "/goals/$hung/cancel");
    is $res->code, 202, 'cancel: 202';
    ok wait_until(sub { state_of($hung) eq 'cancelled' }, 5), 'the hung goal is cancelled'
        or diag worker_log($ctx, 'w1');
    my $heard = time - $c0;
    cmp_ok $heard, '<', 1, 'within a second (the control channel wakes it; no poll)'
        or diag "cancelled after $heard s";
    my $st = stop_workers();
    is $st->{w1}, 0, 'w1 exits 0';
    is $echo->stop, 0, 'Echo exits 0';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 2: a killed worker's 200 goals are taken over and concluded, no step done twice
kill -9 of a worker holding 200 goals in flight: another worker takes each one
over and concludes it; no step posted twice, none decided twice.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- timeout: 120
--- ioa_scenario
    fresh($ctx);
    my $slow = agent($ctx, name => 'Sleeper', desc => 'sleeps, then echoes the text',
                     exec => ['/bin/sh', '-c', 'sleep 4; cat']);
    ok wait_online($ctx, 'Sleeper', 1, 10), 'Sleeper is online' or diag $slow->log;
    my $w1 = worker($ctx, 'w1', claim_idle => 3);
    my @g = map { launch(goal => "Sleep on line $_.", team_member_names => ['Sleeper']) } 1 .. 200;
    # every goal has handed out its task (step 11 PAUSE posted) and waits
    ok wait_until(sub { !grep { (fsm($_)->{step} // 0) < 11 } @g }, 30),
       'w1 holds all 200 goals, each waiting for its task'
        or diag scalar(grep { (fsm($_)->{step} // 0) < 11 } @g) . " not yet\n"
                . worker_log($ctx, 'w1');
    my $pending = redis_cmd('XPENDING', 'ioa:{jobs}:goals', 'workers');
    is $pending->[0], 200, '200 jobs pending';
    is $pending->[3][0][0], 'w1', 'all on w1';
    kill9($w1);
    worker($ctx, 'w2', claim_idle => 3);
    ok wait_until(sub { !grep { state_of($_) ne 'concluded' } @g }, 60),
       'w2 concluded all 200' or diag join(' ', map { state_of($_) } @g) . "\n"
                                     . worker_log($ctx, 'w2');
    like worker_log($ctx, 'w2'), qr/took over job .* from a silent worker/, 'by taking them over';
    my ($twice, $decided, $concl, $done) = (0, 0, 0, 0);
    for my $gid (@g) {
        my @env = room(meta($gid)->{comm_id});
        my %seen;
        $twice += grep { $_->{sender} eq $COORD && $seen{$_->{ioa_step}}++ } @env;
        $decided += grep { $_->{sender} eq $COORD && $_->{type} == 10 } @env;
        $concl += grep { $_->{sender} eq $COORD && $_->{type} == 11 } @env;
        $done += (meta($gid)->{conclusion} // '') =~ /1 of 1 part done/;
    }
    is $twice, 0, 'no coordinator step is in any room twice';
    is $decided, 200, 'one CONCLUDE_GROUP_DISCUSSION (the decision) per goal';
    is $concl, 200, 'one CONCLUSION per goal';
    is $done, 200, 'every task\'s result reached its goal';
    is redis_cmd('XPENDING', 'ioa:{jobs}:goals', 'workers')->[0], 0, 'no job left pending';
    my $st = stop_workers();
    is $st->{w2}, 0, 'w2 exits 0';
    is $slow->stop, 0, 'Sleeper exits 0';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 3: a three-level nested goal runs in one worker while each parent waits
a three-level nested goal on a single worker: each sub-goal runs in the same
process while its parent waits.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my %skills = (Ann => 'write the report', Ben => 'check the figures',
                  Cid => 'draw the chart', Dan => 'translate the text',
                  Eve => 'summarise the paper', Fay => 'plan the budget',
                  Gus => 'book the hall', Hal => 'order the food',
                  Ida => 'print the tickets', Jon => 'hire the band');
    my @a = map { agent($ctx, name => $_, desc => $skills{$_}, exec => ['cat']) }
            sort keys %skills;
    ok !grep({ !wait_online($ctx, $_, 1, 10) } sort keys %skills), 'ten agents online';
    worker($ctx, 'w1', args => ['--min-score', '0.1']);
    my $goal = join ' ', map { ucfirst($_) . '.' } map { $skills{$_} } sort keys %skills;
    my $t0 = time;
    my $gid = launch(goal => $goal, team_up_depth => 2);
    ok wait_until(sub { state_of($gid) eq 'concluded' }, 60), 'the goal concluded'
        or diag worker_log($ctx, 'w1');
    diag sprintf 'three levels on one worker: %.1f s', time - $t0;
    my $children = redis_cmd('SMEMBERS', "ioa:{goal:$gid}:children");
    is scalar(@$children), 1, 'one sub-goal';
    my $child = $children->[0];
    is meta($child)->{state}, 'concluded', 'the sub-goal concluded';
    is meta($child)->{depth}, '1', 'one level down';
    my $grand = redis_cmd('SMEMBERS', "ioa:{goal:$child}:children");
    is scalar(@$grand), 1, 'the sub-goal has a sub-goal of its own';
    is meta($grand->[0])->{state}, 'concluded', 'which concluded';
    is meta($grand->[0])->{depth}, '0', 'at the last level';
    is $_->{worker}, 'w1', "$_->{goal_id}: run by w1"
        for map { meta($_) } $gid, $child, $grand->[0];
    like meta($gid)->{conclusion}, qr/^(\d+) of \1 parts done\.$/m, 'every part done';
    unlike worker_log($ctx, 'w1'), qr/timed out|timed_out/, 'no task timed out waiting for a worker';
    my $st = stop_workers();
    is $st->{w1}, 0, 'w1 exits 0';
    is $_->stop, 0, $_->{name} . ' exits 0' for @a;
--- no_error_log
[error]
[alert]
[crit]



=== TEST 4: with IOA_LLM_CONCURRENCY 2 a third LLM call waits for a slot
the LLM limiter: with IOA_LLM_CONCURRENCY 2, a third call waits for a slot
(the worker's heartbeat counts 2 in flight, 1 queued), and gets one when a
call ends.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $echo = agent($ctx, name => 'Echo', desc => 'echoes the text back',
                     exec => ['cat']);
    ok wait_online($ctx, 'Echo', 1, 10), 'Echo is online' or diag $echo->log;
    my $llm = scripted_llm(sub {
        my ($req) = @_;
        return { hang => 1 } if ($req->{messages}[1]{content} // '') =~ /Goal: Hang/;
        return '{}';
    });
    worker($ctx, 'w1', env => { IOA_LLM_BASE_URL => $llm->{url}, IOA_LLM_TIMEOUT => 3,
                                IOA_LLM_MAX_ATTEMPTS => 1, IOA_LLM_CONCURRENCY => 2,
                                IOA_LLM_BREAKER_FAILURES => 0 });
    my @hang = map { launch(goal => "Hang $_ here.", team_member_names => ['Echo']) } 1 .. 3;
    my $beat = sub { redis_cmd('HGET', 'ioa:{workers}:w:w1', $_[0]) // -1 };
    ok wait_until(sub { $beat->('llm_in_flight') == 2 && $beat->('llm_queued') == 1 }, 10),
       'two calls in flight, the third queued' or diag worker_log($ctx, 'w1');
    is scalar(() = scripted_requests($llm)), 2, 'the model got two requests, not three';
    # the hung ones time out (IOA_LLM_TIMEOUT 3): their slots pass on
    ok wait_until(sub { scalar(() = scripted_requests($llm)) >= 3 }, 10),
       'the third is sent once a slot is free';
    ok wait_until(sub { !grep { state_of($_) ne 'concluded' } @hang }, 30),
       'all three conclude (the built-in planner for what the model did not answer)'
        or diag worker_log($ctx, 'w1');
    like worker_log($ctx, 'w1'), qr/the LLM gave no usable plan/, 'the log says the model failed';
    ok wait_until(sub { $beat->('goals_in_flight') == 0 }, 5), 'no goal in flight any more';
    my $st = stop_workers();
    is $st->{w1}, 0, 'w1 exits 0';
    is $echo->stop, 0, 'Echo exits 0';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 5: the LLM breaker stops requests after failures in a row; a success closes it
the LLM breaker: after IOA_LLM_BREAKER_FAILURES failed attempts in a row no
request is sent for IOA_LLM_BREAKER_OPEN (the goals go on with the built-in
planner), then one call tries again and a success closes it.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $echo = agent($ctx, name => 'Echo', desc => 'echoes the text back',
                     exec => ['cat']);
    ok wait_online($ctx, 'Echo', 1, 10), 'Echo is online' or diag $echo->log;
    my $flag = "$Scratch/llm-up";
    my $llm = scripted_llm(sub {
        return -e $flag ? '{}' : { status => 500, body => '{"error":"down"}' };
    });
    # one request at a time, so that the failures come in a row before
    # any other call is sent (calls already in flight when the breaker
    # opens are not called back)
    worker($ctx, 'w1', env => { IOA_LLM_BASE_URL => $llm->{url}, IOA_LLM_MAX_ATTEMPTS => 1,
                                IOA_LLM_CONCURRENCY => 1,
                                IOA_LLM_BREAKER_FAILURES => 3, IOA_LLM_BREAKER_OPEN => 3 });
    my $beat = sub { redis_cmd('HGET', 'ioa:{workers}:w:w1', $_[0]) // -1 };
    my @g = map { launch(goal => "Echo line $_.", team_member_names => ['Echo']) } 1 .. 6;
    ok wait_until(sub { !grep { state_of($_) ne 'concluded' } @g }, 30),
       'every goal concludes while the model is down' or diag worker_log($ctx, 'w1');
    is scalar(() = scripted_requests($llm)), 3, 'the endpoint was asked three times, no more';
    like worker_log($ctx, 'w1'), qr/failed 3 times in a row; its circuit breaker opens/,
        'the log says the breaker opened';
    like worker_log($ctx, 'w1'), qr/its circuit breaker is open/, 'and why later calls failed at once';
    ok wait_until(sub { $beat->('llm_breaker_open') == 1 }, 5), 'the heartbeat says it is open';
    is $beat->('llm_breaker_trips'), 1, 'one trip';

    open my $f, '>', $flag or die; close $f;
    sleep 3.2;                  # IOA_LLM_BREAKER_OPEN
    my $g2 = launch(goal => 'Echo the last line.', team_member_names => ['Echo']);
    ok wait_until(sub { state_of($g2) eq 'concluded' }, 15), 'a goal after the open time concludes';
    cmp_ok scalar(() = scripted_requests($llm)), '>', 3, 'and its calls reach the endpoint again';
    like worker_log($ctx, 'w1'), qr/answers again; its circuit breaker is closed/, 'the breaker closed';
    ok wait_until(sub { $beat->('llm_breaker_open') == 0 }, 5), 'the heartbeat says it is closed';
    my $st = stop_workers();
    is $st->{w1}, 0, 'w1 exits 0';
    is $echo->stop, 0, 'Echo exits 0';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 6: SIGTERM gives back every goal the worker holds at once
SIGTERM gives back every goal the worker holds at once: 30 waiting goals,
taken over by another worker long before --claim-idle.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $slow = agent($ctx, name => 'Sleeper', desc => 'sleeps, then echoes the text',
                     exec => ['/bin/sh', '-c', 'sleep 3; cat']);
    ok wait_online($ctx, 'Sleeper', 1, 10), 'Sleeper is online' or diag $slow->log;
    my $w1 = worker($ctx, 'w1', claim_idle => 60);
    my @g = map { launch(goal => "Sleep on line $_.", team_member_names => ['Sleeper']) } 1 .. 30;
    ok wait_until(sub { !grep { (fsm($_)->{step} // 0) < 11 } @g }, 20),
       'w1 holds 30 goals, each waiting for its task' or diag worker_log($ctx, 'w1');
    my $t0 = time;
    kill 'TERM', $w1;
    waitpid $w1, 0;
    my $took = time - $t0;
    delete $IoaTest::Goals::Workers{$w1};
    is $? >> 8, 0, 'w1 exits 0';
    cmp_ok $took, '<', 3, 'at once' or diag "it took $took s";
    like worker_log($ctx, 'w1'), qr/released 30 goals for other workers/, 'having released all 30';
    worker($ctx, 'w2', claim_idle => 60);
    my $t1 = time;
    ok wait_until(sub { !grep { state_of($_) ne 'concluded' } @g }, 30),
       'w2 concludes all 30' or diag worker_log($ctx, 'w2');
    cmp_ok time - $t1, '<', 20, 'well before --claim-idle (60 s)';
    is scalar(() = worker_log($ctx, 'w2') =~ /took over job/g), 30, 'by taking each one over';
    my $st = stop_workers();
    is $st->{w2}, 0, 'w2 exits 0';
    is $slow->stop, 0, 'Sleeper exits 0';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 7: at --max-goals a worker takes no more goals from the queue
at --max-goals a worker takes no more from the queue: the rest wait there for
another worker.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $slow = agent($ctx, name => 'Sleeper', desc => 'sleeps, then echoes the text',
                     exec => ['/bin/sh', '-c', 'sleep 3; cat']);
    ok wait_online($ctx, 'Sleeper', 1, 10), 'Sleeper is online' or diag $slow->log;
    worker($ctx, 'w1', args => ['--max-goals', 4]);
    my @g = map { launch(goal => "Sleep on line $_.", team_member_names => ['Sleeper']) } 1 .. 10;
    ok wait_until(sub { (grep { (fsm($_)->{step} // 0) >= 11 } @g) == 4 }, 10),
       'w1 runs four goals' or diag worker_log($ctx, 'w1');
    sleep 0.5;
    is scalar(grep { (fsm($_)->{step} // 0) >= 11 } @g), 4, 'and no more';
    is redis_cmd('XPENDING', 'ioa:{jobs}:goals', 'workers')->[0], 4, 'four jobs delivered, six still queued';
    ok wait_until(sub { (redis_cmd('HGET', 'ioa:{workers}:w:w1', 'goals_in_flight') // -1) == 4 }, 5),
       'its heartbeat: 4 in flight';
    worker($ctx, 'w2');
    ok wait_until(sub { !grep { state_of($_) ne 'concluded' } @g }, 30), 'all ten conclude'
        or diag worker_logs($ctx);
    my %by;
    $by{ meta($_)->{worker} }++ for @g;
    cmp_ok $by{w1}, '>=', 4, 'w1 did its four and more as its goals ended';
    cmp_ok $by{w2} // 0, '>=', 1, 'w2 took what w1 had no room for';
    my $st = stop_workers();
    is $st->{$_}, 0, "$_ exits 0" for qw(w1 w2);
    is $slow->stop, 0, 'Sleeper exits 0';
--- no_error_log
[error]
[alert]
[crit]
