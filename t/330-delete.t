# t/330-delete.t -- deletion (issue 17): DELETE /agents/{name} (the agent
# itself or admin) removes its registry entry, index, presence and room
# memberships and closes its connections with 1008 on every hub instance;
# DELETE /rooms/{comm_id} (its creator or admin) hands its members a final
# envelope, drops their links and removes the room; every deletion is in
# the audit stream (GET /audit).  Real nginx + module + Redis (a Cluster
# too), two hub instances.
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/330-delete.t

use strict;
use warnings;

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(envelope fresh_hub json);
use IoaTest::Api;
use IoaTest::JWT;
use IoaTest::Instance;
use File::Temp ();
use Time::HiRes qw(sleep time);

no_root_location();
no_shuffle();
log_level('info');

our $KEYDIR = File::Temp::tempdir('ioa-delete-XXXXXX', TMPDIR => 1, CLEANUP => 1);
our $K = jwt_keys($KEYDIR);
$ENV{TEST_NGINX_KEYS} = $KEYDIR;

sub tok { jwt($K, 'HS256', { sub => $_[0], scope => $_[1] // 'agent', exp => time + 600 }) }
sub bearer { [ Authorization => "Bearer $_[0]" ] }
sub as {
    my ($ctx, $who, $method, $path, $body, $scope) = @_;
    return api($ctx, $method, $path, $body, headers => bearer(tok($who, $scope)));
}
sub reg {
    my ($ctx, @names) = @_;
    for my $n (@names) {
        my ($code, $d) = as($ctx, $n, POST => '/register',
                            { name => $n, type => 'Human Assistant', desc => "deletable agent $n" });
        die "register $n: $code\n" unless $code == 200;
    }
}
sub team {
    my ($ctx, $sender, $names) = @_;
    my ($code, $d) = as($ctx, $sender, POST => '/teamup',
                        { sender => $sender, agent_names => $names, team_name => 't' });
    die "teamup: $code\n" unless $code == 200;
    return $d->{comm_id};
}
sub members { [ sort @{ redis_cmd('SMEMBERS', "ioa:{room:$_[0]}:members") } ] }
sub audit { my ($code, $d) = as($_[0], 'root', GET => '/audit?count=50', undef, 'admin'); $d }

our $AUTH = <<"CONF";
    location / {
        ioa_api;
        ioa_auth jwt;
        ioa_auth_jwt_key $KEYDIR/hs256.key;
    }
CONF

run_tests();

__DATA__

=== TEST 1: DELETE /agents/{name} removes an agent everywhere and closes its WebSockets
DELETE /agents/{name}: itself or admin, others 403, unknown 404; entry, index,
presence, memberships go; its WebSockets on two instances close with 1008
"agent deleted"; it registers again afresh; each deletion is audited.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_teamup_rate off;
--- config
    location / {
        ioa_api;
        ioa_auth jwt;
        ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
    }
--- ioa_scenario
    fresh_hub($ctx);
    reg($ctx, qw(Alice Bob Carol Dave));
    my $cid = team($ctx, 'Alice', ['Bob', 'Carol']);
    my $cid2 = team($ctx, 'Carol', ['Bob']);

    my $b = IoaTest::Instance->start(
        dir => File::Temp::tempdir('ioa-instance-b-XXXXXX', TMPDIR => 1, CLEANUP => 1),
        workers => 1, log_level => 'info',
        avoid => [ $ctx->port ],
        http_config => "ioa_redis 127.0.0.1:" . $ctx->redis_port . ";",
        config => $main::AUTH,
    );
    ok wait_until(sub { my $r = $ctx->http(GET => '/health_check', port => $b->port); $r->code == 200 }, 10),
        'instance B is up';

    my $bob_a = IoaTest::Agent->connect($ctx, 'Bob', '', headers => bearer(tok('Bob')));
    my $bob_b = IoaTest::Agent->connect($ctx, 'Bob', '', headers => bearer(tok('Bob')), port => $b->port);
    my $carol = IoaTest::Agent->connect($ctx, 'Carol', '', headers => bearer(tok('Carol')));
    ok $bob_a->ok && $bob_b->ok && $carol->ok, 'Bob on both instances, Carol on A';
    ok wait_until(sub { defined redis_cmd('ZSCORE', 'ioa:{reg}:online', 'Bob') }, 5), 'Bob is online';

    # Bob has the floor of the first room alone, and shares the second's
    redis_cmd('SADD', "ioa:{room:$cid}:floor", 'Bob');
    redis_cmd('SADD', "ioa:{room:$cid2}:floor", 'Bob', 'Carol');

    my ($code, $d) = as($ctx, 'Carol', DELETE => '/agents/Bob');
    is "$code $d->{code}", '403 forbidden', 'Carol cannot delete Bob';
    ($code, $d) = as($ctx, 'root', DELETE => '/agents/Nobody', undef, 'admin');
    is "$code $d->{code}", '404 unknown_agent', 'an unknown agent: 404 unknown_agent';
    like $d->{message}, qr/"Nobody"/, '... naming it';
    ($code) = as($ctx, 'Bob', GET => '/agents/Bob');
    is $code, 405, 'GET /agents/{name}: 405';

    ($code, $d) = as($ctx, 'Bob', DELETE => '/agents/Bob');
    is $code, 200, 'Bob deletes itself';
    is_deeply $d, { deleted => 'agent', name => 'Bob', rooms => 2 }, '... the answer says what';

    for ([$bob_a, 'A'], [$bob_b, 'B']) {
        my ($c, $why) = $_->[0]->ws->recv_close(10);
        is "@{[ $c // 'none' ]} @{[ $why // '' ]}", '1008 agent deleted', "its WebSocket on instance $_->[1] closed: 1008 agent deleted";
    }
    ok $carol->quiet(0.3) || 1, 'Carol stays connected';
    $carol->post(envelope(comm_id => $cid, content => 'still here'));
    ok $carol->recv_until(sub { ($_->{content} // '') eq 'still here' }, 5), "Carol's connection and rooms go on";

    is redis_cmd('EXISTS', 'ioa:{reg}:agent:Bob', 'ioa:{reg}:rooms:Bob', 'ioa:{reg}:rep:Bob'), 0,
        'its entry, room set and task record are gone';
    ok wait_until(sub { !defined redis_cmd('ZSCORE', 'ioa:{reg}:online', 'Bob')
                        && !defined redis_cmd('ZSCORE', 'ioa:{reg}:seen', 'Bob') }, 5),
        'nothing of its presence is left once its connections went';
    ok !defined redis_cmd('ZSCORE', 'ioa:{reg}:agents', 'Bob'), 'out of the agent list';
    is_deeply members($cid), [qw(Alice Carol)], 'out of the first room';
    is_deeply members($cid2), [qw(Carol)], 'and of the second; the rooms stay';
    is redis_cmd('EXISTS', "ioa:{room:$cid}:floor"), 0,
        'a floor that was Bob alone is gone: the floor is open, the room cannot stall on him';
    is_deeply [ sort @{ redis_cmd('SMEMBERS', "ioa:{room:$cid2}:floor") } ], ['Carol'],
        'a shared floor keeps the others';
    ok redis_cmd('XLEN', "ioa:{room:$cid}:log") >= 1, 'with their logs';
    ($code) = as($ctx, 'Alice', POST => '/query_assistant', { name => 'Bob' });
    is $code, 404, '/query_assistant no longer finds it';
    ok wait_until(sub {
        my ($c, $r) = as($ctx, 'Alice', POST => '/retrieve_assistant',
                         { sender => 'Alice', capabilities => ['deletable agent'] });
        $c == 200 && json()->encode($r) !~ /"Bob"/ && json()->encode($r) =~ /"Dave"/;
    }, 5), '/retrieve_assistant neither';
    my ($n) = @{ redis_cmd('HMGET', 'ioa:{reg}:stats', 'n') };
    is $n, 3, 'the registry counts three agents';

    ($code, $d) = as($ctx, 'root', DELETE => '/agents/Dave', undef, 'admin');
    is $code, 200, 'admin deletes Dave';
    ($code, $d) = as($ctx, 'Bob', DELETE => '/agents/Bob');
    is "$code $d->{code}", '404 unknown_agent', 'deleting Bob again: 404';

    ($code) = as($ctx, 'Bob', POST => '/register', { name => 'Bob', type => 'Thing Assistant', desc => 'new Bob' });
    is $code, 200, 'Bob registers again';
    is redis_cmd('EXISTS', 'ioa:{reg}:rooms:Bob'), 0, '... afresh, in no room';

    my $log = audit($ctx);
    my @del = grep { $_->{action} eq 'agent_deleted' } @$log;
    is scalar @del, 2, 'the audit stream has two agent deletions';
    my ($dave) = grep { $_->{target} eq 'Dave' } @del;
    my ($bob) = grep { $_->{target} eq 'Bob' } @del;
    is $bob->{actor}, 'Bob', "Bob's: actor Bob";
    is $dave->{actor}, 'root', "Dave's: actor root";
    like $bob->{at}, qr/^\d{13}$/, '... at in ms';
    like $bob->{detail}, qr/rooms=2/, '... detail says how many rooms';
    ($code) = as($ctx, 'Alice', GET => '/audit');
    is $code, 403, 'an agent may not read the audit stream';
    $b->stop;
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: DELETE /rooms/{comm_id} removes a room and tells its connected members
DELETE /rooms/{comm_id}: creator or admin; members connected get a final
envelope and lose the link, keep their connection; keys and index entries go;
a resume and a post get room_deleted / unknown_room; audited.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_teamup_rate off;
--- config
    location / {
        ioa_api;
        ioa_auth jwt;
        ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
    }
--- ioa_scenario
    fresh_hub($ctx);
    reg($ctx, qw(Alice Bob Carol));
    my $cid = team($ctx, 'Alice', ['Bob']);
    my $other = team($ctx, 'Bob', ['Carol']);
    my $third = team($ctx, 'Carol', ['Alice']);
    my $bob = IoaTest::Agent->connect($ctx, 'Bob', '', headers => bearer(tok('Bob')));
    sleep 0.3;
    $bob->post(envelope(comm_id => $cid, content => 'before'));
    my ($m) = $bob->recv_until(sub { ($_->{content} // '') eq 'before' }, 5);
    ok $m, 'Bob speaks in the room';

    my ($code, $d) = as($ctx, 'Bob', DELETE => "/rooms/$cid");
    is "$code $d->{code}", '403 forbidden', 'a member that did not create it: 403';
    ($code, $d) = as($ctx, 'Alice', DELETE => '/rooms/nosuchroom');
    is "$code $d->{code}", '404 unknown_room', 'an unknown room: 404 unknown_room';

    ($code, $d) = as($ctx, 'Alice', DELETE => "/rooms/$cid");
    is $code, 200, 'its creator deletes it';
    is "$d->{deleted} $d->{comm_id} $d->{members}", "room $cid 2", '... the answer says what';

    my ($fin) = $bob->recv_until(sub { ($_->{comm_id} // '') eq $cid && $_->{ioa_room_deleted} }, 5);
    ok $fin, 'Bob gets the final envelope';
    is $fin && $fin->{sender}, 'ioa', '... from "ioa"';
    is $fin && $fin->{ioa_room_deleted}{by}, 'Alice', '... saying by whom';
    ok $fin && $fin->{id} =~ /^\d+-\d+$/, '... with an id';

    is scalar(grep { redis_cmd('EXISTS', "ioa:{room:$cid}:$_") } qw(meta members log floor chain)), 0,
        'every key of the room is gone';
    like redis_cmd('GET', "ioa:{room:$cid}:expired"), qr/^deleted:\d+:Alice$/, 'a tombstone says it was deleted';
    ok !defined redis_cmd('ZSCORE', 'ioa:{reg}:roomlist', $cid), 'out of the room index';
    ok !grep({ $_ eq $cid } @{ redis_cmd('SMEMBERS', "ioa:{reg}:rooms:$_") }), "out of ${_}'s room set"
        for qw(Alice Bob);

    $bob->post(envelope(comm_id => $cid, content => 'after'));
    my ($err) = $bob->recv_until(sub { ($_->{op} // '') eq 'error' }, 5);
    is $err && $err->{code}, 'unknown_room', 'posting into it afterwards: unknown_room';
    $bob->post(envelope(comm_id => $other, content => 'other room'));
    ok $bob->recv_until(sub { ($_->{content} // '') eq 'other room' }, 5), 'its connection goes on in its other room';

    my $re = IoaTest::Agent->connect($ctx, 'Bob', "?resume=$cid:$m->{id}", headers => bearer(tok('Bob')));
    my ($gone) = $re->recv_until(sub { ($_->{op} // '') eq 'error' }, 5);
    is $gone && $gone->{code}, 'room_deleted', 'a resume into it: room_deleted';
    like $gone && $gone->{message}, qr/deleted by "Alice"/, '... saying by whom';
    ($code, $d) = as($ctx, 'root', GET => "/rooms/$cid/events", undef, 'admin');
    is "$code $d->{code}", '404 room_deleted', 'its events: 404 room_deleted';

    ($code, $d) = as($ctx, 'root', DELETE => "/rooms/$third", undef, 'admin');
    is $code, 200, 'admin deletes a room it did not create';

    my @del = grep { $_->{action} eq 'room_deleted' } @{ audit($ctx) };
    is scalar @del, 2, 'the audit stream has both room deletions';
    my ($e) = grep { $_->{target} eq $cid } @del;
    is_deeply [ sort keys %$e ], [qw(action actor at detail id target)], 'an entry has at, action, actor, target, detail';
    is $e->{actor}, 'Alice', '... the actor';
    $bob->close;
    $re->close;
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3: in open mode (ioa_auth off) anyone may delete; the actor is "-"
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_teamup_rate off;
--- config
    location / { ioa_api; ioa_auth off; }
--- ioa_scenario
    fresh_hub($ctx);
    IoaTest::Agent::register($ctx, 'Alice', 'Bob');
    my $cid = IoaTest::Agent::teamup($ctx, 'Alice', ['Bob']);
    my ($code, $d) = api($ctx, DELETE => "/rooms/$cid");
    is $code, 200, 'a room deleted';
    ($code, $d) = api($ctx, DELETE => '/agents/Bob');
    is $code, 200, 'an agent deleted';
    ($code, $d) = api($ctx, GET => '/audit?count=1');
    is $code, 200, '/audit';
    is scalar @$d, 1, '?count=1: one entry';
    is "$d->[0]{action} $d->[0]{actor} $d->[0]{target}", 'agent_deleted - Bob', 'the newest first, actor "-"';
--- no_error_log
[alert]
[crit]
[emerg]
