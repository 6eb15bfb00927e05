# t/103-reputation.t -- reputation as a gradient (workers/worker/registry.c:
# iw_reg_rank; decide.c: iw_decide_verdict): an agent's record is the
# coordinator's verdicts, it weighs in every ranking against the match, a
# newcomer gets its documented share of the work, and the model planner
# reads every candidate's record.  Real nginx + module + Redis, a real
# ioa-worker, agents played in the scenario (IoaTest::Goals::drive), the
# model played by the scripted OpenAI-compatible server.
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/103-reputation.t

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
use JSON::PP ();

no_root_location();
no_shuffle();
log_level('info');

# FNV-1a, as iw_reg_hash: which goals let a newcomer go first
sub fnv {
    my $h = 2166136261;
    $h = (($h ^ ord $_) * 16777619) % 4294967296 for split //, shift;
    return $h;
}

# the agent each goal's first assignment went to
sub first_assignee {
    my ($gid) = @_;
    my ($a) = grep { $_->{type} == 6 } room(meta($gid)->{comm_id});
    return join ',', sort keys %{ $a->{tasks} };
}

# the BM25 match of each agent for a capability
sub matches {
    my ($ctx, $cap) = @_;
    my (undef, $d) = api($ctx, POST => '/retrieve_assistant',
                         { sender => 'Zed', capabilities => [$cap] });
    return { map { $_->{name} => $_->{score} } @$d };
}

# runs goals $n at a time until every one concluded; returns their ids
sub run_goals {
    my ($ag, $how, $n, @goals) = @_;
    my @ids;
    while (my @batch = splice @goals, 0, $n) {
        my @g = map { launch(goal => $_) } @batch;
        drive(agents => $ag, how => $how, secs => 30,
              until => sub { !grep { state_of($_) ne 'concluded' } @g })
            or return;
        push @ids, @g;
    }
    return @ids;
}

run_tests();

__DATA__

=== TEST 1: over 50 goals a flaky agent loses the work to a reliable one
The flaky agent has a slightly better description.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Flaky => 'tallies the words in a text',
                    Steady => 'tallies the words in a text or a note');
    my $ag = connect_agents($ctx, qw(Flaky Steady));
    my $m = matches($ctx, 'tally the words in a text');
    ok $m->{Flaky} > $m->{Steady} && $m->{Flaky} < 1.15 * $m->{Steady},
       "Flaky matches slightly better ($m->{Flaky} against $m->{Steady})";
    worker($ctx, 'w1');

    my @ids = run_goals($ag, { Flaky => 'fail' }, 5,
                        map { qq{Tally the words in "w$_ x$_".} } 1 .. 50);
    is scalar(@ids), 50, 'fifty goals concluded' or diag worker_logs($ctx);
    my %first;
    $first{ first_assignee($_) }++ for @ids;
    diag "first assignments: Steady $first{Steady}, Flaky " . ($first{Flaky} // 0);
    ok(($first{Steady} // 0) >= 40,
       "Steady gets the first assignment of most goals (Steady $first{Steady}, "
       . "Flaky " . ($first{Flaky} // 0) . ')');
    ok(($first{Flaky} // 0) <= 10, 'Flaky only while its record is young');
    ok !(grep { meta($_)->{conclusion} !~ /\n1 of 1 part done\./ } @ids),
       'every goal is done (a Flaky failure is re-routed to Steady)';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: a newcomer gets the first turn in 20% of the goals until it has 5 verdicts
The 20% is chosen by the hash of goal and part.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Veteran => 'counts the words in a text',
                    Rookie => 'counts the words in a text and in a letter');
    my $ag = connect_agents($ctx, qw(Veteran Rookie));
    # twenty accepted results of two seconds each: a proven record
    redis_cmd('HSET', 'ioa:{reg}:rep:Veteran', completed => 20,
              latency_ms => 40000, timed => 20);
    my $m = matches($ctx, 'count the words in a text');
    ok $m->{Rookie} < $m->{Veteran},
       "Rookie: a weaker match ($m->{Rookie} against $m->{Veteran})";
    worker($ctx, 'w1');

    my (@ids, @want, @got);
    my $verdicts = 0;
    for my $i (1 .. 30) {
        my ($gid) = run_goals($ag, {}, 1, qq{Count the words in "r$i s$i".});
        ok $gid, "goal $i concluded" or last;
        push @ids, $gid;
        # registry.c's IW_REP_NEWCOMER and IW_REP_EXPLORE
        my $turn = $verdicts < 5 && fnv("$gid:0") % 100 < 20;
        push @want, $turn ? 'Rookie' : 'Veteran';
        push @got, first_assignee($gid);
        $verdicts++ if $turn;
    }
    is_deeply \@got, \@want, 'each goal goes where the rule says';
    my $share = grep { $_ eq 'Rookie' } @got;
    diag "Rookie first in $share of 30 goals";
    ok $share >= 1, "the newcomer got its share: $share of 30";
    is redis_cmd('HGET', 'ioa:{reg}:rep:Rookie', 'completed') // 0, $share,
       'and earned a record with it';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3: an empty "completed" result gains nothing: rejected, re-routed, a failure
The agent reports "completed" with an empty result.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Hollow => 'tallies the words in a text',
                    Steady => 'tallies the words in a text or a note');
    my $ag = connect_agents($ctx, qw(Hollow Steady));
    worker($ctx, 'w1');
    my @ids = run_goals($ag, { Hollow => 'empty' }, 1,
                        'Tally the words in "one two".');
    is scalar(@ids), 1, 'concluded' or diag worker_logs($ctx);
    is first_assignee($ids[0]), 'Hollow', 'the better match goes first';
    my @assign = grep { $_->{type} == 6 } room(meta($ids[0])->{comm_id});
    is_deeply [map { keys %{ $_->{tasks} } } @assign], [qw(Hollow Steady)],
        'the review did not accept it: re-routed to Steady';
    like meta($ids[0])->{conclusion}, qr/\n1 of 1 part done\.\n.*\n   Steady: Steady did: /,
        'done by Steady';
    like worker_log($ctx, 'w1'), qr/\(Hollow\) reported completed with an empty result; rejected/,
        'the worker says why';
    is_deeply [map { redis_cmd('HGET', 'ioa:{reg}:rep:Hollow', $_) // 0 }
               qw(completed failed)], [0, 1],
        'Hollow: no success, one failure';
    my (undef, $d) = api($ctx, POST => '/query_assistant', { name => 'Hollow' });
    is_deeply [@{ $d->{record} }{qw(completed failed)}], [0, 1],
        'query_assistant shows a failure, no success';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 4: the model planner reads each candidate's verdicts, smoothed rate and mean time
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Flaky => 'tallies the words in a text',
                    Steady => 'tallies the words in a text or a note');
    my $ag = connect_agents($ctx, qw(Flaky Steady));
    redis_cmd('HSET', 'ioa:{reg}:rep:Steady', completed => 3, timed => 3,
              latency_ms => 3600);
    my $llm = scripted_llm(sub {
        my ($req) = @_;
        my $sys = $req->{messages}[0]{content} // '';
        my $user = $req->{messages}[1]{content} // '';
        return '{}' unless $sys =~ /Form a team/;
        return $user =~ /agent_discovery\(/
            ? '{"tool":"team_up","queries":[],"team_members":["Steady"]}'
            : '{"tool":"agent_discovery","queries":["tallies words"],"team_members":[]}';
    });
    worker($ctx, 'w1', env => { IOA_LLM_BASE_URL => $llm->{url}, IOA_LLM_MAX_ATTEMPTS => 1 });
    my ($gid) = run_goals($ag, {}, 1, 'Tally the words in "one two".');
    ok $gid, 'concluded' or diag worker_logs($ctx);
    my ($rq) = grep { ($_->{messages}[1]{content} // '') =~ /agent_discovery\(/ }
               scripted_requests($llm);
    my $user = $rq ? $rq->{messages}[1]{content} : '';
    like $user, qr/\n- Steady \(Thing Assistant\): [^\n]*\n  record: 3 tasks, 3 accepted, 0 partial, 0 failed, timed out or rejected; smoothed success rate 0\.80; mean time to result 1200 ms/,
        'Steady: its verdicts, (3 + 1) / (3 + 2), and its time';
    like $user, qr/\n- Flaky \(Thing Assistant\): [^\n]*\n  record: newcomer, no verdicts yet/,
        'Flaky: a newcomer';
    is first_assignee($gid), 'Steady', 'the model\'s team';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]
