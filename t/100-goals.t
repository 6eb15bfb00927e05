# t/100-goals.t -- goals end to end with real ioa-worker processes: a goal
# is queued, a worker forms the team, runs IoA's conversation in the room as
# the coordinator (discussion, async task assignment, pause with triggers,
# conclude, conclusion), and writes the outcome to the goal's record and
# event feed.  The hub is real (nginx + the module + Redis), the agents are
# real WebSocket clients that play the agent runtime inside the scenario:
# on an ASYNC_TASK_ASSIGNMENT naming them they answer INFORM_TASK_PROGRESS,
# then INFORM_TASK_RESULT with the task_id from the envelope's "tasks".
#
#   make -C workers/worker        # builds workers/build/ioa-worker
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/100-goals.t
#
# IOA_WORKER_BIN runs another build of the worker (an ASan one, say).
#
# Goals are queued the way POST /launch_goal queues them (launch() below:
# HSET P{goal:<id>}:meta, XADD P{jobs}:goals), so this file proves the
# workers alone; t/095-goal-api.t proves the nginx side.  Workers are child
# processes with their own logs in <servroot>/logs/worker-<name>.log (shown
# when a block fails); they are stopped by PID (SIGTERM, and each must exit
# 0) at the end of every block, and killed in END if a block died.

use strict;
use warnings;

use Cwd ();
use File::Basename ();

BEGIN {
    my $bin = $ENV{IOA_WORKER_BIN}
              || Cwd::abs_path(File::Basename::dirname(__FILE__) . '/..')
                 . '/workers/build/ioa-worker';
    if (!-x $bin) {
        require Test::More;
        Test::More::plan(skip_all => "$bin is not built; run "
                                   . "`make -C workers/worker` first");
    }
}

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(envelope wait_health fresh_hub json);
use IoaTest::Api;
use IoaTest::SSE;
use IoaTest::Goals;   # workers, launch, room, feed, drive: see there
use IoaTest::Llama;
use JSON::PP ();
use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

no_root_location();
no_shuffle();
log_level('info');

run_tests();

__DATA__

=== TEST 1: a three-agent goal runs to its conclusion; record, event feed and job agree
Discovery of online agents only, async task assignment, pause with the task
ids as triggers, progress and results, conclude, conclusion.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    %Seen = ();
    register_agents($ctx,
        Poet       => 'writes poems and short verses on any topic',
        Translator => 'translates texts between English and French',
        Critic     => 'reviews grammar, spelling and style of texts',
        Bard       => 'writes poems, poems and more poems',   # never online
        Outsider   => 'bakes bread');
    my $ag = connect_agents($ctx, qw(Poet Translator Critic Outsider));
    worker($ctx, 'w1');

    my $goal = 'Write a short poem about the sea. Translate the poem into '
             . 'French. Review the grammar of the French translation.';
    my $gid = launch(goal => $goal);
    ok drive(agents => $ag, secs => 20,
             until => sub { state_of($gid) eq 'concluded' }),
       'the goal concluded' or diag worker_logs($ctx);

    my $m = meta($gid);
    my $cid = $m->{comm_id};
    like $cid, qr/^[0-9a-f]{32}$/, 'meta: comm_id';
    is_deeply [sort @{ redis_cmd('SMEMBERS', "ioa:{room:$cid}:members") }],
        [sort $COORD, qw(Critic Poet Translator)],
        'the team: one online agent per clause, and the coordinator; not the offline Bard';
    ok redis_cmd('ZSCORE', 'ioa:{reg}:roomlist', $cid), 'the room is in the room index';
    ok redis_cmd('SISMEMBER', "ioa:{reg}:rooms:$_", $cid), "$_ has the room in its room set"
        for $COORD, qw(Critic Poet Translator);

    my @env = room($cid);
    my @mine = grep { $_->{sender} eq $COORD } @env;
    is_deeply [types(@mine)], [usual_types(3)],
        'coordinator: DISCUSSION, one DISCUSSION on behalf of each member, ASYNC_TASK_ASSIGNMENT, PAUSE, CONCLUDE_GROUP_DISCUSSION, CONCLUSION';
    is_deeply [coordinator_steps(@env)], [usual_steps(3)], 'each with its ioa_step, once';
    is $env[0]{type}, 4, 'the room starts with the discussion';
    is $env[-1]{type}, 11, 'and ends with the conclusion';
    like $_->{_raw}, qr/^\{"sender":"\Q$COORD\E","timestamp":\d+,/,
        "step $_->{ioa_step} is stored normalised: sender, then timestamp" for @mine;
    is $_->{ioa_goal}, $gid, "step $_->{ioa_step} names the goal" for @mine;

    my %step = by_step(@env);
    my ($disc, $assign, $pause, $concl, $final) = @step{1, 10, 11, 40, 41};
    my @behalf = @step{2, 3, 4};
    my %desc = (Poet => 'writes poems and short verses on any topic',
                Translator => 'translates texts between English and French',
                Critic => 'reviews grammar, spelling and style of texts');
    for my $b (@behalf) {
        my $who = $b->{on_behalf_of} // '';
        ok $desc{$who}, "on behalf of a member: $who";
        like $b->{content}, qr/^On behalf of \Q$who\E \(.*\Q$desc{$who}\E\): I can take on: /,
            "$who: spoken for from its registered description";
        is_deeply $b->{next_speaker}, [$COORD], "$who: the floor stays with the coordinator";
    }
    is_deeply [sort map { $_->{on_behalf_of} } @behalf], [sort keys %desc], 'each member spoken for once';
    is_deeply $disc->{next_speaker}, [$COORD], 'nobody speaks the protocol: the coordinator keeps the floor';
    is $disc->{goal}, $goal, 'discussion: the goal piggybacked';
    is_deeply [sort map { $_->{name} } @{ $disc->{team_members} }],
        [sort $COORD, qw(Critic Poet Translator)], 'discussion: team_members';
    ok exists $disc->{team_up_depth} && !defined $disc->{team_up_depth}, 'team_up_depth null';
    ok exists $disc->{max_turns} && !defined $disc->{max_turns}, 'max_turns null';
    is $disc->{state}, 1, 'state DISCUSSION';
    is_deeply [sort @{ $assign->{next_speaker} }], [qw(Critic Poet Translator)],
        'assignment: next_speaker = the assignees';
    is_deeply [sort keys %{ $assign->{tasks} }], [qw(Critic Poet Translator)],
        'assignment: one task per assignee';
    like $assign->{tasks}{$_}{task_id}, qr/^[0-9a-f]{32}$/, "$_: a task id"
        for qw(Critic Poet Translator);
    is $assign->{tasks}{Poet}{task_desc}, 'Write a short poem about the sea', 'Poet: its clause';
    is $assign->{tasks}{Translator}{task_desc}, 'Translate the poem into French', 'Translator: its clause';
    is $assign->{tasks}{Critic}{task_desc}, 'Review the grammar of the French translation',
        'Critic: its clause';
    is_deeply [sort @{ $pause->{triggers} }],
        [sort map { $_->{task_id} } values %{ $assign->{tasks} }], 'pause: triggers = the task ids';
    is $pause->{next_speaker}, '', 'pause: nobody speaks';

    for my $name (qw(Critic Poet Translator)) {
        my @theirs = grep { $_->{sender} eq $name } @env;
        is_deeply [types(@theirs)], [8, 7], "$name: progress, then result";
        ok id_lt($assign->{id}, $theirs[0]{id}), "$name answered after the assignment";
        ok id_lt($theirs[1]{id}, $concl->{id}), "the conclusion waited for $name\'s result";
    }

    is $final->{content}, $m->{conclusion}, 'meta: the conclusion is the room\'s CONCLUSION';
    like $m->{conclusion}, qr/^Goal: \Q$goal\E\n3 of 3 parts done\./, 'conclusion: the summary';
    like $m->{conclusion}, qr/\n   \Q$_\E: \Q$_\E did: /, "conclusion: $_\'s result" for qw(Poet Translator Critic);
    is $m->{tokens}, '0', 'meta: tokens 0 (built-in planner)';
    my (undef, $doc) = api($ctx, GET => "/goals/$gid");
    is $doc->{planner}, 'builtin', 'GET /goals/<id>: the built-in planner';
    ok defined $doc->{tokens} && $doc->{tokens} eq '0' && !ref $doc->{tokens},
        'GET /goals/<id>: tokens 0';
    is $doc->{ended}, 'settled', 'GET /goals/<id>: ended when every task settled';
    ok $m->{updated_at} >= $m->{created_at}, 'meta: updated_at';
    is job_pending(), 0, 'the job is acknowledged';

    # the feed: forming, running, every envelope of the room in order, concluded
    my @f = feed($gid);
    like $_->{_raw}, qr/^\{"sender":"ioa-worker","timestamp":\d+,/, 'feed: sender first' for @f;
    is $f[0]{event} . '/' . $f[0]{state}, 'state/forming', 'feed: forming';
    is $f[1]{event} . '/' . $f[1]{state}, 'state/running', 'feed: running';
    is $f[1]{comm_id}, $cid, 'feed: running names the room';
    is_deeply [map { $_->{envelope}{id} } grep { $_->{event} eq 'envelope' } @f],
        [map { $_->{id} } @env], 'feed: every envelope of the room, once, in order';
    is $f[-1]{state}, 'concluded', 'feed: concluded last';
    is $f[-1]{conclusion}, $m->{conclusion}, 'feed: with the conclusion';
    is $f[-1]{comm_id}, $cid, 'feed: and the room';
    is scalar(grep { $_->{event} eq 'state' } @f), 3, 'feed: three state events';

    # the hub delivered the coordinator's envelopes like any other
    drive(agents => $ag, secs => 5, until => sub {
        grep { ($_->{type} // -1) == 11 } @{ $Seen{Poet} } });
    is_deeply [types(grep { ($_->{sender} // '') eq $COORD } @{ $Seen{Poet} })],
        [usual_types(3)], 'Poet received every coordinator envelope over its WebSocket';

    # the room is closed to outsiders
    $ag->{Outsider}->post(envelope(comm_id => $cid, type => 7, task_id => 'x',
                                   task_conclusion => 'fake'));
    my ($err) = $ag->{Outsider}->recv_until(sub { ($_->{op} // '') eq 'error' }, 3);
    is $err && $err->{code}, 'not_member', 'a non-member cannot inject into the goal\'s room';

    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0 on SIGTERM';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: team_member_names gives each named agent a task; unknown names fail the goal
Exactly those agents, each with a task (clauses by BM25 among them, the rest
spread); unknown names fail the goal with an error naming them and no room.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    %Seen = ();
    register_agents($ctx,
        Alice => 'plans trips and outings',
        Bob   => 'shops for groceries',
        Carol => 'plans outings, trips and picnics in great detail');
    my $ag = connect_agents($ctx, qw(Alice Bob Carol));
    worker($ctx, 'w1');

    my $gid = launch(goal => 'Buy the groceries for a picnic; plan the outing.',
                     team_member_names => ['Alice', 'Bob', $COORD, 'Alice']);
    ok drive(agents => $ag, how => { Alice => 'own_id' },
             until => sub { state_of($gid) eq 'concluded' }),
       'concluded (Alice answered under a task_id of her own, as IoA clients do)'
       or diag worker_logs($ctx);
    like meta($gid)->{conclusion}, qr/2 of 2 parts done.*\n   Alice: Alice did: plan the outing/s,
        'Alice\'s result counted, matched by her name';
    my $cid = meta($gid)->{comm_id};
    is_deeply [sort @{ redis_cmd('SMEMBERS', "ioa:{room:$cid}:members") }],
        [sort $COORD, 'Alice', 'Bob'], 'the room: the given names and the coordinator (not Carol)';
    my ($assign) = grep { $_->{type} == 6 } room($cid);
    is $assign->{tasks}{Bob}{task_desc}, 'Buy the groceries for a picnic', 'Bob: the shopping';
    is $assign->{tasks}{Alice}{task_desc}, 'plan the outing', 'Alice: the planning';
    ok !grep({ ($_->{sender} // '') eq $COORD } @{ $Seen{Carol} || [] }),
        'Carol saw nothing of the room';

    # a given name that is not registered
    my $bad = launch(goal => 'Do it.', team_member_names => ['Alice', 'Zed', 'Yan']);
    ok wait_until(sub { state_of($bad) eq 'failed' }, 5), 'failed' or diag worker_logs($ctx);
    my $m = meta($bad);
    like $m->{error}, qr/unknown agents in team_member_names: Zed, Yan/, 'the error names them';
    ok !$m->{comm_id}, 'no room';
    my @f = feed($bad);
    is $f[-1]{state}, 'failed', 'feed: failed';
    like $f[-1]{error}, qr/Zed/, 'feed: with the error';
    is job_pending(), 0, 'both jobs acknowledged';

    # nobody online matches
    my $none = launch(goal => 'Repair the quantum flux capacitor.');
    ok wait_until(sub { state_of($none) eq 'failed' }, 5), 'no match: failed';
    like meta($none)->{error}, qr/no online agent matches the goal/, 'no match: said so';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3: a task that never answers times out and the goal still concludes
With --task-timeout 2; a failed result is reported as failed.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Ann => 'a', Ben => 'b', Cid => 'c');
    my $ag = connect_agents($ctx, qw(Ann Ben Cid));
    worker($ctx, 'w1', task_timeout => 2);

    my $t0 = time;
    my $gid = launch(goal => 'Write the report. Check the figures. Draw the chart.',
                     team_member_names => [qw(Ann Ben Cid)]);
    ok drive(agents => $ag, how => { Ann => 'forge', Ben => 'silent', Cid => 'fail' },
             secs => 15,
             until => sub { state_of($gid) eq 'concluded' }),
       'concluded although Ben never answered' or diag worker_logs($ctx);
    my $took = time - $t0;
    ok $took >= 2 && $took < 8, "after the task deadline (${took}s)";
    my $c = meta($gid)->{conclusion};
    like $c, qr/1 of 3 parts done/, 'one of three completed';
    like $c, qr/\n   Ann: Ann did: /, 'Ann: her result';
    like $c, qr/Not done: Ben timed out \(no result within 2 s\)/, 'Ben: timed out';
    like $c, qr/Not done: Cid failed \(Cid could not do it\)/, 'Cid: failed, with the reason';
    my $fsm = fsm($gid);
    my %st = map { /^st:(.+)$/ ? ($1 => $fsm->{$_}) : () } keys %$fsm;
    is_deeply [sort values %st], [qw(completed failed timed_out)], 'fsm: the task states';
    my @mine = grep { $_->{sender} eq $COORD } room(meta($gid)->{comm_id});
    is_deeply [types(@mine)], [usual_types(3)], 'the usual coordinator steps';
    like worker_log($ctx, 'w1'), qr/task \w+ \(Ben\) timed out/, 'the worker logged the timeout';
    like worker_log($ctx, 'w1'), qr/Ann reported on Ben's task \w+; ignored/,
        'a result for someone else\'s task is ignored (Ann forged one for Ben)';
    unlike $c, qr/forged/, 'the forgery is not in the conclusion';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 4: after kill -9 of its worker a second worker takes the goal over and concludes it
kill -9 of the worker after the assignment, before the results, with a second
worker running; no coordinator step appears twice, the feed holds every
envelope once.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    @Held = ();
    register_agents($ctx, Ann => 'writes reports', Ben => 'checks figures');
    my $ag = connect_agents($ctx, qw(Ann Ben));
    my %pid = (w1 => worker($ctx, 'w1', claim_idle => 2),
               w2 => worker($ctx, 'w2', claim_idle => 2));

    my $gid = launch(goal => 'Write the report. Check the figures.',
                     team_member_names => [qw(Ann Ben)]);
    my $cid;
    ok drive(agents => $ag, how => { Ann => 'hold', Ben => 'hold' },
             until => sub {
                 $cid //= meta($gid)->{comm_id};
                 @Held == 2 && grep { $_->{type} == 9 } room($cid) }),
       'both agents hold their assignment, the pause is posted' or diag worker_logs($ctx);

    my $holder = redis_cmd('XPENDING', 'ioa:{jobs}:goals', 'workers', '-', '+', 10)->[0][1];
    ok $holder && $pid{$holder}, "the goal is held by $holder";
    kill9($pid{$holder});
    my ($other) = grep { $_ ne $holder } keys %pid;

    release();                       # results arrive while nobody holds the goal
    ok drive(agents => $ag, secs => 20,
             until => sub { state_of($gid) eq 'concluded' }),
       "$other concluded the goal" or diag worker_logs($ctx);

    my @env = room($cid);
    is_deeply [coordinator_steps(@env)], [usual_steps(2)], 'every step once';
    is_deeply [types(grep { $_->{sender} eq $COORD } @env)], [usual_types(2)], 'in IoA\'s order';
    like meta($gid)->{conclusion}, qr/2 of 2 parts done/, 'with both results';
    like worker_log($ctx, $other), qr/took over job .* \(goal $gid\)/, "$other took the job over";
    like worker_log($ctx, $other), qr/goal $gid: resumed in phase running at step 1[01]/,
        "$other resumed after the assignment";
    my @f = feed($gid);
    my @copied = map { $_->{envelope}{id} } grep { $_->{event} eq 'envelope' } @f;
    is_deeply \@copied, [map { $_->{id} } @env], 'feed: every envelope once, in room order';
    is_deeply [map { $_->{state} } grep { $_->{event} eq 'state' } @f],
        [qw(forming running concluded)], 'feed: each state once';
    is job_pending(), 0, 'the job is acknowledged';
    is_deeply stop_workers(), { $other => 0 }, "$other exits 0";
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 5: a successor never reposts a step its dead predecessor posted but did not record
A worker dies right after posting a step, before recording it (every step in
turn): the successor finds the step in the room and never posts it again.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Ann => 'writes reports', Ben => 'checks figures');
    my $ag = connect_agents($ctx, qw(Ann Ben));

    for my $step (usual_steps(2)) {
        # both die after posting $step; whichever takes the goal first does
        my @w = map { worker($ctx, "s$step$_", claim_idle => 1, crash_after => $step) } 1, 2;
        my $gid = launch(goal => 'Write the report. Check the figures.',
                         team_member_names => [qw(Ann Ben)]);
        ok drive(agents => $ag, secs => 20,
                 until => sub { state_of($gid) eq 'concluded' }),
           "step $step: concluded" or diag worker_logs($ctx);
        reap_dead();
        is scalar(keys %Workers), 1, "step $step: one worker died, on its own";
        my $cid = meta($gid)->{comm_id};
        my @env = room($cid);
        is_deeply [coordinator_steps(@env)], [usual_steps(2)], "step $step: every step once";
        like worker_logs($ctx), qr/goal $gid: step $step is already in the room/,
            "step $step: the successor found it there";
        is meta($gid)->{conclusion}, $env[-1]{content},
            "step $step: the record says what the room says";
        my @copied = map { $_->{envelope}{id} } grep { $_->{event} eq 'envelope' } feed($gid);
        is_deeply \@copied, [map { $_->{id} } @env], "step $step: feed exact";
        is fsm($gid)->{intent}, '0', "step $step: no intent left";
        stop_workers();
    }

    # the same for the steps of a sequence: each SYNC_TASK_ASSIGNMENT
    for my $step (20, 22) {
        my @w = map { worker($ctx, "q$step$_", claim_idle => 1, crash_after => $step) } 1, 2;
        my $gid = launch(goal => 'Write the report, then check the figures.',
                         team_member_names => [qw(Ann Ben)]);
        ok drive(agents => $ag, secs => 20,
                 until => sub { state_of($gid) eq 'concluded' }),
           "sequence step $step: concluded" or diag worker_logs($ctx);
        reap_dead();
        my @env = room(meta($gid)->{comm_id});
        is_deeply [coordinator_steps(@env)], [1, 2, 3, 20, 22, 40, 41],
            "sequence step $step: every step once";
        is scalar(grep { $_->{type} == 7 } @env), 2, "sequence step $step: each task answered once";
        like meta($gid)->{conclusion}, qr/2 of 2 parts done/, "sequence step $step: both completed";
        stop_workers();
    }
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 6: max_turns forces the conclusion when agents only ever report progress
max_turns is a hard limit: agents that only ever report progress cannot keep
the room open; the limit forces the conclusion, also before the pause.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Ann => 'a', Ben => 'b', Cid => 'c');
    my $ag = connect_agents($ctx, qw(Ann Ben Cid));
    worker($ctx, 'w1');
    my %how = map { $_ => 'progress' } qw(Ann Ben Cid);

    my $t0 = time;
    my $gid = launch(goal => 'Write the report. Check the figures. Draw the chart.',
                     team_member_names => [qw(Ann Ben Cid)], max_turns => 5);
    ok drive(agents => $ag, how => \%how, secs => 15,
             until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    ok time - $t0 < 10, 'long before the 60 s task deadline';
    my @env = room(meta($gid)->{comm_id});
    my ($ci) = grep { $env[$_]{type} == 10 } 0 .. $#env;
    ok $ci >= 5, "the conclude came once the room held max_turns envelopes ($ci before it)";
    is $env[0]{max_turns}, 5, 'max_turns piggybacked';
    like $env[$ci]{content}, qr/reached max_turns \(5\)/, 'the conclude says why';
    my $c = meta($gid)->{conclusion};
    like $c, qr/^Concluded at the turn limit \(max_turns 5\)\.\n/, 'the conclusion says why';
    like $c, qr/0 of 3 parts done/, 'nothing completed';
    like $c, qr/Not done: Ann's task was cancelled/, 'open tasks are cancelled';
    ok !grep({ $_->{type} == 7 } @env), 'no results were ever posted';

    # a limit smaller than the opening: the discussion (the plan, then the
    # member spoken for), then conclude: no assignment, no pause
    my $g2 = launch(goal => 'Write the report.', team_member_names => ['Ann'],
                    max_turns => 2);
    ok drive(agents => $ag, how => \%how, secs => 15,
             until => sub { state_of($g2) eq 'concluded' }), 'max_turns 2: concluded';
    is_deeply [types(grep { $_->{sender} eq $COORD } room(meta($g2)->{comm_id}))],
        [4, 4, 10, 11], 'max_turns 2: no assignment, no pause';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 7: cancel stops a running goal and its sub-goal; a queued goal ends without a room
A running goal stops with a CONCLUSION saying so, state cancelled, its
sub-goal (run by another worker) cancelled too; a goal cancelled while queued
ends without a room.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Ann => 'writes reports', Dora => 'draws charts');
    my $ag = connect_agents($ctx, qw(Ann Dora));
    worker($ctx, 'w1');
    my %how = (Ann => 'silent', Dora => 'silent');

    my $gid = launch(goal => 'Write the report.', team_member_names => ['Ann']);
    ok drive(agents => $ag, how => \%how, until => sub {
                 my $cid = meta($gid)->{comm_id} or return 0;
                 grep { $_->{type} == 9 } room($cid) }),
       'the goal is waiting for its task' or diag worker_logs($ctx);

    # a sub-goal, as a nested team would launch it; the busy w1 cannot take it
    worker($ctx, 'w2');
    my $sub = launch(goal => 'Draw the chart.', team_member_names => ['Dora'],
                     _parent => $gid);
    ok drive(agents => $ag, how => \%how, until => sub {
                 my $cid = meta($sub)->{comm_id} or return 0;
                 grep { $_->{type} == 9 } room($cid) }),
       'the sub-goal is waiting for its task too' or diag worker_logs($ctx);
    is_deeply redis_cmd('SMEMBERS', "ioa:{goal:$gid}:children"), [$sub],
        'the sub-goal is listed under its parent';

    # what POST /goals/<id>/cancel does (goal_cancel.lua)
    redis_cmd('HSET', "ioa:{goal:$gid}:meta", state => 'cancelling');
    redis_cmd('PUBLISH', "ioa:{goal:$gid}:control", 'cancel');
    ok drive(agents => $ag, how => \%how, secs => 5,
             until => sub { state_of($gid) eq 'cancelled' && state_of($sub) eq 'cancelled' }),
       'the goal and its sub-goal are cancelled' or diag worker_logs($ctx);

    for my $g ($gid, $sub) {
        my $m = meta($g);
        my @mine = grep { $_->{sender} eq $COORD } room($m->{comm_id});
        is_deeply [types(@mine)], [4, 4, 6, 9, 11], "$g: the conclusion follows the pause, no conclude";
        like $mine[-1]{content}, qr/^The goal was cancelled before it was achieved\./,
            "$g: the CONCLUSION says it was cancelled";
        like $mine[-1]{content}, qr/task was cancelled/, "$g: its task cancelled";
        is $m->{conclusion}, $mine[-1]{content}, "$g: recorded";
        my @f = feed($g);
        is $f[-1]{state}, 'cancelled', "$g: feed ends cancelled";
    }

    # cancelled before any worker took it: no room at all
    my $q = launch(goal => 'Write the report.', team_member_names => ['Ann'],
                   _state => 'cancelling');
    ok wait_until(sub { state_of($q) eq 'cancelled' }, 5), 'queued then cancelled: cancelled';
    ok !meta($q)->{comm_id}, 'no room was formed';
    is_deeply [map { $_->{state} } feed($q)], ['cancelled'], 'feed: cancelled only';
    is job_pending(), 0, 'every job acknowledged';
    is_deeply stop_workers(), { w1 => 0, w2 => 0 }, 'both workers exit 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 8: on SIGTERM a worker finishes its step and another takes the goal over at once
SIGTERM mid-goal: the worker finishes its step, releases the job and exits 0;
another worker takes it over at once (not after --claim-idle) and concludes
it.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    @Held = ();
    register_agents($ctx, Ann => 'writes reports', Ben => 'checks figures');
    my $ag = connect_agents($ctx, qw(Ann Ben));
    my %pid = (w1 => worker($ctx, 'w1', claim_idle => 30),
               w2 => worker($ctx, 'w2', claim_idle => 30));

    my $gid = launch(goal => 'Write the report. Check the figures.',
                     team_member_names => [qw(Ann Ben)]);
    my $cid;
    ok drive(agents => $ag, how => { Ann => 'hold', Ben => 'hold' },
             until => sub {
                 $cid //= meta($gid)->{comm_id};
                 @Held == 2 && grep { $_->{type} == 9 } room($cid) }),
       'assigned and paused' or diag worker_logs($ctx);
    my $holder = redis_cmd('XPENDING', 'ioa:{jobs}:goals', 'workers', '-', '+', 10)->[0][1];
    my ($other) = grep { $_ ne $holder } keys %pid;

    my $t0 = time;
    kill 'TERM', $pid{$holder};
    waitpid $pid{$holder}, 0;
    is $? >> 8, 0, "$holder exits 0 on SIGTERM";
    delete $Workers{ $pid{$holder} };
    like worker_log($ctx, $holder), qr/goal $gid: released at step 11 for another worker/,
        "$holder released the job";

    release();
    ok drive(agents => $ag, secs => 10, until => sub { state_of($gid) eq 'concluded' }),
       "$other concluded it" or diag worker_logs($ctx);
    ok time - $t0 < 8, sprintf('well before the 30 s claim idle (%.1f s)', time - $t0);
    is_deeply [coordinator_steps(room($cid))], [usual_steps(team_size($cid))], 'every step once';
    is_deeply stop_workers(), { $other => 0 }, "$other exits 0";
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 9: a frozen worker loses the goal; woken, it is fenced and writes or posts nothing
A worker frozen (SIGSTOP) past --claim-idle loses the goal to another worker;
woken up (SIGCONT) it writes nothing over its successor and posts nothing: its
fsm writes are fenced by the owner, and it lets go.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    @Held = ();
    register_agents($ctx, Ann => 'writes reports', Ben => 'checks figures');
    my $ag = connect_agents($ctx, qw(Ann Ben));
    my %pid = (w1 => worker($ctx, 'w1', claim_idle => 1),
               w2 => worker($ctx, 'w2', claim_idle => 1));

    my $gid = launch(goal => 'Write the report. Check the figures.',
                     team_member_names => [qw(Ann Ben)]);
    my $cid;
    ok drive(agents => $ag, how => { Ann => 'hold', Ben => 'hold' },
             until => sub {
                 $cid //= meta($gid)->{comm_id};
                 @Held == 2 && grep { $_->{type} == 9 } room($cid) }),
       'assigned and paused' or diag worker_logs($ctx);
    my $pending = sub {
        (redis_cmd('XPENDING', 'ioa:{jobs}:goals', 'workers', '-', '+', 10)->[0] || [])->[1] // '' };
    my $holder = $pending->();
    my ($other) = grep { $_ ne $holder } keys %pid;
    kill 'STOP', $pid{$holder};
    ok wait_until(sub { $pending->() eq $other }, 10), "$other took the goal from the frozen $holder";
    ok wait_until(sub { (fsm($gid)->{owner} // '') eq $other }, 5), "the fsm is $other\\'s";

    release();
    ok drive(agents => $ag, secs => 10, until => sub { state_of($gid) eq 'concluded' }),
       "$other concluded it" or diag worker_logs($ctx);
    my %before = %{ fsm($gid) };

    kill 'CONT', $pid{$holder};
    ok wait_until(sub { worker_log($ctx, $holder) =~ /goal $gid: another worker (holds the job|owns its state) now/ }, 5),
       "$holder, woken up, lets the goal go" or diag worker_logs($ctx);
    sleep 0.5;
    is_deeply fsm($gid), \%before, 'it wrote nothing over the fsm';
    is_deeply [coordinator_steps(room($cid))], [usual_steps(team_size($cid))],
        'and posted nothing: every step once';
    is state_of($gid), 'concluded', 'the goal stays concluded';
    is_deeply stop_workers(), { w1 => 0, w2 => 0 }, 'both exit 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 10: a worker whose Redis connection is cut reconnects and repeats nothing
The connection is cut mid-goal (CLIENT KILL); the worker goes on from Redis.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    @Held = ();
    register_agents($ctx, Ann => 'writes reports', Ben => 'checks figures');
    my $ag = connect_agents($ctx, qw(Ann Ben));
    worker($ctx, 'w1');
    my $gid = launch(goal => 'Write the report. Check the figures.',
                     team_member_names => [qw(Ann Ben)]);
    my $cid;
    ok drive(agents => $ag, how => { Ann => 'hold', Ben => 'hold' },
             until => sub {
                 $cid //= meta($gid)->{comm_id};
                 @Held == 2 && grep { $_->{type} == 9 } room($cid) }),
       'assigned and paused' or diag worker_logs($ctx);

    # (on a Cluster the worker has one connection per master it used: all
    # of them are cut)
    ok redis_kill_clients(qr/name=ioa-worker:w1 /) >= 1,
       'the worker\'s connection, named ioa-worker:w1, is cut';
    release();
    ok drive(agents => $ag, secs => 10, until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    like worker_log($ctx, 'w1'), qr/redis connection lost/, 'the worker saw the cut';
    like worker_log($ctx, 'w1'), qr/goal $gid: resumed in phase running/, 'and resumed the goal';
    my @env = room($cid);
    is_deeply [coordinator_steps(@env)], [usual_steps(team_size($cid))], 'every step once';
    is_deeply [map { $_->{envelope}{id} } grep { $_->{event} eq 'envelope' } feed($gid)],
        [map { $_->{id} } @env], 'feed exact';
    is_deeply stop_workers(), { w1 => 0 }, 'exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 10c: an ended goal's record and feed expire after --goal-retention, then 404
Retention of ended goals: the job leaves the queue at once; the record and the
event feed expire --goal-retention after the goal ended (2 days by default),
then /goals/{id} is 404.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth off; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Ann => 'writes reports', Ben => 'checks figures');
    my $ag = connect_agents($ctx, qw(Ann Ben));
    for my $case ([default => []], [short => ['--goal-retention', 2]]) {
        my ($what, $args) = @$case;
        my $w = worker($ctx, "w-$what", args => $args);
        my $gid = launch(goal => 'Write the report. Check the figures.',
                         team_member_names => [qw(Ann Ben)]);
        ok drive(agents => $ag, secs => 20, until => sub { state_of($gid) eq 'concluded' }),
           "$what: concluded" or diag worker_logs($ctx);
        ok wait_until(sub { redis_cmd('PTTL', "ioa:{goal:$gid}:meta") > 0 }, 5), "$what: the record expires";
        my $cid = meta($gid)->{comm_id};
        my @ttl = map { redis_cmd('PTTL', $_) } "ioa:{goal:$gid}:meta", "ioa:{goal:$gid}:fsm",
                                              "ioa:{room:goal-$gid}:log";
        my ($lo, $hi) = $what eq 'default' ? (1.9 * 86400e3, 2 * 86400e3) : (0, 2000);
        is scalar(grep { $_ > $lo && $_ <= $hi } @ttl), 3, "$what: record, state and feed expire in "
            . ($what eq 'default' ? '2 days' : '2 s') or diag "@ttl";
        is redis_cmd('PTTL', "ioa:{room:$cid}:log"), -1, "$what: the team's room is ioa_room_retention's";
        my @left = grep { $_->[1][1] eq $gid } @{ redis_cmd('XRANGE', 'ioa:{jobs}:goals', '-', '+') };
        is scalar(@left), 0, "$what: the job left the queue";
        if ($what eq 'short') {
            # one key per EXISTS: on a Cluster the two are in other slots
            ok wait_until(sub { !redis_cmd('EXISTS', "ioa:{goal:$gid}:meta")
                                && !redis_cmd('EXISTS', "ioa:{room:goal-$gid}:log") }, 5),
               'short: 2 s later the record and the feed are gone';
            is $ctx->http(GET => "/goals/$gid")->code, 404, 'short: /goals/{id} is 404';
        }
        stop_workers();
    }
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 10b: with Redis full the worker backs off, then resumes and concludes the goal
Redis full mid-goal (maxmemory, noeviction): the worker backs off instead of
failing the goal, says so, and once memory is freed resumes and concludes it,
nothing repeated.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    if (redis_mode() eq 'cluster') {
        pass('standalone only: maxmemory is set on one Redis');
        return;
    }
    fresh($ctx);
    @Held = ();
    register_agents($ctx, Ann => 'writes reports', Ben => 'checks figures');
    my $ag = connect_agents($ctx, qw(Ann Ben));
    my $w = worker($ctx, 'w1');
    my $gid = launch(goal => 'Write the report. Check the figures.',
                     team_member_names => [qw(Ann Ben)]);
    my $cid;
    ok drive(agents => $ag, how => { Ann => 'hold', Ben => 'hold' },
             until => sub {
                 $cid //= meta($gid)->{comm_id};
                 @Held == 2 && grep { $_->{type} == 9 } room($cid) }),
       'assigned and paused' or diag worker_logs($ctx);

    # the results are stored while the worker is frozen; then Redis is full,
    # so the worker's next step (its own post, its state) is refused
    kill 'STOP', $w;
    release();
    ok wait_until(sub { scalar(grep { $_->{type} == 7 } room($cid)) == 2 }, 5), 'both results stored';
    redis_cmd('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
    redis_cmd('CONFIG', 'SET', 'maxmemory', 1);
    kill 'CONT', $w;
    ok wait_until(sub { worker_log($ctx, 'w1') =~ /redis cannot take .* now: OOM/ }, 10),
        'the worker hears Redis is full and backs off' or diag worker_logs($ctx);
    sleep 2;
    isnt state_of($gid), 'failed', 'the goal is not failed meanwhile';
    redis_cmd('CONFIG', 'SET', 'maxmemory', 0);
    ok drive(agents => $ag, secs => 30, until => sub { state_of($gid) eq 'concluded' }),
       'once memory is freed, the goal concludes' or diag worker_logs($ctx);
    like worker_log($ctx, 'w1'), qr/goal $gid: resumed in phase running/, 'resumed from Redis';
    my @env = room($cid);
    is_deeply [coordinator_steps(@env)], [usual_steps(team_size($cid))], 'every step once';
    is_deeply stop_workers(), { w1 => 0 }, 'exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 11: a continued room is planned by the same team, from where the room was
Continuing a room (comm_id + cont_input): the same team plans the new input in
the same room, reading from where the room was; only the coordinator's own
rooms can be continued.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Ann => 'writes reports', Ben => 'draws charts');
    my $ag = connect_agents($ctx, qw(Ann Ben));
    worker($ctx, 'w1');
    my $g1 = launch(goal => 'Write the report. Draw the chart.', team_member_names => [qw(Ann Ben)]);
    ok drive(agents => $ag, until => sub { state_of($g1) eq 'concluded' }), 'the first goal concluded'
        or diag worker_logs($ctx);
    my $cid = meta($g1)->{comm_id};
    my $end = (room($cid))[-1]{id};

    my $g2 = launch(goal => 'Write the report. Draw the chart.', comm_id => $cid,
                    cont_input => { sender => 'user', content => 'Draw a second chart. Write an appendix.' });
    ok drive(agents => $ag, until => sub { state_of($g2) eq 'concluded' }), 'the continuation concluded'
        or diag worker_logs($ctx);
    is meta($g2)->{comm_id}, $cid, 'in the same room';
    my @env = room($cid);
    my @second = grep { ($_->{ioa_goal} // '') eq $g2 } @env;
    is_deeply [map { $_->{ioa_step} } @second], [usual_steps(2)], 'the continuation\'s own steps';
    ok id_lt($end, $second[0]{id}), 'after everything of the first goal';
    my ($assign) = grep { $_->{type} == 6 } @second;
    is $assign->{tasks}{Ben}{task_desc}, 'Draw a second chart', 'planned from cont_input: Ben';
    is $assign->{tasks}{Ann}{task_desc}, 'Write an appendix', 'planned from cont_input: Ann';
    my @copied = map { $_->{envelope}{id} } grep { $_->{event} eq 'envelope' } feed($g2);
    is_deeply \@copied, [map { $_->{id} } grep { id_lt($end, $_->{id}) } @env],
        'its feed: the room from where it started';
    is_deeply [coordinator_steps(grep { ($_->{ioa_goal} // '') eq $g1 } @env)], [usual_steps(2)],
        'the first goal\'s steps untouched';

    # a room the coordinator is not in, and no room at all
    my ($code, $doc) = api($ctx, POST => '/teamup', { sender => 'Ann', agent_names => ['Ben'] });
    my $g3 = launch(goal => 'x', comm_id => $doc->{comm_id}, cont_input => 'Do more.');
    ok wait_until(sub { state_of($g3) eq 'failed' }, 5), 'someone else\'s room: failed';
    like meta($g3)->{error}, qr/was not formed by ioa-coordinator/, 'saying why';
    my $g4 = launch(goal => 'x', comm_id => 'f' x 32, cont_input => 'Do more.');
    ok wait_until(sub { state_of($g4) eq 'failed' }, 5), 'no such room: failed';
    like meta($g4)->{error}, qr/no room f{32} to continue/, 'saying why';
    is_deeply stop_workers(), { w1 => 0 }, 'exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 12: a sequence assigns one task at a time, each handed the result before it
A sequence ("..., then ..."): one SYNC_TASK_ASSIGNMENT at a time, each after
the result before it and handed that result; members that speak the protocol
get the discussion turn (one takes it, a mute one is waited for until
--turn-timeout), the member that only runs tasks is spoken for.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    %Seen = ();
    register_agents($ctx, Ann => 'writes reports: write the report',
                    Ben => ['checks figures: check the figures', 1],
                    Cid => ['draws charts: draw the chart', 1]);
    my $ag = connect_agents($ctx, qw(Ann Ben Cid));
    worker($ctx, 'w1', turn_timeout => 2);
    my %how = (Cid => 'mute');

    my $gid = launch(goal => 'Write the report, then check the figures and then draw the chart.',
                     team_member_names => [qw(Ann Ben Cid)]);
    ok drive(agents => $ag, how => \%how, secs => 20,
             until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my $cid = meta($gid)->{comm_id};
    my @env = room($cid);
    my %step = by_step(@env);
    my $team = fsm($gid)->{team};
    my @names = map { $_->{name} } @{ json()->decode($team) };
    my $ann = (grep { $names[$_] eq 'Ann' } 0 .. $#names)[0];

    is_deeply [sort { $a <=> $b } keys %step], [1, 2 + $ann, 20, 22, 24, 40, 41],
        'steps: plan, Ann spoken for, three assignments in turn, conclude, conclusion';
    is_deeply [sort @{ $step{1}{next_speaker} }], [qw(Ben Cid)],
        'the plan gives the floor to the protocol speakers';
    like $step{1}{content}, qr/one after the other/, 'the plan says it is a sequence';
    is $step{2 + $ann}{on_behalf_of}, 'Ann', 'the coordinator speaks for Ann';
    is_deeply [sort @{ $step{2 + $ann}{next_speaker} }], [qw(Ben Cid)],
        'leaving the floor with the protocol speakers';
    is_deeply [sort @{ redis_cmd('SMEMBERS', "ioa:{room:$cid}:floor") }], [],
        'the CONCLUSION opened the floor again';
    my ($ben) = grep { $_->{sender} eq 'Ben' && $_->{type} == 4 } @env;
    ok $ben, 'Ben took its discussion turn';
    ok !grep({ $_->{sender} eq 'Cid' && $_->{type} == 4 } @env), 'Cid stayed mute';
    like worker_log($ctx, 'w1'), qr/1 speaker did not take the turn within 2 s/,
        'the worker waited for Cid no longer than --turn-timeout';
    ok id_lt($ben->{id}, $step{20}{id}), 'the first assignment came after Ben\'s turn';

    my @assign = @step{20, 22, 24};
    is_deeply [map { $_->{type} } @assign], [5, 5, 5], 'SYNC_TASK_ASSIGNMENT each';
    is_deeply [map { names_in($_->{next_speaker}) } @assign], [qw(Ann Ben Cid)], 'in the order of the goal';
    is_deeply [map { $_->{task_id} } @assign], [map { (values %{ $_->{tasks} })[0]{task_id} } @assign],
        'each names its task_id';
    for my $i (0, 1) {
        my ($who) = names_in($assign[$i]{next_speaker});
        my ($res) = grep { $_->{sender} eq $who && $_->{type} == 7 } @env;
        ok $res && id_lt($res->{id}, $assign[$i + 1]{id}), "step " . ($i + 2) . " waited for $who\'s result";
    }
    like $assign[1]{content}, qr/^check the figures\n\nResults so far:\nStep 1 \(Ann\): Ann did: Write the report$/,
        'the second step is handed the first result';
    like $assign[2]{content}, qr/^draw the chart\n\nResults so far:\nStep 1 \(Ann\): Ann did: Write the report\nStep 2 \(Ben\): Ben did: check the figures\n/,
        'the third step both results';
    like meta($gid)->{conclusion}, qr/3 of 3 parts done/, 'every step completed';
    is_deeply stop_workers(), { w1 => 0 }, 'exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 13: clauses a full team cannot take go to a sub-team whose conclusion comes back
A nested team (team_up_depth 1): clauses whose best agent cannot join a full
team go to a sub-team; the sub-goal (another worker, depth 0) concludes and
its conclusion comes back as the parent task's INFORM_TASK_RESULT; without
team_up_depth there is no sub-team.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    %Seen = ();
    my %skills = (Ann => 'write the report', Ben => 'check the figures',
                  Cid => 'draw the chart', Dan => 'translate the text',
                  Eve => 'summarise the paper', Fay => 'plan the budget');
    register_agents($ctx, %skills);
    my $ag = connect_agents($ctx, sort keys %skills);
    worker($ctx, 'w1');
    worker($ctx, 'w2');

    my $goal = 'Write the report. Check the figures. Draw the chart. '
             . 'Translate the text. Summarise the paper. Plan the budget.';
    my $gid = launch(goal => $goal, team_up_depth => 1);
    ok drive(agents => $ag, secs => 30,
             until => sub { state_of($gid) eq 'concluded' }),
       'the parent concluded' or diag worker_logs($ctx);
    my $cid = meta($gid)->{comm_id};
    is_deeply [sort @{ redis_cmd('SMEMBERS', "ioa:{room:$cid}:members") }],
        [sort $COORD, qw(Ann Ben Cid Dan)], 'the parent team is full at four';
    my @env = room($cid);
    my %step = by_step(@env);
    my $assign = $step{10};
    is scalar(@{ $assign->{sub_teams} // [] }), 1, 'one task for a sub-team';
    my $sub = $assign->{sub_teams}[0];
    is $sub->{task_desc}, 'Summarise the paper. Plan the budget.', 'the clauses nobody in the team fits';
    ok grep({ $_ eq $COORD } names_in($assign->{next_speaker})), 'the coordinator is its assignee';

    my ($res) = grep { $_->{type} == 7 && $_->{sender} eq $COORD } @env;
    ok $res, 'the sub-team\'s result is in the parent room';
    is $res->{task_id}, $sub->{task_id}, 'as the result of that task';
    is $res->{task_status}, 'completed', 'completed';
    is $res->{ioa_step}, 12 + 4, 'posted as step 12 + its task index';
    my $child = $res->{sub_goal};
    like $child, qr/^[0-9a-f]{32}$/, 'naming the sub-goal';
    my $cm = meta($child);
    is $cm->{state}, 'concluded', 'the sub-goal concluded';
    is $cm->{parent}, $gid, 'its parent';
    is $cm->{depth}, '0', 'one level less of team_up_depth';
    is $res->{task_conclusion}, $cm->{conclusion}, 'its conclusion is the task result';
    # the sub-goal's end wakes the parent at once (the parent's wait reads
    # the sub-goal's event feed with its room), not when the parent's read
    # of its own room times out (half a second)
    my ($fin) = grep { ($_->{event} // '') eq 'state' && $_->{state} eq 'concluded' }
                feed($child);
    my ($t_end) = ($fin->{_id} // '0') =~ /^(\d+)/;
    my ($t_res) = $res->{id} =~ /^(\d+)/;
    cmp_ok $t_res - $t_end, '<', 250, 'its result is posted right after the sub-goal ended'
        or diag "the sub-goal ended at $t_end, its result was posted at $t_res";
    like $cm->{conclusion}, qr/2 of 2 parts done/, 'the sub-team did both clauses';
    is_deeply [sort @{ redis_cmd('SMEMBERS', "ioa:{room:$cm->{comm_id}}:members") }],
        [sort $COORD, qw(Eve Fay)], 'the sub-team: the agents that fit';
    my ($cassign) = grep { $_->{type} == 6 } room($cm->{comm_id});
    ok !exists $cassign->{sub_teams}, 'depth 0: the sub-team nests no further';
    like meta($gid)->{conclusion}, qr/6 of 6 parts done/, 'the parent: every part done';
    like meta($gid)->{conclusion}, qr/\n   \Q$COORD\E: Goal: Summarise the paper/, 'the sub-team\'s conclusion in it';

    # without team_up_depth: the extra clauses go to the team's members
    my $g2 = launch(goal => $goal);
    ok drive(agents => $ag, secs => 20,
             until => sub { state_of($g2) eq 'concluded' }),
       'without depth: concluded' or diag worker_logs($ctx);
    my ($a2) = grep { $_->{type} == 6 } room(meta($g2)->{comm_id});
    ok !exists $a2->{sub_teams}, 'without depth: no sub-team';
    is_deeply [sort keys %{ $a2->{tasks} }], [qw(Ann Ben Cid Dan)], 'the four members share the work';

    # cancelling a goal cancels the sub-team it started
    my %how = (Eve => 'hold', Fay => 'hold');
    my $g3 = launch(goal => $goal, team_up_depth => 1);
    my $kid;
    ok drive(agents => $ag, how => \%how, secs => 20, until => sub {
                 my $t = fsm($g3)->{tasks} or return 0;
                 ($kid) = map { $_->{child} // () } @{ json()->decode($t) };
                 my $kc = $kid && meta($kid)->{comm_id} or return 0;
                 grep { $_->{type} == 9 } room($kc) }),
       'the sub-team is at work' or diag worker_logs($ctx);
    redis_cmd('HSET', "ioa:{goal:$g3}:meta", state => 'cancelling');
    redis_cmd('PUBLISH', "ioa:{goal:$g3}:control", 'cancel');
    ok drive(agents => $ag, how => \%how, secs => 10, until => sub {
                 state_of($g3) eq 'cancelled' && state_of($kid) eq 'cancelled' }),
       'cancelling the goal cancelled its sub-team too' or diag worker_logs($ctx);
    @Held = ();
    is_deeply stop_workers(), { w1 => 0, w2 => 0 }, 'both exit 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 13b: every Redis key family the hub and workers write is documented with its bound
Every key the hub and the workers write belongs to a family that README's
"What Redis holds" lists with its bound: rooms, registry, presence,
reputation, positions, goals, feeds, the queue, the sweep's lease (a new
family fails here until it is documented).
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_room_retention 1h;
--- config
    location / { ioa_api; ioa_auth off; }
--- ioa_scenario
    if (redis_mode() eq 'cluster') {
        pass('standalone only: the key names are the same on a Cluster');
        return;
    }
    fresh($ctx);
    redis_cmd('FLUSHALL');
    # README's table: `<p>{room:<comm_id>}:meta`, `:members` ... per row
    open my $fh, '<', "$Repo/README.md" or die "README.md: $!";
    my $readme = do { local $/; <$fh> };
    my ($table) = $readme =~ /^## What Redis holds\n(.*?)^## /ms;
    my @families;
    for my $row (grep { /^\| `/ } split /\n/, $table // '') {
        my ($cell) = $row =~ /^\| ([^|]+) \|/;
        my @items = $cell =~ /`([^`]+)`/g;
        my ($base) = $items[0] =~ /^(.*?\})/;
        for my $item (@items) {
            my $k = $item =~ /^:/ ? "$base$item" : $item;
            my $re = join '', map { /^<p>$/ ? 'ioa:' : /^<.*>$/ ? '.+' : quotemeta }
                              split /(<[^>]+>)/, $k;
            push @families, [ $k, qr/\A$re\z/ ];
        }
    }
    ok @families >= 20, scalar(@families) . ' key families documented';

    # a bit of everything: agents, presence, rooms, posts, an SSE inbox,
    # a goal to its end (reputation, feed, queue), the retention sweep
    register_agents($ctx, Ann => 'writes reports', Ben => 'checks figures');
    my $ag = connect_agents($ctx, qw(Ann Ben));
    my $sse = IoaTest::SSE->connect($ctx->host, $ctx->port, '/agents/Ann/inbox');
    worker($ctx, 'w1');
    my $gid = launch(goal => 'Write the report. Check the figures.', team_member_names => [qw(Ann Ben)]);
    ok drive(agents => $ag, secs => 20, until => sub { state_of($gid) eq 'concluded' }), 'a goal concluded'
        or diag worker_logs($ctx);
    my ($code) = api($ctx, POST => '/teamup', { sender => 'Ann', agent_names => ['Ben'], team_name => 'side' });
    is $code, 200, 'and a room of their own';
    ok wait_until(sub { redis_cmd('EXISTS', 'ioa:{reg}:sweep') }, 8), 'the retention sweep ran';
    $sse->close;

    my (@keys, $cursor);
    $cursor = 0;
    do {
        my $r = redis_cmd('SCAN', $cursor, 'COUNT', 1000);
        ($cursor, my $batch) = @$r;
        push @keys, @$batch;
    } while ($cursor ne '0');
    ok @keys >= 20, scalar(@keys) . ' keys in Redis';
    my @undocumented = grep { my $k = $_; !grep { $k =~ $_->[1] } @families } sort @keys;
    is_deeply \@undocumented, [], 'every one of them is in a documented family';
    stop_workers();
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 14: the LLM planner on a real server ends every goal, within its token budget
The LLM planner against a real OpenAI-compatible server (llama-server on a
random-weight model, JSON Schema output): goals of every shape from two
workers, and every one ends, concluded or failed with a reason, with its token
usage; the token budget is a hard limit; an endpoint that is down leaves the
built-in planner in charge.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    # the LLM path does not depend on the Redis setup, and llama-server is
    # the slowest part of the file: once, against the standalone Redis
    if (redis_mode() eq 'cluster') {
        pass('the LLM planner runs against the standalone Redis only');
        return;
    }
    fresh($ctx);
    %Seen = ();
    my $llm = llama_server($ctx->servroot . '/logs/llama-server.log');
    my %skills = (Ann => 'write the report', Ben => ['check the figures', 1],
                  Cid => 'draw the chart', Dan => 'translate the text',
                  Eve => 'summarise the paper', Fay => 'plan the budget');
    register_agents($ctx, %skills);
    my $ag = connect_agents($ctx, sort keys %skills);
    my %env = (IOA_LLM_BASE_URL => $llm, IOA_LLM_API_KEY => 'test-key',
               IOA_LLM_TIMEOUT => 60, IOA_LLM_MAX_TOKENS => 1000);
    worker($ctx, $_, env => \%env, task_timeout => 10, turn_timeout => 2) for qw(w1 w2);

    # random weights, schema-constrained: every decision is valid JSON of
    # the right shape with arbitrary content, a fuzzer for the state machine
    my @goals = (
        [goal => 'Write the report. Check the figures.'],
        [goal => 'Draw the chart, then translate the text.'],
        [goal => 'Summarise the paper and plan the budget.', team_member_names => [qw(Eve Fay)]],
        [goal => 'Write the report. Check the figures. Draw the chart. Translate the text. '
               . 'Summarise the paper. Plan the budget.', team_up_depth => 1],
        [goal => 'Translate the text. Draw the chart.', max_turns => 4],
        [goal => 'Plan the budget, then check the figures, then write the report.'],
        [goal => 'Do something nobody here can do: repair the flux capacitor.'],
        [goal => 'Check the figures.', team_member_names => ['Ben'], team_up_depth => 2],
    );
    my @gids = map { launch(@$_) } @goals;
    my $done = sub { !grep { state_of($_) !~ /^(?:concluded|failed)$/ } @gids };
    ok drive(agents => $ag, secs => 300, until => $done), 'every goal ended'
        or diag worker_logs($ctx);
    for my $i (0 .. $#gids) {
        my $m = meta($gids[$i]);
        my $what = "goal $i ($goals[$i][1])";
        like $m->{state}, qr/^(?:concluded|failed)$/, "$what: ended ($m->{state})";
        is $m->{planner}, 'llm', "$what: planned by the LLM";
        if ($m->{state} eq 'concluded') {
            ok length($m->{conclusion} // ''), "$what: with a conclusion";
            my @env = room($m->{comm_id});
            my @mine = grep { $_->{sender} eq $COORD && ($_->{ioa_goal} // '') eq $gids[$i] } @env;
            is $mine[-1]{type}, 11, "$what: the room ends with its CONCLUSION";
            is $mine[-1]{content}, $m->{conclusion}, "$what: the record says what the room says";
            my @steps = map { $_->{ioa_step} } @mine;
            is_deeply \@steps, [sort { $a <=> $b } @steps], "$what: steps in order, none twice";
        } else {
            ok length($m->{error} // ''), "$what: failed with a reason: " . ($m->{error} // '');
        }
        ok(($m->{tokens} // 0) > 0, "$what: token usage recorded ($m->{tokens})");
        is $m->{tokens}, ($m->{prompt_tokens} // 0) + ($m->{completion_tokens} // 0),
            "$what: tokens = prompt + completion";
    }
    my (undef, $doc) = api($ctx, GET => "/goals/$gids[0]");
    is $doc->{planner}, 'llm', 'GET /goals/<id>: the LLM planner';
    ok $doc->{tokens} > 0 && $doc->{tokens} == $doc->{prompt_tokens} + $doc->{completion_tokens},
        "GET /goals/<id>: the token usage ($doc->{prompt_tokens} + $doc->{completion_tokens})";
    like json()->encode($doc), qr/"tokens":\d+/, 'GET /goals/<id>: tokens as a number';
    my $logs = worker_logs($ctx);
    like $logs, qr/LLM team round 1: (?:agent_discovery|team_up)/, 'the team-up tools were used';
    like $logs, qr/LLM plan: \d+ tasks?, in (?:parallel|sequence)/, 'some plans were the LLM\'s';
    unlike $logs, qr/LLM team round [4-9]/, 'never more than three team-up rounds';
    unlike $logs, qr/\berror:/, 'no worker error';
    is_deeply stop_workers(), { w1 => 0, w2 => 0 }, 'both workers exit 0';

    # the token budget is a hard limit: the first call uses it up, and the
    # goal concludes without another call
    worker($ctx, 'w3', env => \%env, token_budget => 1);
    my $gb = launch(goal => 'Write the report. Check the figures.');
    ok drive(agents => $ag, secs => 60, until => sub { state_of($gb) =~ /^(?:concluded|failed)$/ }),
       'budget: ended' or diag worker_logs($ctx);
    my $mb = meta($gb);
    is $mb->{state}, 'concluded', 'budget: concluded';
    is $mb->{ended}, 'token_budget', 'budget: because of the token budget';
    like $mb->{conclusion}, qr/^Concluded at the token budget\./, 'budget: the conclusion says so';
    like worker_log($ctx, 'w3'), qr/token budget reached/, 'budget: logged';
    is_deeply stop_workers(), { w3 => 0 }, 'w3 exits 0';

    # an endpoint that is down: the built-in planner decides, nothing stalls
    worker($ctx, 'w4', env => { %env, IOA_LLM_BASE_URL => 'http://127.0.0.1:9/v1',
                                IOA_LLM_MAX_ATTEMPTS => 2 });
    my $gd = launch(goal => 'Write the report. Check the figures.');
    ok drive(agents => $ag, secs => 60, until => sub { state_of($gd) eq 'concluded' }),
       'endpoint down: concluded' or diag worker_logs($ctx);
    like meta($gd)->{conclusion}, qr/2 of 2 parts done/, 'endpoint down: by the built-in plan';
    like worker_log($ctx, 'w4'), qr/the LLM gave no usable team .*the built-in planner decides instead/,
        'endpoint down: said so';
    is_deeply stop_workers(), { w4 => 0 }, 'w4 exits 0';
--- no_error_log
[alert]
[crit]
[emerg]
