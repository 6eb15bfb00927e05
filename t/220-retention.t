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
use IoaTest::SSE;
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

=== TEST 1: ioa_room_retention removes silent rooms everywhere; a talking room stays
with ioa_room_retention 2s, rooms silent for 2 s (one that spoke, one that
never did) are removed from Redis, from their members' room sets and from the
index at the next sweep; a room that keeps talking stays; the removed room is
then unknown to every endpoint.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_room_retention 2s;
    ioa_limit_rate off;
    ioa_limit_room_rate off;
    ioa_limit_teamup_rate off;
--- config
    location / { ioa_api; }
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



=== TEST 1b: ioa_agent_retention removes agents unseen for its time; connected ones stay
with ioa_agent_retention 2s, an agent registered and never connected, and one
whose connection went, leave the registry 2 s after they were last seen (no
longer found, its room set gone, the index exact), while a connected agent
stays however long; a name that left can register again.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_agent_retention 2s;
    ioa_limit_teamup_rate off;
--- config
    location / { ioa_api; }
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



=== TEST 3: a room's own retention_s removes it when silent and leaves a tombstone
a room's own retention (/teamup "retention_s": 1) with ioa_room_retention off:
the silent room leaves Redis, the room sets, both indexes, and leaves a
tombstone; a room without one and a room that keeps talking stay; the answer
names the retention only where one applies.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_rate off;
    ioa_limit_room_rate off;
    ioa_limit_teamup_rate off;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, 'Alice', 'Bob', 'Carol');
    my ($code, $d) = api($ctx, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'], retention_s => 1 });
    is $code, 200, 'teamup with retention_s 1: 200';
    is $d->{retention_s}, 1, '... and the answer says so';
    my $short = $d->{comm_id};
    is redis_cmd('HGET', "ioa:{room:$short}:meta", 'retention_ms'), 1000, 'its meta holds retention_ms';
    ok defined redis_cmd('ZSCORE', 'ioa:{reg}:roomdue', $short), 'it is in the due index';
    ($code, $d) = api($ctx, POST => '/teamup', { sender => 'Alice', agent_names => ['Carol'] });
    is_deeply [ sort keys %$d ], [qw(agent_names comm_id team_name)],
        'without a retention anywhere: IoA\'s three fields only';
    my $kept = $d->{comm_id};
    ok !defined redis_cmd('ZSCORE', 'ioa:{reg}:roomdue', $kept), '... and not in the due index';
    ($code, $d) = api($ctx, POST => '/teamup', { sender => 'Bob', agent_names => ['Carol'], retention_s => 1 });
    my $busy = $d->{comm_id};
    my $bob = IoaTest::Agent->connect($ctx, 'Bob');
    sleep 0.3;
    $bob->post(envelope(comm_id => $short, content => 'once'));
    my ($m) = $bob->recv_until(sub { ($_->{content} // '') eq 'once' }, 5);
    ok $m, 'one envelope in the short room';
    my $t0 = time;
    my ($gone, $n);
    while (time < $t0 + 16) {
        $bob->post(envelope(comm_id => $busy, content => 'tick'));
        $n++ if $bob->recv_until(sub { ($_->{content} // '') eq 'tick' }, 5);
        if (!room_keys($short)) { $gone = time - $t0; last }
        sleep 0.3;
    }
    ok $gone, sprintf 'the short room is gone from Redis, every key (after %.1f s)', $gone // -1;
    is scalar(room_keys($kept)), 2, 'the room without a retention is all there';
    is scalar(room_keys($busy)), 4, 'the room that keeps talking is all there';
    is scalar @{ redis_cmd('XRANGE', "ioa:{room:$busy}:log", '-', '+') }, $n, '... with every envelope';
    is_deeply rooms_of('Alice'), [$kept], "Alice's room set no longer lists it";
    ok !defined redis_cmd('ZSCORE', 'ioa:{reg}:roomlist', $short), 'out of the room index';
    ok !defined redis_cmd('ZSCORE', 'ioa:{reg}:roomdue', $short), 'out of the due index';
    my $due = redis_cmd('ZSCORE', 'ioa:{reg}:roomdue', $busy);
    ok defined $due && $due > $t0 * 1000, 'the busy room is due a retention after its last envelope';
    my $at = redis_cmd('GET', "ioa:{room:$short}:expired");
    ok $at && abs($at / 1000 - $t0 - $gone) < 8, 'its tombstone says when it expired';
    my $ttl = redis_cmd('PTTL', "ioa:{room:$short}:expired");
    ok $ttl > 6 * 86400_000 && $ttl <= 7 * 86400_000, 'and is gone itself in a week';
    $bob->close;
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3b: resuming into an expired room gets room_expired naming it and when
resuming into the expired room gets room_expired naming it and when, over a
WebSocket (resume=, a resume frame) and SSE (Last-Event-ID), and from
/rooms/{id}/events and /fetch_chat_record; a room that never existed gets what
it got before; a post into it is still unknown_room.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_teamup_rate off;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, 'Alice', 'Bob');
    my ($code, $d) = api($ctx, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'], retention_s => 1 });
    my $cid = $d->{comm_id};
    my $kept = teamup($ctx, 'Alice', ['Bob']);
    my $never = 'f' x 32;
    my $a = IoaTest::Agent->connect($ctx, 'Alice');
    sleep 0.3;
    $a->post(envelope(comm_id => $cid, content => 'before'));
    my ($m) = $a->recv_until(sub { ($_->{content} // '') eq 'before' }, 5);
    my $id = $m && $m->{id};
    ok $id, 'an envelope in the room';
    $a->close;
    ok wait_until(sub { !room_keys($cid) }, 16), 'the room expired';
    my $expired = qr/room_expired/;

    my $ws = IoaTest::Agent->connect($ctx, 'Alice', "?resume=$cid:$id,$kept:0-1");
    my ($e) = $ws->recv_until(sub { ($_->{op} // '') eq 'error' }, 5);
    is $e && $e->{code}, 'room_expired', 'WebSocket resume=: room_expired';
    is $e && $e->{comm_id}, $cid, '... naming the room';
    like $e && $e->{message}, qr/expired at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ/, '... and when';
    $ws->close;

    $ws = IoaTest::Agent->connect($ctx, 'Alice', '?wait_resume=1');
    $ws->post(json()->encode({ op => 'resume', rooms => { $cid => $id, $kept => '0-1' } }));
    ($e) = $ws->recv_until(sub { ($_->{op} // '') eq 'error' }, 5);
    is "@{[ $e && $e->{code} ]} @{[ $e && $e->{comm_id} ]}", "room_expired $cid", 'a first resume frame: the same';
    $ws->close;

    $ws = IoaTest::Agent->connect($ctx, 'Alice');
    sleep 0.5;
    $ws->post(json()->encode({ op => 'resume', rooms => { $cid => $id } }));
    ($e) = $ws->recv_until(sub { ($_->{op} // '') eq 'error' }, 5);
    is $e && $e->{code}, 'room_expired', 'a resume frame once the rooms are loaded: the same';
    $ws->post(json()->encode({ op => 'resume', rooms => { $never => '0-1' } }));
    ($e) = $ws->recv_until(sub { ($_->{op} // '') eq 'error' }, 5);
    is "@{[ $e && $e->{code} ]}", 'not_member', '... and for a room that never existed, not_member as before';
    $ws->close;

    $ws = IoaTest::Agent->connect($ctx, 'Alice', "?resume=$never:0-1");
    ok $ws->quiet(1), 'resume= a room that never existed: nothing, as before'
        or diag explain $ws->noise;
    $ws->close;

    my $sse = IoaTest::SSE->connect($ctx->host, $ctx->port, '/agents/Alice/inbox',
                                    headers => ['Last-Event-ID' => "$cid:$id"]);
    my ($ev) = $sse->data_events(1, 5);
    is $ev && $ev->{event}, 'ioa', 'SSE Last-Event-ID: an ioa event';
    my $ed = $ev && eval { json()->decode($ev->{data}) };
    is "@{[ $ed && $ed->{code} ]} @{[ $ed && $ed->{comm_id} ]}", "room_expired $cid", '... room_expired naming the room';
    $sse->close;

    my $res = $ctx->http(GET => "/rooms/$cid/events", headers => ['Last-Event-ID' => $id]);
    is $res->code, 404, "/rooms/{id}/events: 404";
    like $res->content, qr/"code":"room_expired"/, '... room_expired';
    $res = $ctx->http(GET => "/rooms/$never/events");
    like $res->code . ' ' . $res->content, qr/^404 .*"code":"unknown_room"/, '... unknown_room for one that never existed';
    ($code, $d) = api($ctx, POST => '/fetch_chat_record', { comm_id => $cid, after => $id });
    is "$code $d->{code}", '404 room_expired', '/fetch_chat_record: 404 room_expired';
    ($code, $d) = api($ctx, POST => '/fetch_chat_record', { comm_id => $never });
    is "$code $d->{code}", '404 unknown_room', '... unknown_room for one that never existed';
    ($code, $d) = api($ctx, POST => '/agents/Alice/messages', { comm_id => $cid, content => 'late' });
    is "$code $d->{code}", '404 unknown_room', 'a post into it: unknown_room (post.lua reads no tombstone)';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 4: under ioa_room_retention a room may ask for less retention but not more
with ioa_room_retention 1h, a room may ask for less (and expires by it) but
not for more: 400 naming the limit; a room without its own gets the
deployment's and stays.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_room_retention 1h;
    ioa_limit_teamup_rate off;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, 'Alice', 'Bob');
    my ($code, $d) = api($ctx, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'], retention_s => 3601 });
    is "$code $d->{code} $d->{field}", '400 invalid_request retention_s', 'asking for more than ioa_room_retention: 400';
    like $d->{message}, qr/from 1 to 3600 .*ioa_room_retention/, '... naming the limit';
    for my $bad (0, -1, 1.5, '60', 'x') {
        ($code, $d) = api($ctx, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'], retention_s => $bad });
        is "$code $d->{field}", '400 retention_s', "retention_s $bad: 400";
    }
    is redis_cmd('ZCARD', 'ioa:{reg}:roomlist'), 0, 'none of them made a room';
    ($code, $d) = api($ctx, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'] });
    is $d->{retention_s}, 3600, 'without one: the deployment\'s, in the answer';
    my $long = $d->{comm_id};
    ($code, $d) = api($ctx, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'], retention_s => 2, team_name => undef });
    is "$code $d->{retention_s}", '200 2', 'asking for less: 200 with it';
    my $short = $d->{comm_id};
    ok wait_until(sub { !room_keys($short) }, 16), 'the short room expires';
    is scalar(room_keys($long)), 2, 'the other stays';
    is redis_cmd('ZCARD', 'ioa:{reg}:roomdue'), 0, 'the due index is empty';
    is_deeply rooms_of('Bob'), [$long], "Bob's room set lists the one left";
--- no_error_log
[alert]
[crit]
[emerg]
