# t/205-ioa-frontend.t -- what IoA's own frontend (im_server/frontend in
# OpenBMB/IoA, a React app) reads from the hub, and how it reads it: one
# POST /fetch_chat_record {} when the page loads, then /chatlist_ws.  The
# app keeps every "message" frame under its comm_id and draws it as a
# bubble, puts a "teamup" frame's room on top of its list, ignores any
# other frontend_type, and puts the last room of the first answer on top;
# it never asks for a second page.  Real nginx + module + Redis, a real
# ioa-worker running a goal, over HTTP/1.1 and HTTP/2.
#
#   make -C workers/worker
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/205-ioa-frontend.t

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
        Test::More::plan(skip_all => "$bin is not built; run "
                                   . "`make -C workers/worker` first");
    }
}

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(json);
use IoaTest::Api;
use IoaTest::Goals;
use IoaTest::SSE;
use IO::Socket::INET ();
use Socket ();

no_root_location();
no_shuffle();
log_level('info');

# every frame an observer has got until it has been quiet for $quiet s
sub ws_frames {
    my ($ws, $quiet) = @_;
    my @f;
    while (defined(my $t = $ws->recv_text($quiet))) {
        push @f, jdec($t);
    }
    return @f;
}

sub sse_frames {
    my ($s, $quiet) = @_;
    my @f;
    while (defined(my $ev = $s->next_event($quiet))) {
        push @f, jdec($ev->{data}) if defined $ev->{data};
    }
    return @f;
}

# the top-level keys of an answer in the order they were written
sub room_order { [ $_[0] =~ /"([0-9a-f]{32})":\{"comm_id"/g ] }

# a room of $n envelopes of about $size bytes each, written as post.lua
# writes them; returns their ids
sub fill_room {
    my ($cid, $n, $size) = @_;
    my $pad = 'p' x $size;
    return map {
        redis_cmd('XADD', "ioa:{room:$cid}:log", '*',
                  e => qq({"sender":"Alice","comm_id":"$cid","content":"$_ $pad"}))
    } 1 .. $n;
}

# POST /fetch_chat_record on a socket that never reads the answer, followed
# on the same connection by a pipelined request
sub stalled_fetch {
    my ($ctx, $port, $json) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => $ctx->host, PeerPort => $port,
                                  Proto => 'tcp') or die "connect: $!\n";
    setsockopt $s, Socket::SOL_SOCKET(), Socket::SO_RCVBUF(), 4096;
    print {$s} "POST /fetch_chat_record HTTP/1.1\r\nHost: x\r\n"
             . "Content-Type: application/json\r\nContent-Length: "
             . length($json) . "\r\n\r\n$json"
             . "GET /health_check HTTP/1.1\r\nHost: x\r\n\r\n";
    return $s;
}

sub teamup {
    my ($ctx, @names) = @_;
    my (undef, $t) = api($ctx, POST => '/teamup', { sender => $names[0],
                                                    agent_names => [ @names[1 .. $#names] ] });
    return $t->{comm_id};
}

run_tests();

__DATA__

=== TEST 1: observer feeds carry a goal room's team-up and envelopes, not the goal feed
during a goal, every observer feed (/chatlist_ws, /chatlist over HTTP/1.1 and
HTTP/2) carries exactly the goal room's team-up and its envelopes, in IoA's
shapes, and none of the goal's own feed; that feed still reaches
/goals/{id}/events.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / { ioa_api; }
    }
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    %Seen = ();
    my $h2 = 'http://127.0.0.1:' . $ctx->rand_port(1);
    my $ws = $ctx->ws('/chatlist_ws');
    ok $ws->ok, '/chatlist_ws open' or diag $ws->error;
    my $s1 = IoaTest::SSE->connect($ctx->host, $ctx->port, '/chatlist');
    ok $s1->ok, '/chatlist over HTTP/1.1 open' or diag $s1->error;
    my $s2 = IoaTest::SSE->curl("$h2/chatlist", args => ['--http2-prior-knowledge']);
    ok $s2->ok, '/chatlist over HTTP/2 open' or diag $s2->error;
    ok wait_until(sub { redis_numpat() >= 1 }, 5), 'the hub follows the feed';
    sleep 0.3;

    register_agents($ctx,
        Poet       => 'writes poems and short verses on any topic',
        Translator => 'translates texts between English and French');
    my $ag = connect_agents($ctx, qw(Poet Translator));
    worker($ctx, 'w1');
    my $gid = launch(goal => 'Write a short poem about the sea. Translate the poem into French.');
    ok drive(agents => $ag, secs => 30, until => sub { state_of($gid) eq 'concluded' }),
       'the goal concluded' or diag worker_logs($ctx);
    my $cid = meta($gid)->{comm_id};
    like $cid, qr/^[0-9a-f]{32}$/, 'its room';
    my @room = room($cid);
    my @feed = feed($gid);
    ok @feed > @room, scalar(@feed) . ' events on the goal\'s own feed, ' . scalar(@room) . ' envelopes in its room';

    my %got = ('/chatlist_ws' => [ ws_frames($ws, 1.5) ],
               '/chatlist over HTTP/1.1' => [ sse_frames($s1, 0.5) ],
               '/chatlist over HTTP/2' => [ sse_frames($s2, 0.5) ]);
    for my $feed (sort keys %got) {
        my @f = @{ $got{$feed} };
        my @odd = grep { !$_ || ($_->{frontend_type} // '') !~ /^(?:message|teamup)$/ } @f;
        is scalar @odd, 0, "$feed: only message and teamup frames"
            or diag json()->encode(\@odd);
        is scalar(grep { ($_->{sender} // '') eq 'ioa-worker' || exists $_->{event}
                         || ($_->{comm_id} // '') =~ /^goal-/ } @f), 0,
           "$feed: nothing of the goal's feed";
        my @teamup = grep { $_->{frontend_type} eq 'teamup' } @f;
        is_deeply [ map { $_->{comm_id} } @teamup ], [$cid], "$feed: one team-up, the goal's room";
        is_deeply [ sort @{ $teamup[0]{agent_names} // [] } ],
                  [ sort @{ redis_cmd('SMEMBERS', "ioa:{room:$cid}:members") } ],
                  "$feed: ... naming its members";
        my @msg = grep { $_->{frontend_type} eq 'message' } @f;
        is_deeply [ map { $_->{id} } @msg ], [ map { $_->{id} } @room ],
            "$feed: one message per envelope of the room, in order (" . scalar(@room) . ')';
        is scalar(grep { ($_->{comm_id} // '') ne $cid || !defined $_->{sender}
                         || !defined $_->{content} } @msg), 0,
           "$feed: each with the comm_id, sender and content the frontend draws";
        ok $f[0] && $f[0]{frontend_type} eq 'teamup', "$feed: the team-up comes first";
    }
    $_->close for $ws, $s1, $s2;

    # a feed that wants the goal's events has them
    my $ev = IoaTest::SSE->connect($ctx->host, $ctx->port, "/goals/$gid/events");
    my @ge = sse_frames($ev, 1);
    $ev->close;
    ok scalar(grep { ($_->{event} // '') eq 'state' && ($_->{state} // '') eq 'concluded' } @ge),
       '/goals/{id}/events: the goal\'s states';
    is scalar(grep { ($_->{event} // '') eq 'envelope' } @ge), scalar @room,
       '... and its copies of the room\'s envelopes';
    my $st = stop_workers();
    is $st->{w1}, 0, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: /fetch_chat_record {} lists every room in IoA's order on HTTP/1.1 and HTTP/2
/fetch_chat_record {}: every room in IoA's order (the one that spoke last
comes last, so IoA's frontend shows it on top), the same over HTTP/1.1 and
HTTP/2; a room with no envelope is placed by its team-up.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / { ioa_api; }
    }
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $h2 = 'http://127.0.0.1:' . $ctx->rand_port(1);
    for my $n (qw(Alice Bob Carol)) {
        api($ctx, POST => '/register', { name => $n, type => 'Human Assistant', desc => $n });
    }
    my ($a, $b, $c) = map { my $x = teamup($ctx, 'Alice', 'Bob'); sleep 0.01; $x } 1 .. 3;
    my $post = sub {
        my ($cid, $text) = @_;
        my ($code) = api($ctx, POST => '/agents/Alice/messages', { comm_id => $cid, content => $text });
        is $code, 200, "posted into room " . substr($cid, 0, 6);
        sleep 0.01;
    };
    $post->($c, 'c1');
    $post->($a, 'a1');
    $post->($b, 'b1');
    my $d = teamup($ctx, 'Carol', 'Bob');       # made last, never spoke
    my ($code, $doc, undef, $raw) = curl_json('http://127.0.0.1:' . $ctx->port . '/fetch_chat_record',
                                               method => 'POST', body => '{}',
                                               headers => ['Content-Type' => 'application/json']);
    is $code, 200, '{}: 200';
    is_deeply room_order($raw), [ $c, $a, $b, $d ],
        'rooms in the order they last spoke (or were made): c, a, b, then the new silent d'
        or diag $raw;
    my ($code2, undef, undef, $raw2) = curl_json("$h2/fetch_chat_record", method => 'POST', body => '{}',
                                                 args => ['--http2-prior-knowledge']);
    is $code2, 200, 'over HTTP/2: 200';
    is $raw2, $raw, '... the same answer, byte for byte';

    $post->($a, 'a2');
    (undef, undef, undef, $raw) = curl_json('http://127.0.0.1:' . $ctx->port . '/fetch_chat_record',
                                            method => 'POST', body => '{}');
    is_deeply room_order($raw), [ $c, $b, $d, $a ], 'a spoke again: it comes last';

    # a list keeps the order it was asked in, as IoA answers it
    (undef, undef, undef, $raw) = curl_json('http://127.0.0.1:' . $ctx->port . '/fetch_chat_record',
                                            method => 'POST', body => jenc({ comm_id => [ $d, $a, $c ] }));
    is_deeply room_order($raw), [ $d, $a, $c ], 'a list of rooms: in its own order';
--- no_error_log
[error]
[alert]
[crit]
[emerg]



=== TEST 3: /fetch_chat_record without a page gives a long room's newest envelopes
no page asked for: a room longer than ioa_chat_record_latest (default 1000)
gives its newest envelopes, oldest first, with "older"; a page asked for
("limit", "after") starts where it always did; HTTP/1.1 and HTTP/2 agree.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / { ioa_api; }
    }
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_2;
        location / { ioa_api; ioa_chat_record_latest 25; }
    }
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my $h1 = 'http://127.0.0.1:' . $ctx->port;
    my $h2 = 'http://127.0.0.1:' . $ctx->rand_port(1);
    my $small = 'http://127.0.0.1:' . $ctx->rand_port(2);
    for my $n (qw(Alice Bob)) {
        api($ctx, POST => '/register', { name => $n, type => 'Human Assistant', desc => $n });
    }
    my $long = teamup($ctx, 'Alice', 'Bob');
    # 1,010 envelopes of 2 KB: the walk back to the page's start takes
    # several steps of room_tail.lua
    my @ids = fill_room($long, 1010, 2000);
    my $short = teamup($ctx, 'Alice', 'Bob');
    my @sids = fill_room($short, 12, 10);
    my $empty = teamup($ctx, 'Alice', 'Bob');

    my $fetch = sub {
        my ($base, $body, @a) = @_;
        my ($code, $doc, undef, $raw) = curl_json("$base/fetch_chat_record", method => 'POST',
                                                   body => $body, max_time => 20, @a);
        return ($code, $doc, $raw);
    };
    my ($code, $doc, $raw) = $fetch->($h1, '{}');
    is $code, 200, '{}: 200';
    my $r = $doc->{$long};
    is_deeply [ map { $_->{id} } @{ $r->{chat_record} } ], [ @ids[10 .. 1009] ],
        'a room of 1,010: its newest 1,000, oldest first (the 11th to the 1,010th)';
    is $r->{older}, JSON::PP::true, '... "older": true';
    is $r->{more}, JSON::PP::false, '... "more": false (it reaches the end)';
    ok exists $r->{next_after} && !defined $r->{next_after}, '... "next_after": null';
    like $r->{chat_record}[-1]{content}, qr/^1010 /, '... the last one is the newest envelope';
    is_deeply [ map { $_->{id} } @{ $doc->{$short}{chat_record} } ], \@sids, 'a room of 12: all of it';
    is $doc->{$short}{older}, JSON::PP::false, '... "older": false';
    is_deeply $doc->{$empty}{chat_record}, [], 'an empty room: no envelope';
    is $doc->{$empty}{older}, JSON::PP::false, '... "older": false';
    my (undef, undef, $raw2) = $fetch->($h2, '{}', args => ['--http2-prior-knowledge']);
    is $raw2, $raw, 'over HTTP/2: the same answer, byte for byte';

    ($code, $doc) = $fetch->($h1, jenc({ comm_id => $long }));
    is_deeply [ map { $_->{id} } @{ $doc->{$long}{chat_record} } ], [ @ids[10 .. 1009] ],
        '{"comm_id": <the room>}: the same newest page';
    ($code, $doc) = $fetch->($h2, jenc({ comm_id => [ $short, $long ] }), args => ['--http2-prior-knowledge']);
    is_deeply [ map { scalar @{ $doc->{$_}{chat_record} } } $short, $long ], [ 12, 1000 ],
        'a list of rooms, over HTTP/2: each its newest page';

    # asking for a page: from the start, as before
    ($code, $doc) = $fetch->($h1, jenc({ comm_id => $long, limit => 1000 }));
    $r = $doc->{$long};
    is_deeply [ map { $_->{id} } @{ $r->{chat_record} } ], [ @ids[0 .. 999] ], '"limit": the first page';
    is "$r->{more} $r->{next_after}", "1 $ids[999]", '... "more", and "next_after" its last id';
    ok !exists $r->{older}, '... and no "older" (a page from the start)';
    ($code, $doc) = $fetch->($h1, jenc({ comm_id => $long, after => $ids[999] }));
    is_deeply [ map { $_->{id} } @{ $doc->{$long}{chat_record} } ], [ @ids[1000 .. 1009] ],
        '"after": the page after it';

    # ioa_chat_record_latest 25
    ($code, $doc) = $fetch->($small, '{}');
    is_deeply [ map { $_->{id} } @{ $doc->{$long}{chat_record} } ], [ @ids[985 .. 1009] ],
        'ioa_chat_record_latest 25: the newest 25';
    is_deeply [ map { $_->{id} } @{ $doc->{$short}{chat_record} } ], \@sids, '... and a room of 12 whole';

    # the page follows the room's end
    my @more = fill_room($long, 3, 10);
    ($code, $doc) = $fetch->($small, jenc({ comm_id => $long }));
    is_deeply [ map { $_->{id} } @{ $doc->{$long}{chat_record} } ], [ @ids[988 .. 1009], @more ],
        'three more envelopes: the newest 25 move on by three';
--- no_error_log
[error]
[alert]
[crit]
[emerg]



=== TEST 3b: clients that never read a long room's newest page keep no one else waiting
Three clients ask for {} and a 6 MB room's newest page, each with a request
pipelined behind, and never read: another client is answered at once, and
a reader then gets the newest page whole and in order (the asan pass runs
it under ASan).
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_chat_record_latest 200; }
--- ioa_scenario
    fresh($ctx);
    for my $n (qw(Alice Bob)) {
        api($ctx, POST => '/register', { name => $n, type => 'Human Assistant', desc => $n });
    }
    my $big = teamup($ctx, 'Alice', 'Bob');
    my @ids = fill_room($big, 300, 20_000);
    my @stalled = map { stalled_fetch($ctx, $ctx->port, $_) }
                  '{}', jenc({ comm_id => $big }), jenc({ comm_id => [ $big, $big ] });
    sleep 1;
    my $t0 = time;
    my ($code, $doc) = api($ctx, POST => '/fetch_chat_record', { comm_id => $big, limit => 5 });
    is $code, 200, 'meanwhile another request is answered';
    ok time - $t0 < 2, '... at once';
    close $_ for @stalled;
    my (undef, $d, undef, $raw) = curl_json('http://127.0.0.1:' . $ctx->port . '/fetch_chat_record',
                                            method => 'POST', body => '{}', max_time => 30);
    is_deeply [ map { $_->{id} } @{ $d->{$big}{chat_record} } ], [ @ids[100 .. 299] ],
        'a reader: the newest 200, in order';
    is $d->{$big}{older}, JSON::PP::true, '... "older": true';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 4: ioa_chat_record_latest above its ceiling of 10000 stops nginx clearly
ioa_chat_record_latest above its ceiling (10000, the bound of "limit") stops
nginx with a clear message.
--- config
    location / { ioa_api; ioa_chat_record_latest 10001; }
--- must_die
--- suppress_stderr
--- error_log
[emerg]
value must be between 1 and 10000
