# t/245-metrics-redis.t -- the part of /metrics that comes from Redis: the
# hub's goals by state (the goal index, P{goals}:...) and each ioa-worker's
# heartbeat and counters (P{workers}:...); and GET /goals, the listing the
# same index answers.
#
# Goals are launched through nginx (POST /launch_goal), run by real
# ioa-worker processes (the built-in planner, or a scripted LLM), and the
# scrape is read with Prometheus' own text parser (t/lib/prom-parse.py,
# Debian's python3-prometheus-client).  Every expected value is what the
# block itself caused: so many goals launched, concluded, failed and
# cancelled, so many tasks, decisions and LLM requests.  Workers write
# their counters about once a second, so a scrape is polled until it shows
# them (never a bound on how fast).
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/245-metrics-redis.t
#   TEST_IOA_REDIS=cluster ...     (the same on a 3-master Redis Cluster)

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
        Test::More::plan(skip_all => "$bin is not built; run `make` first");
    }
    if (!-x '/usr/bin/python3'
        || system('/usr/bin/python3 -c "import prometheus_client" 2>/dev/null') != 0)
    {
        require Test::More;
        Test::More::plan(skip_all => 'python3-prometheus-client is needed');
    }
}

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Api;
use IoaTest::Agent qw(wait_health json);
use IoaTest::Goals;
use IoaTest::JWT;
use IoaTest::Metrics;
use IoaTest::ScriptedLLM;
use File::Temp ();
use JSON::PP ();
use Time::HiRes qw(sleep time);

no_root_location();
no_shuffle();
log_level('info');

our $KEYDIR = File::Temp::tempdir('ioa-245-XXXXXX', TMPDIR => 1, CLEANUP => 1);
our $K = jwt_keys($KEYDIR);
$ENV{TEST_NGINX_KEYS} = $KEYDIR;

sub tok {
    my ($sub, $scope) = @_;
    return jwt($K, 'HS256', { sub => $sub, scope => $scope, exp => time + 300 });
}

# polls the scrape until $want->($v) holds (or 15 s pass); the last scrape
sub scrape_until {
    my ($ctx, $want) = @_;
    my ($v, $t, $text);
    wait_until(sub { ($v, $t, $text) = scrape($ctx); $want->($v) }, 15);
    return ($v, $t, $text);
}

sub post_goal {
    my ($ctx, $body, @h) = @_;
    my ($code, $d) = api($ctx, POST => '/launch_goal', $body,
                         @h ? (headers => [@h]) : ());
    die "launch_goal: $code\n" unless $code == 202;
    sleep 0.005;            # the next goal is launched a millisecond later
    return $d->{goal_id};
}

sub goals {
    my ($ctx, $query, @h) = @_;
    return api($ctx, GET => "/goals$query", undef, @h ? (headers => [@h]) : ());
}

sub ids { [ map { $_->{goal_id} } @{ $_[0]{goals} } ] }

sub show { $_[2]->status_line . "\n" . $_[2]->content }

run_tests();

__DATA__

=== TEST 1: goal states and worker counters in the scrape agree with what happened
goals by state and a worker's counters: launched, cancelled, run to their end
by the built-in planner; the index, GET /goals and the scrape agree with what
happened, and a killed worker goes down.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx,
        Poet       => 'writes poems and short verses on any topic',
        Translator => 'translates texts between English and French');
    my $ag = connect_agents($ctx, qw(Poet Translator));

    # four goals before any worker runs: two to conclude, one to fail (an
    # unknown team member), one cancelled while queued
    my $g1 = post_goal($ctx, { goal => 'Write a short poem about the sea.' });
    my $g2 = post_goal($ctx, { goal => 'Translate the text into French.' });
    my $g3 = post_goal($ctx, { goal => 'Do it.', team_member_names => ['Nobody'] });
    my $g4 = post_goal($ctx, { goal => 'Write a poem about the moon.' });
    my ($code, $d) = api($ctx, POST => "/goals/$g4/cancel");
    is $code, 202, 'the fourth goal is cancelled while queued';

    ok wait_until(sub {
        my (undef, $l) = goals($ctx, '');
        ($l->{counts}{queued} // 0) == 3 && ($l->{counts}{cancelling} // 0) == 1
    }, 10), 'the index: 3 queued, 1 cancelling';
    ($code, $d) = goals($ctx, '');
    is $code, 200, 'GET /goals';
    is_deeply ids($d), [$g4, $g3, $g2, $g1], 'newest first';
    is_deeply [map { $_->{state} } @{ $d->{goals} }],
        [qw(cancelling queued queued queued)], 'with their states';
    is $d->{goals}[3]{goal}, 'Write a short poem about the sea.', 'and their text';
    like $d->{goals}[3]{created_at}, qr/^\d{13}$/, 'created_at in ms';
    is $d->{goals}[3]{created_at}, meta($g1)->{created_at}, 'as the record has it';
    ok !defined $d->{next}, 'one page';

    my ($v, $types) = scrape_until($ctx, sub { ($_[0]{ioa_goals}{'state=queued'} // -1) == 3 });
    is $types->{ioa_goals}, 'gauge', 'ioa_goals is a gauge';
    is $v->{ioa_goals}{'state=queued'}, 3, 'ioa_goals{state="queued"} 3';
    is $v->{ioa_goals}{'state=cancelling'}, 1, 'ioa_goals{state="cancelling"} 1';
    is $v->{ioa_goals}{'state=concluded'}, 0, 'a state without goals is 0, not absent';

    my $w = worker($ctx, 'w1');
    ok drive(agents => $ag, secs => 30, until => sub {
            state_of($g1) eq 'concluded' && state_of($g2) eq 'concluded'
            && state_of($g3) eq 'failed' && state_of($g4) eq 'cancelled' }),
       'two goals concluded, one failed, one cancelled' or diag worker_logs($ctx);

    ok wait_until(sub {
        my (undef, $l) = goals($ctx, '');
        join(',', map { $_->{state} } @{ $l->{goals} }) eq 'cancelled,failed,concluded,concluded'
    }, 10), 'the index follows the records' or diag show(goals($ctx, ''));
    ($code, $d) = goals($ctx, '');
    is_deeply $d->{counts}, { queued => 0, forming => 0, running => 0, cancelling => 0,
                              concluded => 2, failed => 1, cancelled => 1 },
        'counts: every state, the ended ones counted';
    cmp_ok $d->{goals}[0]{updated_at}, '>=', $d->{goals}[0]{created_at}, 'updated_at';

    ($code, $d) = goals($ctx, '?state=concluded');
    is_deeply ids($d), [$g2, $g1], '?state=concluded: those two, newest first';
    ($code, $d) = goals($ctx, '?state=running');
    is_deeply ids($d), [], '?state=running: none';

    # pages of one, followed by "next"
    my (@seen, $before, $pages);
    while (++$pages <= 10) {
        ($code, $d) = goals($ctx, '?limit=1' . ($before ? "&before=$before" : ''));
        is $code, 200, "page $pages";
        push @seen, @{ ids($d) };
        last unless defined $d->{next};
        $before = $d->{next};
    }
    is_deeply \@seen, [$g4, $g3, $g2, $g1], 'the pages of one hold every goal once, in order';
    is $pages, 4, 'and the fourth says there is no next';
    ($code, $d) = goals($ctx, "?limit=2&state=concluded&before=$g4");
    is_deeply ids($d), [$g2, $g1], 'a cursor from another listing works with a filter';

    # the worker's own counters, as the scrape shows them
    ($v, $types) = scrape_until($ctx, sub {
        ($_[0]{ioa_worker_goals_total}{'state=concluded,worker=w1'} // 0) == 2
        && ($_[0]{ioa_worker_goals_total}{'state=cancelled,worker=w1'} // 0) == 1 });
    is $v->{ioa_goals}{'state=concluded'}, 2, 'ioa_goals{state="concluded"} 2';
    is $v->{ioa_goals}{'state=failed'}, 1, 'ioa_goals{state="failed"} 1';
    is $v->{ioa_goals}{'state=cancelled'}, 1, 'ioa_goals{state="cancelled"} 1';
    is $v->{ioa_goals}{'state=queued'}, 0, 'none queued';
    is $v->{ioa_worker_up}{'worker=w1'}, 1, 'ioa_worker_up{worker="w1"} 1';
    is $types->{ioa_worker_goals}, 'counter', 'the worker\'s families are counters';
    is $v->{ioa_worker_goals_total}{'state=concluded,worker=w1'}, 2, 'goals concluded: 2';
    is $v->{ioa_worker_goals_total}{'state=failed,worker=w1'}, 1, 'failed: 1';
    is $v->{ioa_worker_goals_total}{'state=cancelled,worker=w1'}, 1, 'cancelled: 1';
    is $v->{ioa_worker_tasks_total}{'outcome=completed,worker=w1'}, 2,
        'tasks completed: one per concluded goal';
    is $v->{ioa_worker_decisions_total}{'by=rule,kind=conclude,worker=w1'}, 2,
        'decisions: a conclude by rule after each concluded goal\'s round';
    is scalar(grep { !/kind=conclude/ } keys %{ $v->{ioa_worker_decisions_total} // {} }), 0,
        'and no other decision';
    is $v->{ioa_worker_llm_calls_total}{'worker=w1'}, 0, 'no LLM call';
    is $types->{ioa_worker_goals_in_flight}, 'gauge', 'goals in flight: a gauge';
    is $v->{ioa_worker_goals_in_flight}{'worker=w1'}, 0, 'none in flight, every goal ended';
    is $v->{ioa_worker_llm_in_flight}{'worker=w1'}, 0, 'no LLM request in flight';
    is $v->{ioa_worker_info}{'planner=builtin,worker=w1'}, 1, 'the built-in planner';
    is $v->{ioa_workers_known}{''}, 1, 'one worker known';
    my $beat = $v->{ioa_worker_heartbeat_timestamp_seconds}{'worker=w1'};
    cmp_ok abs($beat - redis_cmd('TIME')->[0]), '<', 60, 'the heartbeat is a Unix time, by Redis\' clock';
    cmp_ok $v->{ioa_worker_start_time_seconds}{'worker=w1'}, '<=', $beat + 1, 'started before it';

    # the Grafana dashboard (conf.d/grafana) draws series this scrape has,
    # grouped by labels they carry
    my $dash = JSON::PP->new->decode(do {
        open my $fh, '<', 'conf.d/grafana/ioa-dashboard.json' or die "dashboard: $!\n";
        local $/; <$fh> });
    my @problems;
    for my $expr (map { $_->{expr} } map { @{ $_->{targets} } } @{ $dash->{panels} }) {
        my @by = map { split /,\s*/ } $expr =~ /\bby \(([^)]*)\)/g;
        for my $name ($expr =~ /\b(ioa_[a-z_]+)/g) {
            (my $family = $name) =~ s/_(?:total|bucket)$//;
            my $samples = $v->{$name} // {};
            if (!%$samples) {
                # counted once something happens (a Redis error): declared
                push @problems, "$name: not in the scrape" unless $types->{$family};
                next;
            }
            for my $label (@by) {
                push @problems, "$name has no label $label"
                    unless grep { /(?:^|,)\Q$label\E=/ } keys %$samples;
            }
        }
    }
    is_deeply \@problems, [], 'every series of the Grafana dashboard is in the scrape, with its labels';

    # kill -9: no last word, the heartbeat grows old
    kill9($w);
    ($v) = scrape_until($ctx, sub { ($_[0]{ioa_worker_up}{'worker=w1'} // 1) == 0 });
    is $v->{ioa_worker_up}{'worker=w1'}, 0, 'killed: ioa_worker_up 0 once its heartbeat is old';
    is $v->{ioa_worker_goals_total}{'state=concluded,worker=w1'}, 2, 'its counters stay readable';

    # SIGTERM: the last beat says it stopped
    worker($ctx, 'w2');
    ($v) = scrape_until($ctx, sub { ($_[0]{ioa_worker_up}{'worker=w2'} // 0) == 1 });
    is $v->{ioa_worker_up}{'worker=w2'}, 1, 'a second worker is up';
    is stop_workers()->{w2}, 0, 'it exits 0 on SIGTERM';
    ($v) = scrape($ctx);
    is $v->{ioa_worker_up}{'worker=w2'}, 0, 'stopped: down at once, by its last beat';
    is $v->{ioa_workers_known}{''}, 2, 'two workers known';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: GET /goals lists a launch token's own goals and every goal for an admin
GET /goals: a launch token lists its own goals (as GET /goals/{id} lets it
read them), an admin every goal and the counts; bad parameters are 400.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my @ops = (Authorization => 'Bearer ' . tok('ops', 'launch'));
    my @dev = (Authorization => 'Bearer ' . tok('dev', 'launch'));
    my @adm = (Authorization => 'Bearer ' . tok('root', 'admin launch'));
    my @agt = (Authorization => 'Bearer ' . tok('Alice', 'agent'));
    my $o1 = post_goal($ctx, { goal => 'first of ops' }, @ops);
    my $d1 = post_goal($ctx, { goal => 'first of dev' }, @dev);
    my $o2 = post_goal($ctx, { goal => 'second of ops' }, @ops);

    ok wait_until(sub { my (undef, $l) = goals($ctx, '', @adm); @{ $l->{goals} // [] } == 3 }, 10),
        'the admin sees three goals' or diag show(goals($ctx, '', @adm));
    my ($code, $d) = goals($ctx, '', @adm);
    is_deeply ids($d), [$o2, $d1, $o1], 'every goal, newest first';
    is $d->{counts}{queued}, 3, 'and the counts';
    is $d->{goals}[0]{launched_by}, 'ops', 'launched_by';

    ($code, $d) = goals($ctx, '', @ops);
    is $code, 200, 'a launch token may list';
    is_deeply ids($d), [$o2, $o1], 'its own goals only';
    ok !exists $d->{counts}, 'without the hub\'s counts';
    ($code, $d) = goals($ctx, '?limit=1', @ops);
    is_deeply ids($d), [$o2], 'its pages';
    ($code, $d) = goals($ctx, "?limit=1&before=$d->{next}", @ops);
    is_deeply ids($d), [$o1], 'follow its own goals';
    ($code, $d) = goals($ctx, '?state=queued', @dev);
    is_deeply ids($d), [$d1], 'dev: its one goal, with a state filter';
    ($code) = api($ctx, GET => "/goals/$o1", undef, headers => [@dev]);
    is $code, 404, 'as GET /goals/{id}: another launcher\'s goal is not there for dev';

    ($code, $d) = goals($ctx, '', @agt);
    is $code, 403, 'an agent token may not list goals';
    ($code, $d) = goals($ctx, '');
    is $code, 401, 'nor may a request without a token';

    for my $q ('?state=done', '?limit=0', '?limit=101', '?limit=x', '?before=xyz',
               '?before=' . ('A' x 32)) {
        ($code, $d) = goals($ctx, $q, @adm);
        is "$code $d->{code}", '400 invalid_request', "$q: 400";
    }
    ($code, $d) = goals($ctx, '?before=' . ('0' x 32), @adm);
    is "$code $d->{field}", '400 before', 'a cursor that names no goal of the index: 400';
    ($code) = api($ctx, POST => '/goals', '{}', headers => [@adm]);
    is $code, 405, 'POST /goals: 405';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3: ended goals leave the index and ioa_goals as their records expire
ended goals leave the index, and ioa_goals, as their records expire
(--goal-retention).
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    fresh($ctx);
    worker($ctx, 'w1', args => ['--goal-retention', 1]);
    my $g = post_goal($ctx, { goal => 'Do it.', team_member_names => ['Nobody'] });
    ok wait_until(sub { state_of($g) eq 'failed' }, 15), 'the goal failed'
        or diag worker_logs($ctx);
    ok wait_until(sub { my (undef, $l) = goals($ctx, ''); @{ $l->{goals} // [1] } == 0 }, 15),
        'a second after it ended, it is no longer listed';
    my ($code, $d) = goals($ctx, '');
    is $d->{counts}{failed}, 0, 'nor counted';
    # the worker's counters reach Redis with its next heartbeat (once a
    # second), which may come after the record's expiry
    my ($v) = scrape_until($ctx, sub {
        ($_[0]{ioa_worker_goals_total}{'state=failed,worker=w1'} // 0) == 1 });
    is $v->{ioa_goals}{'state=failed'}, 0, 'ioa_goals{state="failed"} 0';
    is $v->{ioa_worker_goals_total}{'state=failed,worker=w1'}, 1,
        'the worker\'s counter keeps it' or diag(explain($v));
    is_deeply redis_cmd('KEYS', 'ioa:{goals}:g:*'), [], 'its index entry is gone';
    ok !redis_cmd('EXISTS', "ioa:{goal:$g}:meta")
       || redis_cmd('PTTL', "ioa:{goal:$g}:meta") <= 1000, 'as its record expires';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 4: LLM counters equal what the scripted model served
LLM counters: calls, requests, retries and tokens equal what the scripted
model served.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Poet => 'writes poems and short verses on any topic');
    my $ag = connect_agents($ctx, qw(Poet));
    # the first request fails (a 503, retried), every other answer is an
    # empty object: the planner falls back to its own rules, and each
    # answer reports 10 prompt and 5 completion tokens
    my $llm = scripted_llm(sub {
        our $served;
        return { status => 503, body => '{"error":"busy"}' } if !$served++;
        return '{}';
    });
    worker($ctx, 'w1', env => { IOA_LLM_BASE_URL => $llm->{url},
                                IOA_LLM_MAX_ATTEMPTS => 2 });
    my $g = post_goal($ctx, { goal => 'Write a short poem about the sea.',
                              team_member_names => ['Poet'] });
    ok drive(agents => $ag, secs => 30, until => sub { state_of($g) eq 'concluded' }),
       'the goal concluded' or diag worker_logs($ctx);
    my $n = () = scripted_requests($llm);
    cmp_ok $n, '>=', 2, "the model was asked ($n requests)";
    my ($v, $types) = scrape_until($ctx, sub {
        ($_[0]{ioa_worker_llm_requests_total}{'worker=w1'} // 0) == $n });
    is $types->{ioa_worker_llm_in_flight}, 'gauge', 'LLM requests in flight: a gauge';
    is $v->{ioa_worker_llm_in_flight}{'worker=w1'}, 0, 'none now';
    is $v->{ioa_worker_llm_queued}{'worker=w1'}, 0, 'none waiting for a slot';
    is $v->{ioa_worker_llm_breaker_open}{'worker=w1'}, 0, 'the breaker is closed';
    is $v->{ioa_worker_llm_breaker_trips_total}{'worker=w1'}, 0, 'it never opened (one 503)';
    is $v->{ioa_worker_llm_requests_total}{'worker=w1'}, $n, 'requests: every one the model served';
    is $v->{ioa_worker_retries_total}{'what=llm,worker=w1'}, 1, 'one request sent again';
    is $v->{ioa_worker_llm_calls_total}{'worker=w1'}, $n - 1, 'calls: the requests but the retried one';
    is $v->{ioa_worker_llm_failures_total}{'worker=w1'}, 0, 'each call got an answer';
    is $v->{ioa_worker_llm_tokens_total}{'type=prompt,worker=w1'}, 10 * ($n - 1),
        'prompt tokens: 10 per answer';
    is $v->{ioa_worker_llm_tokens_total}{'type=completion,worker=w1'}, 5 * ($n - 1),
        'completion tokens: 5 per answer';
    is $v->{ioa_worker_info}{'planner=llm,worker=w1'}, 1, 'the LLM planner';
    is meta($g)->{tokens}, 15 * ($n - 1), 'the goal\'s own record counts the same tokens';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 5: with Redis unreachable the scrape still answers, without Redis's families
Redis unreachable: the scrape still answers, without the families Redis would
have given.
--- no_ready_wait
--- http_config
    ioa_redis 127.0.0.1:1;
--- config
    location = /metrics { ioa_metrics; }
--- request
GET /metrics
--- error_code: 200
--- response_body_like: # TYPE ioa_redis_up gauge\n.*ioa_discovery_queries_total
--- response_body_unlike: ioa_goals|ioa_worker
