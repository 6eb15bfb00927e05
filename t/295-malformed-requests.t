# t/295-malformed-requests.t -- every HTTP endpoint of the hub (REST, MCP,
# A2A, the event streams, WebSocket upgrades, metrics) sent malformed
# methods, headers and bodies, alone and pipelined ahead of a well-formed
# request on one keep-alive connection.  What must hold: each request gets
# an answer (no reset, no silence), the one pipelined after it is answered
# too, and no nginx worker dies; the suite's asan pass runs the same file
# against nginx built with ASan + UBSan, where any invalid read or write is
# a failure whatever the answers were.
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/295-malformed-requests.t
#
# Each TEST is one way the hub is set up (open mode; tokens, with a token of
# no scope and one of every scope), so that the refusals in the handlers'
# first steps and the paths past them are both reached; TEST 3 is a client
# that half-closes with its request.  fuzz/http_request.c mutates the same
# endpoints and malformations (make fuzz).

use strict;
use warnings;

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(fresh_hub register teamup);
use IoaTest::Facade qw(key token);
use IO::Select ();
use IO::Socket::INET ();
use Time::HiRes qw(time);

no_root_location();
log_level('info');

$ENV{TEST_NGINX_JWT_KEY} = key();

# ------------------------------------------------------------------ cases

# [method, path, stream]: stream 1 when a well-formed request may stay open
# (an event stream), so nothing can be pipelined behind it
our @Endpoints = (
    [POST => '/register'], [POST => '/retrieve_assistant'],
    [POST => '/query_assistant'], [POST => '/teamup'],
    [POST => '/list_all_agents'], [POST => '/fetch_chat_record'],
    [POST => '/health_check'], [POST => '/launch_goal'],
    [POST => '/launch_goal?wait=1'],
    [GET => '/goals'], [GET => '/goals/0123456789abcdef0123456789abcdef'],
    [GET => '/goals/0123456789abcdef0123456789abcdef/events', 1],
    [POST => '/goals/0123456789abcdef0123456789abcdef/cancel'],
    [POST => '/goals/0123456789abcdef0123456789abcdef/messages'],
    [GET => '/rooms/nosuchroom/events', 1], [GET => '/rooms/nosuchroom/verify'],
    [POST => '/rooms/nosuchroom/erase'], [DELETE => '/rooms/nosuchroom'],
    [POST => '/agents/Mal/messages'], [GET => '/agents/Mal/inbox', 1],
    [DELETE => '/agents/Mal'], [GET => '/chatlist', 1], [GET => '/audit'],
    [GET => '/ws/Mal', 1], [GET => '/chatlist_ws', 1],
    [POST => '/mcp'], [GET => '/mcp'], [DELETE => '/mcp'],
    [POST => '/a2a'], [GET => '/a2a'], [GET => '/.well-known/agent-card.json'],
    [GET => '/metrics'],
);

my $deep = ('[' x 5000) . (']' x 5000);
my $rpc = '{"jsonrpc":"2.0","id":1,"method":"%s","params":%s}';

# [name, extra headers, body]; a body of undef sends none
our @Malformed = (
    ['no body', [], undef],
    ['empty body', [], ''],
    ['half a JSON text', [], '{"name":'],
    ['an array', [], '[]'],
    ['null', [], 'null'],
    ['a string', [], '"x"'],
    ['nesting 5000 deep', [], $deep],
    ['a huge number', [], '{"limit":' . ('9' x 400) . '}'],
    ['invalid UTF-8', [], "{\"name\":\"\xff\xfe\xc0\x80\"}"],
    ['a NUL byte', [], "{\"name\":\"a\x00b\"}"],
    ['fields of the wrong type', [], '{"name":[1],"goal":{},"comm_id":7,"content":false,"sender":[],"capabilities":"x","agent_names":{},"limit":"3","after":[]}'],
    ['a chunked body', ['Transfer-Encoding: chunked'], undef, "5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n"],
    ['a 2 MiB body', [], '{"pad":"' . ('x' x (2 * 1024 * 1024)) . '"}'],
    ['text/plain', ['Content-Type: text/plain'], '{"name":"x"}'],
    ['a bad MCP-Protocol-Version', ['MCP-Protocol-Version: 2025-03-26'], sprintf($rpc, 'ping', '{}')],
    ['a garbage MCP-Protocol-Version', ["MCP-Protocol-Version: \x01\x7f" . ('v' x 3000)], sprintf($rpc, 'ping', '{}')],
    ['a forged Mcp-Session-Id', ['Mcp-Session-Id: ' . ('z' x 64)], sprintf($rpc, 'tools/list', '{}')],
    ['a bad A2A-Version', ['A2A-Version: 9.9'], sprintf($rpc, 'SendMessage', '{"message":{}}')],
    ['JSON-RPC with params of the wrong kinds', [], sprintf($rpc, 'tasks/get', '{"id":[],"historyLength":"x"}')],
    ['JSON-RPC, a batch', [], '[' . sprintf($rpc, 'ping', '{}') . ']'],
    ['A2A streaming, a bad message', [], sprintf($rpc, 'message/stream', '{"message":{"parts":7}}')],
    ['A2A resubscribe to nothing', ['Last-Event-ID: ~~~'], sprintf($rpc, 'tasks/resubscribe', '{"id":"nosuch"}')],
    ['a Last-Event-ID of garbage', ['Last-Event-ID: ~' . ('%' x 3000)], undef],
    ['a Last-Event-ID of many rooms', ['Last-Event-ID: ' . join(',', map { "r$_:1-$_" } 1 .. 150)], undef],
    ['a cursor that was never made', ['Last-Event-ID: ~deadbeef.1+2'], undef],
    ['Authorization: Basic', ['Authorization: Basic Zm9vOmJhcg=='], '{}'],
    ['Authorization: a broken Bearer', ['Authorization: Bearer a.b.c'], '{}'],
    ['Authorization: an empty Bearer', ['Authorization: Bearer '], '{}'],
    ['a WebSocket upgrade half made', ['Upgrade: websocket', 'Connection: Upgrade', 'Sec-WebSocket-Version: 7'], undef],
    ['a WebSocket upgrade with a bad key', ['Upgrade: websocket', 'Connection: Upgrade', 'Sec-WebSocket-Version: 13', 'Sec-WebSocket-Key: !!'], undef],
    ['an Origin and a preflight', ['Origin: http://evil.example', 'Access-Control-Request-Method: POST'], undef],
    ['Prefer: wait, twice, and no goal', ['Prefer: wait', 'Prefer: respond-async'], '{"goal":""}'],
    ['a query of garbage', [], '{}', undef, '?limit=-1&state=%00&before=%ff&offset=99999999999999999999&wait=2&count=x'],
);

# ------------------------------------------------------------------ client

# the raw request: method, path, the case's headers, its body
sub request_text {
    my ($method, $path, $case, $auth, $close) = @_;
    my (undef, $hdrs, $body, $raw, $query) = @$case;
    $path .= ($path =~ /\?/ ? '&' . substr($query, 1) : $query) if defined $query;
    my @h = ("Host: localhost", "Accept: application/json, text/event-stream",
             $close ? 'Connection: close' : 'Connection: keep-alive');
    push @h, "Authorization: Bearer $auth"
        if defined $auth && !grep { /^Authorization:/ } @$hdrs;
    push @h, 'Content-Type: application/json'
        if (defined $body || defined $raw) && !grep { /^Content-Type:/ } @$hdrs;
    push @h, @$hdrs;
    push @h, 'Content-Length: ' . length($body) if defined $body;
    return join("\r\n", "$method $path HTTP/1.1", @h) . "\r\n\r\n"
           . ($body // $raw // '');
}

# sends $text on a new connection, reads until the peer closes or $wait
# seconds pass (or, with $head, until a response's header is in); returns
# what came
sub exchange {
    my ($port, $text, $wait, $head) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 5)
        or return "CONNECT FAILED: $!";
    binmode $s;
    my $off = 0;
    while ($off < length $text) {
        my $n = syswrite $s, $text, 65536, $off;
        last unless $n;                # the hub may close early (413)
        $off += $n;
    }
    my ($got, $sel, $end) = ('', IO::Select->new($s), time + $wait);
    while ((my $left = $end - time) > 0) {
        last unless $sel->can_read($left);
        my $n = sysread $s, my $buf, 65536;
        last unless $n;
        $got .= $buf;
        last if $head && $got =~ m{^HTTP/1\.1 \d{3} .*?\r\n\r\n}s;
    }
    close $s;
    return $got;
}

sub statuses { my @s = $_[0] =~ m{^HTTP/1\.1 (\d{3}) }mg; @s }

# Every endpoint with every malformation, alone and with a request after
# it; returns the failures.  $auth: a token or undef.
sub attack {
    my ($ctx, $auth, $label) = @_;
    my @fail;
    my $n = 0;
    for my $e (@Endpoints) {
        my ($method, $path, $stream) = @$e;
        for my $case (@Malformed) {
            my $what = "$label: $method $path, $case->[0]";
            $n++;
            my $got = exchange($ctx->port, request_text($method, $path, $case, $auth, 1),
                               10, $stream);
            my @st = statuses($got);
            unless (@st) {
                push @fail, "$what: no answer (" . length($got) . ' bytes)';
                next;
            }
            next if $stream && $st[0] < 300;   # a stream it was: nothing after it

            my $next = request_text('GET', '/health_check', ['', []], undef, 1);
            $got = exchange($ctx->port,
                            request_text($method, $path, $case, $auth, 0) . $next,
                            10);
            @st = statuses($got);
            my ($head) = $got =~ /\A(.*?)\r\n\r\n/s;
            my $closed = ($head // '') =~ /^Connection: close/mi;
            if (!@st) {
                push @fail, "$what, pipelined: no answer";
            } elsif (@st < 2 && !$closed) {
                push @fail, "$what, pipelined: the request after it got no answer ("
                            . join(',', @st) . ')';
            }
        }
    }
    return ($n, @fail);
}

# $k connections at once, each sending $text, $rounds times; returns how
# many got no answer
sub burst {
    my ($port, $text, $k, $rounds) = @_;
    my $silent = 0;
    for (1 .. $rounds) {
        my @s = map { IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                            Proto => 'tcp', Timeout => 5) } 1 .. $k;
        syswrite $_, $text for grep { $_ } @s;
        for my $s (@s) {
            my ($got, $sel, $end) = ('', IO::Select->new($s), time + 10);
            while ($s && (my $left = $end - time) > 0) {
                last unless $sel->can_read($left);
                my $n = sysread $s, my $buf, 65536;
                last unless $n;
                $got .= $buf;
            }
            $silent++ unless statuses($got) == 2;
            close $s if $s;
        }
    }
    return $silent;
}

# sends $text and half-closes, as a client that has nothing more to say
# does; returns how long the hub took to close the connection (undef: not
# within $wait seconds)
sub half_closed {
    my ($port, $text, $wait) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 5)
        or return undef;
    syswrite $s, $text;
    shutdown $s, 1;
    my ($t0, $sel) = (time, IO::Select->new($s));
    while ((my $left = $t0 + $wait - time) > 0) {
        last unless $sel->can_read($left);
        my $n = sysread $s, my $buf, 65536;
        return time - $t0 unless $n;
    }
    return undef;
}

sub workers_alive {
    my $ctx = shift;
    my $log = $ctx->servroot . '/logs/error.log';
    open my $fh, '<', $log or return "no $log";
    my @dead = grep { /exited on signal|worker process \d+ exited/ } <$fh>;
    return @dead ? join('', @dead) : '';
}

run_tests();

__DATA__

=== TEST 1: every malformed request in open mode is answered, and the one after it too
open mode: every endpoint, every malformation, alone and pipelined: each
answered, the request after it too, no worker lost.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth off; subrequest_output_buffer_size 1m; }
    location = /mcp { ioa_mcp; ioa_auth off; }
    location = /.well-known/agent-card.json { ioa_a2a url=/a2a name=test-hub; ioa_auth off; }
    location = /a2a { ioa_a2a; ioa_auth off; }
    location = /metrics { ioa_metrics; }
--- timeout: 600
--- ioa_scenario
    fresh_hub($ctx);
    # MCP's own conformance suite sends 2025-03-26; three at once, ten
    # times over, used to kill workers (the refusal finalized the request
    # and the handler's NGX_DONE finalized it again)
    my $mcp = request_text('POST', '/mcp', $main::Malformed[14], undef, 0)
              . request_text('GET', '/health_check', ['', []], undef, 1);
    like $mcp, qr/2025-03-26/, 'the MCP case';
    is burst($ctx->port, $mcp, 3, 10), 0,
       'three refused MCP requests at once, ten times: each answered, and the request after it';
    is burst($ctx->port, $mcp, 50, 4), 0, 'fifty at once, four times';
    my ($n, @fail) = attack($ctx, undef, 'open');
    diag "$n requests, each alone and pipelined";
    is scalar(@fail), 0, 'every one answered, and the one after it'
        or diag join "\n", @fail[0 .. ($#fail < 40 ? $#fail : 40)];
    is workers_alive($ctx), '', 'no nginx worker died';
    my $h = $ctx->http(GET => '/health_check');
    is $h->code, 200, 'the hub is healthy afterwards';
--- no_error_log
[alert]
[crit]
exited on signal



=== TEST 2: tokens: the same with a token of no scope, and with one of every scope
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_JWT_KEY;
                 subrequest_output_buffer_size 1m; }
    location = /mcp { ioa_mcp; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_JWT_KEY; }
    location = /.well-known/agent-card.json { ioa_a2a url=/a2a; ioa_auth jwt;
                                              ioa_auth_jwt_key $TEST_NGINX_JWT_KEY; }
    location = /a2a { ioa_a2a; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_JWT_KEY; }
    location = /metrics { ioa_metrics token; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_JWT_KEY; }
--- timeout: 900
--- ioa_scenario
    fresh_hub($ctx);
    for my $t (['no scope', token('Mal', '')],
               ['every scope', token('Mal', 'agent launch admin metrics')]) {
        my ($n, @fail) = attack($ctx, $t->[1], $t->[0]);
        diag "$t->[0]: $n requests, each alone and pipelined";
        is scalar(@fail), 0, "$t->[0]: every one answered, and the one after it"
            or diag join "\n", @fail[0 .. ($#fail < 40 ? $#fail : 40)];
    }
    is workers_alive($ctx), '', 'no nginx worker died';
    my $h = $ctx->http(GET => '/health_check');
    is $h->code, 200, 'the hub is healthy afterwards';
--- no_error_log
[alert]
[crit]
exited on signal



=== TEST 3: a half-closed client: a goal wait and a room feed end at once
epoll told of the end with the request's bytes, and never again: the goal
wait (no timeout) and the feed (a keepalive every 15 s) must look at it
themselves.  Found by fuzz/http_request.c.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth off; }
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, 'Ann', 'Ben');
    my $room = teamup($ctx, 'Ann', ['Ben'], 'half');
    my $goal = '{"goal":"never done","team_member_names":["Ben"]}';
    for my $c (['POST /launch_goal?wait=1',
                request_text('POST', '/launch_goal?wait=1', ['', [], $goal])],
               ['GET /rooms/{comm_id}/events',
                request_text('GET', "/rooms/$room/events", ['', []])]) {
        my $took = half_closed($ctx->port, $c->[1], 5);
        ok defined $took && $took < 2,
           "$c->[0]: closed " . (defined $took ? sprintf('after %.2f s', $took)
                                                : 'not within 5 s');
    }
--- no_error_log
[alert]
[crit]
