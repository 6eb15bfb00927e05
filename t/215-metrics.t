# t/215-metrics.t -- the hub's own counters in /metrics (ngx_ioa_stats.c):
# connections by transport, envelopes posted, delivered and refused by
# code, bytes, send-queue overflows, resumes and catch-up lengths, Redis
# command latency, reconnects and errors per node, limits hit.
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/215-metrics.t
#
# Every figure is read through Prometheus' own parser (IoaTest::Metrics)
# and compared with the traffic the block itself made: a block reads the
# counters before and after, and checks the difference, so a scrape's own
# requests or an earlier block cannot make a figure pass.  Two workers, so
# that a count summed in one worker's memory only would come out short.

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(register teamup envelope);
use IoaTest::Api;
use IoaTest::Metrics;
use IoaTest::JWT;
use IoaTest::SSE;

use File::Temp ();
use Time::HiRes qw(sleep time);

master_on();
workers(2);
no_root_location();
log_level('info');

our $KEYDIR = File::Temp::tempdir('ioa-metrics-XXXXXX', TMPDIR => 1, CLEANUP => 1);
our $K = jwt_keys($KEYDIR);
$ENV{TEST_NGINX_KEYS} = $KEYDIR;

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value(init => 'main::workers_ready()')
        unless defined $block->init || defined $block->must_die;
});

# both workers connected (hub_ready waits for each one's "ioa redis:
# ready", IoaTest::Ready), after an empty Redis
sub workers_ready { hub_ready() }

sub bearer {
    my ($sub, $scope) = @_;
    my $t = jwt($K, 'HS256', { sub => $sub, scope => $scope, exp => time + 300 });
    return [ Authorization => "Bearer $t" ];
}

# the difference of one sample between two scrapes
sub delta {
    my ($before, $after, $name, $labels) = @_;
    return ($after->{$name}{$labels} // 0) - ($before->{$name}{$labels} // 0);
}

sub inbox {
    my ($ctx, $who, @headers) = @_;
    return IoaTest::SSE->connect($ctx->host, $ctx->port, "/agents/$who/inbox",
                                 headers => \@headers);
}

# until the hub has subscribed to the room (an inbox opened "from now")
sub subscribed {
    my ($cid, $n) = @_;
    my $ok = wait_until(sub { redis_numsub("ioa:{room:$cid}:ch") >= ($n // 1) }, 5);
    sleep 0.2;
    return $ok;
}

run_tests();

__DATA__

=== TEST 1: envelopes posted, delivered, refused and their bytes are counted per transport
envelopes over WebSocket, SSE and http: posted, delivered, refused by code,
bytes; connections by transport while they are open and after.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    register($ctx, qw(Alice Bob Carol Dave));
    my $cid = teamup($ctx, 'Alice', ['Bob', 'Carol'], 'counted');
    my ($v0) = scrape($ctx);

    # the observer feed flows within a tick of the observer's arrival
    # (README "Endpoint reference"): probed before the agents connect, so
    # they start after the probes
    my $watch = IoaTest::SSE->connect($ctx->host, $ctx->port, '/chatlist');
    ok $watch->ok, 'an SSE observer';
    ok wait_until(sub {
        api($ctx, POST => '/agents/Bob/messages', { comm_id => $cid, content => 'probe' });
        scalar $watch->messages(1, 0.3) }, 10), 'the observer feed flows';
    # on a Cluster each worker learns of the observer at its next tick
    # (NGX_IOA_TICK, 5 s): the posts of the other may not be copied yet
    sleep 5.5 if redis_mode() eq 'cluster';
    1 while $watch->messages(1, 0.5);

    my $alice = IoaTest::Agent->connect($ctx, 'Alice');
    my $bob = IoaTest::Agent->connect($ctx, 'Bob');
    ok $alice->ok && $bob->ok, 'two WebSocket agents';
    my $carol = inbox($ctx, 'Carol');
    ok $carol->ok, 'an SSE inbox';
    ok subscribed($cid), 'the hub listens to the room';

    my ($v1) = scrape($ctx);
    is delta($v0, $v1, 'ioa_connections', 'kind=agent,transport=websocket'), 2,
        'ioa_connections: 2 WebSocket agents';
    is delta($v0, $v1, 'ioa_connections', 'kind=agent,transport=sse'), 1,
        '1 SSE agent';
    is delta($v0, $v1, 'ioa_connections', 'kind=observer,transport=sse'), 1,
        '1 SSE observer';
    is delta($v0, $v1, 'ioa_connections_opened_total', 'kind=agent,transport=websocket'), 2,
        'ioa_connections_opened_total counts them';

    # 4 over the WebSocket, 3 over http; each reaches Alice and Bob (echo
    # on), Carol's inbox and the observer
    # the bytes of a masked frame a client sends: header, mask, payload
    my $sent = 0;
    my $frame = sub { my $n = length shift; $sent += $n + ($n < 126 ? 6 : 8) };
    for my $i (1 .. 4) {
        my $e = envelope(comm_id => $cid, content => "ws $i");
        $frame->($e);
        $alice->post($e);
    }
    for my $i (1 .. 3) {
        my ($code) = api($ctx, POST => '/agents/Bob/messages',
                         { comm_id => $cid, content => "http $i" });
        is $code, 200, "http post $i";
    }
    my @a = $alice->recv_n(7, 5);
    my @b = $bob->recv_n(7, 5);
    my @c = $carol->messages(7, 5);
    is scalar(@a) + scalar(@b) + scalar(@c), 21, 'every envelope arrived';
    is scalar($watch->messages(7, 5)), 7, 'and the observer saw 7';

    # refused: one of each kind, by how it was sent
    my @bad = ('{"comm_id": nope', envelope(comm_id => 'no-such-room', content => 'x'));
    $frame->($_), $alice->post($_) for @bad;
    my $dave = IoaTest::Agent->connect($ctx, 'Dave');
    my $intruder = envelope(comm_id => $cid, content => 'not a member');
    $frame->($intruder);
    $dave->post($intruder);
    my ($code) = api($ctx, POST => '/agents/Dave/messages',
                     { comm_id => $cid, content => 'not a member either' });
    is $code, 403, 'http: not_member';
    ($code) = api($ctx, POST => '/agents/Bob/messages', '{"comm_id":');
    is $code, 400, 'http: invalid_json';
    my @err = ($alice->recv_n(2, 5), $dave->recv_n(1, 5));
    is_deeply [ sort map { $_->{code} } @err ],
              [ 'invalid_json', 'not_member', 'unknown_room' ], 'the WebSocket errors';

    my ($v2) = scrape($ctx);
    is delta($v1, $v2, 'ioa_envelopes_posted_total', 'transport=websocket'), 4,
        'posted over the WebSocket: 4';
    is delta($v1, $v2, 'ioa_envelopes_posted_total', 'transport=http'), 3,
        'posted over http: 3';
    is delta($v1, $v2, 'ioa_envelopes_delivered_total', 'transport=websocket'), 14,
        'delivered over WebSockets: 7 each to Alice and Bob';
    is delta($v1, $v2, 'ioa_envelopes_delivered_total', 'transport=sse'), 14,
        'over SSE: 7 to the inbox, 7 to the observer';
    is delta($v1, $v2, 'ioa_envelopes_refused_total', 'code=not_member'), 2,
        'refused not_member: once each way';
    is delta($v1, $v2, 'ioa_envelopes_refused_total', 'code=invalid_json'), 2,
        'refused invalid_json: once each way';
    is delta($v1, $v2, 'ioa_envelopes_refused_total', 'code=unknown_room'), 1,
        'refused unknown_room';
    my $in = delta($v1, $v2, 'ioa_received_bytes_total', 'transport=websocket');
    cmp_ok $in, '>=', $sent, "bytes received over WebSockets: $in, the frames are $sent";
    cmp_ok $in, '<', $sent + 64, '... and not more (a pong at most)';
    my $out_ws = delta($v1, $v2, 'ioa_sent_bytes_total', 'transport=websocket');
    my $texts = 0;
    $texts += length($_->{_raw}) + 2 for @a, @b, @err;
    cmp_ok $out_ws, '>=', $texts, "bytes sent over WebSockets: $out_ws, frames seen $texts";
    cmp_ok $out_ws, '<', $texts + 200, '... and not more than what the clients read';
    cmp_ok delta($v1, $v2, 'ioa_sent_bytes_total', 'transport=sse'), '>',
           length(join '', map { $_->{data} } @c), 'bytes sent over SSE: at least the data';
    cmp_ok delta($v1, $v2, 'ioa_received_bytes_total', 'transport=http'), '>', 100,
        'envelope bodies received over http';

    $alice->ws->close; $bob->ws->close; $dave->ws->close;
    $carol->close; $watch->close;
    ok wait_until(sub {
        my ($v) = scrape($ctx);
        !grep { delta($v0, $v, 'ioa_connections', $_) != 0 }
            'kind=agent,transport=websocket', 'kind=agent,transport=sse',
            'kind=observer,transport=sse' }, 5), 'ioa_connections back to what it was';
--- no_error_log
[alert]
[crit]



=== TEST 2: resumes are counted and what they caught up on sums in a histogram
resumes and catch-up lengths: a WebSocket with since= and an inbox with
Last-Event-ID are counted, and what they caught up on is the histogram's sum.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    register($ctx, qw(Alice Bob));
    my $cid = teamup($ctx, 'Alice', ['Bob'], 'resumed');
    my @ids;
    for my $i (1 .. 10) {
        my ($code, $d) = api($ctx, POST => '/agents/Alice/messages',
                             { comm_id => $cid, content => "m$i" });
        push @ids, $d->{id};
    }
    my ($v0) = scrape($ctx);
    my $bob = IoaTest::Agent->connect($ctx, 'Bob', "?since=$ids[2]");
    my @got = $bob->recv_n(7, 5);
    is scalar(@got), 7, 'the WebSocket caught up on 7';
    my $inbox = inbox($ctx, 'Bob', 'Last-Event-ID' => "$cid:$ids[5]");
    my @ev = $inbox->messages(4, 5);
    is scalar(@ev), 4, 'the inbox caught up on 4';
    my ($v1) = scrape($ctx);
    is delta($v0, $v1, 'ioa_resumes_total', 'transport=websocket'), 1, 'a WebSocket resume';
    is delta($v0, $v1, 'ioa_resumes_total', 'transport=sse'), 1, 'an SSE resume';
    is delta($v0, $v1, 'ioa_catchup_envelopes_sum', ''), 11,
        'the histogram sums the 7 and the 4';
    is delta($v0, $v1, 'ioa_catchup_envelopes_count', ''), 2, 'two catch-ups';
    is delta($v0, $v1, 'ioa_catchup_envelopes_bucket', 'le=1'), 0, 'neither of at most 1';
    is delta($v0, $v1, 'ioa_catchup_envelopes_bucket', 'le=10'), 2, 'both of at most 10';

    # a resume frame on an open connection counts too
    my $late = IoaTest::Agent->connect($ctx, 'Alice', '?wait_resume=1');
    $late->post('{"op":"resume","rooms":{"' . $cid . '":"' . $ids[8] . '"}}');
    my @one = $late->recv_n(1, 5);
    is scalar(@one), 1, 'the resume frame caught up on 1';
    my ($v2) = scrape($ctx);
    is delta($v1, $v2, 'ioa_resumes_total', 'transport=websocket'), 1, 'a resume frame';
    is delta($v1, $v2, 'ioa_catchup_envelopes_sum', ''), 1, '... that caught up on 1';
--- no_error_log
[alert]
[crit]



=== TEST 3: a WebSocket that does not read is closed at the send queue limit and counted
a WebSocket that does not read is closed at ioa_send_queue_limit and counted
as an overflow.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 sndbuf=8k;
        location / { ioa_api; ioa_send_queue_limit 16k; }
    }
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    register($ctx, qw(Alice Bob));
    my $cid = teamup($ctx, 'Alice', ['Bob'], 'slow');
    my ($v0) = scrape($ctx);
    my $slow = IoaTest::Agent->connect($ctx, 'Bob', '', port => $ctx->rand_port(1),
                                       rcvbuf => 4096);
    ok $slow->ok, 'a reader that will not read';
    ok subscribed($cid), 'subscribed';
    my $content = 'c' x 3000;
    for my $i (1 .. 60) {
        my ($code) = api($ctx, POST => '/agents/Alice/messages',
                         { comm_id => $cid, content => "$i $content" });
        die "post $i: $code\n" unless $code == 200;
    }
    ok wait_until(sub {
        my ($v) = scrape($ctx);
        delta($v0, $v, 'ioa_send_queue_overflows_total', 'transport=websocket') == 1 }, 10),
        'one overflow over WebSockets';
--- no_error_log
[alert]
[crit]



=== TEST 4: each limit hit (rate, conn, room members) is counted under its name
limits hit: ioa_limit_rate, ioa_limit_conn, ioa_max_room_members, each counted
under its name.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_rate 1r/s burst=2;
    ioa_limit_conn 1;
    ioa_max_room_members 3;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    register($ctx, qw(Alice Bob Carol Dave));
    my $cid = teamup($ctx, 'Alice', ['Bob'], 'limited');
    my ($v0) = scrape($ctx);
    my $limited = 0;
    # 1 a second with a burst of 2: some of 20 posts in a row are refused,
    # how many depends on how fast they go
    for my $i (1 .. 20) {
        my ($code) = api($ctx, POST => '/agents/Alice/messages',
                         { comm_id => $cid, content => "m$i" });
        $limited++ if $code == 429;
    }
    cmp_ok $limited, '>=', 1, "$limited posts over the rate";
    my $one = IoaTest::Agent->connect($ctx, 'Bob');
    my $two = IoaTest::Agent->connect($ctx, 'Bob');
    ok $one->ok && !$two->ok, 'a second connection of Bob is refused';
    my ($code, $d) = api($ctx, POST => '/teamup',
                         { sender => 'Alice', agent_names => ['Bob', 'Carol', 'Dave'] });
    is $d->{code}, 'room_too_large', 'a team of 4 is too large';
    my ($v1) = scrape($ctx);
    is delta($v0, $v1, 'ioa_limits_hit_total', 'limit=rate'), $limited, 'limit="rate"';
    is delta($v0, $v1, 'ioa_envelopes_refused_total', 'code=rate_limited'), $limited,
        'and the envelopes refused with rate_limited';
    is delta($v0, $v1, 'ioa_limits_hit_total', 'limit=conn'), 1, 'limit="conn"';
    is delta($v0, $v1, 'ioa_limits_hit_total', 'limit=room_members'), 1, 'limit="room_members"';
    is delta($v0, $v1, 'ioa_limits_hit_total', 'limit=room_rate'), 0, 'no other';
--- no_error_log
[alert]
[crit]



=== TEST 5: Redis command latency is a histogram; a Redis restart counts connection_lost
Redis: every command's latency in a histogram; a Redis restart shows as
connection_lost and reconnects on its node.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_redis_backoff_max 300ms;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    my ($v0, $types) = scrape($ctx);
    is $types->{ioa_redis_command_duration_seconds}, 'histogram', 'a histogram';
    register($ctx, map { "agent$_" } 1 .. 20);
    my ($v1) = scrape($ctx);
    cmp_ok delta($v0, $v1, 'ioa_redis_command_duration_seconds_count', ''), '>=', 20,
        'at least a command per registration';
    cmp_ok delta($v0, $v1, 'ioa_redis_command_duration_seconds_sum', ''), '>', 0,
        'a sum of seconds';
    my $node = "127.0.0.1:" . $ctx->redis_port;
    SKIP: {
        skip 'a Redis Cluster restarts elsewhere (t/130-cluster.t)', 3
            if redis_mode() eq 'cluster';
        redis_stop();
        sleep 0.5;
        redis_start();
        ok wait_until(sub { $ctx->http(GET => '/health_check')->code == 200 }, 10),
            'the hub is back';
        # each of the 2 workers has a command and a pub/sub connection
        my $v2;
        ok wait_until(sub {
            ($v2) = scrape($ctx);
            delta($v1, $v2, 'ioa_redis_reconnects_total', "node=$node") >= 4 }, 10),
            'every connection of both workers made again';
        cmp_ok delta($v1, $v2, 'ioa_redis_errors_total', "error=connection_lost,node=$node"),
               '>=', 4, 'each one lost first';
    }
--- no_error_log
[alert]
[crit]



=== TEST 6: only a token with the metrics or admin scope scrapes; others get 401 or 403
"ioa_metrics token": only a token with the "metrics" (or "admin") scope
scrapes; no token is 401, another scope 403 naming "metrics".
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics token; }
--- ioa_scenario
    my ($code, $d) = api($ctx, GET => '/metrics');
    is "$code $d->{code}", '401 unauthorized', 'no token: 401';
    ($code, $d) = api($ctx, GET => '/metrics', undef, headers => bearer('Alice', 'agent observer launch'));
    is "$code $d->{code}", '403 forbidden', 'agent, observer, launch: 403';
    like $d->{message}, qr/lacks the "metrics" scope/, 'naming the scope';
    my $res = $ctx->http(GET => '/metrics', headers => bearer('prometheus', 'metrics'));
    is $res->code, 200, 'metrics: 200';
    like $res->content, qr/^ioa_envelopes_posted_total\{transport="websocket"\} \d+$/m, 'the scrape';
    $res = $ctx->http(GET => '/metrics', headers => bearer('root', 'admin'));
    is $res->code, 200, 'admin: 200';
--- no_error_log
[alert]
[crit]



=== TEST 7: "ioa_metrics" takes "token" or nothing
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location = /metrics { ioa_metrics open; }
--- must_die
--- error_log
"ioa_metrics" takes no argument or "token", not "open"
