# t/175-limits-fleet.t -- ioa_limit_scope fleet: the rate limits hold across
# nginx instances on one Redis (or one Redis Cluster), leased from Redis a
# slice at a time (limit_lease.lua, ngx_ioa_limit.c), where `instance` lets
# an agent post N times the rate through N instances.
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/175-limits-fleet.t
#   (TEST_IOA_REDIS=cluster for a 3-master Redis Cluster)
#
# Instance A is the runner's nginx; instance B a second nginx on the same
# Redis with the same limits (IoaTest::Instance, stopped by PID).  One child
# process per instance posts as fast as it can for a few seconds, both at
# once; what is counted is 200 (stored) against 429 (rate_limited).  The
# bounds are loose on purpose (the machine is shared): over T seconds one
# instance admits at most burst + rate x T; the fleet at most that plus
# 2 x N x slice (the comment at the top of ngx_ioa_limit.c), and the
# instances alone about twice as much.

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(register teamup);
use IoaTest::Api;
use IoaTest::Instance;

use File::Temp ();
use POSIX ();
use Time::HiRes qw(sleep time);

no_root_location();
no_shuffle();
log_level('info');

our $SECS = 3;

sub start_b {
    my ($ctx, $limits) = @_;
    my $b = IoaTest::Instance->start(
        dir => File::Temp::tempdir('ioa-fleet-b-XXXXXX', TMPDIR => 1,
                                   CLEANUP => 1),
        workers => 1,
        log_level => 'info',
        avoid => [ $ctx->port ],
        http_config => "ioa_redis 127.0.0.1:" . $ctx->redis_port . ";\n"
                       . $limits,
        config => "location / { ioa_api; }\n"
                  . "location = /metrics { ioa_metrics; }",
    );
    my $ok = wait_until(sub {
        my $res = eval { $ctx->http(GET => '/health_check', port => $b->port) };
        $res && $res->code == 200;
    }, 5);
    die "instance B is not ready\n" unless $ok;
    return $b;
}

# Posts as $name into $cid through each port of @$targets ([port, name]),
# one child per target, all for $secs; returns [[ok, limited, other], ...].
sub hammer {
    my ($ctx, $cid, $secs, @targets) = @_;
    my $start = time + 0.3;
    my @kids;
    for my $t (@targets) {
        my ($port, $name, $pause) = @$t;
        pipe my $r, my $w or die "pipe: $!";
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            close $r;
            my @n = (0, 0, 0);
            sleep $start - time if $start > time;
            my $end = $start + $secs;
            my $i = 0;
            while (time < $end) {
                my ($code) = eval {
                    api($ctx, POST => "/agents/$name/messages",
                        { comm_id => $cid, content => "$port #" . $i++ },
                        port => $port);
                };
                $n[ !defined $code ? 2 : $code == 200 ? 0 : $code == 429 ? 1 : 2 ]++;
                sleep $pause if $pause;
            }
            print {$w} "@n\n";
            close $w;
            POSIX::_exit(0);
        }
        close $w;
        push @kids, [$pid, $r];
    }
    my @res;
    for my $k (@kids) {
        my $fh = $k->[1];
        my $line = <$fh> // '0 0 0';
        waitpid $k->[0], 0;
        push @res, [ split ' ', $line ];
    }
    return @res;
}

sub metric {
    my ($ctx, $port, $re) = @_;
    my $res = $ctx->http(GET => '/metrics', port => $port);
    return $res->content =~ /^$re (\d+)$/m ? $1 : undef;
}

sub log_len { redis_cmd('XLEN', "ioa:{room:$_[0]}:log") }

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value(init => 'main::hub_ready()')
        unless defined $block->init || defined $block->must_die;
});

run_tests();

__DATA__

=== TEST 1: instance scope: an agent posting through two instances gets about twice the rate
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_rate 10r/s burst=10;
    ioa_limit_room_rate off;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    my $b = start_b($ctx, "ioa_limit_rate 10r/s burst=10;\nioa_limit_room_rate off;\n");
    register($ctx, 'Alice', 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    my @r = hammer($ctx, $cid, $::SECS, [$ctx->port, 'Alice'], [$b->port, 'Alice']);
    my $ok = $r[0][0] + $r[1][0];
    my $one = 10 + 10 * $::SECS;
    diag "instance scope: A $r[0][0] ok $r[0][1] limited, B $r[1][0] ok $r[1][1] limited";
    ok $r[0][1] > 0 && $r[1][1] > 0, 'each instance refused some';
    ok $ok > 1.5 * $one, "both together admitted about twice one instance's $one ($ok)";
    ok $ok <= 2 * ($one + 10), '... and no more than each one\'s own';
    is $r[0][2] + $r[1][2], 0, 'every answer was 200 or 429';
    is log_len($cid), $ok, 'exactly the accepted envelopes are stored';
    is redis_cmd('EXISTS', 'ioa:{lim:a:Alice}'), 0, 'no lease key: nothing asked of Redis';
    $b->stop;
--- no_error_log
[alert]



=== TEST 2: fleet scope: one agent through two instances gets the configured rate
fleet scope: the same agent through two instances gets the configured rate
within the bound; the lease key expires.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_scope fleet;
    ioa_limit_rate 10r/s burst=10;
    ioa_limit_room_rate off;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    my $b = start_b($ctx, "ioa_limit_scope fleet;\nioa_limit_rate 10r/s burst=10;\nioa_limit_room_rate off;\n");
    register($ctx, 'Alice', 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    my @r = hammer($ctx, $cid, $::SECS, [$ctx->port, 'Alice'], [$b->port, 'Alice']);
    my $ok = $r[0][0] + $r[1][0];
    my $one = 10 + 10 * $::SECS;
    # slice: 100 ms of 10r/s = 1 request; N = 2 instances
    my $bound = $one + 2 * 2 * 1;
    diag "fleet scope: A $r[0][0] ok $r[0][1] limited, B $r[1][0] ok $r[1][1] limited (bound $bound)";
    ok $r[0][0] > 0 && $r[1][0] > 0, 'both instances admitted some';
    ok $ok <= $bound + 5, "together no more than burst + rate x T + 2 x N x slice ($ok <= $bound, + 5 for timing)";
    ok $ok >= 0.75 * $one, "and not much less than the rate ($ok)";
    is $r[0][2] + $r[1][2], 0, 'every answer was 200 or 429';
    is log_len($cid), $ok, 'exactly the accepted envelopes are stored';
    my $asked = metric($ctx, $ctx->port, 'ioa_limit_leases_total\{result="asked"\}');
    my $granted = metric($ctx, $ctx->port, 'ioa_limit_leases_total\{result="granted"\}');
    my $refused = metric($ctx, $ctx->port, 'ioa_limit_leases_total\{result="refused"\}');
    ok $asked > 0 && $granted > 0 && $refused > 0,
        "leases asked $asked, granted $granted, refused $refused";
    is metric($ctx, $ctx->port, 'ioa_limit_leases_total\{result="failed"\}'), 0, 'none failed';
    my $pttl = redis_cmd('PTTL', 'ioa:{lim:a:Alice}');
    ok $pttl > 0 && $pttl <= 2000 + 1000, "the lease key expires once the bucket would be full ($pttl ms)";
    ok wait_until(sub { !redis_cmd('EXISTS', 'ioa:{lim:a:Alice}') }, 4), '... and is gone';
    $b->stop;
--- no_error_log
[alert]
fleet-wide limit's lease got no answer



=== TEST 3: fleet scope: one room's rate holds across instances, its writers on both
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_scope fleet;
    ioa_limit_rate off;
    ioa_limit_room_rate 10r/s burst=10;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    my $b = start_b($ctx, "ioa_limit_scope fleet;\nioa_limit_rate off;\nioa_limit_room_rate 10r/s burst=10;\n");
    register($ctx, 'Alice', 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    my @r = hammer($ctx, $cid, $::SECS, [$ctx->port, 'Alice'], [$b->port, 'Bob']);
    my $ok = $r[0][0] + $r[1][0];
    my $one = 10 + 10 * $::SECS;
    my $bound = $one + 2 * 2 * 1;
    diag "room, fleet scope: Alice on A $r[0][0] ok, Bob on B $r[1][0] ok (bound $bound)";
    ok $r[0][0] > 0 && $r[1][0] > 0, 'both writers got in';
    ok $ok <= $bound + 5, "the room took no more than its rate ($ok <= $bound, + 5 for timing)";
    ok $ok >= 0.75 * $one, "and not much less ($ok)";
    is log_len($cid), $ok, 'exactly the accepted envelopes are stored';
    ok redis_cmd('EXISTS', "ioa:{lim:r:$cid}"), "the room's bucket is ioa:{lim:r:<comm_id>}";
    $b->stop;
--- no_error_log
[alert]
fleet-wide limit's lease got no answer



=== TEST 4: fleet scope: under the rate nothing is refused, posting through both instances
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_scope fleet;
    ioa_limit_rate 10r/s burst=10;
    ioa_limit_room_rate 10r/s burst=10;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    my $b = start_b($ctx, "ioa_limit_scope fleet;\nioa_limit_rate 10r/s burst=10;\nioa_limit_room_rate 10r/s burst=10;\n");
    register($ctx, 'Alice', 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    # about 3 + 3 a second together: well under 10r/s
    my @r = hammer($ctx, $cid, $::SECS, [$ctx->port, 'Alice', 0.33], [$b->port, 'Alice', 0.33]);
    diag "under the rate: A $r[0][0] ok $r[0][1] limited, B $r[1][0] ok $r[1][1] limited";
    is $r[0][1] + $r[1][1], 0, 'nothing refused';
    ok $r[0][0] >= 5 && $r[1][0] >= 5, 'both posted';
    is log_len($cid), $r[0][0] + $r[1][0], 'everything stored, once';
    $b->stop;
--- no_error_log
[alert]
fleet-wide limit's lease got no answer



=== TEST 5: fleet scope: a busy agent asks Redis about once a slice, not once an envelope
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_scope fleet slice=100ms;
    ioa_limit_rate 1000r/s burst=2000;
    ioa_limit_room_rate off;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    register($ctx, 'Alice', 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    my $ws = $ctx->ws('/ws/Alice');
    ok $ws->ok, 'connected';
    sleep 0.3;
    # in batches of 50 every 50 ms: the rate's pace, and each batch within
    # a slice, which is what one instance may post ahead of its lease
    my $n = 500;
    for my $batch (0 .. $n / 50 - 1) {
        $ws->send_text(jenc({ comm_id => $cid, content => "w$_" }))
            for $batch * 50 + 1 .. $batch * 50 + 50;
        sleep 0.05;
    }
    ok wait_until(sub { log_len($cid) >= $n }, 10), "all $n stored"
        or diag 'stored: ' . log_len($cid);
    my $asked = metric($ctx, $ctx->port, 'ioa_limit_leases_total\{result="asked"\}');
    # slice: 100 ms of 1000r/s = 100; leases double from 1 up to it
    diag "$n envelopes, $asked leases";
    ok $asked >= 2 && $asked <= 20, "leases asked: $asked for $n envelopes (slice 100)";
--- no_error_log
[alert]
fleet-wide limit's lease got no answer



=== TEST 6: fleet scope: a lease Redis refuses falls back to the instances' own limits
fleet scope, a lease Redis refuses (its key of the wrong type): the instances'
own limits apply, logged and counted, until it works again.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_scope fleet;
    ioa_limit_rate 10r/s burst=10;
    ioa_limit_room_rate off;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    my $b = start_b($ctx, "ioa_limit_scope fleet;\nioa_limit_rate 10r/s burst=10;\nioa_limit_room_rate off;\n");
    register($ctx, 'Alice', 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    redis_cmd('SET', 'ioa:{lim:a:Alice}', 'not a bucket');
    my @r = hammer($ctx, $cid, $::SECS, [$ctx->port, 'Alice'], [$b->port, 'Alice']);
    my $ok = $r[0][0] + $r[1][0];
    my $one = 10 + 10 * $::SECS;
    diag "fallback: A $r[0][0] ok $r[0][1] limited, B $r[1][0] ok $r[1][1] limited";
    ok $r[0][1] > 0 && $r[1][1] > 0, 'never unlimited: each instance refused some';
    ok $ok > 1.5 * $one && $ok <= 2 * ($one + 10), "never everything refused: each instance's own limit ($ok)";
    is log_len($cid), $ok, 'exactly the accepted envelopes are stored';
    like $ctx->error_log, qr/\[warn\].*a fleet-wide limit's lease got no answer from Redis; this instance's own limits apply/,
        'A logged the fallback';
    like $b->error_log, qr/\[warn\].*fleet-wide limit's lease got no answer/, '... and so did B';
    ok metric($ctx, $ctx->port, 'ioa_limit_leases_total\{result="failed"\}') > 0, 'failed leases counted';
    ok metric($ctx, $ctx->port, 'ioa_limit_fallbacks_total') > 0, 'posts decided by the fallback counted';
    redis_cmd('DEL', 'ioa:{lim:a:Alice}');
    sleep 1.2;
    my ($code) = api($ctx, POST => '/agents/Alice/messages', { comm_id => $cid, content => 'back' });
    is $code, 200, 'posted again';
    ok wait_until(sub { $ctx->error_log =~ /fleet-wide limits hold again/ }, 3), 'A logged that leases work again';
    ok redis_cmd('EXISTS', 'ioa:{lim:a:Alice}'), 'a real bucket again';
    $b->stop;
--- no_error_log
[alert]



=== TEST 7: fleet scope: Redis stopped mid-run refuses posts, then fleet limits resume
fleet scope, Redis stopped mid-run: posts get redis_unavailable, the lease's
failure is logged; after Redis is back posts are limited by the fleet again,
each stored once.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_redis_timeout 1s;
    ioa_limit_scope fleet;
    ioa_limit_rate 10r/s burst=10;
    ioa_limit_room_rate off;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    my $b = start_b($ctx, "ioa_redis_timeout 1s;\nioa_limit_scope fleet;\nioa_limit_rate 10r/s burst=10;\nioa_limit_room_rate off;\n");
    register($ctx, 'Alice', 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    my ($code) = api($ctx, POST => '/agents/Alice/messages', { comm_id => $cid, content => 'before' });
    is $code, 200, 'a post before';
    redis_stop();
    my %codes;
    for my $i (1 .. 6) {
        for my $port ($ctx->port, $b->port) {
            my ($c, $d) = api($ctx, POST => '/agents/Alice/messages',
                              { comm_id => $cid, content => "down $i" }, port => $port);
            $codes{$c == 200 ? 'stored' : ($d && $d->{code}) // $c}++;
        }
        sleep 0.2;
    }
    diag "while Redis was away: " . join ', ', map { "$_ $codes{$_}" } sort keys %codes;
    ok !$codes{stored}, 'nothing stored while Redis is away';
    ok $codes{redis_unavailable}, 'the posts were told redis_unavailable';
    ok !$codes{rate_limited}, 'and not refused by a limit under the rate';
    like $ctx->error_log, qr/fleet-wide limit's lease got no answer from Redis/, 'the lease failure is logged';
    ok metric($ctx, $ctx->port, 'ioa_limit_leases_total\{result="failed"\}') > 0, '... and counted';
    redis_start();
    ok wait_until(sub {
        my $res = eval { $ctx->http(GET => '/health_check') };
        my $rb = eval { $ctx->http(GET => '/health_check', port => $b->port) };
        $res && $res->code == 200 && $rb && $rb->code == 200;
    }, 10), 'both hubs see Redis again';
    # the Redis of the tests keeps nothing: a new room
    register($ctx, 'Alice', 'Bob');
    $cid = teamup($ctx, 'Alice', ['Bob']);
    sleep 1.1;    # past the fallback
    my @r = hammer($ctx, $cid, 2, [$ctx->port, 'Alice'], [$b->port, 'Alice']);
    my $ok = $r[0][0] + $r[1][0];
    my $bound = 10 + 10 * 2 + 2 * 2 * 1;
    diag "after Redis came back: A $r[0][0] ok $r[0][1] limited, B $r[1][0] ok $r[1][1] limited (bound $bound)";
    ok $ok <= $bound + 5, "the fleet's limit holds again ($ok <= $bound, + 5 for timing)";
    is log_len($cid), $ok, 'exactly the accepted envelopes are stored, once';
    ok wait_until(sub { $ctx->error_log =~ /fleet-wide limits hold again/ }, 3), 'leases work again, logged';
    $b->stop;
--- no_error_log
[alert]



=== TEST 8: fleet scope: ioa_limit_teamup_rate holds across instances too
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_scope fleet;
    ioa_limit_teamup_rate 1r/m burst=8;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $b = start_b($ctx, "ioa_limit_scope fleet;\nioa_limit_teamup_rate 1r/m burst=8;\n");
    register($ctx, 'Alice', 'Bob');
    my %made = (A => 0, B => 0);
    for my $i (1 .. 10) {
        for my $x ([A => $ctx->port], [B => $b->port]) {
            my ($code) = api($ctx, POST => '/teamup',
                             { sender => 'Alice', agent_names => ['Bob'] }, port => $x->[1]);
            $made{ $x->[0] }++ if $code == 200;
        }
    }
    my $made = $made{A} + $made{B};
    diag "teamups: A $made{A}, B $made{B} of 10 each";
    # per instance it would be 8 + 8; the fleet: 8, + 2 x N x slice (1)
    ok $made >= 8 && $made <= 8 + 4, "the fleet made its burst of 8 rooms ($made), not 16";
    ok redis_cmd('EXISTS', 'ioa:{lim:t:Alice}'), "the maker's bucket is ioa:{lim:t:<agent>}";
    $b->stop;
--- no_error_log
[alert]
fleet-wide limit's lease got no answer



=== TEST 8b: fleet scope: ioa_limit_conn holds an agent's connections across instances
fleet scope: ioa_limit_conn holds across instances: a connection past the
fleet's count is closed right after its handshake with 1008
too_many_connections; a closed one frees its place; an instance killed with
its connections lets them go within ioa_presence_ttl.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_scope fleet;
    ioa_limit_conn 3;
    ioa_presence_ttl 10s;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    my $b = start_b($ctx, "ioa_limit_scope fleet;\nioa_limit_conn 3;\nioa_presence_ttl 10s;\n");
    register($ctx, 'Alice');
    my $open = sub {
        my $port = shift;
        my $ws = $ctx->ws('/ws/Alice', port => $port);
        die "handshake failed: " . ($ws->error // '') . ' ' . ($ws->body // '') . "\n" unless $ws->ok;
        return $ws;
    };
    # stays open: no close frame within the time a check takes
    my $stays = sub { !defined $_[0]->recv_close(1.5) };
    my $closed = sub {
        my ($code, $reason) = $_[0]->recv_close(3);
        $_[0]->disconnect;
        return ($code // 0) == 1008 && ($reason // '') =~ /^too_many_connections: .*ioa_limit_conn.*fleet/;
    };
    my @a = ($open->($ctx->port), $open->($ctx->port));
    my @b = ($open->($b->port));
    ok $stays->($_), 'one of the three stays open' for @a, @b;
    my %h = @{ redis_cmd('HGETALL', 'ioa:{conn:Alice}') };
    my $sum = 0;
    $sum += (split / /, $_)[0] for values %h;
    is $sum, 3, 'Redis counts three, per worker (' . join(', ', values %h) . ')';

    ok $closed->($open->($b->port)), 'a fourth on B: closed with 1008 too_many_connections';
    ok $closed->($open->($ctx->port)), 'a fourth on A: the same';
    like $ctx->error_log, qr/"Alice" already holds 3 connections across the fleet/, 'logged on A with the count';

    $a[0]->close;
    ok $a[0]->wait_eof(3), 'one on A closes';
    $a[0]->disconnect;
    sleep 0.3;
    push @b, $open->($b->port);
    ok $stays->($b[-1]), 'after one closed on A, a new one on B stays';
    ok $closed->($open->($ctx->port)), 'and the fleet is full again';

    # B dies with its two connections: its entry runs out in Redis
    my @pids = ($b->pid, $b->worker_pids);
    kill 'KILL', @pids;
    ok $closed->($open->($ctx->port)), 'right after B is killed its connections still count';
    my $t0 = time;
    ok wait_until(sub { my %e = @{ redis_cmd('HGETALL', 'ioa:{conn:Alice}') };
                        my $n = 0; $n += (split / /, $_)[0] for values %e; $n == 1 }, 25),
        'B\'s entry runs out within ioa_presence_ttl and a heartbeat (' . sprintf('%.1f', time - $t0) . ' s)';
    my @more = ($open->($ctx->port), $open->($ctx->port));
    ok $stays->($_), 'then A takes the places back' for @more;
    my $third = $ctx->ws('/ws/Alice');
    is $third->status, 429, 'up to the limit: A alone holds three now, and its own count refuses at the handshake';
    like metric($ctx, $ctx->port, 'ioa_limits_hit_total\{limit="conn"\}'), qr/^[4-9]$/, 'A counted its refusals';
    $_->close for $a[1], @more;
--- no_error_log
[alert]
[crit]
fleet-wide connection count got no answer



=== TEST 9: ioa_limit_scope: a bad value fails nginx -t naming the directive
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_scope fleet slice=0;
--- config
    location / { ioa_api; }
--- must_die
--- suppress_stderr
--- error_log
[emerg]
"ioa_limit_scope" directive has an invalid slice: a time from 1ms to 60s
