# t/040-http-transport.t -- agents without WebSocket: POST
# /agents/{name}/messages, the SSE inbox GET /agents/{name}/inbox (event ids,
# Last-Event-ID / since= / resume= resume), the same over HTTP/2, the /chatlist
# observer feed, and order/ACL parity with WebSocket agents.
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/040-http-transport.t
#
# Every block starts from an empty Redis and a hub connected to it.  An
# inbox opened without a resume position starts "from now", and a client
# cannot see when "now" is, so such tests wait until the hub subscribed to
# the room (inbox_ready) before posting; everything else is exact.
#
# log_level('info'): at the runner's default "debug" level the module's
# worker crashes at start (t/030-registry.t keeps checking that in "the module's
# worker starts and serves with error_log at debug level").

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Api;
use IoaTest::SSE;
use IoaTest::WS;

use IO::Select ();
use IO::Socket::INET ();
use Time::HiRes qw(sleep time);

no_root_location();
log_level('info');

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value(init => 'main::hub_ready()')
        unless defined $block->init || defined $block->must_die;
});


# Registers the names (once each) and teams them up; returns the comm_id.
sub room {
    my ($ctx, $sender, @others) = @_;
    for my $n ($sender, @others) {
        my ($code, $d) = api($ctx, POST => '/register',
                             { name => $n, type => 'Human Assistant', desc => "agent $n" });
        die "register $n: $code\n" unless $code == 200;
    }
    my ($code, $d) = api($ctx, POST => '/teamup',
                         { sender => $sender, agent_names => \@others });
    die "teamup: $code " . jenc($d) . "\n" unless $code == 200;
    return $d->{comm_id};
}

# POST /agents/$who/messages; returns the stream id (dies unless 200).
sub say_http {
    my ($ctx, $who, $cid, $text, %extra) = @_;
    my ($code, $d) = api($ctx, POST => "/agents/$who/messages",
                         { comm_id => $cid, content => $text, %extra });
    die "post as $who: $code " . jenc($d) . "\n" unless $code == 200;
    return $d->{id};
}

sub inbox {
    my ($ctx, $who, %opt) = @_;
    my $q = $opt{query} // '';
    return IoaTest::SSE->connect($ctx->host, $opt{port} // $ctx->port,
                                 "/agents/$who/inbox$q",
                                 headers => $opt{headers} || []);
}

# Until the hub has subscribed to the room's channel, plus a moment for
# its first Stream read: from then on an "open from now" client gets every
# new envelope.
sub inbox_ready {
    my ($cid) = @_;
    my $ok = wait_until(sub {
        redis_numsub("ioa:{room:$cid}:ch") >= 1;
    }, 3);
    sleep 0.2;
    return $ok;
}

sub stream_ids {
    my ($cid) = @_;
    return [ map { $_->[0] } @{ redis_cmd('XRANGE', "ioa:{room:$cid}:log", '-', '+') } ];
}

sub ev_data { [ map { jdec($_->{data}) } @_ ] }

# "c1:1-0,c2:3-0" -> { c1 => '1-0', c2 => '3-0' }
sub position { +{ map { split /:/, $_, 2 } split /,/, $_[0] // '' } }

run_tests();

__DATA__

=== TEST 1: a POST answers {"id","comm_id"} and stamps the sender from the path
POST /agents/{name}/messages answers {"id","comm_id"} and stamps the sender
from the path.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, 'Alice', 'Bob');
    my ($code, $d, $res) = api($ctx, POST => '/agents/Alice/messages',
        { comm_id => $cid, content => 'no sender field', next_speaker => ['Bob'],
          state => 1, type => 4, id => 'client-id', timestamp => 5 });
    is $code, 200, '200';
    is $res->header('Content-Type'), 'application/json', 'JSON';
    is_deeply [ sort keys %$d ], ['comm_id', 'id'], 'exactly {"id","comm_id"}';
    like $d->{id}, qr/^\d+-\d+$/, 'id: a Stream id';
    is $d->{comm_id}, $cid, 'comm_id: the room';
    my $id1 = $d->{id};

    ($code, $d) = api($ctx, POST => '/agents/Bob/messages',
                      { comm_id => $cid, content => 'own name', sender => 'Bob' });
    is $code, 200, 'a sender equal to the path name is fine';

    my $log = redis_cmd('XRANGE', "ioa:{room:$cid}:log", '-', '+');
    is scalar @$log, 2, 'two entries in the room log';
    is $log->[0][0], $id1, 'the first under the id the POST returned';
    my $e = jdec($log->[0][1][1]);
    like $log->[0][1][1], qr/^\{"sender":"Alice","timestamp":\d+,/,
        'stored as {"sender":<path name>,"timestamp":<server time>,...}';
    isnt $e->{timestamp}, 5, 'the client\'s timestamp is replaced';
    ok !exists $e->{id}, 'the client\'s id is dropped';
    is_deeply [ @$e{qw(comm_id content state type)}, $e->{next_speaker} ],
              [ $cid, 'no sender field', 1, 4, ['Bob'] ], 'IoA fields kept';
    is jdec($log->[1][1][1])->{sender}, 'Bob', 'second entry: sender Bob';
--- no_error_log
[error]
[alert]
[crit]
[emerg]



=== TEST 2: in open mode another "sender" is stored as sent; an invalid one is 400
Open mode is IoA's: another "sender" is stored as sent (IoA's cont_input from
"user"), membership stays the poster's; a sender that is no name is 400
invalid_name and nothing is stored (with a token the mismatch is refused:
t/150-auth.t).
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, 'Alice', 'Bob');
    my ($code, $d) = api($ctx, POST => '/agents/Alice/messages',
                         { comm_id => $cid, content => 'go on', sender => 'user' });
    is $code, 200, 'Alice posts as "user": 200';
    my $stored = redis_cmd('XRANGE', "ioa:{room:$cid}:log", '-', '+')->[0][1][1];
    like $stored, qr/^\{"sender":"user","timestamp":\d+,/, '... stored with the sender as sent';
    unlike $stored, qr/"sender":"Alice"/, '... once';
    ($code, $d) = api($ctx, POST => '/agents/Carol/messages',
                      { comm_id => $cid, content => 'let me in', sender => 'Alice' });
    is "$code $d->{code}", '403 not_member', 'Carol posting as Alice into a room she is not in: not_member';
    ($code, $d) = api($ctx, POST => '/agents/Alice/messages',
                      { comm_id => $cid, content => 'x', sender => "B\nob" });
    is "$code $d->{code} $d->{field}", '400 invalid_name sender', 'a sender that is no name: 400 naming the field';
    is redis_cmd('XLEN', "ioa:{room:$cid}:log"), 1, 'only the first stored';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3: a non-member posting is 403 not_member and nothing is stored
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, 'Alice', 'Bob');
    room($ctx, 'Carol');
    say_http($ctx, 'Alice', $cid, 'first');
    for my $who (qw(Carol Stranger)) {
        my ($code, $d) = api($ctx, POST => "/agents/$who/messages",
                             { comm_id => $cid, content => 'let me in' });
        is $code, 403, "$who: 403";
        is $d->{code}, 'not_member', "$who: code not_member";
    }
    is redis_cmd('XLEN', "ioa:{room:$cid}:log"), 1, 'XLEN still 1: nothing stored';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 4: posting to an unknown room is 404 unknown_room
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- request
POST /agents/Alice/messages
{"comm_id":"0123456789abcdef0123456789abcdef","content":"anyone?"}
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body_like: ^\{"op":"error","code":"unknown_room","message":"[^\n]*","field":"comm_id"\}$
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 5: a body larger than ioa_max_message_size is 413
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / {
        ioa_api;
        ioa_max_message_size 1k;
    }
--- request eval
"POST /agents/Alice/messages\n" . '{"comm_id":"r1","content":"' . ('x' x 1100) . '"}'
--- error_code: 413
--- response_headers
Content-Type: application/json
--- response_body_like: ^\{"op":"error","code":"too_big","message":"[^\n]*"\}$
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 6: messages up to ioa_max_message_size pass: 1000 bytes under 1k, 20 KB under 1m
ioa_max_message_size is the limit: 1000 bytes pass under 1k, and 20 KB under
the default 1m.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
    location /small/ {
        ioa_api;
        ioa_max_message_size 1k;
    }
--- ioa_scenario
    my $cid = room($ctx, 'Alice', 'Bob');
    my $small = jenc({ comm_id => $cid, content => 'x' });
    $small = jenc({ comm_id => $cid, content => 'x' x (1024 - length($small) + 1) });
    is length $small, 1024, 'a body of exactly 1024 bytes';
    my ($code, $d) = api($ctx, POST => '/small/agents/Alice/messages', $small);
    is $code, 200, 'exactly ioa_max_message_size: accepted' or diag jenc($d);

    my $text = 'y' x 20000;
    my $ws = $ctx->ws('/ws/Bob');
    my $n = redis_cmd('XLEN', "ioa:{room:$cid}:log");
    $ws->send_text(jenc({ comm_id => $cid, content => $text }));
    ok wait_until(sub { redis_cmd('XLEN', "ioa:{room:$cid}:log") == $n + 1 }, 3),
        'a 20 KB envelope over WebSocket (default ioa_max_message_size 64k): stored';
    ($code, $d) = api($ctx, POST => '/agents/Alice/messages', { comm_id => $cid, content => $text });
    is $code, 200, 'the same 20 KB envelope over HTTP: accepted too' or diag jenc($d);
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 6b: ioa_max_message_size in the http block holds in every location below it
ioa_max_message_size given in the http block holds in every location below it
(it fell back to the 1m default: the http level's conf is never merged
itself).
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_max_message_size 2k;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, 'Alice', 'Bob');
    my ($code, $d) = api($ctx, POST => '/agents/Alice/messages', { comm_id => $cid, content => 'x' x 1500 });
    is $code, 200, '1.5 KB under 2k: accepted' or diag jenc($d);
    ($code, $d) = api($ctx, POST => '/agents/Alice/messages', { comm_id => $cid, content => 'x' x 3000 });
    is $code, 413, '3 KB over the http block\'s 2k: 413';
    is $d->{code}, 'too_big', 'code too_big';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 7: with Redis down a POST is 503 redis_unavailable, and works again after
With Redis down a POST is 503 redis_unavailable with Retry-After, and works
again after.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_redis_backoff_max 300ms;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, 'Alice', 'Bob');
    redis_stop();
    my $ok = eval {
        my ($code, $d, $res);
        ok wait_until(sub { ($code, $d, $res) = api($ctx, POST => '/agents/Alice/messages',
                                { comm_id => $cid, content => 'into the void' });
                            $code == 503 }, 3), 'POST: 503' or diag "got $code";
        is $d->{code}, 'redis_unavailable', 'code redis_unavailable';
        like $res->header('Retry-After') // '', qr/^\d+$/, 'Retry-After';
        is $res->header('Content-Type'), 'application/json', 'JSON';
        1;
    };
    my $err = $@;
    redis_start();
    die $err unless $ok;
    ok wait_until(sub { (api($ctx, GET => '/health_check'))[0] == 200 }, 5), 'hub reconnected';
    # the private Redis keeps nothing across a restart: a new room
    $cid = room($ctx, 'Alice', 'Bob');
    like say_http($ctx, 'Alice', $cid, 'back'), qr/^\d+-\d+$/, 'posting works again';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 8: malformed posts are refused: no comm_id, bad JSON, control frame, bad name, GET
Malformed posts: missing comm_id, bad JSON, a control frame, a bad name in the
path, GET.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- request eval
["POST /agents/Alice/messages\n" . '{"content":"where to?"}',
 "POST /agents/Alice/messages\n" . '{"comm_id":"r1","content":',
 "POST /agents/Alice/messages\n" . '{"op":"resume","since":"0-0"}',
 "POST /agents/Al%7Bi%7Dce/messages\n" . '{"comm_id":"r1","content":"x"}',
 "GET /agents/Alice/messages"]
--- error_code eval
[400, 400, 400, 400, 405]
--- response_body_like eval
['^\{"op":"error","code":"missing_comm_id","message":"[^\n]*","field":"comm_id"\}$',
 '^\{"op":"error","code":"invalid_json"',
 '^\{"op":"error","code":"invalid_envelope"',
 '^\{"op":"error","code":"invalid_name"',
 '"code":"method_not_allowed"']
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 9: the SSE inbox streams others' envelopes as data events in Stream order
The SSE inbox: text/event-stream, "retry:" first, others' envelopes (HTTP and
WebSocket) as data events in Stream order with <comm_id>:<id> ids.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, 'Alice', 'Bob', 'Carol');
    my $in = inbox($ctx, 'Bob');
    ok $in->ok, 'inbox: 200' or diag $in->error . ' ' . $in->body;
    like $in->header('Content-Type'), qr{^text/event-stream\b}, 'Content-Type: text/event-stream';
    is $in->header('Cache-Control'), 'no-cache', 'Cache-Control: no-cache';
    my $first = $in->next_event(2);
    like $in->raw, qr/^retry: \d+\n\n/, 'the stream starts with a retry: line';
    ok inbox_ready($cid), 'hub subscribed to the room';

    my $carol = $ctx->ws('/ws/Carol');
    ok $carol->ok, 'Carol on WebSocket' or diag $carol->error;
    my @sent;
    push @sent, say_http($ctx, 'Alice', $cid, 'one (http)');
    $carol->send_text(jenc({ comm_id => $cid, content => 'two (ws)' }));
    ok wait_until(sub { @{ stream_ids($cid) } == 2 }, 3), 'Carol\'s envelope stored';
    push @sent, stream_ids($cid)->[1];
    push @sent, say_http($ctx, 'Alice', $cid, 'three (http)');

    my @ev = $in->messages(3, 3);
    is scalar @ev, 3, 'three data events';
    my $data = ev_data(@ev);
    is_deeply [ map { $_->{content} } @$data ], ['one (http)', 'two (ws)', 'three (http)'],
        'in order';
    is_deeply [ map { $_->{sender} } @$data ], [qw(Alice Carol Alice)], 'senders';
    is_deeply [ map { $_->{id} } @$data ], \@sent, 'data.id: the Stream ids, in Stream order';
    is_deeply [ map { $_->{id} } @$data ], stream_ids($cid), '... which is XRANGE order';
    is_deeply [ map { $_->{comm_id} } @$data ], [ ($cid) x 3 ], 'comm_id';
    is_deeply [ map { $_->{id} } @ev ], [ map { "$cid:$_" } @sent ],
        'SSE id: lines are <comm_id>:<stream id>';
    ok !grep({ defined $_->{event} } @ev), 'envelopes are unnamed events (EventSource onmessage)';
    is $in->messages(1, 0.5), 0, 'nothing else';
--- no_error_log
[error]
[alert]
[crit]
[emerg]



=== TEST 10: resuming with Last-Event-ID gets exactly the missed events, then live again
Reconnecting with Last-Event-ID gets exactly the missed events: no gap, no
duplicate, then live again.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, 'Alice', 'Bob', 'Carol');
    my $in = inbox($ctx, 'Bob');
    ok inbox_ready($cid), 'inbox subscribed';
    my @ids = map { say_http($ctx, 'Alice', $cid, "before $_") } 1 .. 2;
    my @ev = $in->messages(2, 3);
    is_deeply [ map { $_->{id} } @ev ], [ map { "$cid:$_" } @ids ], 'two events';
    my $last = $in->last_id;
    $in->close;

    my $carol = $ctx->ws('/ws/Carol');
    push @ids, say_http($ctx, 'Alice', $cid, 'missed 1');
    $carol->send_text(jenc({ comm_id => $cid, content => 'missed 2' }));
    ok wait_until(sub { @{ stream_ids($cid) } == 4 }, 3), 'Carol\'s envelope stored';
    push @ids, stream_ids($cid)->[3];
    push @ids, say_http($ctx, 'Alice', $cid, 'missed 3');

    $in = inbox($ctx, 'Bob', headers => ['Last-Event-ID' => $last]);
    ok $in->ok, 'reconnect with Last-Event-ID' or diag $in->error . ' ' . $in->body;
    @ev = $in->messages(10, 1.5);
    is_deeply [ map { jdec($_->{data})->{content} } @ev ], ['missed 1', 'missed 2', 'missed 3'],
        'exactly the three missed envelopes, in order';
    is_deeply [ map { $_->{id} } @ev ], [ map { "$cid:$_" } @ids[2 .. 4] ], 'with their ids';

    push @ids, say_http($ctx, 'Alice', $cid, 'live');
    @ev = $in->messages(1, 2);
    is_deeply [ map { jdec($_->{data})->{content} } @ev ], ['live'], 'then live delivery';
    is $in->messages(1, 0.5), 0, 'once';
    $in->close;

    $in = inbox($ctx, 'Bob', headers => ['Last-Event-ID' => "$cid:$ids[0]"]);
    @ev = $in->messages(10, 1.5);
    is_deeply [ map { jdec($_->{data})->{id} } @ev ], [ @ids[1 .. 5] ],
        'an older Last-Event-ID: everything after it';
--- no_error_log
[error]
[alert]
[crit]
[emerg]



=== TEST 11: an event id holds every room's position; resuming with it is exact in each
An event id holds every room's position, and resuming with it is exact in
every room.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $r1 = room($ctx, 'Alice', 'Bob');
    my $r2 = room($ctx, 'Carol', 'Bob');
    my $in = inbox($ctx, 'Bob');
    ok inbox_ready($r1) && inbox_ready($r2), 'inbox subscribed to both rooms';
    my $a1 = say_http($ctx, 'Alice', $r1, 'r1 a');
    my $c1 = say_http($ctx, 'Carol', $r2, 'r2 a');
    my @ev = $in->messages(2, 3);
    is scalar @ev, 2, 'two events';
    is_deeply position($ev[1]{id}), { $r1 => $a1, $r2 => $c1 },
        'the second event\'s id: both rooms\' positions';
    $in->close;

    my @missed = (say_http($ctx, 'Carol', $r2, 'r2 b'), say_http($ctx, 'Alice', $r1, 'r1 b'),
                  say_http($ctx, 'Carol', $r2, 'r2 c'));
    $in = inbox($ctx, 'Bob', headers => ['Last-Event-ID' => $ev[1]{id}]);
    @ev = $in->messages(10, 1.5);
    is_deeply [ sort map { jdec($_->{data})->{content} } @ev ], ['r1 b', 'r2 b', 'r2 c'],
        'exactly the missed envelopes of both rooms';
    is_deeply [ map { jdec($_->{data})->{content} } grep { jdec($_->{data})->{comm_id} eq $r2 } @ev ],
              ['r2 b', 'r2 c'], 'in order within a room';
    is_deeply position($in->last_id), { $r1 => $missed[1], $r2 => $missed[2] },
        'the last id is the new position in both rooms';
--- no_error_log
[error]
[alert]
[crit]
[emerg]



=== TEST 12: a room with no envelope when the last event id was written is not skipped
A room that had no envelope yet when the last event id was written is not
skipped on resume.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $r1 = room($ctx, 'Alice', 'Bob');
    my $r2 = room($ctx, 'Carol', 'Bob');      # stays empty until Bob is away
    my $in = inbox($ctx, 'Bob');
    ok inbox_ready($r1) && inbox_ready($r2), 'inbox subscribed to both rooms';
    say_http($ctx, 'Alice', $r1, 'r1 a');
    my ($ev) = $in->messages(1, 3);
    ok $ev, 'one event';
    my $last = $ev->{id};
    $in->close;

    say_http($ctx, 'Carol', $r2, 'r2 first ever');
    say_http($ctx, 'Alice', $r1, 'r1 b');
    $in = inbox($ctx, 'Bob', headers => ['Last-Event-ID' => $last]);
    my @ev = $in->messages(10, 1.5);
    is_deeply [ sort map { jdec($_->{data})->{content} } @ev ], ['r1 b', 'r2 first ever'],
        "both envelopes missed while away arrive (Last-Event-ID was '$last')";
--- no_error_log
[error]
[alert]
[crit]
[emerg]



=== TEST 13: a room created while the inbox was away is delivered from its start on resume
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $r1 = room($ctx, 'Alice', 'Bob');
    my $in = inbox($ctx, 'Bob');
    ok inbox_ready($r1), 'inbox subscribed';
    say_http($ctx, 'Alice', $r1, 'r1 a');
    my ($ev) = $in->messages(1, 3);
    my $last = $ev->{id};
    $in->close;

    my $r2 = room($ctx, 'Carol', 'Bob');
    say_http($ctx, 'Carol', $r2, 'hello from a new room');
    $in = inbox($ctx, 'Bob', headers => ['Last-Event-ID' => $last]);
    my @ev = $in->messages(10, 1.5);
    is_deeply [ map { jdec($_->{data})->{content} } @ev ], ['hello from a new room'],
        'the new room\'s envelope posted while away arrives';
--- no_error_log
[error]
[alert]
[crit]
[emerg]



=== TEST 14: ?since=<id> and ?resume=<comm_id>:<id> resume like Last-Event-ID
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $r1 = room($ctx, 'Alice', 'Bob');
    my $r2 = room($ctx, 'Carol', 'Bob');
    # ids are per room (Redis time in ms, then a sequence): a post in
    # another room within the same millisecond as $a[0] may get the very
    # same id, which "after $a[0]" rightly leaves out; a pause after the
    # first post keeps the later ones in later milliseconds
    my @a = (say_http($ctx, 'Alice', $r1, "r1 1"));
    sleep 0.005;
    push @a, map { say_http($ctx, 'Alice', $r1, "r1 $_") } 2 .. 3;
    my @c = map { say_http($ctx, 'Carol', $r2, "r2 $_") } 1 .. 2;

    my $in = inbox($ctx, 'Bob', query => "?since=$a[0]");
    my @ev = $in->messages(10, 1.5);
    is_deeply [ sort map { jdec($_->{data})->{content} } @ev ],
              ['r1 2', 'r1 3', 'r2 1', 'r2 2'], 'since=: everything after that id, in every room';
    $in->close;

    $in = inbox($ctx, 'Bob', query => "?since=0-0");
    @ev = $in->messages(10, 1.5);
    is scalar @ev, 5, 'since=0-0: the whole history';
    $in->close;

    $in = inbox($ctx, 'Bob', query => "?resume=$r1:$a[1],$r2:$c[0]");
    @ev = $in->messages(10, 1.5);
    is_deeply [ sort map { jdec($_->{data})->{content} } @ev ], ['r1 3', 'r2 2'],
        'resume=: per room, after each room\'s id';
    say_http($ctx, 'Alice', $r1, 'r1 live');
    is_deeply [ map { jdec($_->{data})->{content} } $in->messages(1, 2) ], ['r1 live'],
        'then live';
--- no_error_log
[error]
[alert]
[crit]
[emerg]



=== TEST 15: a malformed Last-Event-ID is 400
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- more_headers
Last-Event-ID: not-a-position
--- request
GET /agents/Bob/inbox
--- error_code: 400
--- response_headers
Content-Type: application/json
--- response_body_like: ^\{"op":"error","code":"bad_option","message":"[^\n]*","field":"Last-Event-ID"\}$
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 16: malformed ?since= and ?resume= are 400, and so is a bad agent name
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- request eval
["GET /agents/Bob/inbox?since=yesterday",
 "GET /agents/Bob/inbox?resume=abc",
 "GET /agents/Bob/inbox?resume=abc:1-x",
 "GET /agents/B%7Bo%7Db/inbox"]
--- error_code eval
[400, 400, 400, 400]
--- response_body_like eval
['^\{"op":"error","code":"bad_option","message":"[^\n]*","field":"since"\}$',
 '^\{"op":"error","code":"bad_option","message":"[^\n]*","field":"resume"\}$',
 '^\{"op":"error","code":"bad_option","message":"[^\n]*","field":"resume"\}$',
 '^\{"op":"error","code":"invalid_name"']
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 17: over HTTP/2 POST, SSE inboxes with resume, /chatlist and big records all work
HTTP/2: POST works, an SSE inbox over h2 receives events and resumes with
Last-Event-ID; two inboxes and /chatlist multiplex on one connection;
/fetch_chat_record streams a 6 MB room over h2.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / { ioa_api; }
    }
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $base = 'http://127.0.0.1:' . $ctx->rand_port(1);
    my @h2 = (args => ['--http2-prior-knowledge']);
    my $cid = room($ctx, 'Alice', 'Bob');

    my ($code, $d, $h) = curl_json("$base/agents/Alice/messages", @h2, method => 'POST',
        body => { comm_id => $cid, content => 'over h2' },
        headers => ['Content-Type' => 'application/json']);
    is $code, 200, 'POST over HTTP/2: 200';
    like $d->{id}, qr/^\d+-\d+$/, '... with an id';
    is $d->{comm_id}, $cid, '... and the comm_id';
    is_deeply stream_ids($cid), [ $d->{id} ], 'stored';
    my @ids = ($d->{id});

    my $in = IoaTest::SSE->curl("$base/agents/Bob/inbox?since=0-0", @h2);
    ok $in->ok, 'SSE inbox over HTTP/2: 200' or diag $in->error . ' ' . $in->body;
    like $in->header('Content-Type'), qr{^text/event-stream}, 'text/event-stream';
    my @ev = $in->messages(1, 3);
    is_deeply [ map { $_->{id} } @ev ], ["$cid:$ids[0]"], 'the catch-up event';
    like $in->raw, qr/^retry: \d+\n\n/, 'retry: first, over h2 too';

    push @ids, say_http($ctx, 'Alice', $cid, 'live over h1');
    ($code, $d) = curl_json("$base/agents/Alice/messages", @h2, method => 'POST',
                            body => { comm_id => $cid, content => 'live over h2' });
    push @ids, $d->{id};
    @ev = $in->messages(2, 3);
    is_deeply [ map { jdec($_->{data})->{content} } @ev ], ['live over h1', 'live over h2'],
        'live events arrive on the h2 stream, in order';
    my $last = $in->last_id;
    is $last, "$cid:$ids[2]", 'Last-Event-ID position';
    $in->close;

    push @ids, map { say_http($ctx, 'Alice', $cid, "missed $_") } 1 .. 2;
    $in = IoaTest::SSE->curl("$base/agents/Bob/inbox", @h2, headers => ['Last-Event-ID' => $last]);
    @ev = $in->messages(10, 1.5);
    is_deeply [ map { jdec($_->{data})->{id} } @ev ], [ @ids[3, 4] ],
        'resuming over h2 with Last-Event-ID: exactly the missed events';
    $in->close;

    # the streamed /fetch_chat_record, over h2: 100 envelopes of 60 KB
    my $pad = 'z' x 60_000;
    redis_cmd('XADD', "ioa:{room:$cid}:log", '*', e => qq({"sender":"Alice","comm_id":"$cid","content":"$_ $pad"}))
        for 1 .. 100;
    ($code, $d) = curl_json("$base/fetch_chat_record", @h2, method => 'POST',
                            body => { comm_id => $cid, limit => 200 });
    is $code, 200, '/fetch_chat_record over HTTP/2: 200';
    is scalar @{ $d->{$cid}{chat_record} }, 105, '... every envelope of the 6 MB room, streamed';
    is $d->{$cid}{more}, JSON::PP::false, '... and the end of it';

    # two inboxes and the observer feed multiplexed on one h2 connection
    my $cid2 = room($ctx, 'Carol', 'Bob');
    # stdbuf: nghttp's stdout is a pipe, so it must not sit in a buffer
    my $pid = open(my $ng, '-|', 'stdbuf', '-oL', 'nghttp', '-t', '10', "$base/agents/Bob/inbox",
                   "$base/agents/Carol/inbox", "$base/chatlist") or die "nghttp: $!";
    ok wait_until(sub { redis_numpat() >= 1
                        && redis_numsub("ioa:{room:$cid2}:ch") >= 1 }, 5),
        'three h2 streams attached';
    sleep 0.3;
    my @m = map { say_http($ctx, 'Carol', $cid2, "mux $_") } 1 .. 2;
    my ($got, $deadline) = ('', time + 5);
    my $sel = IO::Select->new($ng);
    while (time < $deadline && (() = $got =~ /^data: /mg) < 6) {
        $sel->can_read($deadline - time) or last;
        sysread($ng, $got, 65536, length $got) or last;
    }
    kill 'TERM', $pid;
    close $ng;
    my @data = map { jdec($_) } $got =~ /^data: (.*)$/mg;
    is scalar(grep { !$_->{frontend_type} && $_->{content} =~ /^mux/ } @data), 4,
        'both inboxes got both envelopes';
    is_deeply [ map { $_->{id} } grep { ($_->{frontend_type} // '') eq 'message' } @data ], \@m,
        'the observer stream got them too';
    my @pos = $got =~ /^id: (.*)$/mg;
    is scalar(grep { (position($_)->{$cid2} // '') eq $m[1] } @pos), 2,
        'both inbox streams carry their own position';

    # inbox streams closed by the client leave the hub fine
    ($code) = curl_json("$base/health_check", @h2);
    is $code, 200, 'the h2 server still answers';
--- no_error_log
[error]
[alert]
[crit]
[emerg]



=== TEST 18: an open inbox keeps the agent online and joins rooms teamed up meanwhile
An open inbox makes the agent online until it closes (HTTP/1.1 and HTTP/2),
and joins rooms teamed up meanwhile from their first envelope.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / { ioa_api; }
    }
--- config
    location / { ioa_api; }
--- ioa_scenario
    room($ctx, 'Alice', 'Bob');
    my $online = sub {
        my (undef, $d) = api($ctx, POST => '/query_assistant', { name => 'Bob' });
        $d->{online} ? 1 : 0;
    };
    is $online->(), 0, 'Bob is offline';
    for my $proto ('HTTP/1.1', 'HTTP/2') {
        my $in = $proto eq 'HTTP/1.1'
            ? inbox($ctx, 'Bob')
            : IoaTest::SSE->curl('http://127.0.0.1:' . $ctx->rand_port(1) . '/agents/Bob/inbox',
                                 args => ['--http2-prior-knowledge']);
        ok $in->ok, "$proto inbox open";
        ok wait_until(sub { $online->() }, 3), "$proto: online while the inbox is open";

        # a room created now: its first envelope must not be missed
        my (undef, $t) = api($ctx, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'] });
        my $id = say_http($ctx, 'Alice', $t->{comm_id}, "first in a new room ($proto)");
        my @ev = $in->messages(1, 3);
        is jdec($ev[0]{data} // '{}')->{id}, $id, "$proto: the new room's first envelope arrives";

        $in->close;
        ok wait_until(sub { !$online->() }, 3), "$proto: offline once the inbox is closed";
    }
--- no_error_log
[error]
[alert]
[crit]
[emerg]



=== TEST 19: /chatlist gives each of two observers every room's envelopes and teamups
/chatlist: two observers at once both get every room's envelopes
("frontend_type":"message") and teamups ("frontend_type":"teamup").
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $n (qw(Alice Bob Carol)) {
        api($ctx, POST => '/register', { name => $n, type => 'Human Assistant', desc => $n });
    }
    my @obs = map { IoaTest::SSE->connect($ctx->host, $ctx->port, '/chatlist') } 1 .. 2;
    ok $_->ok, 'observer connected' or diag $_->error for @obs;
    like $obs[0]->header('Content-Type'), qr{^text/event-stream}, 'text/event-stream';
    my $wso = $ctx->ws('/chatlist_ws');
    ok $wso->ok, 'and IoA\'s WebSocket observer at the same time' or diag $wso->error;
    ok wait_until(sub { redis_numpat() >= 1 }, 3), 'hub subscribed to the feed';
    sleep 0.1;

    my (undef, $t1) = api($ctx, POST => '/teamup',
                          { sender => 'Alice', agent_names => ['Bob'], team_name => 'AB' });
    my (undef, $t2) = api($ctx, POST => '/teamup', { sender => 'Carol', agent_names => ['Bob'] });
    my $i1 = say_http($ctx, 'Alice', $t1->{comm_id}, 'in room 1');
    my $i2 = say_http($ctx, 'Carol', $t2->{comm_id}, 'in room 2');

    for my $k (0, 1) {
        my @ev = $obs[$k]->data_events(4, 3);
        is scalar @ev, 4, "observer $k: 4 events";
        my $d = ev_data(@ev);
        my @teamups = grep { $_->{frontend_type} eq 'teamup' } @$d;
        my @msgs = grep { $_->{frontend_type} eq 'message' } @$d;
        is_deeply [ map { $_->{comm_id} } @teamups ], [ $t1->{comm_id}, $t2->{comm_id} ],
            "observer $k: both teamups";
        is_deeply [ @{ $teamups[0] }{qw(team_name)}, $teamups[0]{agent_names} ],
                  [ 'AB', ['Bob', 'Alice'] ], "observer $k: teamup carries team_name and agent_names";
        is_deeply [ map { [ @$_{qw(id comm_id sender content)} ] } @msgs ],
                  [ [ $i1, $t1->{comm_id}, 'Alice', 'in room 1' ],
                    [ $i2, $t2->{comm_id}, 'Carol', 'in room 2' ] ],
            "observer $k: every room's envelopes with ids";
    }
    my @ws_got = map { jdec($wso->recv_text(2) // '') } 1 .. 4;
    is_deeply [ map { $_ && $_->{frontend_type} } @ws_got ], [qw(teamup teamup message message)],
        'the WebSocket observer got the same four, in order';
    is_deeply [ map { $_->{id} } @ws_got[2, 3] ], [ $i1, $i2 ], '... with the same ids';

    $obs[0]->close;
    sleep 0.1;
    my $i3 = say_http($ctx, 'Bob', $t1->{comm_id}, 'after one left');
    my @ev = $obs[1]->data_events(1, 2);
    is jdec($ev[0]{data})->{id}, $i3, 'the other observer keeps receiving after one leaves';
--- no_error_log
[error]
[alert]
[crit]
[emerg]



=== TEST 20: a WebSocket and an HTTP agent in one room see the same ids and ACL answers
A WebSocket agent and an HTTP agent in one room see the same sequence of ids,
and the same ACL answers.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, 'Alice', 'Bob');
    room($ctx, 'Carol');
    my $ws = $ctx->ws('/ws/Alice');
    ok $ws->ok, 'Alice on WebSocket' or diag $ws->error;
    my $in = inbox($ctx, 'Bob');
    ok $in->ok, 'Bob on SSE';
    ok inbox_ready($cid), 'subscribed';

    my @ws_seen;
    for my $i (1 .. 3) {
        $ws->send_text(jenc({ comm_id => $cid, content => "ws $i" }));
        my $m = jdec($ws->recv_text(3) // '') // {};
        push @ws_seen, $m->{id};
        say_http($ctx, 'Bob', $cid, "http $i");
        $m = jdec($ws->recv_text(3) // '') // {};
        push @ws_seen, $m->{id};
    }
    my @sse_seen = map { jdec($_->{data})->{id} } $in->messages(6, 3);
    my $log = stream_ids($cid);
    is scalar @$log, 6, 'six envelopes stored';
    is_deeply \@ws_seen, $log, 'the WebSocket agent saw every id, in Stream order';
    is_deeply \@sse_seen, $log, 'the HTTP agent saw the same sequence';

    # ACL parity for a non-member and for a sender that is no name
    my $carol = $ctx->ws('/ws/Carol');
    $carol->send_text(jenc({ comm_id => $cid, content => 'ws intruder' }));
    my $err = jdec($carol->recv_text(3) // '') // {};
    is "$err->{op} $err->{code}", 'error not_member', 'WebSocket non-member: error not_member';
    my ($code, $d) = api($ctx, POST => '/agents/Carol/messages', { comm_id => $cid, content => 'http intruder' });
    is "$code $d->{code}", '403 not_member', 'HTTP non-member: 403 not_member';
    $ws->send_text(jenc({ comm_id => $cid, content => 'spoof', sender => "B\tob" }));
    $err = jdec($ws->recv_text(3) // '') // {};
    is "$err->{op} $err->{code}", 'error invalid_name', 'WebSocket: a sender that is no name: invalid_name';
    ($code, $d) = api($ctx, POST => '/agents/Bob/messages', { comm_id => $cid, content => 'spoof', sender => "A\tlice" });
    is "$code $d->{code}", '400 invalid_name', 'HTTP: 400 invalid_name';
    is redis_cmd('XLEN', "ioa:{room:$cid}:log"), 6, 'none of them stored';
    is $in->messages(1, 0.5), 0, 'and the HTTP agent got none of them';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 21: an inbox sends its starting position first, so an early reconnect misses nothing
An inbox hands out its starting position before any envelope (an id-only
block), so a client that reconnects before its first envelope misses nothing.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $r1 = room($ctx, 'Alice', 'Bob');
    my $in = inbox($ctx, 'Bob');
    ok $in->ok, 'inbox open' or diag $in->error;
    my $ev;
    for (1 .. 3) {
        $ev = $in->next_event(3) or last;
        last if defined $ev->{id};
    }
    ok $ev && !defined $ev->{data}, 'an id-only block, no envelope';
    like $ev && $ev->{id}, qr/^$r1:\d+-\d+$/, 'holding the position in the room';
    my $last = $ev->{id};
    $in->close;

    say_http($ctx, 'Alice', $r1, 'while Bob was away');
    $in = inbox($ctx, 'Bob', headers => ['Last-Event-ID' => $last]);
    my @m = $in->messages(1, 3);
    is scalar(@m) && jdec($m[0]{data})->{content}, 'while Bob was away',
        'the envelope posted before the first one Bob ever saw';
    $in->close;
--- no_error_log
[error]
[alert]
[crit]
[emerg]



=== TEST 22: gzip compresses an SSE stream and each event still arrives when it happens
nginx's gzip module compresses an SSE stream where configured, over HTTP/1.1
and HTTP/2, and every event still arrives when it happens (the hub flushes
each one, so gzip writes a sync flush, not a buffer held until the stream
ends); without Accept-Encoding the stream is plain.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            ioa_api;
            gzip on;
            gzip_types text/event-stream;
            gzip_min_length 0;
        }
    }
--- config
    location / {
        ioa_api;
        gzip on;
        gzip_types text/event-stream;
        gzip_min_length 0;
    }
--- ioa_scenario
    my $cid = room($ctx, 'Alice', 'Bob');
    my $in = inbox($ctx, 'Bob', headers => ['Accept-Encoding' => 'gzip']);
    ok $in->ok, 'inbox: 200' or diag $in->error;
    is $in->header('Content-Encoding'), 'gzip', 'Content-Encoding: gzip';
    ok $in->compressed, 'the body is inflated as it comes';
    my $plain = inbox($ctx, 'Alice');
    ok $plain->ok && !defined $plain->header('Content-Encoding'),
        'a client that does not offer gzip gets the stream plain';
    ok inbox_ready($cid), 'hub subscribed to the room';

    my $text = 'compressible ' x 40;
    for my $k (1 .. 3) {
        say_http($ctx, 'Alice', $cid, "$k: $text");
        my @m = $in->messages(1, 3);
        is scalar(@m) && jdec($m[0]{data})->{content}, "$k: $text",
            "envelope $k arrives while the stream stays open (not held by gzip)";
    }
    ok !$in->eof, 'the stream is still open';
    ok !$in->error, 'every byte inflated' or diag $in->error;
    ok $in->wire < length($in->raw), sprintf 'fewer bytes on the wire than in the events (%d < %d)',
        $in->wire, length($in->raw);
    $in->close;
    $plain->close;

    # HTTP/2: curl hands the gzipped DATA frames through undecoded (no
    # --compressed), and the client inflates them as they come
    my $h2 = IoaTest::SSE->curl('http://127.0.0.1:' . $ctx->rand_port(1) . '/agents/Bob/inbox',
        args => ['--http2-prior-knowledge'], headers => ['Accept-Encoding' => 'gzip']);
    ok $h2->ok, 'inbox over h2: 200' or diag $h2->error;
    ok $h2->compressed, '... gzipped';
    ok inbox_ready($cid), 'still subscribed';
    say_http($ctx, 'Alice', $cid, "h2: $text");
    my $got;
    for my $ev ($h2->messages(4, 3)) {
        $got = 1 if jdec($ev->{data})->{content} eq "h2: $text";
        last if $got;
    }
    ok $got, 'over h2 too, the envelope arrives while the stream stays open';
    ok !$h2->error, 'every byte inflated' or diag $h2->error;
    $h2->close;
--- no_error_log
[error]
[alert]
[crit]
[emerg]
