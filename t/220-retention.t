# t/220-retention.t -- ioa_room_retention and ioa_agent_retention (issues
# 17 and 20): a room whose last envelope is older than the retention leaves
# Redis (its log, members, floor, chain and meta), the members' room sets
# and the room index; a room that keeps talking stays; an agent not seen
# for the retention leaves the registry, a connected one stays.  Real
# nginx + module + Redis (a Cluster too).
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/220-retention.t

use strict;
use warnings;

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(register teamup envelope fresh_hub json);
use IoaTest::Api;
use Time::HiRes qw(sleep time);

no_root_location();
no_shuffle();
log_level('info');

sub room_keys {
    my ($cid) = @_;
    return grep { redis_cmd('EXISTS', "ioa:{room:$cid}:$_") } qw(meta members log floor chain);
}

sub rooms_of { [ sort @{ redis_cmd('SMEMBERS', "ioa:{reg}:rooms:$_[0]") } ] }

run_tests();

__DATA__

=== TEST 1: with ioa_room_retention 2s, rooms silent for 2 s (one that spoke, one that never did) are removed from Redis, from their members' room sets and from the index at the next sweep; a room that keeps talking stays; the removed room is then unknown to every endpoint
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_room_retention 2s;
    ioa_limit_rate off;
    ioa_limit_room_rate off;
    ioa_limit_teamup_rate off;
--- config
    location / { ioa_api; }
--- request
GET /health_check
--- error_code_like: ^(?:200|503)$
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, 'Alice', 'Bob', 'Carol');
    my $spoke = teamup($ctx, 'Alice', ['Bob']);
    my $silent = teamup($ctx, 'Alice', ['Carol']);
    my $busy = teamup($ctx, 'Bob', ['Carol']);
    my $alice = IoaTest::Agent->connect($ctx, 'Alice');
    my $bob = IoaTest::Agent->connect($ctx, 'Bob');
    sleep 0.3;
    $alice->post(envelope(comm_id => $spoke, content => 'once'));
    ok $alice->recv_until(sub { ($_->{content} // '') eq 'once' }, 5), 'one envelope in the room that spoke';
    is scalar(room_keys($spoke)), 4, 'it has meta, members, log and chain';
    my @busy_ids;

    # the busy room speaks every half second while the others age
    my $until = time + 14;
    my $gone;
    while (time < $until) {
        $bob->post(envelope(comm_id => $busy, content => 'tick'));
        my ($m) = $bob->recv_until(sub { ($_->{content} // '') eq 'tick' }, 5);
        push @busy_ids, $m->{id} if $m;
        if (!room_keys($spoke) && !room_keys($silent)) { $gone = 1; last }
        sleep 0.5;
    }
    ok $gone, 'both silent rooms are gone from Redis, every key';
    is scalar(room_keys($busy)), 4, 'the busy room is all there';
    is scalar @{ redis_cmd('XRANGE', "ioa:{room:$busy}:log", '-', '+') }, scalar @busy_ids,
        '... with every envelope it was sent';
    is_deeply rooms_of('Alice'), [], "Alice's room set no longer lists them";
    is_deeply rooms_of('Bob'), [$busy], "Bob's lists the busy room only";
    is_deeply rooms_of('Carol'), [$busy], "and Carol's";
    ok !defined redis_cmd('ZSCORE', 'ioa:{reg}:roomlist', $_), "$_ is out of the room index"
        for $spoke, $silent;
    my $score = redis_cmd('ZSCORE', 'ioa:{reg}:roomlist', $busy);
    ok defined $score && $score > 0, 'the busy room is in the index (looked at again a retention after its last envelope)';

    # an expired room is unknown everywhere
    my ($code, $d) = api($ctx, POST => '/fetch_chat_record', { comm_id => $spoke });
    is $code, 404, '/fetch_chat_record of an expired room: 404';
    ($code, $d) = api($ctx, POST => '/agents/Alice/messages', { comm_id => $spoke, content => 'late' });
    is "$code $d->{code}", '404 unknown_room', 'posting into it: 404 unknown_room';
    $alice->post(envelope(comm_id => $spoke, content => 'late too'));
    my ($err) = $alice->recv_until(sub { ($_->{op} // '') eq 'error' }, 5);
    is $err && $err->{code}, 'unknown_room', '... and over the WebSocket that stayed open';
    ok !room_keys($spoke), 'nothing was recreated';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 1b: with ioa_agent_retention 2s, an agent registered and never connected, and one whose connection went, leave the registry 2 s after they were last seen (no longer found, its room set gone, the index exact), while a connected agent stays however long; a name that left can register again
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_agent_retention 2s;
    ioa_limit_teamup_rate off;
--- config
    location / { ioa_api; }
--- request
GET /health_check
--- error_code_like: ^(?:200|503)$
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, 'Idle', 'Stays', 'Leaves');
    my $cid = teamup($ctx, 'Stays', ['Idle', 'Leaves']);
    my $stays = IoaTest::Agent->connect($ctx, 'Stays');
    my $leaves = IoaTest::Agent->connect($ctx, 'Leaves');
    sleep 1.5;
    $leaves->close;
    my $until = time + 16;
    my $gone;
    while (time < $until) {
        my ($c1) = api($ctx, POST => '/query_assistant', { name => 'Idle' });
        my ($c2) = api($ctx, POST => '/query_assistant', { name => 'Leaves' });
        if ($c1 == 404 && $c2 == 404) { $gone = 1; last }
        sleep 0.5;
    }
    ok $gone, 'both left the registry';
    my ($code, $d) = api($ctx, POST => '/query_assistant', { name => 'Stays' });
    is $code, 200, 'the connected agent stays';
    ($code, $d) = api($ctx, POST => '/retrieve_assistant', { sender => 'Carol', capabilities => ['test agent'] });
    like json()->encode($d), qr/"Stays"/, '/retrieve_assistant finds the one that stays';
    unlike json()->encode($d), qr/"(?:Idle|Leaves)"/, '... and neither of the others';
    is redis_cmd('EXISTS', 'ioa:{reg}:rooms:Idle', 'ioa:{reg}:rooms:Leaves', 'ioa:{reg}:agent:Idle'), 0,
        'their records and room sets are gone';
    is_deeply [ sort @{ redis_cmd('SMEMBERS', "ioa:{room:$cid}:members") } ], [qw(Idle Leaves Stays)],
        'the room keeps their names among its members';
    my ($n) = @{ redis_cmd('HMGET', 'ioa:{reg}:stats', 'n') };
    is $n, 1, 'the registry counts one agent';
    ($code) = api($ctx, POST => '/register', { name => 'Leaves', type => 'Thing Assistant', desc => 'back' });
    is $code, 200, 'a name that left registers again';
    $stays->close;
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: ioa_room_retention refuses what is not "off" or a time of at least 1s
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_room_retention 500ms;
--- config
    location / { ioa_api; }
--- must_die
--- error_log
"ioa_room_retention" takes "off" or a time of at least 1s, such as "7d", not "500ms"
