# t/102-decisions.t -- the review after each round (workers/worker/decide.c):
# the built-in planner cuts a goal into the parts a person would, hands each
# agent only its own part, refuses weak matches, re-routes what failed or
# timed out to the next agent that matches, iterates on a partial result,
# and concludes with an account of every part.  Real nginx + module +
# Redis, real ioa-worker processes, agents played in the scenario
# (IoaTest::Goals::drive).
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/102-decisions.t

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
        Test::More::plan(skip_all => "$bin is not built");
    }
}

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(envelope fresh_hub json);
use IoaTest::Api;
use IoaTest::Goals;
use IoaTest::ScriptedLLM;
use IoaTest::SSE;
use JSON::PP ();
use File::Temp ();
use Time::HiRes qw(sleep time);

no_root_location();
no_shuffle();
log_level('info');

# the example agents of `make run`
sub demo_agents {
    my ($ctx, %more) = @_;
    register_agents($ctx,
        Counter  => 'counts the words in a text',
        Shouter  => 'shouts a text in upper case',
        Reverser => 'reverses the order of the words of a text', %more);
    return connect_agents($ctx, qw(Counter Shouter Reverser), sort keys %more);
}

# the task records of the counting agents, so that name order decides ties
sub forget_records {
    redis_cmd('DEL', map { "ioa:{reg}:rep:$_" } qw(Counter Tallier));
}

sub decisions {
    return grep { $_->{sender} eq $COORD && $_->{ioa_decision} } @_;
}

run_tests();

__DATA__

=== TEST 1: two verbs joined by "and" are two parts, each agent gets only its own
A list joined by "and" stays one part.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = demo_agents($ctx, Poet => 'writes poems about animals');
    worker($ctx, 'w1');

    my $goal = 'Reverse the words of "alpha beta gamma" and count the words in "one two three four".';
    my $gid = launch(goal => $goal);
    ok drive(agents => $ag, until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my @env = room(meta($gid)->{comm_id});
    my ($assign) = grep { $_->{type} == 6 } @env;
    is_deeply [sort keys %{ $assign->{tasks} }], [qw(Counter Reverser)], 'two agents';
    is $assign->{tasks}{Reverser}{task_desc}, 'Reverse the words of "alpha beta gamma"',
        'Reverser: its clause only';
    is $assign->{tasks}{Counter}{task_desc}, 'count the words in "one two three four"',
        'Counter: its clause only';
    my $c = meta($gid)->{conclusion};
    like $c, qr/^Goal: .*\n2 of 2 parts done\./, 'two parts, both done';
    like $c, qr/\n1\. Reverse the words of "alpha beta gamma"\n   Reverser: Reverser did: /,
        'part 1 with its result';
    like $c, qr/\n2\. count the words in "one two three four"\n   Counter: Counter did: /,
        'part 2 with its result';
    my ($concl) = grep { $_->{type} == 10 } @env;
    is $concl->{ioa_decision}{decision}, 'conclude', 'the conclude carries the decision';
    is $concl->{ioa_decision}{bound}, 'settled', 'bound: settled';

    my $g2 = launch(goal => 'Write poems about cats, dogs and birds.');
    ok drive(agents => $ag, until => sub { state_of($g2) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    ($assign) = grep { $_->{type} == 6 } room(meta($g2)->{comm_id});
    is_deeply $assign->{tasks}, { Poet => { task_id => $assign->{tasks}{Poet}{task_id},
        task_desc => 'Write poems about cats, dogs and birds' } }, 'one clause, for the poet';
    like meta($g2)->{conclusion}, qr/\n1 of 1 part done\./, 'one part';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 1c: an agent with two parts gets each as a task of its own, one after the other
One part, one task: an agent that answers only the first clause of what it is
handed cannot get both counted.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = demo_agents($ctx);
    worker($ctx, 'w1');
    my $gid = launch(goal => 'Shout "one". Shout "two". Count the words in "a b".');
    ok drive(agents => $ag, how => { Shouter => 'first_clause', Counter => 'first_clause' },
             until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my @env = room(meta($gid)->{comm_id});
    my @assign = grep { $_->{type} == 5 || $_->{type} == 6 } @env;
    my @shout = map { $_->{tasks}{Shouter} // () } @assign;
    is_deeply [map { $_->{task_desc} } @shout], ['Shout "one"', 'Shout "two"'],
        'the Shouter gets two tasks, one part each';
    ok !(grep { $_->{type} == 6 } @assign), 'one after the other (SYNC_TASK_ASSIGNMENT), since IoA maps an agent to one task';
    my $c = meta($gid)->{conclusion};
    like $c, qr/\n3 of 3 parts done\./, 'three parts, each done by its own task';
    like $c, qr/\n2\. Shout "two"\n   Shouter: Shouter did: Shout "two"/, 'part 2 carries its own answer';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: a part nobody matches well enough goes to nobody, and the conclusion says so
The conclusion does not claim the part was done.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = demo_agents($ctx);
    worker($ctx, 'w1');
    my $gid = launch(goal => 'Shout "good morning". Translate the text into French.');
    ok drive(agents => $ag, until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my ($assign) = grep { $_->{type} == 6 } room(meta($gid)->{comm_id});
    is_deeply [keys %{ $assign->{tasks} }], ['Shouter'], 'only the shouting is handed out';
    my $c = meta($gid)->{conclusion};
    like $c, qr/\n1 of 2 parts done\./, 'one of two parts done';
    like $c, qr/\n2\. Translate the text into French\n   Not done: no agent matches it well enough \(the best, \w+, scores [\d.]+; at least 0\.80 is needed\)\./,
        'the other part: why it has no result';
    is_deeply [sort @{ redis_cmd('SMEMBERS', "ioa:{room:" . meta($gid)->{comm_id} . "}:members") }],
        [sort $COORD, 'Shouter'], 'nobody joined for a weak match';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3: a silent agent's part is re-routed after its timeout to the next online match
The next online agent that matches joins the room; the decision is an
envelope.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    %Seen = ();
    my $ag = demo_agents($ctx, Tallier => 'counts the words in a text');
    worker($ctx, 'w1', task_timeout => 2);
    my $gid = launch(goal => 'Count the words in "one two three".');
    ok drive(agents => $ag, how => { Counter => 'silent' }, secs => 20,
             until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my $m = meta($gid);
    my @env = room($m->{comm_id});
    is_deeply [coordinator_steps(@env)], [1, 2, 10, 11, 40, 110, 111, 140, 141],
        'round 1, the decision (step 40), round 2 from step 110, the conclusion';
    my ($d) = decisions(grep { $_->{type} == 4 } @env);
    is $d->{ioa_decision}{decision}, 'reroute', 'decision: reroute';
    is $d->{ioa_decision}{round}, 1, 'after round 1';
    like $d->{ioa_decision}{reason}, qr/part 1 timed out with Counter, so Tallier takes it/,
        'the reason';
    like $d->{content}, qr/^Decision after round 1: reroute/, 'said in the room';
    my @assign = grep { $_->{type} == 6 } @env;
    is_deeply [map { keys %{ $_->{tasks} } } @assign], [qw(Counter Tallier)],
        'first Counter, then Tallier';
    ok grep({ ($_->{type} // 0) == 6 } @{ $Seen{Tallier} || [] }),
        'Tallier, linked to the room when it joined, got its assignment';
    is_deeply [sort @{ redis_cmd('SMEMBERS', "ioa:{room:$m->{comm_id}}:members") }],
        [sort $COORD, qw(Counter Tallier)], 'Tallier is a member now';
    ok redis_cmd('SISMEMBER', "ioa:{reg}:rooms:Tallier", $m->{comm_id}),
        'and the room is in its room set';
    like $m->{conclusion}, qr/\n1 of 1 part done\.\n1\. Count the words in "one two three"\n   Tallier: Tallier did: /,
        'the conclusion: done by Tallier';
    is $m->{ended}, 'settled', 'ended: settled';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 4: a failed part is re-routed at once, to at most --max-attempts agents
The option bounds the agents tried, and the account says when the attempts are
used up.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = demo_agents($ctx, Tallier => 'counts the words in a text',
                         Numberer => 'counts the words in a text');
    worker($ctx, 'w1', args => ['--max-attempts', 2]);
    my $t0 = time;
    my $gid = launch(goal => 'Count the words in "one two three".');
    ok drive(agents => $ag, how => { map { $_ => 'fail' } qw(Counter Tallier Numberer) },
             until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    ok time - $t0 < 10, 'no timeout was waited for';
    my @env = room(meta($gid)->{comm_id});
    my @assign = grep { $_->{type} == 6 } @env;
    is scalar(@assign), 2, 'two agents tried';
    my $c = meta($gid)->{conclusion};
    like $c, qr/\n0 of 1 part done\./, 'nothing claimed';
    like $c, qr/Not done: \w+ failed \(\w+ could not do it\); 2 agents tried, the attempts allowed are used up\./,
        'the account says why';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 5: a partial result makes another round for the same agent, up to --max-rounds
The agent is handed its result so far; the round limit ends the loop, and the
account says so.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    %Partial = ();
    my $ag = demo_agents($ctx);
    worker($ctx, 'w1', args => ['--max-rounds', 2]);
    my $gid = launch(goal => 'Reverse the words of "a b c" and shout "hello there".');
    ok drive(agents => $ag, how => { Reverser => 'partial_once' },
             until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my @env = room(meta($gid)->{comm_id});
    my ($d) = decisions(grep { $_->{type} == 4 } @env);
    is $d->{ioa_decision}{decision}, 'iterate', 'decision: iterate';
    my @assign = grep { $_->{type} == 6 } @env;
    is_deeply [sort keys %{ $assign[1]{tasks} }], ['Reverser'], 'round 2: only the partial part';
    like $assign[1]{tasks}{Reverser}{task_desc},
        qr/^Continue: Reverse the words of "a b c"\nWhat you reported so far \(partial\): Reverser did half of it$/,
        'handed its result so far';
    like meta($gid)->{conclusion}, qr/\n2 of 2 parts done\./, 'both parts done';

    # always partial: the second round is the last one
    my $g2 = launch(goal => 'Reverse the words of "x y z".');
    ok drive(agents => $ag, how => { Reverser => 'partial' },
             until => sub { state_of($g2) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my $m = meta($g2);
    is $m->{ended}, 'max_rounds', 'ended: max_rounds';
    like $m->{conclusion}, qr/^Concluded at the round limit \(2\)\.\n/, 'the conclusion says which bound';
    like $m->{conclusion}, qr/\n0 of 1 part done\.\n.*\n   Partly done by Reverser: Reverser did half of it/,
        'a partial part is not counted as done';
    my ($concl) = grep { $_->{type} == 10 } room($m->{comm_id});
    is $concl->{ioa_decision}{bound}, 'max_rounds', 'the conclude names the bound';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 6: kill -9 after posting the decision: the successor does not decide or post twice
The worker is killed right after it posts the decision, and round 2 completes.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = demo_agents($ctx, Tallier => 'counts the words in a text');
    for my $step (40, 110) {
        forget_records();    # else Tallier's record wins the work at once
        my $w1 = worker($ctx, "a$step", crash_after => $step, claim_idle => 1);
        my $gid = launch(goal => 'Count the words in "one two three".');
        ok drive(agents => $ag, how => { Counter => 'fail' }, secs => 10,
                 until => sub { reap_dead(); !grep { $Workers{$_}{name} eq "a$step" } keys %Workers }),
           "step $step: the first worker died" or diag worker_logs($ctx);
        worker($ctx, "b$step", claim_idle => 1);
        ok drive(agents => $ag, how => { Counter => 'fail' }, secs => 15,
                 until => sub { state_of($gid) eq 'concluded' }),
           "step $step: concluded by the second" or diag worker_logs($ctx);
        my @env = room(meta($gid)->{comm_id});
        is_deeply [coordinator_steps(@env)], [1, 2, 10, 11, 40, 110, 111, 140, 141],
            "step $step: every step once";
        is scalar(decisions(grep { $_->{type} == 4 } @env)), 1, "step $step: one decision";
        like meta($gid)->{conclusion}, qr/\n1 of 1 part done\./, "step $step: done by the re-route";
        is_deeply [redis_cmd('HGET', 'ioa:{reg}:rep:Counter', 'failed'),
                   redis_cmd('HGET', 'ioa:{reg}:rep:Tallier', 'completed')], [1, 1],
            "step $step: each outcome recorded once across the takeover";
        stop_workers();
    }
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 7: every task outcome goes into its agent's record once and steers the routing
/query_assistant and /retrieve_assistant show it, and a flaky agent loses work
to a reliable one that describes itself the same way.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = demo_agents($ctx, Alpha => 'tallies the words in a text',
                         Beta => 'tallies the words in a text');
    worker($ctx, 'w1');
    my $gid = launch(goal => 'Tally the words in "one two".');
    ok drive(agents => $ag, how => { Alpha => 'fail' },
             until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my @assign = grep { $_->{type} == 6 } room(meta($gid)->{comm_id});
    is_deeply [map { keys %{ $_->{tasks} } } @assign], [qw(Alpha Beta)],
        'a tie goes by name while nobody has a record: Alpha, then Beta after Alpha failed';

    my ($code, $d) = api($ctx, POST => '/query_assistant', { name => 'Alpha' });
    is $code, 200, 'query_assistant';
    my $lat = delete $d->{record}{latency_ms};
    is_deeply $d->{record}, { completed => 0, partial => 0, failed => 1, timed_out => 0 },
        'Alpha: one task failed, counted once (the review and the conclusion both record it)';
    ok defined $lat && $lat >= 1 && $lat < 5000, "with the time it took to answer (${\($lat // 'null')} ms)";
    ($code, $d) = api($ctx, POST => '/retrieve_assistant', { sender => 'Zed', capabilities => ['tallies words'] });
    my %rec = map { $_->{name} => $_->{record} } @$d;
    delete $rec{Beta}{latency_ms};
    is_deeply $rec{Beta}, { completed => 1, partial => 0, failed => 0, timed_out => 0 },
        'retrieve_assistant: Beta completed one';
    is $rec{Alpha}{failed}, 1, 'retrieve_assistant: Alpha failed one';

    my $g2 = launch(goal => 'Tally the words in "three four five".');
    ok drive(agents => $ag, until => sub { state_of($g2) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    @assign = grep { $_->{type} == 6 } room(meta($g2)->{comm_id});
    is_deeply [map { keys %{ $_->{tasks} } } @assign], ['Beta'],
        'the same match, the better record: Beta gets the work';
    is redis_cmd('HGET', 'ioa:{reg}:rep:Beta', 'completed'), 2, 'Beta: two completed';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 8: an offline assignee gives its part up after --offline-grace and it is re-routed
This happens long before --task-timeout.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = demo_agents($ctx, Tallier => 'counts the words in a text');
    worker($ctx, 'w1', task_timeout => 60, args => ['--offline-grace', 1]);
    my $t0 = time;
    my $gid = launch(goal => 'Count the words in "one two three".');
    ok drive(agents => $ag, how => { Counter => 'vanish' }, secs => 20,
             until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my $took = time - $t0;
    ok $took < 15, "within the grace, not the 60 s timeout (${took}s)";
    my @env = room(meta($gid)->{comm_id});
    my ($d) = decisions(grep { $_->{type} == 4 } @env);
    like $d->{ioa_decision}{reason}, qr/part 1 failed with Counter, so Tallier takes it/,
        'the decision: re-routed from the agent that left';
    like meta($gid)->{conclusion}, qr/\n1 of 1 part done\.\n.*\n   Tallier: Tallier did: /,
        'done by Tallier';
    like worker_log($ctx, 'w1'), qr/task \w+ \(Counter\) failed: its agent went offline/,
        'the worker says why';
    is redis_cmd('HGET', 'ioa:{reg}:rep:Counter', 'failed'), 1, 'Counter\'s record: one failed';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 9: a person's post into a running goal becomes work, and "stop" ends the goal
A request becomes work at the next review, quoted in the decision; the command
"stop" ends the goal at once with what it has; clear errors otherwise.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    @Held = ();
    my $ag = demo_agents($ctx);
    worker($ctx, 'w1', task_timeout => 60);

    # a request while the round runs
    my $gid = launch(goal => 'Count the words in "a b c".');
    ok drive(agents => $ag, how => { Counter => 'hold' }, until => sub { @Held }),
       'Counter has its task' or diag worker_logs($ctx);
    my ($code, $d) = api($ctx, POST => "/goals/$gid/messages",
                         { sender => 'Ann', content => 'Also shout "hello there"' });
    is $code, 202, 'accepted';
    like $d->{message_id}, qr/^\d+-\d+$/, 'with the id of the message';
    is $d->{sender}, 'Ann', 'and its sender';
    release();
    ok drive(agents => $ag, until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my @env = room(meta($gid)->{comm_id});
    my ($dec) = decisions(grep { $_->{type} == 4 } @env);
    like $dec->{ioa_decision}{reason}, qr/^Ann asked: "Also shout "hello there""; part 2 goes to Shouter$/,
        'the decision quotes the request and says who takes it';
    my @assign = grep { $_->{type} == 6 } @env;
    is $assign[1]{tasks}{Shouter}{task_desc}, 'shout "hello there"', 'round 2: the request, for Shouter';
    like meta($gid)->{conclusion}, qr/\n2 of 2 parts done\..*\n2\. shout "hello there"\n   Shouter: /s,
        'the conclusion accounts for it';
    like worker_log($ctx, 'w1'), qr/Ann says: Also shout/, 'the worker logged it';

    # stop: the silent agent's task is not waited for
    my $t0 = time;
    my $g2 = launch(goal => 'Count the words in "d e f".');
    ok drive(agents => $ag, how => { Counter => 'silent' },
             until => sub { grep { $_->{type} == 6 } room(meta($g2)->{comm_id} // 'none') }),
       'assigned' or diag worker_logs($ctx);
    ($code) = api($ctx, POST => "/goals/$g2/messages", { content => '/STOP' });
    is $code, 202, 'accepted, as "user"';
    ok drive(agents => $ag, how => { Counter => 'silent' }, secs => 10,
             until => sub { state_of($g2) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    ok time - $t0 < 10, 'long before the task timeout';
    my $m = meta($g2);
    is $m->{ended}, 'person', 'ended: person';
    like $m->{conclusion}, qr/^Concluded when asked to \(user: \/STOP\)\.\n.*\n0 of 1 part done\..*task was cancelled/s,
        'the conclusion says who stopped it, and nothing is claimed';
    my ($concl) = grep { $_->{type} == 10 } room($m->{comm_id});
    like $concl->{content}, qr/^Asked to stop \(user: \/STOP\)/, 'so does the conclude';
    is $concl->{ioa_decision}{bound}, 'person', 'its decision names the bound';

    # errors
    ($code, $d) = api($ctx, POST => "/goals/$g2/messages", { content => 'more?' });
    is $code, 409, 'an ended goal: 409';
    is $d->{code}, 'goal_ended', 'goal_ended';
    ($code, $d) = api($ctx, POST => '/goals/' . ('0' x 32) . '/messages', { content => 'hi' });
    is $code, 404, 'an unknown goal: 404';
    ($code, $d) = api($ctx, POST => "/goals/$g2/messages", { content => '' });
    is $code, 400, 'empty content: 400';
    is $d->{field}, 'content', 'naming the field';
    ($code, $d) = api($ctx, POST => "/goals/$g2/messages", { content => 'x', sender => "bad\nname" });
    is $code, 400, 'a sender that is no name: 400';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 10: with a model, the review is the model's, falling back to the rule when invalid
A valid answer is followed (its agent, its task text), one naming an agent
that may not take the part falls back to the rule, and the model may conclude.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = demo_agents($ctx, Tallier => 'counts the words in a text',
                         Speaker => ['speaks for the team', 1]);
    # the model: each goal's text picks its review answer; any other call
    # (the plan, the conclusion) gets {} and the built-in planner's part
    my %asked;
    my %review = (
        'seven eight' => sub {
            return $asked{x}++ ? { decision => 'another_round', reason => 'Speaker explained',
                                   tasks => [{ part => 1, agent => 'Tallier', task_desc => 'count it' }] }
                               : { decision => 'ask', reason => 'why did it fail?',
                                   question => { agent => 'Speaker', text => 'Speaker, why did the count fail?' },
                                   tasks => [] };
        },
        'one two' => { decision => 'another_round', reason => 'Counter failed; Tallier counts too',
                       tasks => [{ part => 1, agent => 'Tallier',
                                   task_desc => 'Count the words in "one two", carefully' }] },
        'three four' => { decision => 'another_round', reason => 'let Shouter try',
                          tasks => [{ part => 1, agent => 'Shouter', task_desc => 'shout it' }] },
        'five six' => { decision => 'conclude', reason => 'a failure is answer enough', tasks => [] },
    );
    my $llm = scripted_llm(sub {
        my ($req) = @_;
        my $sys = $req->{messages}[0]{content} // '';
        my $user = $req->{messages}[1]{content} // '';
        return '{}' unless $sys =~ /A round of tasks has ended/;
        for my $k (keys %review) {
            next unless $user =~ /\Q$k\E/;
            my $r = ref $review{$k} eq 'CODE' ? $review{$k}->() : $review{$k};
            return JSON::PP->new->encode($r);
        }
        return '{}';
    });
    worker($ctx, 'w1', env => { IOA_LLM_BASE_URL => $llm->{url}, IOA_LLM_MAX_ATTEMPTS => 1 });
    my $team = [qw(Counter Tallier Shouter)];

    my $g1 = launch(goal => 'Count the words in "one two".', team_member_names => $team);
    ok drive(agents => $ag, how => { Counter => 'fail' },
             until => sub { state_of($g1) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my @env = room(meta($g1)->{comm_id});
    my ($d) = decisions(grep { $_->{type} == 4 } @env);
    is $d->{ioa_decision}{by}, 'llm', 'decided by the model' or diag worker_logs($ctx);
    is $d->{ioa_decision}{reason}, 'the model: Counter failed; Tallier counts too', 'with its reason';
    my @assign = grep { $_->{type} == 6 } @env;
    is $assign[1]{tasks}{Tallier}{task_desc}, 'Count the words in "one two", carefully',
        'the model\'s agent and task text';
    my ($rq) = grep { ($_->{messages}[0]{content} // '') =~ /A round of tasks has ended/ }
               scripted_requests($llm);
    like $rq->{messages}[1]{content}, qr/Where the parts stand:.*Not done: Counter failed/s,
        'the prompt shows where the parts stand';
    like $rq->{messages}[1]{content}, qr/The room, most recent last:.*\nCounter: Counter could not do it/s,
        'and the transcript';
    my $format = JSON::PP->new->encode($rq->{response_format} // {});
    like $format, qr/"json_schema".*"another_round"/, 'the answer is asked for as a JSON Schema';

    forget_records();      # else Tallier's record wins the first round
    my $g2 = launch(goal => 'Count the words in "three four".', team_member_names => $team);
    ok drive(agents => $ag, how => { Counter => 'fail' },
             until => sub { state_of($g2) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    ($d) = decisions(grep { $_->{type} == 4 } room(meta($g2)->{comm_id}));
    is $d->{ioa_decision}{by}, 'rule', 'an agent that may not take the part: the rule decides';
    like $d->{ioa_decision}{reason}, qr/so Tallier takes it/, 'and re-routes as it would';
    like worker_log($ctx, 'w1'), qr/the model gave part 1 to Shouter, who may not take it; ignored/,
        'the log says why';

    forget_records();      # else Tallier's record wins the first round
    my $g3 = launch(goal => 'Count the words in "five six".', team_member_names => $team);
    ok drive(agents => $ag, how => { Counter => 'fail' },
             until => sub { state_of($g3) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my ($c) = grep { $_->{type} == 10 } room(meta($g3)->{comm_id});
    is $c->{ioa_decision}{by}, 'llm', 'the model concluded';
    like $c->{ioa_decision}{reason}, qr/^the model: a failure is answer enough; 0 of 1 part done$/,
        'saying why, and what is done';
    is scalar(grep { $_->{type} == 6 } room(meta($g3)->{comm_id})), 1, 'no second round';
    ok meta($g3)->{tokens} > 0, 'the calls are counted in the goal\'s tokens';

    # the model asks a member first, then decides with the answer in view
    forget_records();
    my $g4 = launch(goal => 'Count the words in "seven eight".',
                    team_member_names => [qw(Counter Tallier Speaker)]);
    ok drive(agents => $ag, how => { Counter => 'fail' }, secs => 20,
             until => sub { state_of($g4) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my %step = by_step(room(meta($g4)->{comm_id}));
    is $step{36}{ioa_decision}{decision}, 'ask', 'the model asked (step 36)';
    is $step{36}{ioa_decision}{by}, 'llm', 'by the model';
    is $step{36}{content}, 'Speaker, why did the count fail?', 'its question';
    is_deeply $step{36}{next_speaker}, ['Speaker'], 'to Speaker';
    is $step{40}{ioa_decision}{reason}, 'the model: Speaker explained', 'then decided';
    my ($second) = grep { ($_->{messages}[1]{content} // '') =~ /seven eight/
                          && ($_->{messages}[0]{content} // '') =~ /A round of tasks has ended/ }
                   reverse scripted_requests($llm);
    like $second->{messages}[1]{content}, qr/\nSpeaker: Speaker: I agree with the plan/,
        'the second review sees the answer in the transcript';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 11: nested teams are reviewed the same way: a partial sub-team's part moves on
A sub-team that did only some of its parts reports partial, and the parent
hands the part to a new sub-team; a sub-team iterates inside too.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    %Partial = ();
    my %skills = (Ann => 'write the report', Ben => 'check the figures',
                  Cid => 'draw the chart', Dan => 'translate the text',
                  Eve => 'summarise the paper', Fay => 'plan the budget');
    register_agents($ctx, %skills);
    my $ag = connect_agents($ctx, sort keys %skills);
    worker($ctx, $_, args => ['--max-rounds', 2]) for qw(w1 w2);
    my $goal = 'Write the report. Check the figures. Draw the chart. '
             . 'Translate the text. Summarise the paper. Plan the budget.';

    # Fay fails every time: each sub-team does one of its two parts
    my $gid = launch(goal => $goal, team_up_depth => 1);
    ok drive(agents => $ag, how => { Fay => 'fail' }, secs => 30,
             until => sub { state_of($gid) eq 'concluded' }),
       'the parent concluded' or diag worker_logs($ctx);
    my @env = room(meta($gid)->{comm_id});
    my @subres = grep { $_->{type} == 7 && $_->{sender} eq $COORD } @env;
    is_deeply [map { $_->{task_status} } @subres], [qw(partial partial)],
        'both sub-teams\' results: partial';
    isnt $subres[0]{sub_goal}, $subres[1]{sub_goal}, 'from two sub-goals';
    my ($d) = decisions(grep { $_->{type} == 4 } @env);
    like $d->{ioa_decision}{reason}, qr/part 5 came back partial from \Q$COORD\E; part 6 came back partial/,
        'the parent iterates on the partial result';
    my @assign = grep { $_->{type} == 6 } @env;
    is $assign[1]{sub_teams}[0]{task_desc}, 'Summarise the paper. Plan the budget.',
        'round 2: the parts again, for a new sub-team';
    my $m = meta($gid);
    is $m->{ended}, 'max_rounds', 'the parent ended at its round limit';
    like $m->{conclusion}, qr/\n4 of 6 parts done\./, 'four of six done, nothing more claimed';
    like $m->{conclusion}, qr/\n5\. Summarise the paper\n   Partly done by \Q$COORD\E: /,
        'the sub-team\'s parts: partly done';
    is meta($subres[0]{sub_goal})->{parts_done}, 1, 'a sub-goal records its parts done';
    is meta($subres[0]{sub_goal})->{parts_total}, 2, 'of its parts';

    # Fay partial once: the sub-team iterates inside and completes
    %Partial = ();
    my $g2 = launch(goal => $goal, team_up_depth => 1);
    ok drive(agents => $ag, how => { Fay => 'partial_once' }, secs => 30,
             until => sub { state_of($g2) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my ($sr) = grep { $_->{type} == 7 && $_->{sender} eq $COORD } room(meta($g2)->{comm_id});
    is $sr->{task_status}, 'completed', 'the sub-team completed';
    my ($sd) = decisions(grep { $_->{type} == 4 } room(meta($sr->{sub_goal})->{comm_id}));
    is $sd->{ioa_decision}{decision}, 'iterate', 'after iterating in its own room';
    like meta($g2)->{conclusion}, qr/\n6 of 6 parts done\./, 'the parent: every part done';
    is_deeply stop_workers(), { w1 => 0, w2 => 0 }, 'the workers exit 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 13: a protocol member's proposal in its turn is followed, or refused saying why
Valid tasks join the plan, an invalid proposal gets an error envelope saying
why, a proposal to conclude is followed.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = demo_agents($ctx, Planner => ['plans the work of a team', 1]);
    worker($ctx, 'w1', turn_timeout => 5);
    my $team = [qw(Planner Counter Shouter)];
    my $goal = 'Count the words in "a b".';

    my $g1 = launch(goal => $goal, team_member_names => $team);
    ok drive(agents => $ag, how => { Planner => { tasks => { Shouter => { task_desc => 'Shout "a b"' } } } },
             until => sub { state_of($g1) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my @env = room(meta($g1)->{comm_id});
    my %step = by_step(@env);
    my $ans = $step{9};
    is_deeply $ans->{ioa_proposals}, [{ sender => 'Planner', accepted => JSON::PP::true, reason => '' }],
        'step 9 answers the proposal: followed';
    is_deeply $ans->{next_speaker}, ['Planner'], 'addressed to the proposer';
    ok !exists $ans->{ioa_error}, 'no error';
    is_deeply [sort keys %{ $step{10}{tasks} }], [qw(Counter Shouter)], 'the proposed task is assigned';
    is $step{10}{tasks}{Shouter}{task_desc}, 'Shout "a b"', 'as proposed';
    like meta($g1)->{conclusion}, qr/\n2 of 2 parts done\..*\n2\. Shout "a b"\n   Shouter: Shouter did: Shout "a b"/s,
        'and accounted for';

    my $g2 = launch(goal => $goal, team_member_names => $team);
    ok drive(agents => $ag, how => { Planner => { tasks => { Nobody => { task_desc => 'x' } } } },
             until => sub { state_of($g2) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    %step = by_step(room(meta($g2)->{comm_id}));
    is $step{9}{ioa_proposals}[0]{accepted}, JSON::PP::false, 'refused';
    is_deeply $step{9}{ioa_error}, { code => 'invalid_proposal',
        message => 'Planner: Nobody is not a member of this team' }, 'an error envelope saying why';
    like $step{9}{content}, qr/^Planner's proposal is refused: Nobody is not a member of this team\.$/,
        'said in the room';
    is_deeply [keys %{ $step{10}{tasks} }], ['Counter'], 'the plan as it was';

    my $g3 = launch(goal => $goal, team_member_names => $team);
    ok drive(agents => $ag, how => { Planner => { conclude => 'There is nothing to do: "a b" has 2 words.' } },
             until => sub { state_of($g3) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my $m = meta($g3);
    is $m->{ended}, 'proposal', 'ended: proposal';
    %step = by_step(room($m->{comm_id}));
    ok !$step{10}, 'nothing was assigned';
    like $m->{conclusion}, qr/^Concluded on a member's proposal \(Planner proposed it: There is nothing to do: "a b" has 2 words\.\)\.\n/,
        'the conclusion carries the proposer\'s answer';
    like $m->{conclusion}, qr/\n0 of 1 part done\./, 'and claims nothing done by the team';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';

    # kill -9 right after the answer is posted: the successor neither
    # answers again nor loses the proposed task
    # (turn_timeout: a bound, not a wait; the Planner answers at once, but
    # a loaded machine must not make its answer miss the turn)
    worker($ctx, 'a9', crash_after => 9, claim_idle => 1, turn_timeout => 30);
    my $g4 = launch(goal => $goal, team_member_names => $team);
    my $how = { Planner => { tasks => { Shouter => { task_desc => 'Shout "c d"' } } } };
    ok drive(agents => $ag, how => $how, secs => 40,
             until => sub { reap_dead(); !grep { $Workers{$_}{name} eq 'a9' } keys %Workers }),
       'the worker died after step 9' or diag worker_logs($ctx);
    worker($ctx, 'b9', claim_idle => 1, turn_timeout => 30);
    ok drive(agents => $ag, how => $how, secs => 40,
             until => sub { state_of($g4) eq 'concluded' }),
       'concluded by the second' or diag worker_logs($ctx);
    my @mine = grep { $_->{sender} eq $COORD } room(meta($g4)->{comm_id});
    is_deeply [map { $_->{ioa_step} } @mine], [1, 3, 4, 9, 10, 11, 40, 41], 'every step once (3 and 4: spoken for Counter and Shouter)';
    like meta($g4)->{conclusion}, qr/\n2 of 2 parts done\./, 'with the proposed task';
    stop_workers();
--- no_error_log
[alert]
[crit]
[emerg]


=== TEST 13b: IoA's updated_plan is reviewed like a proposal under collaborative planning
With is_collaborative_planning_enabled a member's updated_plan is reviewed
like a proposal and recorded as a decision (update_plan), and the plan goes
back out in updated_plan; without the flag, or too long, it is refused with
the reason (keep_plan).
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = demo_agents($ctx, Planner => ['plans the work of a team', 1]);
    worker($ctx, 'w1', turn_timeout => 5);
    my $team = [qw(Planner Counter)];
    my $goal = 'Count the words in "a b".';
    my $plan = "## Strategic Objectives\n- count the words\n## Expected Milestones\n- the count";

    my $g1 = launch(goal => $goal, team_member_names => $team,
                    is_collaborative_planning_enabled => JSON::PP::true);
    ok drive(agents => $ag, how => { Planner => { plan => $plan } },
             until => sub { state_of($g1) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my %step = by_step(room(meta($g1)->{comm_id}));
    my $ans = $step{9};
    is_deeply $ans->{ioa_proposals}, [{ sender => 'Planner', kind => 'plan', accepted => JSON::PP::true, reason => '' }],
        'step 9 answers the plan: taken';
    is $ans->{ioa_decision}{decision}, 'update_plan', 'recorded as a decision: update_plan';
    is $ans->{ioa_decision}{plan_by}, 'Planner', '... by the proposer';
    is $ans->{ioa_decision}{plan}, $plan, '... quoting the plan';
    is $ans->{updated_plan}, $plan, 'and the plan goes out in updated_plan, for every member\'s planner';
    like $ans->{content}, qr/^Planner's plan is taken: it is the team's plan now\.$/, 'said in the room';
    like meta($g1)->{conclusion}, qr/\n1 of 1 part done\./, 'the goal runs on with its parts';

    my $g2 = launch(goal => $goal, team_member_names => $team);
    ok drive(agents => $ag, how => { Planner => { plan => $plan } },
             until => sub { state_of($g2) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    %step = by_step(room(meta($g2)->{comm_id}));
    is $step{9}{ioa_proposals}[0]{accepted}, JSON::PP::false, 'without the flag: refused';
    like $step{9}{ioa_proposals}[0]{reason}, qr/is_collaborative_planning_enabled/, 'naming the flag';
    is $step{9}{ioa_decision}{decision}, 'keep_plan', 'recorded: keep_plan';
    ok !defined $step{9}{updated_plan} || $step{9}{updated_plan} eq '', 'no plan goes out';
    is $step{9}{ioa_error}{code}, 'invalid_proposal', 'an error envelope';

    my $g3 = launch(goal => $goal, team_member_names => $team,
                    is_collaborative_planning_enabled => JSON::PP::true);
    ok drive(agents => $ag, how => { Planner => { plan => 'p' x 5000 } },
             until => sub { state_of($g3) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    %step = by_step(room(meta($g3)->{comm_id}));
    like $step{9}{ioa_proposals}[0]{reason}, qr/at most 4000 bytes/, 'a plan of 5,000 bytes: refused, saying the bound';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 14: cancel in a later round cancels the re-routed task and ends the goal cancelled
The goal's account says what was done.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    @Held = ();
    my $ag = demo_agents($ctx, Tallier => 'counts the words in a text');
    worker($ctx, 'w1');
    my $gid = launch(goal => 'Count the words in "a b c" and shout "go".');
    ok drive(agents => $ag, how => { Counter => 'fail', Tallier => 'hold' },
             until => sub { @Held }),
       'round 2: Tallier has the re-routed part' or diag worker_logs($ctx);
    my ($code) = api($ctx, POST => "/goals/$gid/cancel");
    is $code, 202, 'cancel accepted';
    ok drive(agents => $ag, until => sub { state_of($gid) eq 'cancelled' }),
       'cancelled' or diag worker_logs($ctx);
    my @mine = grep { $_->{sender} eq $COORD } room(meta($gid)->{comm_id});
    is_deeply [(map { $_->{ioa_step} } @mine)[-2, -1]], [111, 141],
        'the round-2 pause, then only the CONCLUSION (step 141)';
    like $mine[-1]{content}, qr/^The goal was cancelled before it was achieved\.\n.*\n1 of 2 parts done\./s,
        'it says so, and what was done';
    like $mine[-1]{content}, qr/Not done: Tallier's task was cancelled\./, 'the held task: cancelled';
    is meta($gid)->{ended}, 'cancelled', 'ended: cancelled';
    @Held = ();
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]


=== TEST 15: a protocol member that failed its part is asked what went wrong before it moves
The question (ask) comes before the part moves on, which waits for the answer
or for --turn-timeout.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = demo_agents($ctx, Speaker => ['counts the words in a text', 1],
                         Tallier => 'counts the words in a text');
    worker($ctx, 'w1', turn_timeout => 2);
    my $gid = launch(goal => 'Count the words in "a b c".', team_member_names => [qw(Speaker Tallier)]);
    ok drive(agents => $ag, how => { Speaker => 'fail' },
             until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my @env = room(meta($gid)->{comm_id});
    my %step = by_step(@env);
    my $ask = $step{36};
    ok $ask, 'a question at step 36' or diag join ' ', coordinator_steps(@env);
    is $ask->{ioa_decision}{decision}, 'ask', 'decision: ask';
    is_deeply $ask->{next_speaker}, ['Speaker'], 'the floor to the member asked';
    like $ask->{content}, qr/^Speaker, part 1 \(Count the words in "a b c"\) failed with you: "Speaker could not do it"\. What went wrong/,
        'what it asks';
    my ($reply) = grep { $_->{sender} eq 'Speaker' && $_->{type} == 4 && id_lt($ask->{id}, $_->{id}) } @env;
    ok $reply, 'Speaker answered';
    ok id_lt($reply->{id}, $step{40}{id}), 'before the coordinator decided';
    like $step{40}{ioa_decision}{reason}, qr/so Tallier takes it/, 'then the part moved on';
    like worker_log($ctx, 'w1'), qr/Speaker answered/, 'the worker saw the answer';

    # a member that does not answer: the review goes on at --turn-timeout
    redis_cmd('DEL', 'ioa:{reg}:rep:Speaker', 'ioa:{reg}:rep:Tallier');
    my $g2 = launch(goal => 'Count the words in "d e".', team_member_names => [qw(Speaker Tallier)]);
    my $t0 = time;
    ok drive(agents => $ag, how => { Speaker => 'fail_mute' }, secs => 20,
             until => sub { state_of($g2) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    %step = by_step(room(meta($g2)->{comm_id}));
    ok $step{36} && $step{40}, 'asked, then decided';
    my ($a36) = $step{36}{id} =~ /^(\d+)/;
    my ($a40) = $step{40}{id} =~ /^(\d+)/;
    cmp_ok $a40 - $a36, '>=', 1900, 'after waiting --turn-timeout (2 s) for the answer';
    like worker_log($ctx, 'w1'), qr/Speaker did not answer within 2 s; deciding without it/,
        'the log says so';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';

    # kill -9 right after the question is posted: asked once, answered,
    # decided once
    redis_cmd('DEL', 'ioa:{reg}:rep:Speaker', 'ioa:{reg}:rep:Tallier');
    worker($ctx, 'a36', crash_after => 36, claim_idle => 1, turn_timeout => 2);
    my $g3 = launch(goal => 'Count the words in "f g".', team_member_names => [qw(Speaker Tallier)]);
    ok drive(agents => $ag, how => { Speaker => 'fail' }, secs => 10,
             until => sub { reap_dead(); !grep { $Workers{$_}{name} eq 'a36' } keys %Workers }),
       'the worker died after step 36' or diag worker_logs($ctx);
    worker($ctx, 'b36', claim_idle => 1, turn_timeout => 2);
    ok drive(agents => $ag, how => { Speaker => 'fail' }, secs => 15,
             until => sub { state_of($g3) eq 'concluded' }),
       'concluded by the second' or diag worker_logs($ctx);
    my @steps = coordinator_steps(room(meta($g3)->{comm_id}));
    is scalar(grep { $_ == 36 } @steps), 1, 'the question once';
    is scalar(grep { $_ == 40 } @steps), 1, 'the decision once';
    like meta($g3)->{conclusion}, qr/\n1 of 1 part done\./, 'done by the re-route';
    stop_workers();

    # cancel while the question waits for its answer
    redis_cmd('DEL', 'ioa:{reg}:rep:Speaker', 'ioa:{reg}:rep:Tallier');
    worker($ctx, 'w3', turn_timeout => 5);
    my $g4 = launch(goal => 'Count the words in "h i".', team_member_names => [qw(Speaker Tallier)]);
    ok drive(agents => $ag, how => { Speaker => 'fail_mute' }, secs => 15,
             until => sub { grep { ($_->{ioa_step} // 0) == 36 } room(meta($g4)->{comm_id} // 'none') }),
       'the question is out' or diag worker_logs($ctx);
    my $t0c = time;
    my ($code) = api($ctx, POST => "/goals/$g4/cancel");
    is $code, 202, 'cancel accepted';
    ok drive(agents => $ag, how => { Speaker => 'fail_mute' }, secs => 10,
             until => sub { state_of($g4) eq 'cancelled' }),
       'cancelled' or diag worker_logs($ctx);
    ok time - $t0c < 3, 'without waiting for the answer';
    is_deeply [(coordinator_steps(room(meta($g4)->{comm_id})))[-1]], [41],
        'only the CONCLUSION follows';
    is_deeply stop_workers(), { w3 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]


=== TEST 16: the goal's deadline ends the loop wherever it is, and the account says so
The deadline is deadline_s, within --goal-timeout.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = demo_agents($ctx);
    worker($ctx, 'w1', task_timeout => 60);
    my $t0 = time;
    my $gid = launch(goal => 'Count the words in "a b". Shout "hi".', deadline_s => 2);
    ok drive(agents => $ag, how => { Counter => 'silent' }, secs => 15,
             until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my $took = time - $t0;
    ok $took >= 1.9 && $took < 6, "at the deadline, not the task timeout (${took}s)";
    my $m = meta($gid);
    is $m->{ended}, 'deadline', 'ended: deadline';
    like $m->{conclusion}, qr/^Concluded at the goal's deadline \(2 s\)\.\n.*\n1 of 2 parts done\./s,
        'the conclusion says which bound, and what was done';
    my ($c) = grep { $_->{type} == 10 } room($m->{comm_id});
    is $c->{ioa_decision}{bound}, 'deadline', 'the conclude names the bound';
    stop_workers();

    # --goal-timeout caps every goal, shorter deadlines stay shorter
    worker($ctx, 'w2', task_timeout => 60, args => ['--goal-timeout', 1]);
    my $g2 = launch(goal => 'Count the words in "c d".', deadline_s => 30);
    ok drive(agents => $ag, how => { Counter => 'silent' }, secs => 10,
             until => sub { state_of($g2) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    like meta($g2)->{conclusion}, qr/^Concluded at the goal's deadline \(1 s\)/, '--goal-timeout 1 wins';

    # the hub checks the field
    my ($code, $d) = api($ctx, POST => '/launch_goal', { goal => 'x', deadline_s => 0 });
    is "$code $d->{field}", '400 deadline_s', 'deadline_s 0: 400 naming the field';
    is_deeply stop_workers(), { w2 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]


=== TEST 17: a goal cancelled after its worker died at any step ends with only a CONCLUSION
Cancel at each new step: the worker dies right after posting it, the goal is
cancelled, and the successor ends it with only the CONCLUSION of that round.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $ag = demo_agents($ctx, Speaker => ['counts the words in a text', 1],
                         Tallier => 'counts the words in a text');
    # the whole path: 1 plan, 3 for Tallier, 10 assign, 11 pause, 36 the
    # question to Speaker (who failed), 40 the re-route, 110 and 111 round 2
    for my $step (1, 10, 36, 40, 110) {
        redis_cmd('DEL', 'ioa:{reg}:rep:Speaker', 'ioa:{reg}:rep:Tallier');
        worker($ctx, "a$step", crash_after => $step, claim_idle => 1, turn_timeout => 2);
        my $gid = launch(goal => 'Count the words in "x y".', team_member_names => [qw(Speaker Tallier)]);
        ok drive(agents => $ag, how => { Speaker => 'fail', Tallier => 'hold' }, secs => 15,
                 until => sub { reap_dead(); !grep { $Workers{$_}{name} eq "a$step" } keys %Workers }),
           "step $step: the worker died right after posting it" or diag worker_logs($ctx);
        my ($code) = api($ctx, POST => "/goals/$gid/cancel");
        is $code, 202, "step $step: cancel accepted";
        worker($ctx, "b$step", claim_idle => 1, turn_timeout => 2);
        ok drive(agents => $ag, how => { Speaker => 'fail', Tallier => 'hold' }, secs => 15,
                 until => sub { state_of($gid) eq 'cancelled' }),
           "step $step: cancelled by the successor" or diag worker_logs($ctx);
        my @steps = coordinator_steps(room(meta($gid)->{comm_id}));
        my $end = $step >= 40 ? 141 : 41;    # the decision opened round 2
        is $steps[-1], $end, "step $step: the CONCLUSION (step $end) ends it";
        is $steps[-2], $step, "step $step: right after the step it died at";
        my %seen;
        ok !grep({ $seen{$_}++ } @steps), "step $step: no step twice";
        like meta($gid)->{conclusion}, qr/^The goal was cancelled before it was achieved\./,
            "step $step: the conclusion says so";
        @Held = ();
        stop_workers();
    }
--- no_error_log
[alert]
[crit]
[emerg]


=== TEST 18: the goal's person is a member of its room, reading and posting like any member
It reads the room over WebSocket or SSE and posts into it like any member; a
request becomes work, the command "stop" ends the goal; floor control still
holds; a continued room's team leaves the person out.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    @Held = ();
    my $ag = demo_agents($ctx);
    my $ann = IoaTest::Agent->connect($ctx, 'Ann');
    ok $ann->ok, 'Ann, who is no agent of the network, is connected' or diag $ann->error;
    worker($ctx, 'w1', task_timeout => 60);

    my $gid = launch(goal => 'Count the words in "a b c".', _person => 'Ann');
    ok drive(agents => $ag, how => { Counter => 'hold' }, until => sub { @Held }),
       'Counter has its task' or diag worker_logs($ctx);
    my $cid = meta($gid)->{comm_id};
    ok redis_cmd('SISMEMBER', "ioa:{room:$cid}:members", 'Ann'), 'Ann is a member of the room';
    is redis_cmd('HGET', "ioa:{room:$cid}:meta", 'person'), 'Ann', '... marked as its person';
    ok redis_cmd('SISMEMBER', 'ioa:{reg}:rooms:Ann', $cid), '... and the room is in her room set';
    my ($plan) = $ann->recv_until(sub { ($_->{type} // -1) == 6 }, 5);
    ok $plan, 'she reads the room live, up to the assignment' or diag explain $plan;
    is $plan->{comm_id}, $cid, '... of this room';
    ok !grep({ $_ eq 'Ann' } map { names_in($_->{next_speaker}) } room($cid)), 'nobody gives her a turn or a task';

    # a turn out of the floor is refused, as for any member
    $ann->post(envelope(comm_id => $cid, sender => 'Ann', type => 4, content => 'my turn?',
                        next_speaker => ['Counter']));
    my ($err) = $ann->recv_until(sub { ($_->{op} // '') eq 'error' }, 5);
    is $err && $err->{code}, 'not_your_turn', 'a DISCUSSION of hers out of turn: not_your_turn';

    # a plain message is hers to send at any time: a request
    $ann->post(envelope(comm_id => $cid, sender => 'Ann', drop => ['type'],
                        content => 'Also shout "hello there"'));
    ok wait_until(sub { grep { ($_->{sender} // '') eq 'Ann' } room($cid) }, 5), 'her message is in the room';
    ok wait_until(sub { (fsm($gid)->{requests} // '') =~ /hello there/ }, 5),
       'the coordinator keeps it for the review, saved with its read position' or diag worker_logs($ctx);
    release();
    ok drive(agents => $ag, until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my @env = room($cid);
    my ($dec) = decisions(grep { ($_->{type} // -1) == 4 } @env);
    like $dec->{ioa_decision}{reason}, qr/^Ann asked: "Also shout "hello there""; part 2 goes to Shouter$/,
        'the decision quotes her and says who takes it';
    my @assign = grep { ($_->{type} // -1) == 6 } @env;
    is $assign[1]{tasks}{Shouter}{task_desc}, 'shout "hello there"', 'round 2: her request, for Shouter';
    like meta($gid)->{conclusion}, qr/\n2 of 2 parts done\./, 'the conclusion accounts for it';
    my ($last) = $ann->recv_until(sub { ($_->{type} // -1) == 11 }, 5);
    ok $last, 'she reads the CONCLUSION too';

    # the HTTP transport: she follows over SSE and says stop
    my $sse = IoaTest::SSE->connect($ctx->host, $ctx->port, '/agents/Ann/inbox');
    ok $sse->ok, 'her inbox (SSE) is open' or diag $sse->error;
    my $t0 = time;
    my $g2 = launch(goal => 'Count the words in "d e f".', _person => 'Ann');
    ok drive(agents => $ag, how => { Counter => 'silent' },
             until => sub { grep { $_->{type} == 6 } room(meta($g2)->{comm_id} // 'none') }),
       'assigned' or diag worker_logs($ctx);
    my $c2 = meta($g2)->{comm_id};
    my @got;
    wait_until(sub { push @got, grep { defined } map { eval { json()->decode($_->{data}) } } $sse->messages(1, 0.2);
                     grep { ($_->{type} // -1) == 6 && $_->{comm_id} eq $c2 } @got }, 5);
    ok scalar(grep { ($_->{type} // -1) == 6 && $_->{comm_id} eq $c2 } @got), 'the assignment reaches her over SSE';
    my ($code, $d) = api($ctx, POST => '/agents/Ann/messages',
                         { sender => 'Ann', comm_id => $c2, content => 'Stop' });
    is $code, 200, 'she posts over HTTP' or diag explain $d;
    ok drive(agents => $ag, how => { Counter => 'silent' }, secs => 10,
             until => sub { state_of($g2) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    ok time - $t0 < 10, 'long before the task timeout';
    my $m = meta($g2);
    is $m->{ended}, 'person', 'ended: person';
    like $m->{conclusion}, qr/^Concluded when asked to \(Ann: Stop\)\.\n.*\n0 of 1 part done\./s,
        'the conclusion says who stopped it, and claims nothing';
    is_deeply [ coordinator_steps(room($c2)) ], [ usual_steps(1) ], 'one CONCLUDE and one CONCLUSION, no step twice';
    $sse->close;

    # someone else is no member
    my $bob = IoaTest::Agent->connect($ctx, 'Bob');
    $bob->post(envelope(comm_id => $c2, sender => 'Bob', drop => ['type'], content => 'stop'));
    ($err) = $bob->recv_until(sub { ($_->{op} // '') eq 'error' }, 5);
    is $err && $err->{code}, 'not_member', 'a name outside the room: not_member';

    # a goal that continues her room: the team is the agents, not Ann
    my $g3 = launch(goal => 'Count the words in "g h".', comm_id => $cid);
    ok drive(agents => $ag, until => sub { state_of($g3) eq 'concluded' }),
       'the continued room concluded' or diag worker_logs($ctx);
    unlike fsm($g3)->{team}, qr/"Ann"/, 'its team leaves the person out';

    # a goal's room is its launcher's: another launcher does not continue it
    my $g4 = launch(goal => 'Count the words in "i j".', comm_id => $cid, _person => 'Bob', _admin => 0);
    ok wait_until(sub { state_of($g4) eq 'failed' }, 10), 'Bob\'s goal continuing Ann\'s room fails'
        or diag worker_logs($ctx);
    like meta($g4)->{error}, qr/room \Q$cid\E belongs to the goals of Ann; only that launcher or an administrator can continue it/,
        '... saying why';
    my $g5 = launch(goal => 'Count the words in "k l".', comm_id => $cid, _person => 'Ann', _admin => 0);
    ok drive(agents => $ag, until => sub { state_of($g5) eq 'concluded' }), 'Ann continues her own'
        or diag worker_logs($ctx);
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]


=== TEST 12: the goal suite gets every goal right, by the built-in planner and by the model
The suite is bench/goal.sh GOAL_SUITE=1, with its own hub and the example
agents, run by the built-in planner and by the scripted model; no goal claims
what it did not do.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $out = File::Temp::tempdir(CLEANUP => 1);
    local $ENV{BENCH_OUT} = $out;
    local $ENV{GOAL_SUITE} = 1;
    local $ENV{GOAL_SUITE_ROUNDS} = 1;
    local $ENV{GOAL_WORKERS} = 2;
    local $ENV{GOAL_WORKER_BIN} = $WorkerBin;
    local $ENV{GOAL_AGENT_BIN} = $ENV{IOA_AGENT_BIN} if $ENV{IOA_AGENT_BIN};
    my $log = `bash $Repo/bench/goal.sh 2>&1`;
    is $?, 0, 'bench/goal.sh GOAL_SUITE=1 exits 0' or diag $log;
    my $doc = eval { JSON::PP->new->decode(do { local (@ARGV, $/) = "$out/goal-suite.json"; <> }) };
    ok $doc, 'it wrote goal-suite.json' or diag $log;
    is $doc->{verdicts}{dishonest}, 0, 'no conclusion claims more than it shows';
    is $doc->{verdicts}{right}, $doc->{goals}, 'every goal right (impossible parts said so)'
        or diag join "\n", map { "$_->{verdict}: $_->{goal}\n$_->{conclusion}" }
                           grep { $_->{verdict} ne 'right' } @{ $doc->{rows} };

    # the same suite, every decision asked of the scripted model
    local $ENV{GOAL_SUITE_LLM} = 'scripted';
    $log = `bash $Repo/bench/goal.sh 2>&1`;
    is $?, 0, 'bench/goal.sh GOAL_SUITE=1 GOAL_SUITE_LLM=scripted exits 0' or diag $log;
    $doc = eval { JSON::PP->new->decode(do { local (@ARGV, $/) = "$out/goal-suite-llm.json"; <> }) };
    ok $doc, 'it wrote goal-suite-llm.json' or diag $log;
    is $doc->{planner}, 'scripted LLM', 'planned by the model';
    ok $doc->{llm_calls}{plan} && $doc->{llm_calls}{review} && $doc->{llm_calls}{conclusion},
       'the model was asked for plans, reviews and conclusions' or diag explain $doc->{llm_calls};
    is $doc->{verdicts}{dishonest}, 0, 'with the model too, no conclusion claims more than it shows';
    is $doc->{verdicts}{right}, $doc->{goals}, 'every goal right'
        or diag join "\n", map { "$_->{verdict}: $_->{goal}\n$_->{conclusion}" }
                           grep { $_->{verdict} ne 'right' } @{ $doc->{rows} };
    my ($hi) = grep { $_->{goal} =~ /^Shout "hi" and translate/ } @{ $doc->{rows} };
    like $hi->{conclusion}, qr/^The team's answer: HI!\.\n\nGoal: .*\n1 of 2 parts done\..*\n2\. Translate the text into French\n   Not done: no member of the team translates\.$/s,
        'the model\'s answer first, then the account, with the part it said nobody can do';
--- no_error_log
[alert]
[crit]
[emerg]
