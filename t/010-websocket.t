# t/010-websocket.t -- RFC 6455 behaviour of ioa's WebSocket endpoint,
# GET /ws/{agent_name}: the opening handshake and its refusals, frame
# decoding and every protocol error a server must detect (with the close
# code RFC 6455 section 7.4.1 assigns to it), ping/pong in both directions,
# the closing handshake, the size and send-queue limits, graceful reload and
# shutdown, and many connections at once.
#
#     TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#         prove -It/lib t/010-websocket.t
#
# Conventions of this file:
#   - every block has `location / { ioa_api; }` (IoA's paths), so the runner's
#     own root location is off (no_root_location);
#   - a block with a scenario and no request of its own gets `GET /`, which
#     ioa_api answers with 404 unknown_endpoint: the preprocessor below makes
#     that the expected answer, so the block request also proves ioa_api
#     serves the location;
#   - nginx runs with a master process, as in production, so that reload and
#     graceful shutdown (SIGHUP/SIGQUIT to the master) can be tested;
#   - IoaTest::WS's `pipeline_raw` (bytes in the handshake's own write) and
#     `rcvbuf` (a small receive window for clients that do not read) serve
#     the pipelining and send-queue blocks; TEST 38 reads /proc (Linux);
#   - protocol errors are each sent on a fresh connection, and each expects
#     the close code, a reason naming the problem, and then the end of the
#     TCP connection (the server shuts down its side after its close frame).

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;

use JSON::PP ();
use IO::Select ();
use Time::HiRes qw(sleep time);

no_root_location();
master_on();
workers(1);
worker_connections(1024);

add_block_preprocessor(sub {
    my $block = shift;
    return unless defined $block->ioa_scenario;
    return if defined $block->request || defined $block->raw_request;
    $block->set_value(request => "GET /\n");
    $block->set_value(error_code => 404) unless defined $block->error_code;
    $block->set_value(response_body_like => '"code":"unknown_endpoint"')
        unless defined $block->response_body_like;
});

# ------------------------------------------------------------------ helpers
# (package main: scenario code calls them directly)

our $JSON = JSON::PP->new->canonical;

our $SampleKey    = 'dGhlIHNhbXBsZSBub25jZQ==';        # RFC 6455 1.3
our $SampleAccept = 's3pPLMBiTxaQ9kYGzzhZRbK+xOo=';

sub decode_json_or_undef {
    my $text = shift;
    return undef unless defined $text;
    return eval { JSON::PP->new->decode($text) };
}

# A handshake that must succeed.
sub ws_ok {
    my ($ctx, $path, %opt) = @_;
    my $ws = $ctx->ws($path, %opt);
    Test::More::ok($ws->ok, "handshake $path")
        or Test::More::diag($ws->error . "\n" . ($ws->body // ''));
    return $ws;
}

# Waits for the server's close frame; checks its code and reason, and that
# the server then ends the TCP connection.
sub expect_close {
    my ($ws, $code, $reason_re, $what, $timeout) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my ($got, $reason) = $ws->recv_close($timeout // 3);
    Test::More::is($got, $code, "$what: close code $code")
        or Test::More::diag('eof=' . ($ws->eof ? 1 : 0));
    Test::More::like($reason // '', $reason_re, "$what: close reason")
        if $reason_re;
    Test::More::ok($ws->wait_eof(3), "$what: server ends the TCP connection");
}

# The next frame must be a pong with this payload.
sub expect_pong {
    my ($ws, $payload, $what, $timeout) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $f = $ws->recv_frame($timeout // 3);
    Test::More::ok($f && $f->{opcode} == 0xA && $f->{fin} && !$f->{rsv}
                   && !$f->{masked}, "$what: an unmasked final pong")
        or Test::More::diag(Test::More::explain($f));
    Test::More::is($f && $f->{payload}, $payload, "$what: pong payload");
}

# The next frame must be one of our {"op":"error"} text frames.
sub expect_error_frame {
    my ($ws, $code, $what, $timeout) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $f = $ws->recv_frame($timeout // 3);
    Test::More::ok($f && $f->{opcode} == 1 && $f->{fin} && !$f->{masked},
                   "$what: an unmasked final text frame")
        or Test::More::diag(Test::More::explain($f));
    my $j = decode_json_or_undef($f && $f->{payload});
    Test::More::ok(ref $j eq 'HASH', "$what: the frame is a JSON object")
        or Test::More::diag($f && $f->{payload});
    $j = {} unless ref $j eq 'HASH';
    Test::More::is($j->{op}, 'error', "$what: op error");
    Test::More::is($j->{code}, $code, "$what: code $code");
    Test::More::ok(defined $j->{message} && length $j->{message} > 10,
                   "$what: a human-readable message")
        or Test::More::diag($f && $f->{payload});
    return $j;
}

# Nothing arrives for a while (and the connection is still open).
sub expect_silence {
    my ($ws, $secs, $what) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $f = $ws->recv_frame($secs);
    Test::More::ok(!$f && !$ws->eof, "$what: nothing arrives, still open")
        or Test::More::diag(Test::More::explain($f));
}

# One raw HTTP request on a fresh connection; reads the response head and a
# Content-Length body (so keep-alive connections do not stall).
sub raw_http {
    my ($ctx, $bytes, $timeout) = @_;
    my $s = $ctx->connect;
    local $SIG{PIPE} = 'IGNORE';
    syswrite $s, $bytes;
    my ($raw, $deadline) = ('', time + ($timeout // 3));
    my $sel = IO::Select->new($s);
    while (1) {
        if ((my $end = index $raw, "\r\n\r\n") >= 0) {
            my $len = $raw =~ /^Content-Length:\s*(\d+)/mi ? $1 : undef;
            last if defined $len && length($raw) >= $end + 4 + $len;
        }
        my $left = $deadline - time;
        last if $left <= 0 || !$sel->can_read($left);
        sysread($s, $raw, 65536, length $raw) or last;
    }
    close $s;
    my ($head) = $raw =~ /^(.*?\r\n)\r\n/s;
    return (HTTP::Response->parse($raw), $head // '');
}

# The handshake request ioa expects, with headers replaced/removed.
sub handshake_request {
    my ($method, $path, $version, @override) = @_;
    my @h = (Host => 'localhost', Upgrade => 'websocket',
             Connection => 'Upgrade', 'Sec-WebSocket-Key' => $SampleKey,
             'Sec-WebSocket-Version' => 13);
    while (my ($k, $v) = splice @override, 0, 2) {
        my @keep;
        while (my ($hk, $hv) = splice @h, 0, 2) {
            push @keep, $hk, $hv if lc $hk ne lc $k;
        }
        @h = (@keep, defined $v ? ($k, $v) : ());
    }
    my $req = "$method $path $version\r\n";
    $req .= "$h[$_]: $h[$_ + 1]\r\n" for grep { $_ % 2 == 0 } 0 .. $#h;
    return "$req\r\n";
}

# A refusal of the handshake: status, JSON error body, and headers.
sub expect_refusal {
    my ($ws_or_res, $status, $code, $field, $what) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my ($st, $ctype, $body) = ref $ws_or_res eq 'IoaTest::WS'
        ? ($ws_or_res->status, $ws_or_res->header('Content-Type'),
           $ws_or_res->body)
        : ($ws_or_res->code, scalar $ws_or_res->header('Content-Type'),
           $ws_or_res->content);
    Test::More::is($st, $status, "$what: status $status");
    Test::More::is($ctype, 'application/json', "$what: JSON content type");
    my $j = decode_json_or_undef($body);
    Test::More::ok(ref $j eq 'HASH', "$what: body is a JSON object")
        or Test::More::diag($body);
    $j = {} unless ref $j eq 'HASH';
    Test::More::is($j->{op}, 'error', "$what: op error");
    Test::More::is($j->{code}, $code, "$what: code $code") if defined $code;
    Test::More::is($j->{field}, $field, "$what: field " . ($field // 'none'));
    Test::More::ok(defined $j->{message} && length $j->{message} > 10,
                   "$what: a human-readable message");
    return $j;
}

# Registers agents and teams them up; returns the room's comm_id.
sub make_room {
    my ($ctx, @names) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    for my $n (@names) {
        my $res = $ctx->http(POST => '/register',
            headers => ['Content-Type' => 'application/json'],
            body => $JSON->encode({ name => $n, type => 'Human Assistant',
                                    desc => "test agent $n" }));
        Test::More::is($res->code, 200, "register $n")
            or Test::More::diag($res->as_string);
    }
    my $res = $ctx->http(POST => '/teamup',
        headers => ['Content-Type' => 'application/json'],
        body => $JSON->encode({ sender => $names[0],
                                agent_names => [@names[1 .. $#names]],
                                team_name => 'ws-test' }));
    Test::More::is($res->code, 200, 'teamup') or Test::More::diag($res->as_string);
    my $j = decode_json_or_undef($res->content) // {};
    Test::More::ok($j->{comm_id}, 'teamup gave a comm_id');
    return $j->{comm_id};
}

# Children of a pid (nginx's workers).
sub child_pids_of {
    my $ppid = shift;
    my @kids;
    for my $stat (glob '/proc/[0-9]*/stat') {
        open my $fh, '<', $stat or next;
        my $line = <$fh> // next;
        push @kids, $1 if $line =~ /^(\d+) \(.*\) (\S) (\d+) /s
                          && $3 == $ppid && $2 ne 'Z';
    }
    return @kids;
}

sub pid_alive {
    my $pid = shift;
    open my $fh, '<', "/proc/$pid/stat" or return 0;
    my $stat = <$fh> // '';
    return $stat !~ /^\d+ \(.*\) [ZX] /s;
}

sub master_pid {
    my $ctx = shift;
    open my $fh, '<', $ctx->servroot . '/logs/nginx.pid' or return undef;
    my $pid = <$fh>;
    return $pid =~ /(\d+)/ ? $1 : undef;
}

run_tests();

__DATA__

=== TEST 1: handshake: a method other than GET gets 405 with a JSON error and Allow: GET
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $m (qw(POST PUT DELETE)) {
        my ($res, $head) = raw_http($ctx, handshake_request($m, '/ws/Alice',
            'HTTP/1.1', 'Content-Length' => 0));
        expect_refusal($res, 405, 'method_not_allowed', undef, "$m /ws/Alice");
        is $res->content, '{"op":"error","code":"method_not_allowed","message":'
            . qq{"method $m is not allowed on \\"/ws/Alice\\""\}\n},
            "$m /ws/Alice: exact body";
        like $head, qr/^Allow:\s*GET\b/mi, "$m /ws/Alice: Allow: GET";
        unlike $head, qr/^Upgrade:/mi, "$m /ws/Alice: no upgrade";
    }
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 2: handshake: HTTP/1.0 gets 400 bad_handshake (exact JSON body)
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- raw_request eval
"GET /ws/Alice HTTP/1.0\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
--- error_code: 400
--- response_headers
Content-Type: application/json
!Upgrade
!Sec-WebSocket-Accept
--- response_body
{"op":"error","code":"bad_handshake","message":"a WebSocket handshake needs HTTP/1.1; this request came over another version"}
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 3: handshake: a missing or foreign Upgrade gets 426 naming websocket and version 13
The response carries Upgrade: websocket and Sec-WebSocket-Version: 13.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $body = '{"op":"error","code":"upgrade_required","message":"this endpoint '
             . 'speaks WebSocket only: send \"Upgrade: websocket\"","field":"Upgrade"}'
             . "\n";
    for my $case ([undef, 'no Upgrade'], ['h2c', 'Upgrade: h2c'],
                  ['websocketx', 'Upgrade: websocketx'], ['', 'empty Upgrade'])
    {
        my ($up, $what) = @$case;
        my $ws = $ctx->ws('/ws/Alice', key => $::SampleKey,
                          headers => [Upgrade => $up]);
        ok !$ws->ok, "$what: no upgrade";
        expect_refusal($ws, 426, 'upgrade_required', 'Upgrade', $what);
        is $ws->body, $body, "$what: exact body";
        is $ws->header('Upgrade'), 'websocket', "$what: Upgrade: websocket";
        is $ws->header('Sec-WebSocket-Version'), '13',
            "$what: Sec-WebSocket-Version: 13";
        ok !defined $ws->header('Sec-WebSocket-Accept'), "$what: no accept";
    }
    # tokens are case-insensitive and may come in a list (RFC 6455 4.2.1)
    my $ws = ws_ok($ctx, '/ws/Alice', headers => [Upgrade => 'WebSocket',
                   Connection => 'keep-alive, Upgrade']);
    is $ws->status, 101, 'Upgrade: WebSocket, Connection: keep-alive, Upgrade: 101';
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 4: handshake: a Connection header without "upgrade" gets 400 bad_handshake
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $body = '{"op":"error","code":"bad_handshake","message":"the \"Connection\" '
             . 'header must include \"Upgrade\"","field":"Connection"}' . "\n";
    for my $conn ('keep-alive', 'upgraded', undef) {
        my $what = 'Connection: ' . ($conn // '(none)');
        my $ws = $ctx->ws('/ws/Alice', headers => [Connection => $conn]);
        ok !$ws->ok, "$what: no upgrade";
        expect_refusal($ws, 400, 'bad_handshake', 'Connection', $what);
        is $ws->body, $body, "$what: exact body";
    }
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 5: handshake: Sec-WebSocket-Version other than 13 gets 426 naming version 13
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $body = '{"op":"error","code":"unsupported_version","message":"only WebSocket '
             . 'version 13 (RFC 6455) is supported","field":"Sec-WebSocket-Version"}'
             . "\n";
    for my $v ('8', '12', '14', '130', '13, 8', undef) {
        my $what = 'Sec-WebSocket-Version: ' . ($v // '(none)');
        my $ws = $ctx->ws('/ws/Alice', headers => ['Sec-WebSocket-Version' => $v]);
        ok !$ws->ok, "$what: no upgrade";
        expect_refusal($ws, 426, 'unsupported_version', 'Sec-WebSocket-Version',
                       $what);
        is $ws->body, $body, "$what: exact body";
        is $ws->header('Sec-WebSocket-Version'), '13',
            "$what: Sec-WebSocket-Version: 13";
        is $ws->header('Upgrade'), 'websocket', "$what: Upgrade: websocket";
    }
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 6: handshake: a missing or malformed Sec-WebSocket-Key gets 400 bad_handshake
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $body = '{"op":"error","code":"bad_handshake","message":"\"Sec-WebSocket-Key\" '
             . 'must be 16 bytes in base64","field":"Sec-WebSocket-Key"}' . "\n";
    for my $case ([undef, 'missing'],
                  ['', 'empty'],
                  ['c2hvcnQ=', '5 bytes'],
                  ['AAAAAAAAAAAAAAAAAAAAAAAA', '24 chars decoding to 18 bytes'],
                  ['!!!!!!!!!!!!!!!!!!!!!!==', 'not base64'],
                  ['dGhlIHNhbXBsZSBub25jZQ==AAAA', 'too long'])
    {
        my ($key, $what) = @$case;
        $what = "key $what";
        my $ws = $ctx->ws('/ws/Alice', headers => ['Sec-WebSocket-Key' => $key]);
        ok !$ws->ok, "$what: no upgrade";
        expect_refusal($ws, 400, 'bad_handshake', 'Sec-WebSocket-Key', $what);
        is $ws->body, $body, "$what: exact body";
    }
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 7: handshake: a name the built-in rule refuses gets 400 invalid_name with the rule
The refused name is an agent name, and the error says the rule.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $case (['%20bad', ' bad'], ['bad%20', 'bad '], ['a%7Bb%7D', 'a{b}'],
                  ['x' x 65, 'x' x 65], ['tab%09x', "tab\tx"], ['nl%0A', "nl\n"],
                  ['%FF', "\xff"])
    {
        my ($path, $name) = @$case;
        my $ws = $ctx->ws("/ws/$path");
        ok !$ws->ok, "/ws/$path: no upgrade";
        my $j = expect_refusal($ws, 400, 'invalid_name', 'agent_name', "/ws/$path");
        like $j->{message} // '', qr/1 to 64 characters of UTF-8/,
            "/ws/$path: message says the rule";
    }
    # the rule's edges: 64 characters, punctuation, any script
    for my $path ('x' x 64, 'Open%20Interpreter', 'a_b.c@d:e+f-g', '0', '-dash', 'a!b',
                  'a%22b', 'caf%C3%A9', 'Weize%20Chen%27s%20Assistant', '%E7%8E%8B%E5%B0%8F%E6%98%8E') {
        my $ws = ws_ok($ctx, "/ws/$path");
        is $ws->status, 101, "/ws/$path: 101";
    }
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 8: handshake: RFC 6455's sample key gets 101 with the sample Sec-WebSocket-Accept
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $s = $ctx->connect;
    syswrite $s, handshake_request('GET', '/ws/Alice', 'HTTP/1.1');
    my $raw = '';
    my $deadline = time + 3;
    while (index($raw, "\r\n\r\n") < 0 && time < $deadline) {
        IO::Select->new($s)->can_read(0.5) or next;
        sysread($s, $raw, 4096, length $raw) or last;
    }
    my ($head) = $raw =~ /^(.*?)\r\n\r\n/s;
    $head //= '';
    like $head, qr{^HTTP/1\.1 101 Switching Protocols\r\n}, '101 Switching Protocols';
    like $head, qr{^Sec-WebSocket-Accept: \Q$::SampleAccept\E\r?$}mi,
        'Sec-WebSocket-Accept of the RFC sample';
    like $head, qr{^Upgrade: websocket\r?$}mi, 'Upgrade: websocket';
    like $head, qr{^Connection: upgrade\r?$}mi, 'Connection: upgrade';
    unlike $head, qr{^(Content-Length|Transfer-Encoding):}mi,
        'no body framing headers';
    unlike $head, qr{^Sec-WebSocket-(Extensions|Protocol):}mi,
        'no extension or subprotocol was negotiated';
    is length($raw), length($head) + 4, 'nothing follows the head';
    # and it is a live WebSocket
    my $ws = ws_ok($ctx, '/ws/Alice', key => $::SampleKey);
    is $ws->header('Sec-WebSocket-Accept'), $::SampleAccept, 'client sees the same';
    $ws->send_ping('hi');
    expect_pong($ws, 'hi', 'after the handshake');
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 9: frames pipelined in the same write as the handshake are read
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    # one ping
    my $ws = ws_ok($ctx, '/ws/Alice',
                   pipeline_raw => IoaTest::WS->build_frame(opcode => 9,
                                                        payload => 'early'));
    expect_pong($ws, 'early', 'ping in the handshake write');
    # a ping, an envelope without comm_id, and a second ping, in order
    my $frames = IoaTest::WS->build_frame(opcode => 9, payload => 'one')
               . IoaTest::WS->build_frame(opcode => 1, payload => '{"content":"x"}')
               . IoaTest::WS->build_frame(opcode => 9, payload => 'two');
    $ws = ws_ok($ctx, '/ws/Bob', pipeline_raw => $frames);
    expect_pong($ws, 'one', 'first pipelined ping');
    expect_error_frame($ws, 'missing_comm_id', 'pipelined text message');
    expect_pong($ws, 'two', 'second pipelined ping');
    # a pipelined frame cut in the middle is completed by the next write
    my $ping = IoaTest::WS->build_frame(opcode => 9, payload => 'split');
    $ws = ws_ok($ctx, '/ws/Carol', pipeline_raw => substr($ping, 0, 5));
    expect_silence($ws, 0.3, 'half a frame');
    $ws->send_raw(substr $ping, 5);
    expect_pong($ws, 'split', 'completed frame');
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 10: frames arriving one byte at a time are decoded
The header, mask and payload are split anywhere.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $ws = ws_ok($ctx, '/ws/Alice');
    my $payload = join '', map { chr } 0 .. 124;
    my $bytes = $ws->build_frame(opcode => 9, payload => $payload)
              . $ws->build_frame(opcode => 1, fin => 0, payload => '{"con')
              . $ws->build_frame(opcode => 0, fin => 1, payload => 'tent":"x"}');
    for my $i (0 .. length($bytes) - 1) {
        $ws->send_raw(substr $bytes, $i, 1);
        sleep 0.002;
    }
    expect_pong($ws, $payload, 'byte-by-byte 125-byte ping');
    expect_error_frame($ws, 'missing_comm_id', 'byte-by-byte fragmented message');
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 11: an unmasked client frame is a protocol error: close 1002
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $op (1, 9, 8) {
        my $ws = ws_ok($ctx, '/ws/Alice');
        $ws->send_frame(opcode => $op, mask => 0,
                        payload => $op == 8 ? pack('n', 1000) : '{}');
        expect_close($ws, 1002, qr/mask/, "unmasked opcode $op");
    }
--- error_log
closing WebSocket of "Alice" with 1002: client frames must be masked
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 12: an RSV bit without a negotiated extension is a protocol error: close 1002
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $rsv (1, 2, 4, 7) {
        for my $op (1, 9) {
            my $ws = ws_ok($ctx, '/ws/Alice');
            $ws->send_frame(opcode => $op, rsv => $rsv, payload => '{}');
            expect_close($ws, 1002, qr/reserved bits/, "rsv $rsv on opcode $op");
        }
    }
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 13: a reserved (unknown) opcode is a protocol error: close 1002
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $op (3 .. 7, 0xB .. 0xF) {
        my $ws = ws_ok($ctx, '/ws/Alice');
        $ws->send_frame(opcode => $op, payload => 'x');
        expect_close($ws, 1002, qr/unknown opcode/, sprintf 'opcode 0x%X', $op);
    }
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 14: a control frame longer than 125 bytes is a protocol error: close 1002
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $op (9, 0xA, 8) {
        my $ws = ws_ok($ctx, '/ws/Alice');
        my $payload = $op == 8 ? pack('n', 1000) . ('r' x 124) : 'p' x 126;
        $ws->send_frame(opcode => $op, payload => $payload);
        expect_close($ws, 1002, qr/125 bytes/, "126-byte control opcode $op");
    }
    # the header alone is enough: only the 16-bit length of a ping is sent
    my $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_raw(pack 'CCn', 0x89, 0x80 | 126, 200);
    expect_close($ws, 1002, qr/125 bytes/, 'header of a 200-byte ping');
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 15: a fragmented control frame is a protocol error: close 1002
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $op (9, 0xA, 8) {
        my $ws = ws_ok($ctx, '/ws/Alice');
        $ws->send_frame(opcode => $op, fin => 0,
                        payload => $op == 8 ? pack('n', 1000) : 'frag');
        expect_close($ws, 1002, qr/fragmented control/, "FIN=0 opcode $op");
    }
    # also in the middle of a fragmented text message
    my $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_frame(opcode => 1, fin => 0, payload => '{"a":');
    $ws->send_frame(opcode => 9, fin => 0, payload => 'frag');
    expect_close($ws, 1002, qr/fragmented control/, 'FIN=0 ping inside a message');
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 16: a continuation frame with no message in progress is a protocol error: close 1002
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $fin (1, 0) {
        my $ws = ws_ok($ctx, '/ws/Alice');
        $ws->send_frame(opcode => 0, fin => $fin, payload => '{}');
        expect_close($ws, 1002, qr/continuation/, "first frame a continuation, FIN=$fin");
    }
    # right after a complete message, too
    my $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_frame(opcode => 1, fin => 1, payload => '{"a":1}');
    expect_error_frame($ws, 'missing_comm_id', 'complete message');
    $ws->send_frame(opcode => 0, fin => 1, payload => '{"a":1}');
    expect_close($ws, 1002, qr/continuation/, 'continuation after a complete message');
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 17: a data frame inside an open fragmented message is a protocol error: close 1002
The offending frame is a new data frame.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $case ([1, 1, 'text after text'], [1, 0, 'unfinished text after text'],
                  [2, 1, 'binary after text'])
    {
        my ($op, $fin, $what) = @$case;
        my $ws = ws_ok($ctx, '/ws/Alice');
        $ws->send_frame(opcode => 1, fin => 0, payload => '{"a":');
        $ws->send_frame(opcode => $op, fin => $fin, payload => '1}');
        expect_close($ws, 1002, qr/before the previous one ended/, $what);
    }
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 18: a binary message is refused with close 1003 (envelopes are text)
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $fin (1, 0) {
        my $ws = ws_ok($ctx, '/ws/Alice');
        $ws->send_binary('{"comm_id":"x"}', fin => $fin);
        expect_close($ws, 1003, qr/binary/, "binary frame FIN=$fin");
    }
    my $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_binary('');
    expect_close($ws, 1003, qr/binary/, 'empty binary frame');
--- error_log
closing WebSocket of "Alice" with 1003
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 19: a text message that is not UTF-8 is refused with close 1007
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $case (["\xff", 'byte FF'], ["{\"a\":\"\xc0\xaf\"}", 'overlong /'],
                  ["\xed\xa0\x80", 'UTF-16 surrogate'],
                  ["\xf4\x90\x80\x80", 'above U+10FFFF'],
                  ["abc\x80def", 'stray continuation byte'],
                  ["\xe2\x28\xa1", 'bad second byte'])
    {
        my ($bytes, $what) = @$case;
        my $ws = ws_ok($ctx, '/ws/Alice');
        $ws->send_frame(opcode => 1, payload => $bytes);
        expect_close($ws, 1007, qr/UTF-8/, $what);
    }
    # valid UTF-8 of every length goes through to the envelope parser
    my $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_frame(opcode => 1,
        payload => "{\"content\":\"\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xef\xbf\xbd\"}");
    expect_error_frame($ws, 'missing_comm_id', 'valid 2-, 3- and 4-byte sequences');
--- error_log
closing WebSocket of "Alice" with 1007
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 20: UTF-8 is validated across fragments: a split invalid sequence is 1007
An invalid sequence split over two fragments is 1007, a valid one is accepted.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    # E2 82 | 28: the second fragment breaks the sequence the first began
    my $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_frame(opcode => 1, fin => 0, payload => "{\"a\":\"\xe2\x82");
    expect_silence($ws, 0.3, 'a fragment ending inside a sequence is fine so far');
    $ws->send_frame(opcode => 0, fin => 1, payload => "\x28\"}");
    expect_close($ws, 1007, qr/UTF-8/, 'invalid sequence split across fragments');

    # F0 9F | 98 | 80: a valid 4-byte sequence split over three fragments
    $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_frame(opcode => 1, fin => 0, payload => "{\"content\":\"\xf0\x9f");
    $ws->send_frame(opcode => 0, fin => 0, payload => "\x98");
    $ws->send_frame(opcode => 0, fin => 1, payload => "\x80\"}");
    expect_error_frame($ws, 'missing_comm_id', 'valid sequence split across fragments');
    $ws->send_ping('still');
    expect_pong($ws, 'still', 'connection still usable');
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 21: a text message that ends inside a UTF-8 sequence is refused with close 1007
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_frame(opcode => 1, payload => "abc\xe2\x82");
    expect_close($ws, 1007, qr/UTF-8/, 'single frame ending mid-sequence');

    $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_frame(opcode => 1, fin => 0, payload => "{\"a\":1}\xf0\x9f");
    $ws->send_frame(opcode => 0, fin => 1, payload => '');
    expect_close($ws, 1007, qr/UTF-8/, 'empty last fragment after a partial sequence');
--- error_log
text message ends inside a UTF-8 sequence
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 22: a forbidden close code or a 1-byte close payload is a protocol error: close 1002
A forbidden code is one a peer may not send.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $code (0, 999, 1004, 1005, 1006, 1015, 1016, 2000, 2999, 5000, 65535) {
        my $ws = ws_ok($ctx, '/ws/Alice');
        $ws->close($code);
        expect_close($ws, 1002, qr/invalid close code/, "close code $code");
    }
    my $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_frame(opcode => 8, payload => "\x03");
    expect_close($ws, 1002, qr/one-byte/, 'close with a one-byte payload');
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 23: a close reason that is not UTF-8 is refused with close 1007
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $case (["bad \xff", 'byte FF'], ["cut \xe2\x82", 'ends mid-sequence'],
                  ["\xed\xa0\x80", 'surrogate'])
    {
        my ($reason, $what) = @$case;
        my $ws = ws_ok($ctx, '/ws/Alice');
        $ws->close(1000, $reason);
        expect_close($ws, 1007, qr/UTF-8/, "close reason $what");
    }
    # a valid UTF-8 reason is fine
    my $ws = ws_ok($ctx, '/ws/Alice');
    $ws->close(1000, "bye \xe2\x82\xac");
    expect_close($ws, 1000, undef, 'UTF-8 close reason');
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 24: non-minimal and out-of-range payload lengths are protocol errors: close 1002
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $key = 'abcd';
    for my $case ([pack('CCn', 0x81, 0x80 | 126, 5) . $key . 'x' x 5, '16-bit length 5'],
                  [pack('CCQ>', 0x81, 0x80 | 127, 200) . $key . 'x' x 200, '64-bit length 200'],
                  [pack('CCQ>', 0x81, 0x80 | 127, 2**63) . $key, '64-bit length with the top bit set'])
    {
        my ($bytes, $what) = @$case;
        my $ws = ws_ok($ctx, '/ws/Alice');
        $ws->send_raw($bytes);
        expect_close($ws, 1002, qr/length/, $what);
    }
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 25: a fragmented text message is reassembled; a ping between fragments is answered
The ping is answered at once, with its payload.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_frame(opcode => 1, fin => 0, payload => '{"content":');
    $ws->send_ping('between');
    expect_pong($ws, 'between', 'ping between fragments');
    expect_silence($ws, 0.3, 'the message is not processed before its last fragment');
    $ws->send_frame(opcode => 0, fin => 0, payload => '"hello ');
    $ws->send_frame(opcode => 0, fin => 1, payload => 'world","x":1}');
    my $j = expect_error_frame($ws, 'missing_comm_id', 'reassembled message');
    is $j->{field}, 'comm_id', 'the error names the field';

    # all in one write: the pong still comes before the message's answer
    $ws->send_raw(join '',
        $ws->build_frame(opcode => 1, fin => 0, payload => '{"a"'),
        $ws->build_frame(opcode => 9, payload => 'p1'),
        $ws->build_frame(opcode => 0, fin => 0, payload => ':'),
        $ws->build_frame(opcode => 10, payload => 'unsolicited pong'),
        $ws->build_frame(opcode => 9, payload => 'p2'),
        $ws->build_frame(opcode => 0, fin => 1, payload => '1}'));
    expect_pong($ws, 'p1', 'first interleaved ping');
    expect_pong($ws, 'p2', 'second interleaved ping (the pong got no answer)');
    expect_error_frame($ws, 'missing_comm_id', 'message after the pings');

    # the connection stays usable
    $ws->send_text('{"content":"again"}');
    expect_error_frame($ws, 'missing_comm_id', 'a later message');
    $ws->send_ping('end');
    expect_pong($ws, 'end', 'a later ping');
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 26: a ping is answered with a pong carrying the same payload
The payload is empty, binary or 125 bytes.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $ws = ws_ok($ctx, '/ws/Alice');
    for my $p ('', 'x', "\x00\xff\x80 binary \r\n", join('', map { chr } 0 .. 124),
               'z' x 125, 'abcd' x 31)
    {
        $ws->send_ping($p);
        expect_pong($ws, $p, 'ping of ' . length($p) . ' bytes');
    }
    # unsolicited pongs are ignored
    $ws->send_pong('nobody asked');
    expect_silence($ws, 0.3, 'unsolicited pong');
    # ten pings in one write: ten pongs, in order
    $ws->send_raw(join '', map { $ws->build_frame(opcode => 9, payload => "n$_") } 1 .. 10);
    expect_pong($ws, "n$_", "ping $_ of 10") for 1 .. 10;
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 27: server pings every ioa_ping_interval and closes a silent client with 1011
A client that answers stays, one that never answers is closed with 1011.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / {
        ioa_api;
        ioa_ping_interval 1s;
    }
--- ioa_scenario
    my $start = time;
    my $good = ws_ok($ctx, '/ws/Alice');
    my $mute = ws_ok($ctx, '/ws/Bob');
    my ($good_pings, $mute_pings, $good_bad, @mute_close, $mute_close_at) = (0, 0, 0);
    while (time - $start < 3.4) {
        while (my $f = $good->recv_frame(0.05)) {
            if ($f->{opcode} == 9) {
                $good_pings++;
                $good_bad++ if $f->{payload} ne 'ioa' && $f->{payload} ne '';
                $good->send_pong($f->{payload});
            } else {
                $good_bad++;
                diag Test::More::explain($f);
            }
        }
        next if defined $mute_close_at || $mute->eof;
        while (my $f = $mute->recv_frame(0.05)) {
            if ($f->{opcode} == 9) {
                $mute_pings++;
            } elsif ($f->{opcode} == 8) {
                $mute_close_at = time - $start;
                @mute_close = (unpack('n', $f->{payload}), substr $f->{payload}, 2);
                last;
            }
        }
    }
    ok $good_pings >= 2, "the answering client got pings ($good_pings in 3.4 s)";
    ok !$good_bad, 'only pings, and with a short payload';
    ok !$good->eof, 'the answering client is still connected';
    $good->send_ping('alive');
    expect_pong($good, 'alive', 'answering client');
    ok $mute_pings >= 1, "the mute client got a ping first ($mute_pings)";
    is $mute_close[0], 1011, 'the mute client is closed with 1011';
    like $mute_close[1] // '', qr/keepalive ping timeout/, 'reason says why';
    ok defined $mute_close_at && $mute_close_at >= 1.5 && $mute_close_at <= 3.5,
        'closed after about two intervals (' . ($mute_close_at // 'never') . ' s)';
    ok $mute->wait_eof(3), 'and the TCP connection ends';
--- error_log
closing WebSocket of "Bob" with 1011: keepalive ping timeout
--- no_error_log
[alert]
[emerg]
[crit]
closing WebSocket of "Alice"



=== TEST 28: closing handshake: the server echoes the client's code and ends the connection
The codes are 1000, 1001, 3000 and 4000 with a reason, and the TCP connection
is ended.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $case ([1000, ''], [1000, 'bye'], [1001, 'going'], [3000, 'lib'],
                  [4000, 'application reason'], [4999, 'r' x 123])
    {
        my ($code, $reason) = @$case;
        my $ws = ws_ok($ctx, '/ws/Alice');
        $ws->close($code, $reason);
        my $f = $ws->recv_frame(3);
        ok $f && $f->{opcode} == 8 && $f->{fin} && !$f->{masked},
            "close $code: an unmasked final close frame comes back";
        is $f && length($f->{payload}) >= 2 ? unpack('n', $f->{payload}) : undef,
            $code, "close $code: same code";
        ok $ws->wait_eof(2), "close $code: the server ends the TCP connection";
    }
    # an empty close frame is answered (1000 or empty)
    my $ws = ws_ok($ctx, '/ws/Alice');
    $ws->close;
    my $code = $ws->recv_close(3);
    ok defined $code && ($code == 1000 || $code == 1005),
        'empty close answered with 1000 or an empty close (' . ($code // 'none') . ')';
    ok $ws->wait_eof(2), 'empty close: the server ends the TCP connection';
    # frames after the client's close frame are not processed
    $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_raw($ws->build_frame(opcode => 8, payload => pack 'n', 1000)
                . $ws->build_frame(opcode => 9, payload => 'late')
                . $ws->build_frame(opcode => 1, payload => '{"content":"late"}'));
    my $f = $ws->recv_frame(3);
    is $f && $f->{opcode}, 8, 'only the close frame comes back';
    ok !$ws->recv_frame(1), 'no pong or error frame after it';
    ok $ws->eof, 'then EOF';
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 29: ioa_max_message_size 1k: a bigger message gets too_big, the connection goes on
A 2 KiB message, or fragments adding up to more than 1 KiB, get an error frame
too_big naming the limit and are skipped as they stream in; the connection
stays usable; 1 KiB exactly passes.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / {
        ioa_api;
        ioa_max_message_size 1k;
    }
--- ioa_scenario
    my $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_text('{"content":"' . ('x' x 2030) . '"}');
    expect_error_frame($ws, 'too_big', '2 KiB in one frame');
    # the next message is read as a message: the oversized one was skipped
    $ws->send_text('{"content":"after"}');
    expect_error_frame($ws, 'missing_comm_id', 'the next message after it');

    $ws->send_frame(opcode => 1, fin => 0, payload => '{"content":"' . ('x' x 500));
    $ws->send_frame(opcode => 0, fin => 0, payload => 'x' x 500);
    expect_silence($ws, 0.3, '1012 bytes so far');
    $ws->send_frame(opcode => 0, fin => 0, payload => 'x' x 100);
    expect_error_frame($ws, 'too_big', 'fragments passing 1 KiB: said at once');
    $ws->send_frame(opcode => 0, fin => 1, payload => ('x' x 5000) . '"}');
    expect_silence($ws, 0.3, 'the rest of it, read past');
    $ws->send_text('{"content":"after"}');
    expect_error_frame($ws, 'missing_comm_id', 'and the next message is read');

    # exactly 1024 bytes, in one frame and in fragments, is processed
    my $msg = '{"content":"' . ('y' x (1024 - 14)) . '"}';
    is length $msg, 1024, 'the boundary message is 1024 bytes';
    $ws->send_text($msg);
    expect_error_frame($ws, 'missing_comm_id', '1024 bytes in one frame');
    $ws->send_frame(opcode => 1, fin => 0, payload => substr $msg, 0, 600);
    $ws->send_frame(opcode => 0, fin => 1, payload => substr $msg, 600);
    expect_error_frame($ws, 'missing_comm_id', '1024 bytes in two fragments');
    $ws->send_text($msg . ' ');
    expect_error_frame($ws, 'too_big', '1025 bytes');
    $ws->send_frame(opcode => 9, payload => 'still');
    expect_pong($ws, 'still', 'the connection is still open');
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 30: ioa_max_message_size: the frame header alone triggers too_big
The error comes before any payload is sent; the payload is then read past, and
the connection goes on.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / {
        ioa_api;
        ioa_max_message_size 1k;
    }
--- ioa_scenario
    for my $case ([1 << 20, '1 MiB'], [2000, '2000 bytes (16-bit length)']) {
        my ($len, $what) = @$case;
        my $ws = ws_ok($ctx, '/ws/Alice');
        # header and mask key only
        $ws->send_raw($ws->build_frame(opcode => 1, length => $len, payload => ''));
        expect_error_frame($ws, 'too_big', "header of a $what frame");
        # then the payload, which is read past, and a message that is read
        $ws->send_raw('z' x $len);
        $ws->send_text('{"content":"after"}');
        expect_error_frame($ws, 'missing_comm_id', "after the $what payload, the next message");
    }
    # a length no client could send ends the connection (1009)
    my $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_raw($ws->build_frame(opcode => 1, length => 2**62, payload => ''));
    expect_close($ws, 1009, qr/ioa_max_message_size/, 'header of a 2^62-byte frame');
    # a fragment header that would push the message over the limit
    $ws = ws_ok($ctx, '/ws/Alice');
    $ws->send_frame(opcode => 1, fin => 0, payload => 'a' x 1000);
    $ws->send_raw($ws->build_frame(opcode => 0, length => 100, payload => ''));
    expect_error_frame($ws, 'too_big', 'header of a continuation');
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 31: invalid JSON and invalid envelopes get an error frame; the connection goes on
The error frame has a code and a message; the connection stays usable and a
valid envelope is delivered.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    redis_flush();
    my $room = make_room($ctx, 'Alice', 'Bob');
    my $ws = ws_ok($ctx, '/ws/Alice');
    my $bob = ws_ok($ctx, '/ws/Bob');
    for my $case (['{"comm_id":', 'invalid_json', 'truncated JSON'],
                  ['not json', 'invalid_json', 'not JSON'],
                  ['{"a":1}{"b":2}', 'invalid_json', 'trailing garbage'],
                  ['', 'invalid_json', 'empty message'],
                  ['{"comm_id":"' . $room . '","comm_id":"x"}', undef, 'duplicate member'],
                  ['{"x":' . ('[' x 40) . (']' x 40) . '}', 'too_deep', 'nesting beyond ioa_max_json_depth'],
                  ['[1,2]', 'invalid_envelope', 'not an object'],
                  ['{"comm_id":"' . $room . '","type":"nope"}', 'invalid_envelope', 'type not an integer'],
                  ['{"comm_id":"' . $room . '","sender":"B\\nob","content":"x"}', 'invalid_name', 'a sender that is no name'],
                  ['{"content":"no room"}', 'missing_comm_id', 'no comm_id'],
                  ['{"op":"bogus"}', 'unknown_op', 'unknown control op'])
    {
        my ($text, $code, $what) = @$case;
        $ws->send_text($text);
        my $f = $ws->recv_frame(3);
        my $j = decode_json_or_undef($f && $f->{payload}) // {};
        is $j->{op}, 'error', "$what: an error frame";
        if (defined $code) {
            is $j->{code}, $code, "$what: code $code";
        } else {
            like $j->{code} // '', qr/^[a-z_]+$/, "$what: a machine-readable code";
        }
        ok length($j->{message} // '') > 10, "$what: a message"
            or diag $f && $f->{payload};
    }
    # still usable: a valid envelope is stored and echoed with its id
    $ws->send_text($::JSON->encode({ comm_id => $room, content => 'hello', type => 0 }));
    my $echo = decode_json_or_undef($ws->recv_text(5)) // {};
    is $echo->{comm_id}, $room, 'the echo of a valid envelope arrives';
    is $echo->{sender}, 'Alice', 'sender stamped';
    is $echo->{content}, 'hello', 'content kept';
    like $echo->{id} // '', qr/^\d+-\d+$/, 'with a Stream id';
    my $got = decode_json_or_undef($bob->recv_text(5)) // {};
    is $got->{id}, $echo->{id}, 'the other member gets the same envelope';
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 32: a large envelope sent in odd-sized pieces is unmasked and delivered intact
64 KiB exactly passes.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    redis_flush();
    my $room = make_room($ctx, 'Alice', 'Bob');
    my $ws = ws_ok($ctx, '/ws/Alice');
    my $content = join '', map { chr(0x20 + ($_ * 7) % 95) } 1 .. 60000;
    my $text = $::JSON->encode({ comm_id => $room, content => $content });
    my $bytes = $ws->build_frame(opcode => 1, fin => 0, payload => substr $text, 0, 33333)
              . $ws->build_frame(opcode => 9, payload => 'mid')
              . $ws->build_frame(opcode => 0, fin => 1, payload => substr $text, 33333);
    my $off = 0;
    for my $n (map { (1, 3, 7, 1000, 4093, 17) } 1 .. 100) {
        last if $off >= length $bytes;
        $ws->send_raw(substr $bytes, $off, $n);
        $off += $n;
    }
    $ws->send_raw(substr $bytes, $off) if $off < length $bytes;
    expect_pong($ws, 'mid', 'ping inside the large message');
    my $echo = decode_json_or_undef($ws->recv_text(5)) // {};
    is length($echo->{content} // ''), 60000, 'the echo has all 60000 characters';
    ok(($echo->{content} // '') eq $content, 'byte for byte');
    # a 64 KiB message, which needs the 64-bit length form, is accepted
    # too
    my $pad = 65536 - length $::JSON->encode({ comm_id => $room, content => '' });
    $text = $::JSON->encode({ comm_id => $room, content => 'q' x $pad });
    is length $text, 65536, 'a 65536-byte envelope';
    my $frame = $ws->build_frame(opcode => 1, payload => $text);
    is ord(substr $frame, 1, 1) & 0x7f, 127, 'sent with a 64-bit length';
    $ws->send_raw($frame);
    $echo = decode_json_or_undef($ws->recv_text(5)) // {};
    is length($echo->{content} // ''), $pad, 'its echo arrives whole';
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 33: reload (SIGHUP): clients get close 1001, the old worker exits, new ones connect
Connected clients get close 1001, the old worker exits, and new connections
work.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $master = master_pid($ctx);
    ok $master, 'master pid';
    my @old = child_pids_of($master);
    is scalar @old, 1, 'one worker';
    my $a = ws_ok($ctx, '/ws/Alice');
    my $b = ws_ok($ctx, '/ws/Bob');
    $a->send_ping('before');
    expect_pong($a, 'before', 'before the reload');
    # Bob is in the middle of a fragmented message
    $b->send_frame(opcode => 1, fin => 0, payload => '{"content":');
    ok kill('HUP', $master), 'SIGHUP sent to the master';
    for my $c ([$a, 'Alice'], [$b, 'Bob']) {
        my ($ws, $who) = @$c;
        my ($code, $reason) = $ws->recv_close(5);
        is $code, 1001, "$who gets close 1001";
        like $reason // '', qr/shutting down/, "$who: reason";
        $ws->close(1001);
        ok $ws->wait_eof(3), "$who: TCP connection ends";
    }
    my $deadline = time + 5;
    sleep 0.1 while time < $deadline && grep { pid_alive($_) } @old;
    ok !(grep { pid_alive($_) } @old), 'the old worker exits';
    ok pid_alive($master), 'the master is still up';
    my $c = ws_ok($ctx, '/ws/Carol');
    $c->send_ping('after');
    expect_pong($c, 'after', 'a new connection after the reload');
    my @new = child_pids_of($master);
    ok @new && !grep({ my $n = $_; grep { $_ == $n } @old } @new),
        'served by a new worker';
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 34: graceful shutdown (SIGQUIT): clients get close 1001, then nginx exits
Connected clients get close 1001 and nginx exits once they are gone.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $master = master_pid($ctx);
    ok $master, 'master pid';
    my $a = ws_ok($ctx, '/ws/Alice');
    $a->send_ping('before');
    expect_pong($a, 'before', 'before the shutdown');
    ok kill('QUIT', $master), 'SIGQUIT sent to the master';
    my ($code, $reason) = $a->recv_close(5);
    is $code, 1001, 'close 1001';
    like $reason // '', qr/shutting down/, 'reason';
    $a->close(1001);
    ok $a->wait_eof(3), 'TCP connection ends';
    my $deadline = time + 5;
    sleep 0.1 while time < $deadline && pid_alive($master);
    ok !pid_alive($master), 'nginx has exited';
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 35: ioa_send_queue_limit: a client that never reads is closed (1008) when full
The client sends pings but never reads, and is closed once its queue is full;
readers and the server are unaffected.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 sndbuf=8k;
        location / {
            ioa_api;
            ioa_max_message_size 4k;
            ioa_send_queue_limit 16k;
        }
    }
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $port = $ctx->rand_port(1);
    my $ping = 'p' x 125;
    my $batch = join '', map { IoaTest::WS->build_frame(opcode => 9, payload => $ping) } 1 .. 40;

    # a client that reads keeps up: 40 batches of 40 pings, all answered
    my $reader = ws_ok($ctx, '/ws/Reader', port => $port);
    my $pongs = 0;
    for (1 .. 40) {
        $reader->send_raw($batch);
        for (1 .. 40) {
            my $f = $reader->recv_frame(3) or last;
            $pongs++ if $f->{opcode} == 10 && $f->{payload} eq $ping;
        }
    }
    is $pongs, 1600, 'a reading client gets all 1600 pongs';

    # a client that never reads, with a small receive window
    $ctx->log_mark;
    my $slow = ws_ok($ctx, '/ws/Slow', port => $port, rcvbuf => 4096);
    my $sent = 0;
    for (1 .. 60) {
        last unless defined $slow->send_raw($batch);
        $sent++;
        sleep 0.005;
    }
    ok $sent >= 10, "the slow client sent $sent batches of 40 pings";
    ok $ctx->wait_for_log(qr/\[info\].*(reads too slowly|closing WebSocket of "Slow" with 1008)/, 5),
        'the server logs why it closes the slow client';

    # now read what was queued: whole pongs, then close 1008 (or the end)
    my ($n, $bad, $close) = (0, 0);
    while (my $f = $slow->recv_frame(5)) {
        if ($f->{opcode} == 8) {
            $close = length $f->{payload} >= 2 ? unpack 'n', $f->{payload} : 1005;
            last;
        }
        $f->{opcode} == 10 && $f->{payload} eq $ping ? $n++ : $bad++;
    }
    ok !$bad, "the frames before the close are intact pongs ($n)";
    ok $n < 40 * $sent, "not every ping was answered ($n of " . 40 * $sent . ')';
    ok((defined $close && $close == 1008) || $slow->eof,
       'closed: 1008 (' . ($close // 'no close frame, EOF') . ')');
    is $close, 1008, 'the close frame was readable, with 1008';
    ok $slow->wait_eof(3), 'and the connection ends';

    # the server is healthy
    my $next = ws_ok($ctx, '/ws/Next', port => $port);
    $next->send_ping('ok');
    expect_pong($next, 'ok', 'a new client afterwards');
    $reader->send_ping('still');
    expect_pong($reader, 'still', 'the reading client is still served');
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 36: ioa_send_queue_limit: a member not reading its room's traffic gets close 1008
The member is closed with 1008 and "reads too slowly".
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 sndbuf=8k;
        location / {
            ioa_api;
            ioa_max_message_size 4k;
            ioa_send_queue_limit 16k;
        }
    }
--- config
    location / { ioa_api; }
--- ioa_scenario
    redis_flush();
    my $port = $ctx->rand_port(1);
    my $room = make_room($ctx, 'Fast', 'Slow');
    my $slow = ws_ok($ctx, '/ws/Slow', port => $port, rcvbuf => 4096);
    my $fast = ws_ok($ctx, '/ws/Fast', port => $port);
    # the slow member is in the room: the first envelope reaches it
    $ctx->log_mark;
    my $content = 'c' x 3000;
    my ($posted, $fast_got) = (0, 0);
    for my $i (1 .. 60) {
        my $res = $ctx->http(POST => '/agents/Fast/messages',
            headers => ['Content-Type' => 'application/json'],
            body => $::JSON->encode({ comm_id => $room, content => "$i $content" }));
        $posted++ if $res->code == 200;
        # the fast member reads everything
        while (my $t = $fast->recv_text(0.01)) { $fast_got++ }
    }
    is $posted, 60, 'sixty 3 KB envelopes posted';
    while ($fast_got < 60) { $fast->recv_text(3) // last; $fast_got++ }
    is $fast_got, 60, 'the reading member got all of them';
    ok $ctx->wait_for_log(qr/\[info\].*agent "Slow" reads too slowly, closing/, 3),
        'logged: reads too slowly';
    my ($n, $close) = (0);
    while (my $f = $slow->recv_frame(5)) {
        if ($f->{opcode} == 8) {
            $close = unpack 'n', $f->{payload};
            last;
        }
        $n++ if $f->{opcode} == 1;
    }
    ok $n < 60, "the slow member got only part of the traffic ($n)";
    is $close, 1008, 'then close 1008';
    ok $slow->wait_eof(3), 'and the connection ends';
    ok !$fast->eof, 'the reading member is still connected';
    $fast->send_ping('ok');
    my $f = $fast->recv_frame(3);
    is $f && $f->{payload}, 'ok', 'and served';
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 37: 200 concurrent WebSocket connections all get 101 and a pong
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my @ws;
    my $up = 0;
    for my $i (1 .. 200) {
        my $ws = $ctx->ws("/ws/agent-$i", timeout => 10);
        $up++ if $ws->ok && $ws->status == 101;
        push @ws, $ws;
    }
    is $up, 200, 'all 200 handshakes got 101';
    for my $i (0 .. $#ws) { $ws[$i]->send_ping("n$i") }
    my $ok = 0;
    for my $i (0 .. $#ws) {
        my $f = $ws[$i]->recv_frame(5);
        $ok++ if $f && $f->{opcode} == 10 && $f->{payload} eq "n$i";
    }
    is $ok, 200, 'all 200 got their own pong';
    ok !(grep { $_->eof } @ws), 'all still open';
    $_->close(1000) for @ws;
    my $closed = grep { my $c = $_->recv_close(5); defined $c && $c == 1000 } @ws;
    is $closed, 200, 'all 200 closed cleanly';
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 38: a closed WebSocket releases its connection and descriptor, however it ended
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / {
        ioa_api;
        ioa_max_message_size 1k;
    }
    location = /nginx_status { stub_status; }
--- ioa_scenario
    my $active = sub {
        my $res = $ctx->http(GET => '/nginx_status');
        return $res->content =~ /^Active connections:\s*(\d+)/m ? $1 : -1;
    };
    my ($worker) = child_pids_of(master_pid($ctx));
    my $sockets = sub {
        scalar grep { (readlink($_) // '') =~ /^socket:/ } glob "/proc/$worker/fd/*";
    };
    is $active->(), 1, 'before: only the status request itself';
    my $fds = $sockets->();
    my @ws;
    push @ws, my $a = ws_ok($ctx, '/ws/Alice');     # closing handshake
    push @ws, my $b = ws_ok($ctx, '/ws/Bob');       # protocol error
    push @ws, my $c = ws_ok($ctx, '/ws/Carol');     # message too big, then gone
    push @ws, my $d = ws_ok($ctx, '/ws/Dave');      # client just goes away
    push @ws, my $e = ws_ok($ctx, '/ws/Eve');       # close frame, then gone
    is $active->(), 6, 'five WebSockets open';
    is $sockets->(), $fds + 5, 'five more sockets in the worker';
    $a->close(1000);
    expect_close($a, 1000, undef, 'closing handshake');
    $b->send_frame(opcode => 1, mask => 0, payload => 'x');
    expect_close($b, 1002, qr/mask/, 'protocol error');
    $c->send_text('x' x 2000);
    expect_error_frame($c, 'too_big', 'too big');
    $e->close(1000);
    $_->disconnect for @ws;
    my ($n, $left, $deadline) = (-1, -1, time + 4);
    while (time < $deadline) {
        ($n, $left) = ($active->(), $sockets->());
        last if $n == 1 && $left == $fds;
        sleep 0.2;
    }
    is $n, 1, 'after: nginx closed every WebSocket connection';
    is $left, $fds, 'after: the worker holds no socket for them';
--- no_error_log
[alert]
[emerg]
[crit]



=== TEST 39: reload (SIGHUP) ends SSE inboxes cleanly too, with a close event 1001
The close event with 1001 comes first, then the end of the response, and the
old worker exits.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    require IoaTest::SSE;
    my $master = master_pid($ctx);
    my @old = child_pids_of($master);
    # the hub connects to Redis after it starts: wait for that, as a
    # load balancer's health check would
    my $ready_by = time + 5;
    sleep 0.05 while time < $ready_by
        && $ctx->http(GET => '/health_check')->code != 200;
    my $res = $ctx->http(POST => '/register',
        body => '{"name":"Zed","type":"Human Assistant","desc":"z"}');
    is $res->code, 200, 'Zed registered';
    my $s = IoaTest::SSE->connect($ctx->host, $ctx->port, '/agents/Zed/inbox');
    ok $s->ok, 'inbox open' or diag $s->error;
    sleep 0.3;
    ok kill('HUP', $master), 'SIGHUP sent to the master';
    my $close;
    while (my $ev = $s->next_event(5)) {
        next unless ($ev->{event} // '') eq 'ioa';
        $close = JSON::PP->new->decode($ev->{data});
        last;
    }
    is $close && $close->{op}, 'close', 'a close event';
    is $close && $close->{code}, 1001, 'with 1001';
    like $close && $close->{message}, qr/shutting down/, 'saying why';
    ok !defined $s->next_event(3), 'then the stream ends';
    ok $s->eof, 'and the response is complete';
    my $deadline = time + 5;
    sleep 0.1 while time < $deadline && grep { pid_alive($_) } @old;
    ok !(grep { pid_alive($_) } @old), 'the old worker exits';
--- no_error_log
[alert]
[emerg]
[crit]
