# t/095-goal-api.t -- the goal endpoints on the nginx side: POST /launch_goal
# (IoA's fields, validated; 202 with where to follow; the job queued for the
# workers), GET /goals/{id}, the goal's event feed as SSE with exact resume,
# IoA's blocking form, and cancel; and make run's demo following a feed.
#
# These blocks play the worker themselves (writing the goal's state events
# to its feed exactly as ioa-worker does: XADD to P{room:goal-<id>}:log and
# PUBLISH "<id> <json>" on P{room:goal-<id>}:ch), so they prove the nginx
# side alone; t/100-goals.t runs real workers.
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/095-goal-api.t

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(wait_health json);
use IoaTest::SSE;
use File::Temp ();
use POSIX ();
use Time::HiRes qw(sleep time);

no_root_location();
log_level('info');

sub fresh {
    my $ctx = shift;
    $ctx->redis('FLUSHALL');
    wait_health($ctx);
}

sub launch {
    my ($ctx, $body, %opt) = @_;
    my $path = '/launch_goal' . ($opt{query} // '');
    return $ctx->http(POST => $path, body => $body,
                      headers => $opt{headers} // [], timeout => $opt{timeout} // 5);
}

# what ioa-worker does for every event of a goal
our $EMIT = q{
    local id = redis.call('XADD', KEYS[1], '*', 'e', ARGV[1])
    redis.call('PUBLISH', KEYS[2], id .. ' ' .. ARGV[1])
    return id
};

sub emit {
    my ($ctx, $gid, %ev) = @_;
    my $json = json()->encode({ %ev, goal_id => $gid });
    $json =~ s/^\{/{"sender":"ioa-worker","timestamp":1,/;
    return $ctx->redis('EVAL', $EMIT, 2, "ioa:{room:goal-$gid}:log",
                       "ioa:{room:goal-$gid}:ch", $json);
}

run_tests();

__DATA__

=== TEST 1: launch_goal answers 202 with the goal's URLs and stores its record and job
launch_goal: 202 with the goal id, Location and the follow/cancel URLs; the
goal's record and its job are in Redis for the workers.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $res = launch($ctx, '{"goal":"write a haiku","team_member_names":["Bob"],"team_up_depth":1,"max_turns":12,"skip_naming":true,"future_field":{"x":1}}');
    is $res->code, 202, '202 Accepted';
    my $doc = json()->decode($res->content);
    my $gid = $doc->{goal_id};
    like $gid, qr/^[0-9a-f]{32}$/, 'a goal id';
    is $doc->{state}, 'queued', 'queued';
    is $doc->{status_url}, "/goals/$gid", 'status_url';
    is $doc->{events_url}, "/goals/$gid/events", 'events_url';
    is $doc->{cancel_url}, "/goals/$gid/cancel", 'cancel_url';
    is $res->header('Location'), "/goals/$gid", 'Location';

    my %meta = @{ $ctx->redis('HGETALL', "ioa:{goal:$gid}:meta") };
    is $meta{state}, 'queued', 'meta: state';
    is $meta{goal}, 'write a haiku', 'meta: goal';
    is $meta{depth}, '1', 'meta: depth';
    my $req = json()->decode($meta{request});
    is $req->{max_turns}, 12, 'meta: the request, for the worker';
    is_deeply $req->{team_member_names}, ['Bob'], 'with team_member_names';
    is_deeply $req->{future_field}, { x => 1 }, 'unknown fields kept';

    my $jobs = $ctx->redis('XRANGE', 'ioa:{jobs}:goals', '-', '+');
    is scalar(@$jobs), 1, 'one job';
    is_deeply $jobs->[0][1], ['goal_id', $gid], 'naming the goal';
    my $groups = $ctx->redis('XINFO', 'GROUPS', 'ioa:{jobs}:goals');
    my %g = @{ $groups->[0] };
    is $g{name}, 'workers', 'the workers group exists';
    is $g{'last-delivered-id'}, '0-0', 'and will hand out every queued job';

    my $st = $ctx->http(GET => "/goals/$gid");
    is $st->code, 200, 'GET /goals/<id>';
    my $s = json()->decode($st->content);
    is $s->{state}, 'queued', 'state';
    is $s->{goal}, 'write a haiku', 'goal';
    ok !defined $s->{conclusion}, 'no conclusion yet';
    ok !defined $s->{launched_by}, 'open mode without "person": the goal has none';
    my $p = json()->decode(launch($ctx, '{"goal":"g","person":"Ann"}')->content);
    is $ctx->redis('HGET', "ioa:{goal:$p->{goal_id}}:meta", 'launched_by'), 'Ann',
        'open mode with "person": kept as launched_by, for the worker';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: launch_goal refuses bad requests with 400 naming the field, and stores nothing
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my @bad = (
        ['[]'                                              => undef],
        ['{}'                                              => 'goal'],
        ['{"goal":""}'                                     => 'goal'],
        ['{"goal":7}'                                      => 'goal'],
        ['{"goal":"g","team_member_names":"Bob"}'          => 'team_member_names'],
        ['{"goal":"g","team_member_names":["bad{name}"]}'  => 'team_member_names'],
        ['{"goal":"g","team_up_depth":-1}'                 => 'team_up_depth'],
        ['{"goal":"g","team_up_depth":"1"}'                => 'team_up_depth'],
        ['{"goal":"g","max_turns":0}'                      => 'max_turns'],
        ['{"goal":"g","comm_id":5}'                        => 'comm_id'],
        ['{"goal":"g","cont_input":{"sender":"u"}}'        => 'cont_input'],
        ['{"goal":"g","skip_naming":"yes"}'                => 'skip_naming'],
        ['{"goal":"g","is_collaborative_planning_enabled":1}' => 'is_collaborative_planning_enabled'],
        ['{"goal":"g","person":"bad\\nname"}'             => 'person'],
        ['{"goal":"g","person":["Ann"]}'                   => 'person'],
    );
    for my $case (@bad) {
        my ($body, $field) = @$case;
        my $res = launch($ctx, $body);
        is $res->code, 400, "$body: 400";
        my $e = json()->decode($res->content);
        is $e->{code}, 'invalid_request', "$body: invalid_request";
        is $e->{field}, $field, "$body: names " . ($field // 'no field');
    }
    is launch($ctx, '{"goal":')->code, 400, 'broken JSON: 400';
    is $ctx->redis('EXISTS', 'ioa:{jobs}:goals') && $ctx->redis('XLEN', 'ioa:{jobs}:goals'), 0,
        'no job was queued';
    is scalar(@{ $ctx->redis('KEYS', 'ioa:{goal:*') }), 0, 'no goal stored';
    is $ctx->http(GET => '/launch_goal')->code, 405, 'GET /launch_goal: 405';
    is $ctx->http(GET => '/goals/xyz')->code, 400, 'a malformed goal id: 400';
    my $nf = $ctx->http(GET => '/goals/' . ('0' x 32));
    is $nf->code, 404, 'an unknown goal: 404';
    like $nf->content, qr/"code":"unknown_goal"/, 'unknown_goal';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3: the goal's events as SSE come in order, with ids that Last-Event-ID resumes at
the goal's events as SSE: state changes and envelopes in order, each with the
feed position as its id, and exact resume with Last-Event-ID.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $gid = json()->decode(launch($ctx, '{"goal":"g"}')->content)->{goal_id};
    emit($ctx, $gid, event => 'state', state => 'forming');

    my $s = IoaTest::SSE->connect($ctx->host, $ctx->port, "/goals/$gid/events");
    ok $s->ok, 'stream open' or diag $s->error;
    like $s->header('Content-Type'), qr{^text/event-stream}, 'text/event-stream';
    my ($first) = $s->messages(1, 3);
    is json()->decode($first->{data})->{state}, 'forming', 'an event from before connecting';
    like $first->{id}, qr/^goal-$gid:\d+-\d+$/, 'its id is the feed position';

    emit($ctx, $gid, event => 'state', state => 'running', comm_id => 'c1');
    my ($second) = $s->messages(1, 3);
    is json()->decode($second->{data})->{state}, 'running', 'a live event';
    my $last = $s->last_id;
    $s->close;

    emit($ctx, $gid, event => 'envelope', envelope => { content => 'hi' });
    emit($ctx, $gid, event => 'state', state => 'concluded', comm_id => 'c1', conclusion => 'done');

    my $r = IoaTest::SSE->connect($ctx->host, $ctx->port, "/goals/$gid/events",
                                  headers => ['Last-Event-ID' => $last]);
    my @ev = map { json()->decode($_->{data}) } $r->messages(2, 3);
    is_deeply [ map { $_->{event} } @ev ], ['envelope', 'state'], 'exactly what was missed';
    is $ev[1]{conclusion}, 'done', 'up to the conclusion';
    ok !$r->messages(1, 0.5), 'nothing more';
    $r->close;
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 4: the blocking form answers [comm_id, conclusion] when the goal concludes
IoA's blocking form (?wait=1 and Prefer: wait) answers [comm_id, conclusion]
when the goal concludes, without polling; a failed goal answers 502
goal_failed.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);

    for my $form ('query', 'header') {
        # a child plays the worker: it waits for the job, then concludes
        my $pid = fork // die "fork: $!";
        if (!$pid) {
            my $deadline = time + 5;
            my $gid;
            while (time < $deadline) {
                my $jobs = eval { redis_cmd('XRANGE', 'ioa:{jobs}:goals', '-', '+') } || [];
                my @ids = map { $_->[1][1] } @$jobs;
                my @open = grep { (redis_cmd('HGET', "ioa:{goal:$_}:meta", 'state') // '') eq 'queued' } @ids;
                if (@open) { $gid = $open[0]; last }
                sleep 0.05;
            }
            if ($gid) {
                sleep 0.3;
                redis_cmd('HSET', "ioa:{goal:$gid}:meta", 'state', 'concluded');
                emit($ctx, $gid, event => 'state', state => 'running', comm_id => "room-$form");
                emit($ctx, $gid, event => 'state', state => 'concluded', comm_id => "room-$form",
                     conclusion => "the answer ($form)");
            }
            POSIX::_exit(0);
        }
        my $t0 = time;
        my $res = $form eq 'query'
            ? launch($ctx, '{"goal":"g"}', query => '?wait=1', timeout => 10)
            : launch($ctx, '{"goal":"g"}', headers => [Prefer => 'wait'], timeout => 10);
        waitpid $pid, 0;
        is $res->code, 200, "$form: 200 when the goal concluded";
        is_deeply json()->decode($res->content), ["room-$form", "the answer ($form)"],
            "$form: IoA's [comm_id, conclusion]";
        ok time - $t0 >= 0.3, "$form: it waited for the conclusion";
    }

    my $pid = fork // die;
    if (!$pid) {
        sleep 0.5;
        my $jobs = redis_cmd('XRANGE', 'ioa:{jobs}:goals', '-', '+');
        my $gid = $jobs->[-1][1][1];
        emit($ctx, $gid, event => 'state', state => 'failed', error => 'nobody online');
        POSIX::_exit(0);
    }
    my $res = launch($ctx, '{"goal":"g"}', query => '?wait=1', timeout => 10);
    waitpid $pid, 0;
    is $res->code, 502, 'a failed goal: 502';
    like $res->content, qr/"code":"goal_failed".*nobody online/, 'goal_failed with the reason';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 4b: with ioa_launch_goal_wait on, a plain POST /launch_goal waits for the conclusion
ioa_launch_goal_wait on: IoA's scripts get [comm_id, conclusion] from a plain
POST /launch_goal; ?wait=0 and Prefer: respond-async still get the 202.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_launch_goal_wait on; }
--- ioa_scenario
    fresh($ctx);
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        my $deadline = time + 5;
        my $gid;
        while (time < $deadline && !$gid) {
            my $jobs = eval { redis_cmd('XRANGE', 'ioa:{jobs}:goals', '-', '+') } || [];
            ($gid) = map { $_->[1][1] } @$jobs;
            sleep 0.05;
        }
        if ($gid) {
            sleep 0.3;
            redis_cmd('HSET', "ioa:{goal:$gid}:meta", 'state', 'concluded');
            emit($ctx, $gid, event => 'state', state => 'concluded', comm_id => 'room-plain',
                 conclusion => 'the plain answer');
        }
        POSIX::_exit(0);
    }
    my $res = launch($ctx, '{"goal":"g"}', timeout => 10);
    waitpid $pid, 0;
    is $res->code, 200, 'a plain POST waits';
    is_deeply json()->decode($res->content), ['room-plain', 'the plain answer'], "... for IoA's [comm_id, conclusion]";
    $res = launch($ctx, '{"goal":"g"}', query => '?wait=0');
    is $res->code, 202, '?wait=0: 202';
    $res = launch($ctx, '{"goal":"g"}', headers => [Prefer => 'respond-async']);
    is $res->code, 202, 'Prefer: respond-async: 202';
    like $res->content, qr/"state":"queued"/, '... with the goal object';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 5: cancel is 202 while the goal runs, 409 once it has ended, 404 if unknown
cancel: 202 and "cancel" on the goal's control channel while it runs; 409 once
it has ended; 404 for an unknown goal.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $gid = json()->decode(launch($ctx, '{"goal":"g"}')->content)->{goal_id};

    my $sub = redis_connect();
    $sub->cmd('SUBSCRIBE', "ioa:{goal:$gid}:control");
    my $res = $ctx->http(POST => "/goals/$gid/cancel");
    is $res->code, 202, 'cancel: 202';
    is json()->decode($res->content)->{state}, 'cancelling', 'cancelling';
    my $msg = $sub->read_reply(3);
    is_deeply $msg, ['message', "ioa:{goal:$gid}:control", 'cancel'],
        'the workers are told on the control channel';
    is $ctx->redis('HGET', "ioa:{goal:$gid}:meta", 'state'), 'cancelling', 'meta: cancelling';

    $ctx->redis('HSET', "ioa:{goal:$gid}:meta", 'state', 'cancelled');
    my $again = $ctx->http(POST => "/goals/$gid/cancel");
    is $again->code, 409, 'an ended goal: 409';
    like $again->content, qr/"code":"goal_ended"/, 'goal_ended';
    is $ctx->http(POST => '/goals/' . ('a' x 32) . '/cancel')->code, 404, 'unknown: 404';
    is $ctx->http(GET => "/goals/$gid/cancel")->code, 405, 'GET: 405';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 6: scripts/demo.py follows a goal's feed across the hub's keepalive pings
scripts/demo.py (make run's demo) follows a goal's feed across the hub's
keepalive, a "ping" event after 15 s without events whose data is not JSON: it
shows the states and the envelope and returns the conclusion.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $gid = json()->decode(launch($ctx, '{"goal":"g"}')->content)->{goal_id};
    emit($ctx, $gid, event => 'state', state => 'forming');

    # the demo's own follower, and a stream of ours opened with it that
    # shows the ping really came
    my $out = File::Temp->new;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', $out->filename;
        open STDERR, '>&', \*STDOUT;
        exec('/usr/bin/python3', '-c',
             'import sys; sys.path.insert(0, "scripts"); import demo; '
           . 'demo.HUB = sys.argv[1]; '
           . 'print("returned:", demo.follow_goal(sys.argv[2]), flush=True)',
             $ctx->host . ':' . $ctx->port, "/goals/$gid/events")
            or POSIX::_exit(127);
    }
    my $s = IoaTest::SSE->connect($ctx->host, $ctx->port, "/goals/$gid/events");
    my ($forming) = $s->messages(1, 5);
    ok $forming, 'our stream has the first state';
    my $ping = $s->next_event(20);
    is $ping && $ping->{event}, 'ping', 'the quiet stream gets a "ping" event';
    is $ping && $ping->{data}, 'keepalive', 'whose data is not JSON';
    sleep 0.5;     # the demo's stream opened at the same time as ours

    emit($ctx, $gid, event => 'envelope',
         envelope => { sender => 'Counter', type => 7, content => 'six words' });
    emit($ctx, $gid, event => 'state', state => 'concluded', comm_id => 'c1',
         conclusion => 'all done');
    my $deadline = time + 15;
    sleep 0.1 while time < $deadline && waitpid($pid, POSIX::WNOHANG()) != $pid;
    my $status = $?;
    kill 'KILL', $pid if time >= $deadline;
    my $text = do { local (@ARGV, $/) = $out->filename; <> } // '';
    is $status, 0, 'the demo follower exits 0' or diag $text;
    like $text, qr/goal \| state forming/, 'it showed the first state';
    like $text, qr/Counter \| \[task result\] six words/, 'then the envelope, after the ping';
    like $text, qr/goal \| state concluded \(room c1\)/, 'and the last state';
    like $text, qr/^returned: all done$/m, 'and returned the conclusion';
    $s->close;
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 7: launch rate, unknown fields and input_timeout_s are bounded per launcher
bounds per launcher: ioa_limit_launch_rate (429 with Retry-After, nothing
queued), fields the hub does not know at most 4 KiB, input_timeout_s under
ioa_goal_input_timeout_max.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_launch_rate 5r/s burst=10;
    ioa_limit_goals_in_flight off;
--- config
    location / { ioa_api; ioa_goal_input_timeout_max 600; }
--- ioa_scenario
    fresh($ctx);
    my %codes;
    my $retry;
    for my $i (1 .. 40) {
        my $res = launch($ctx, qq({"goal":"goal $i"}));
        $codes{$res->code}++;
        $retry //= $res->header('Retry-After') if $res->code == 429;
    }
    cmp_ok $codes{202}, '>=', 10, 'the burst is queued';
    cmp_ok $codes{202}, '<=', 13, '... and not much more in the time it took';
    is $codes{202} + $codes{429}, 40, 'the others: 429';
    ok defined $retry && $retry =~ /^\d+$/, "with Retry-After ($retry)";
    is $ctx->redis('XLEN', 'ioa:{jobs}:goals'), $codes{202}, 'only the accepted ones are queued';
    sleep 1.1;
    is launch($ctx, '{"goal":"later"}')->code, 202, 'a second later the bucket has room again';
    my $bad = launch($ctx, '{"goal":""}');
    is $bad->code, 400, 'an invalid launch is refused as before, not charged';

    sleep 2.5;
    my $res = launch($ctx, json()->encode({ goal => 'x', mine => 'y' x 4000 }));
    is $res->code, 202, '4,000 bytes of a field we do not know: kept';
    $res = launch($ctx, json()->encode({ goal => 'x', mine => 'y' x 3000, yours => 'z' x 2000 }));
    is $res->code, 400, 'two that hold 5,000 bytes: 400';
    my $d = json()->decode($res->content);
    is $d->{field}, 'mine', 'naming the first';
    like $d->{message}, qr/4096 bytes in all/, 'and the bound';
    $res = launch($ctx, json()->encode({ goal => 'x', extra => { pad => 'p' x (200 * 1024) } }));
    is $res->code, 400, '200 KiB of them: 400';
    $res = launch($ctx, json()->encode({ goal => 'x' x 5000 }));
    is $res->code, 202, 'a long goal is no extra field';

    $res = launch($ctx, '{"goal":"ask me","input_timeout_s":600}');
    is $res->code, 202, 'input_timeout_s at the ceiling: 202';
    $res = launch($ctx, '{"goal":"ask me","input_timeout_s":601}');
    is $res->code, 400, 'over it: 400';
    $d = json()->decode($res->content);
    is $d->{field}, 'input_timeout_s', 'naming the field';
    like $d->{message}, qr/at most 600 here \(ioa_goal_input_timeout_max\)/, 'and the ceiling';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 8: a launcher past ioa_limit_goals_in_flight gets 429 and nothing is queued
ioa_limit_goals_in_flight: a launcher past its goals in flight gets 429
too_many_goals with Retry-After, nothing is queued and no record stays;
another launcher is not affected; a place comes back when a goal ends (the
worker's goal_index.lua write), and ten launches at once never take more
places than there are.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_launch_rate off;
    ioa_limit_goals_in_flight 3;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    fresh($ctx);
    my @ids;
    for my $i (1 .. 3) {
        my $res = launch($ctx, qq({"goal":"goal $i"}));
        is $res->code, 202, "goal $i: 202";
        push @ids, json()->decode($res->content)->{goal_id};
    }
    my $res = launch($ctx, '{"goal":"one too many"}');
    is $res->code, 429, 'the fourth in flight: 429';
    my $d = json()->decode($res->content);
    is $d->{code}, 'too_many_goals', 'code too_many_goals';
    like $d->{message}, qr/"127\.0\.0\.1" has 3 goals in flight, as many as ioa_limit_goals_in_flight allows/,
        'naming the launcher, the count and the directive';
    is $res->header('Retry-After'), 5, 'Retry-After: 5';
    is $ctx->redis('XLEN', 'ioa:{jobs}:goals'), 3, 'nothing more queued';
    is scalar(@{ $ctx->redis('KEYS', 'ioa:{goal:*}:meta') }), 3, 'no record of the refused launch stays';
    is $ctx->redis('HGET', 'ioa:{goals}:count', 'queued'), 3, 'the index counts the three';

    $res = $ctx->http(POST => '/launch_goal', body => '{"goal":"elsewhere"}', local => '127.0.0.2');
    is $res->code, 202, 'another launcher (another address in open mode): 202';

    # a worker ends the first goal: the state it writes frees the place
    open my $fh, '<', 'redis-scripts/goal_index.lua' or die "goal_index.lua: $!";
    my $lua = do { local $/; <$fh> };
    is $ctx->redis('EVAL', $lua, 1, 'ioa:{goals}:', $ids[0], 'concluded', '0'), 1, 'the worker concludes goal 1';
    is launch($ctx, '{"goal":"now there is room"}')->code, 202, 'a place came back: 202';
    is launch($ctx, '{"goal":"and then none"}')->code, 429, 'and the cap holds again';

    # ten at once from a launcher with no goal yet: each is admitted in
    # the same call that counts, so no two take the last place
    my @kids;
    for my $i (1 .. 10) {
        pipe my $r, my $w or die "pipe: $!";
        my $pid = fork // die "fork: $!";
        if (!$pid) {
            close $r;
            my $res = eval { $ctx->http(POST => '/launch_goal', body => qq({"goal":"rush $i"}), local => '127.0.0.3') };
            print {$w} $res ? $res->code : 'error';
            close $w;
            POSIX::_exit(0);
        }
        close $w;
        push @kids, [$pid, $r];
    }
    my %codes;
    for (@kids) {
        my ($pid, $r) = @$_;
        my $code = do { local $/; <$r> };
        waitpid $pid, 0;
        $codes{$code}++;
    }
    is $codes{202}, 3, 'ten at once: three admitted';
    is $codes{429}, 7, '... seven refused';
    my $m = $ctx->http(GET => '/metrics')->content;
    like $m, qr/^ioa_limits_hit_total\{limit="goals_in_flight"\} 9$/m, '/metrics counts the nine refusals';
--- no_error_log
[alert]
[crit]
[emerg]
