# t/045-room-feed.t -- one room for readers who are not in it
# (ngx_ioa_room_api.c): GET /rooms/{comm_id}/events, its live transcript as
# SSE that resumes exactly with Last-Event-ID (also across a hub restart),
# and GET /rooms/{comm_id}/verify, its log's hash chain checked; who may
# read which room.
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/045-room-feed.t

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Api;
use IoaTest::Instance;
use IoaTest::JWT;
use IoaTest::SSE;

use File::Temp ();
use Time::HiRes qw(sleep time);

no_root_location();
log_level('info');

our $KEYDIR = File::Temp::tempdir('ioa-feed-XXXXXX', TMPDIR => 1, CLEANUP => 1);
our $K = jwt_keys($KEYDIR);
$ENV{TEST_NGINX_KEYS} = $KEYDIR;

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value(init => 'main::hub_ready()') unless defined $block->init;
});

sub tok {
    my ($sub, $scope) = @_;
    return jwt($K, 'HS256', { sub => $sub, scope => $scope, exp => time + 300 });
}

# registers the names, teams them up (the first makes the room): comm_id
sub room {
    my ($ctx, $headers, @names) = @_;
    for my $n (@names) {
        my ($code) = api($ctx, POST => '/register',
            { name => $n, type => 'Human Assistant', desc => "agent $n" },
            headers => $headers->($n));
        die "register $n: $code\n" unless $code == 200;
    }
    my ($code, $d) = api($ctx, POST => '/teamup',
        { sender => $names[0], agent_names => [ @names[1 .. $#names] ] },
        headers => $headers->($names[0]));
    die "teamup: $code\n" unless $code == 200;
    return $d->{comm_id};
}

sub say_as {
    my ($ctx, $headers, $who, $cid, $text, %o) = @_;
    my ($code, $d) = api($ctx, POST => "/agents/$who/messages",
                         { comm_id => $cid, content => $text },
                         headers => $headers->($who), %o);
    die "post as $who: $code\n" unless $code == 200;
    return $d->{id};
}

sub feed {
    my ($port, $cid, @headers) = @_;
    return IoaTest::SSE->connect('127.0.0.1', $port, "/rooms/$cid/events",
                                 headers => \@headers);
}

sub contents { [ map { jdec($_->{data})->{content} } @_ ] }

sub open_mode { sub { [] } }

run_tests();

__DATA__

=== TEST 1: the room's transcript from its beginning, then live; Last-Event-ID resumes it
The resume starts after the last event read, with nothing lost or doubled.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $h = open_mode();
    my $cid = room($ctx, $h, 'Alice', 'Bob');
    say_as($ctx, $h, 'Alice', $cid, "m$_") for 1 .. 3;
    my $f = feed($ctx->port, $cid);
    ok $f->ok, 'GET /rooms/{comm_id}/events: 200' or diag $f->status . ' ' . ($f->body // '');
    like $f->header('Content-Type'), qr{^text/event-stream}, 'an event stream';
    my @ev = $f->messages(3, 5);
    is_deeply contents(@ev), [qw(m1 m2 m3)], 'the log from its beginning';
    my $log = redis_cmd('XRANGE', "ioa:{room:$cid}:log", '-', '+');
    like $ev[2]{id}, qr/\Q$log->[2][0]\E$/, "each event's id names its log entry ($ev[2]{id})";
    say_as($ctx, $h, 'Bob', $cid, 'live');
    is_deeply contents($f->messages(1, 5)), ['live'], 'then live';
    my $last = $f->last_id;
    $f->close;
    say_as($ctx, $h, 'Alice', $cid, "missed $_") for 1 .. 2;
    my $again = feed($ctx->port, $cid, 'Last-Event-ID' => $last);
    is_deeply contents($again->messages(2, 5)), ['missed 1', 'missed 2'],
        'Last-Event-ID: what came meanwhile, from after the last read';
    say_as($ctx, $h, 'Bob', $cid, 'after');
    is_deeply contents($again->messages(1, 5)), ['after'], 'and live after it, once';
    $again->close;
--- no_error_log
[error]
[alert]
[crit]



=== TEST 2: a hub restart loses no line: the follower resumes with its Last-Event-ID
The follower comes back with its Last-Event-ID and gets exactly what was
posted meanwhile through another instance.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $h = open_mode();
    my $cid = room($ctx, $h, 'Alice', 'Bob');
    my %opt = (dir => $ctx->servroot . '/second',
               http_config => 'ioa_redis 127.0.0.1:' . $ctx->redis_port . ';',
               config => 'location / { ioa_api; }', log_level => 'info');
    # ready, not only started: the feed below is one request, not a
    # client that retries (under ASan a new hub is up before it is
    # connected to Redis, and answers 503 meanwhile)
    my $second = IoaTest::Instance->start(%opt)->ready;
    my $port = $second->port;
    my $f = feed($port, $cid);
    ok $f->ok, 'following through the second instance';
    ok wait_until(sub { redis_numsub("ioa:{room:$cid}:ch") >= 1 }, 5), 'subscribed';
    my @want = map { "before $_" } 1 .. 3;
    say_as($ctx, $h, 'Alice', $cid, $_) for @want;
    my @got = @{ contents($f->messages(3, 5)) };
    $second->stop;
    ok wait_until(sub { $f->next_event(0.2); $f->eof }, 5), 'the stream ended with the hub';
    my $last = $f->last_id;
    for my $i (1 .. 4) {
        push @want, "during $i";
        say_as($ctx, $h, 'Bob', $cid, "during $i");
    }
    $second = IoaTest::Instance->start(%opt, port => $port)->ready;
    my $back = feed($port, $cid, 'Last-Event-ID' => $last);
    ok $back->ok, 'the restarted hub takes the Last-Event-ID';
    push @got, @{ contents($back->messages(4, 5)) };
    push @want, 'after';
    say_as($ctx, $h, 'Alice', $cid, 'after');
    push @got, @{ contents($back->messages(1, 5)) };
    is_deeply \@got, \@want, 'every line once, in order';
    $back->close;
    $second->stop;
--- no_error_log
[alert]
[crit]



=== TEST 3: only observers and the room's members may follow and verify; others get 403
"observer" may follow any room, "observer:<comm_id>" that room, a member its
own rooms; others get 403 whether or not the room exists; an unknown room is
404 for an observer; a goal's feed is not a room here.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my %tok = map { $_ => tok($_, 'agent') } qw(Alice Bob Carol);
    my $h = sub { [ Authorization => "Bearer $tok{$_[0]}" ] };
    my $cid = room($ctx, $h, 'Alice', 'Bob');
    room($ctx, $h, 'Carol');
    say_as($ctx, $h, 'Alice', $cid, 'secret');
    my $status = sub {
        my ($token, $path) = @_;
        my $f = IoaTest::SSE->connect('127.0.0.1', $ctx->port, $path,
            headers => [ defined $token ? (Authorization => "Bearer $token") : () ]);
        my $s = $f->status;
        my $code = $s == 200 ? '' : ' ' . (jdec($f->body) // {})->{code};
        $f->close;
        return "$s$code";
    };
    my $ev = "/rooms/$cid/events";
    is $status->(tok('eye', 'observer'), $ev), '200', 'observer: 200';
    is $status->(tok('eye', "observer:$cid"), $ev), '200', 'observer:<comm_id>: 200';
    is $status->(tok('eye', 'admin'), $ev), '200', 'admin: 200';
    is $status->($tok{Bob}, $ev), '200', 'a member: 200';
    is $status->($tok{Carol}, $ev), '403 forbidden', 'another agent: 403 forbidden';
    is $status->(tok('eye', 'observer:other'), $ev), '403 forbidden', 'observer of another room: 403';
    is $status->($tok{Carol}, '/rooms/nosuchroom/events'), '403 forbidden',
        'no scope, no such room: 403 too (nothing learnt)';
    is $status->(tok('eye', 'observer'), '/rooms/nosuchroom/events'), '404 unknown_room',
        'an observer: 404 unknown_room';
    is $status->(undef, $ev), '401 unauthorized', 'no token: 401';
    redis_cmd('XADD', 'ioa:{room:goal-abc}:log', '*', 'e', '{}');
    is $status->(tok('eye', 'observer'), '/rooms/goal-abc/events'), '404 unknown_room',
        "a goal's feed is not a room";
    my ($code, $d) = api($ctx, GET => "/rooms/$cid/verify",
                         undef, headers => $h->('Carol'));
    is "$code $d->{code}", '403 forbidden', 'verify: the same rule';
    ($code, $d) = api($ctx, GET => "/rooms/$cid/verify",
                      undef, headers => $h->('Bob'));
    is "$code $d->{status}", '200 intact', 'a member verifies its room';
    ($code) = api($ctx, POST => "/rooms/$cid/events", '{}', headers => $h->('Bob'));
    is $code, 405, 'POST: 405';

    # scopes first, then membership: a token in a member's name that is
    # no agent's or launcher's is a member of nothing (as /fetch_chat_record)
    for my $scope ('', 'metrics', 'observer:other', 'billing', 'metrics observer:other') {
        my $t = tok('Bob', $scope);
        my $hb = [ Authorization => "Bearer $t" ];
        is $status->($t, $ev), '403 forbidden', "Bob with scope '$scope': events 403";
        ($code, $d) = api($ctx, GET => "/rooms/$cid/verify", undef, headers => $hb);
        is "$code $d->{code}", '403 forbidden', "Bob with scope '$scope': verify 403";
        ($code, $d) = api($ctx, POST => '/fetch_chat_record', qq({"comm_id":"$cid"}),
                          headers => $hb);
        is $code, 403, "Bob with scope '$scope': /fetch_chat_record 403 as well";
    }
    is $status->(tok('Bob', 'launch'), $ev), '200', 'Bob as a launcher (the person of a goal\'s room): 200';
--- no_error_log
[alert]
[crit]



=== TEST 4: verify: an intact log, an empty room, a deleted entry, an unknown room
The deleted entry is found where it was.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_rate off;
    ioa_limit_room_rate off;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $h = open_mode();
    my $cid = room($ctx, $h, 'Alice', 'Bob');
    my ($code, $d) = api($ctx, GET => "/rooms/$cid/verify");
    is_deeply [ $code, @$d{qw(comm_id status checked)} ], [ 200, $cid, 'empty', 0 ],
        'a room without envelopes: empty';
    my @ids = map { say_as($ctx, $h, $_ % 2 ? 'Alice' : 'Bob', $cid, "m$_") } 1 .. 2500;
    ($code, $d) = api($ctx, GET => "/rooms/$cid/verify");
    is_deeply [ $code, @$d{qw(status checked unchained)} ], [ 200, 'intact', 2500, 0 ],
        '2,500 envelopes (three batches): intact, every link checked';
    like $d->{chain_from}, qr/^genesis \Q$ids[0]\E$/, 'the chain starts at the first envelope';
    ok !exists $d->{broken_at}, 'nothing broken';
    redis_cmd('XDEL', "ioa:{room:$cid}:log", $ids[1700]);
    ($code, $d) = api($ctx, GET => "/rooms/$cid/verify");
    is_deeply [ $code, @$d{qw(status broken_at reason)} ],
              [ 200, 'broken', $ids[1701], 'hash mismatch' ],
        'an entry deleted: broken at the next one, which no longer links';
    is $d->{checked}, 1700, 'the links before it were intact';
    ($code, $d) = api($ctx, GET => '/rooms/nosuchroom/verify');
    is "$code $d->{code}", '404 unknown_room', 'an unknown room: 404';
--- no_error_log
[alert]
[crit]



=== TEST 5: every stream counts against its token's ioa_limit_conn; one more is 429
Streams count with the token's sockets: room feeds, goal feeds, the observer
feeds; one more is 429 and holds nothing; other tokens and /health_check are
untouched.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
    ioa_limit_conn 4;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my %tok = (Mal => tok('Mal', 'agent observer'), Bob => tok('Bob', 'agent'));
    my $h = sub { [ Authorization => "Bearer $tok{$_[0]}" ] };
    my $cid = room($ctx, $h, 'Mal', 'Bob');
    say_as($ctx, $h, 'Mal', $cid, 'hello');
    my $auth = [ Authorization => "Bearer $tok{Mal}" ];
    my @held;
    push @held, feed($ctx->port, $cid, @$auth) for 1 .. 2;
    push @held, IoaTest::SSE->connect('127.0.0.1', $ctx->port, '/chatlist', headers => $auth);
    push @held, $ctx->ws('/ws/Mal', headers => $auth);
    is_deeply [map { $_->status } @held], [200, 200, 200, 101],
        'two room feeds, the observer feed and a WebSocket: four, the limit';
    my $more = feed($ctx->port, $cid, @$auth);
    is $more->status, 429, 'a fifth stream: 429';
    like $more->body, qr/"too_many_connections"/, 'too_many_connections';
    like $more->body, qr/already holds 4 connections/, 'saying how many';
    $more->close;
    my $ws = $ctx->ws('/ws/Mal', headers => $auth);
    is $ws->status, 429, 'a WebSocket as well: the streams count against the sockets';
    my $obs = $ctx->ws('/chatlist_ws', headers => $auth);
    is $obs->status, 429, 'and the observer WebSocket';
    my $inbox = IoaTest::SSE->connect('127.0.0.1', $ctx->port, '/agents/Mal/inbox', headers => $auth);
    is $inbox->status, 429, 'and the inbox';
    $inbox->close;

    my $bob = feed($ctx->port, $cid, @{ $h->('Bob') });
    is $bob->status, 200, 'another token follows the room';
    my $bws = $ctx->ws('/ws/Bob', headers => $h->('Bob'));
    is $bws->status, 101, 'and connects';
    my ($code) = api($ctx, GET => '/health_check');
    is $code, 200, '/health_check answers';

    $held[0]->close;
    my $again;
    ok wait_until(sub { $again = feed($ctx->port, $cid, @$auth);
                        my $ok = $again->status == 200; $again->close unless $ok; $ok }, 3),
       'one closed: its place is free again';
    $_->close for grep { $_->can('close') } @held[1 .. $#held], $again, $bob, $bws;
--- no_error_log
[alert]
[crit]
