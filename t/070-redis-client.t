# t/070-redis-client.t -- the module's Redis client (ngx_ioa_redis.c):
# exactly two connections per worker, scripts run with EVALSHA and reloaded
# when Redis has lost them, command timeouts as nginx timers, and the
# reconnect that follows them.
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/070-redis-client.t

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(register teamup envelope wait_health);
use Time::HiRes qw(sleep time);

no_root_location();
log_level('info');
master_on();
workers(2);         # TEST 1 counts connections per worker

sub fresh {
    my $ctx = shift;
    $ctx->redis('FLUSHALL');
    $ctx->redis('CONFIG', 'RESETSTAT');
    wait_health($ctx);
}

# calls of one command since the last RESETSTAT, from INFO commandstats
sub calls {
    my ($ctx, $cmd) = @_;
    my $info = $ctx->redis('INFO', 'commandstats');
    return $info =~ /^cmdstat_\Q$cmd\E:calls=(\d+)/m ? $1 : 0;
}

run_tests();

__DATA__

=== TEST 1: each worker has one command and one pub/sub connection, subscribed to events
The pub/sub connection is subscribed to the teamup events.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $deadline = time + 5;
    my @clients;
    while (time < $deadline) {
        @clients = grep { /\bcmd=/ && !/cmd=client\|list/ && !/cmd=client/ }
                   split /\n/, $ctx->redis('CLIENT', 'LIST');
        last if @clients == 4;
        sleep 0.1;
    }
    is scalar(@clients), 4, 'two workers, two connections each'
        or diag join "\n", @clients;
    is scalar(grep { /\bsub=1\b/ || /\bpsub=/ && /\bsub=1\b/ } @clients), 2,
        'one of each pair is subscribed (to the teamup events)';
    is $ctx->redis('PUBSUB', 'NUMSUB', 'ioa:{reg}:events')->[1], 2,
        'both workers listen to ioa:{reg}:events';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: envelopes and registry calls run as EVALSHA, and scripts reload after a flush
They never run as EVAL, and after SCRIPT FLUSH the scripts are loaded again
and the very envelope that met NOSCRIPT is delivered once.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob));
    my $a = IoaTest::Agent->connect($ctx, 'Alice');
    my $b = IoaTest::Agent->connect($ctx, 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    sleep 0.2;

    $a->post(envelope(comm_id => $cid, content => 'one'));
    is $b->recv(5)->{content}, 'one', 'delivered';
    $a->recv(5);
    ok calls($ctx, 'evalsha') >= 4, 'EVALSHA was used';
    is calls($ctx, 'eval'), 0, 'EVAL was not';

    # Redis forgets every script (as after a failover to a replica that
    # never saw them)
    is $ctx->redis('SCRIPT', 'FLUSH'), 'OK', 'SCRIPT FLUSH';

    $a->post(envelope(comm_id => $cid, content => 'two'));
    my $m = $b->recv(5);
    is $m && $m->{content}, 'two', 'the envelope that met NOSCRIPT is delivered';
    ok $b->quiet(0.3), 'once';
    is $ctx->redis('XLEN', "ioa:{room:$cid}:log"), 2, 'and stored once';
    ok calls($ctx, 'script|load') >= 1, 'the script was loaded again';

    $a->post(envelope(comm_id => $cid, content => 'three'));
    is $b->recv(5)->{content}, 'three', 'later envelopes go on as EVALSHA';
--- error_log
missing in Redis, reloading
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3: a Redis that stops answering gives 503 after ioa_redis_timeout, then recovers
Requests get 503 after ioa_redis_timeout instead of hanging, agents get
redis_unavailable, and the hub reconnects by itself once Redis answers again.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_redis_timeout 500ms;
    ioa_redis_backoff_max 200ms;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob));
    my $a = IoaTest::Agent->connect($ctx, 'Alice');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    sleep 0.2;

    # Redis holds every client's commands for 3 s (ours included)
    my $spy = redis_connect();
    $spy->cmd('CLIENT', 'PAUSE', 3000, 'ALL');

    my $t0 = time;
    my $res = $ctx->http(POST => '/register', timeout => 5,
        body => '{"name":"Carol","type":"Human Assistant","desc":"c"}');
    my $took = time - $t0;
    is $res->code, 503, 'POST /register: 503 while Redis does not answer';
    like $res->content, qr/"code":"redis_unavailable"/, 'with a JSON error';
    ok $took < 2.5, sprintf('answered after %.2f s, not when Redis woke', $took);

    $a->post(envelope(comm_id => $cid, content => 'during the pause'));
    my $err = $a->recv(5);
    is $err && $err->{code}, 'redis_unavailable', 'the agent gets redis_unavailable'
        or diag $err && $err->{_raw};

    # after the pause the hub reconnects (backoff capped at 200 ms)
    ok wait_health($ctx, 200, 8)->code == 200, 'healthy again';
    $a->post(envelope(comm_id => $cid, content => 'after the pause'));
    my $m;
    for (1 .. 3) {
        $m = $a->recv(5) // last;
        last if ($m->{content} // '') eq 'after the pause';
    }
    is $m && $m->{content}, 'after the pause', 'the open WebSocket works again';
--- error_log
command timed out, reconnecting
--- no_error_log
[alert]
[crit]
[emerg]
