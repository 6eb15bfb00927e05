# t/ws-client-selftest.t -- proves IoaTest::WS, the WebSocket client our
# module tests rely on, against an independent server before our module
# exists: a tiny echo server on Debian's python3-websockets.
#
# Plain Test::More (no nginx), so it runs the same under either
# Test::Nginx runner.  The server binds port 0 and prints the port it got,
# so there is no port race with concurrent runs.  Debian's websockets lives
# in /usr/bin/python3's path only (a `python3` earlier in PATH may be a
# different interpreter), hence the absolute path.

use strict;
use warnings;

use Test::More;
use lib 't/lib';
use IoaTest::WS;
use IO::Select ();
use POSIX qw(WNOHANG);

my $PY = '/usr/bin/python3';
plan skip_all => "$PY with the websockets package is needed"
    unless -x $PY && system($PY, '-c', 'import websockets') == 0;

# Echo server.  "close-me" makes it close with 4000 "bye"; "ping-me" makes
# it ping us with "srv" and answer "pong-ok" once our pong arrived; the path
# /reject is refused with a 403 before the upgrade.
my $server = <<'_PY_';
import asyncio, http, sys, websockets

async def handler(ws, path=None):
    try:
        async for msg in ws:
            if msg == 'close-me':
                await ws.close(4000, 'bye')
            elif msg == 'ping-me':
                waiter = await ws.ping(b'srv')
                await asyncio.wait_for(waiter, 5)
                await ws.send('pong-ok')
            else:
                await ws.send(msg)
    except websockets.ConnectionClosed:
        pass

async def process_request(path, headers):
    if path == '/reject':
        return http.HTTPStatus.FORBIDDEN, [('X-Reason', 'nope')], b'forbidden\n'

async def main():
    async with websockets.serve(handler, '127.0.0.1', 0, ping_interval=None,
                                process_request=process_request,
                                subprotocols=['chat']) as srv:
        print('READY', srv.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()

asyncio.run(main())
_PY_

# Stopped explicitly: closing a piped open waits for the child, and perl may
# free the handle (and so wait forever) before END blocks would kill it.
my $pid = open my $from_py, '-|', $PY, '-c', $server
    or BAIL_OUT("cannot run $PY: $!");
sub stop_server {
    return unless $pid;
    kill 'TERM', $pid;
    close $from_py;
    undef $pid;
}
END { local $?; stop_server() }
IO::Select->new($from_py)->can_read(10) or BAIL_OUT('echo server did not start');
my ($port) = (scalar <$from_py> // '') =~ /^READY (\d+)/
    or BAIL_OUT('echo server did not start');

sub ws { IoaTest::WS->connect('127.0.0.1', $port, @_) }

# --- handshake
{
    my $ws = ws('/', protocols => ['chat']);
    ok $ws->ok, 'handshake ok' or diag $ws->error;
    is $ws->status, 101, 'status 101';
    is $ws->header('Sec-WebSocket-Protocol'), 'chat', 'subprotocol chosen';

    my $bad = ws('/reject');
    ok !$bad->ok, 'refused handshake is reported, not fatal';
    is $bad->status, 403, '... with its status';
    is $bad->header('X-Reason'), 'nope', '... its headers';
    is $bad->body, "forbidden\n", '... and its body';
    like $bad->error, qr/403/, '... and an error message';

    my $nover = ws('/', headers => ['Sec-WebSocket-Version' => undef]);
    ok !$nover->ok, 'a header can be removed to break the handshake';
    like $nover->status, qr/^4\d\d$/, '... and the server answers 4xx';

    my $closed = IoaTest::WS->connect('127.0.0.1', 1, '/', timeout => 1);
    ok !$closed->ok, 'connection refused is reported';
    like $closed->error, qr/connect/, '... as a connect error';
}

# --- data frames
{
    my $ws = ws('/');
    my $snow = "h\x{e9}llo \x{2603}";
    $ws->send_text($snow);
    is $ws->recv_text(2), "h\xc3\xa9llo \xe2\x98\x83", 'text echo, sent as UTF-8';

    my $bin = join '', map { chr } 0 .. 255;
    $ws->send_binary($bin);
    my $m = $ws->recv_message(2);
    is $m->{opcode}, 2, 'binary echo opcode';
    is $m->{payload}, $bin, 'binary echo payload';

    for my $len (200, 70_000) {      # 16-bit and 64-bit length forms
        my $big = 'x' x $len;
        $ws->send_text($big);
        is length($ws->recv_text(5) // ''), $len, "$len-byte message echoed";
    }

    $ws->send_frame(opcode => 1, payload => 'frag', fin => 0);
    $ws->send_frame(opcode => 0, payload => 'ment', fin => 1);
    is $ws->recv_text(2), 'fragment', 'fragmented message reassembled by server';

    my $frame = $ws->build_frame(opcode => 1, payload => 'slow');
    $ws->send_raw($_) for split //, $frame;
    is $ws->recv_text(2), 'slow', 'a frame sent byte by byte';

    is $ws->recv_frame(0.2), undef, 'recv_frame times out with undef';
    ok !$ws->eof, '... and no EOF';
}

# --- control frames
{
    my $ws = ws('/');
    $ws->send_ping('abc');
    my $f = $ws->recv_frame(2);
    is_deeply [ @$f{qw(opcode payload fin)} ], [10, 'abc', 1],
        'ping answered by a pong with the same payload';

    $ws->send_text('ping-me');
    is $ws->recv_text(5), 'pong-ok', 'server ping answered automatically';

    my $manual = ws('/', auto_pong => 0);
    $manual->send_text('ping-me');
    $f = $manual->recv_frame(2);
    is_deeply [ @$f{qw(opcode payload)} ], [9, 'srv'], 'auto_pong => 0 shows the ping';
    $manual->send_pong('srv');
    is $manual->recv_text(5), 'pong-ok', '... and a manual pong works';
}

# --- closing
{
    my $ws = ws('/');
    $ws->send_text('close-me');
    is $ws->recv_text(2), undef, 'recv_text returns undef on a close frame';
    is $ws->close_code, 4000, 'server close code';
    is $ws->close_reason, 'bye', 'server close reason';
    $ws->close(4000);
    ok $ws->wait_eof(2), 'server closes TCP after the close handshake';

    $ws = ws('/');
    $ws->close(1000, 'done');
    my ($code) = $ws->recv_close(2);
    is $code, 1000, 'client-initiated close is echoed';
    ok $ws->wait_eof(2), '... then EOF';
}

# --- protocol errors the server must reject
{
    my $ws = ws('/');
    $ws->send_frame(opcode => 1, payload => 'x', rsv => 4);
    is scalar $ws->recv_close(2), 1002, 'RSV bit without extension: 1002';

    $ws = ws('/');
    $ws->send_frame(opcode => 1, payload => 'x', mask => 0);
    is scalar $ws->recv_close(2), 1002, 'unmasked client frame: 1002';
}

stop_server();
done_testing;
