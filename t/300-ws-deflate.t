# t/300-ws-deflate.t -- permessage-deflate (RFC 7692) on /ws/{agent_name}:
# the negotiation (every offer parsed, the first acceptable one taken, the
# window and context parameters honoured), a room exchange through a client
# that is not ours (Debian's python3-websockets), a broadcast compressed
# once per worker and shared, the inflation of what clients send (context
# takeover, fragments, a final block), the protocol errors of RSV1, and
# decompression bombs bounded by ioa_max_message_size (1009, memory flat).
#
#     make all && TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#         prove -It/lib t/300-ws-deflate.t
#
# Conventions of this file:
#   - every block has `location / { ioa_api; }`; a block with a scenario
#     gets `GET /`, which ioa_api answers 404 unknown_endpoint (as t/010);
#   - the raw clients are IoaTest::WS frames plus Compress::Raw::Zlib (a
#     Perl core module over the same zlib), so the tests can send what a
#     well-behaved library never sends: RSV1 on control frames, broken
#     DEFLATE data, bombs, a stream that breaks the agreed context rules;
#   - the envelopes are IoA text of 1-4 KB from bench/lib/ioa_envelopes.py
#     (licence prose, Python code, IoA's fields), what the hub carries;
#   - protocol errors are each sent on a fresh connection and expect the
#     close code, a reason naming the problem, RSV1 clear on the close
#     frame, and then the end of the TCP connection.

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(register teamup fresh_hub);

use Compress::Raw::Zlib qw(Z_OK Z_STREAM_END Z_BUF_ERROR Z_SYNC_FLUSH
                           Z_FINISH);
use Cwd qw(abs_path);
use Digest::SHA qw(sha256_hex);
use Encode ();
use FindBin;
use IO::Select ();
use IPC::Run ();
use JSON::PP ();
use Time::HiRes qw(sleep time);

no_root_location();
log_level('info');

add_block_preprocessor(sub {
    my $block = shift;
    return unless defined $block->ioa_scenario;
    return if defined $block->request || defined $block->raw_request;
    $block->set_value(request => "GET /\n");
    $block->set_value(error_code => 404);
    $block->set_value(response_body_like => '"code":"unknown_endpoint"');
});

# ------------------------------------------------------------------ helpers
# (package main: scenario code calls them directly)

our $Repo = abs_path("$FindBin::Bin/..");
our $Py   = '/usr/bin/python3';
our $JSON = JSON::PP->new->utf8->canonical;
our $Tail = "\x00\x00\xff\xff";      # RFC 7692 7.2.1: the sender removes it

# the answer to an offer the hub takes as it is
our $Agreed = 'permessage-deflate; server_no_context_takeover';

$ENV{PYTHONIOENCODING} = 'utf-8';
$ENV{PYTHONDONTWRITEBYTECODE} = 1;

# A fresh Redis, agents registered, one room of them all; its comm_id.
sub room {
    my ($ctx, @names) = @_;
    fresh_hub($ctx);
    register($ctx, @names);
    return teamup($ctx, $names[0], [ @names[1 .. $#names] ]);
}

# A WebSocket to /ws/$name offering $offer (undef: no offer at all).
sub dz {
    my ($ctx, $name, $offer, $query) = @_;
    my $ws = $ctx->ws("/ws/$name" . ($query // ''),
        headers => [ 'Sec-WebSocket-Extensions' => $offer ]);
    Test::More::ok($ws->ok, "$name connects" . (defined $offer
                                                ? " offering \"$offer\"" : ''))
        or Test::More::diag($ws->error);
    return $ws;
}

# $n envelopes from $sender into $cid (JSON text, UTF-8 bytes), made by
# bench/lib/ioa_envelopes.py: size => bytes each, or 1-4 KB at random.
sub envelopes {
    my ($cid, $sender, $n, %o) = @_;
    my $code = <<'_PY_';
import random, sys
sys.path.insert(0, sys.argv[1])
from ioa_envelopes import Envelopes
cid, sender, n, seed, size = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
e = Envelopes(seed=seed, comm_id=cid, members=[sender, "Bob", "Carol"])
r = random.Random(seed)
for _ in range(n):
    print(e.make(sender, size or r.randint(1024, 4096)))
_PY_
    my ($out, $err) = ('', '');
    IPC::Run::run([$Py, '-c', $code, "$Repo/bench/lib", $cid, $sender, $n,
                   $o{seed} // 1, $o{size} // 0],
                  '<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(30))
        or die "envelopes: $err\n";
    return split /\n/, $out;
}

# A client's compressor: raw DEFLATE, a 2^bits window, kept from message to
# message (context takeover) for as long as the caller keeps it.
sub deflater {
    my (%o) = @_;
    my ($d, $st) = Compress::Raw::Zlib::Deflate->new(
        -WindowBits => -($o{bits} // 15), -Level => $o{level} // 6,
        -AppendOutput => 1,
        defined $o{dict} ? (-Dictionary => $o{dict}) : ());
    die "deflateInit: $st\n" unless $st == Z_OK;
    return $d;
}

# One message compressed as RFC 7692 7.2.1 says: a sync flush without its
# 00 00 ff ff; final => 1 ends it with a final block instead (BFINAL).
sub zmsg {
    my ($d, $bytes, %o) = @_;
    my ($in, $out) = ($bytes, '');
    $d->deflate($in, $out) == Z_OK or die "deflate failed\n";
    if ($o{final}) {
        $d->flush($out, Z_FINISH) == Z_OK or die "flush failed\n";
        return $out;
    }
    $d->flush($out, Z_SYNC_FLUSH) == Z_OK or die "flush failed\n";
    $out =~ s/\x00\x00\xff\xff\z// or die "no sync-flush tail\n";
    return $out;
}

# A server frame's payload inflated with a 2^bits window, the tail put back
# (RFC 7692 7.2.2); undef if it does not inflate.
sub unz {
    my ($data, $bits) = @_;
    my ($i, $st) = Compress::Raw::Zlib::Inflate->new(-WindowBits => -$bits,
        -AppendOutput => 1, -ConsumeInput => 1, -LimitOutput => 0);
    my ($in, $out) = ($data . $Tail, '');
    $st = $i->inflate($in, $out);
    return undef unless $st == Z_OK || $st == Z_BUF_ERROR;
    return $out;
}

# The same, a few bytes of output per call: a back reference further than
# the window then fails, as it does not when one call has all the output
# before it (zlib then reads history from the output buffer itself).
sub unz_window {
    my ($data, $bits) = @_;
    my ($i, $st) = Compress::Raw::Zlib::Inflate->new(-WindowBits => -$bits,
        -LimitOutput => 1, -Bufsize => 64);
    my ($in, $out) = ($data . $Tail, '');
    while (length $in) {
        my $chunk;
        $st = $i->inflate($in, $chunk);
        return undef unless $st == Z_OK || $st == Z_BUF_ERROR;
        $out .= $chunk // '';
        last if $st == Z_BUF_ERROR && !length($chunk // '');
    }
    return $out;
}

# The next data or close frame from the server (pings answered, pongs
# skipped), its payload inflated when RSV1 is set: the frame of
# IoaTest::WS with wire (the payload's length as sent) and plain (the
# payload as the application sees it; undef if it did not inflate).
sub recv_z {
    my ($ws, $bits, $timeout) = @_;
    my $deadline = time + ($timeout // 5);
    while (1) {
        my $left = $deadline - time;
        return undef if $left <= 0;
        my $f = $ws->recv_frame($left) // return undef;
        if ($f->{opcode} == 9) { $ws->send_pong($f->{payload}); next }
        next if $f->{opcode} == 10;
        $f->{wire} = length $f->{payload};
        $f->{plain} = $f->{rsv} & 4 ? unz($f->{payload}, $bits // 15)
                                    : $f->{payload};
        return $f;
    }
}

# The next envelope (or op frame), decoded: the frame of recv_z with json.
sub recv_env {
    my ($ws, $bits, $timeout) = @_;
    my $f = recv_z($ws, $bits, $timeout) // return undef;
    $f->{json} = eval { $JSON->decode($f->{plain}) } // {}
        if $f->{opcode} == 1 && defined $f->{plain};
    return $f;
}

# The server closes: its close frame (code, a reason matching $re, RSV1
# clear: control frames are never compressed), then the end of TCP.
sub expect_close {
    my ($ws, $code, $re, $what, $timeout) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $deadline = time + ($timeout // 3);
    my $f;
    while (1) {
        my $left = $deadline - time;
        last if $left <= 0;
        $f = $ws->recv_frame($left) // last;
        last if $f->{opcode} == 8;
    }
    my ($got, $reason) = $f && $f->{opcode} == 8 && length $f->{payload} >= 2
        ? (unpack('n', $f->{payload}), substr $f->{payload}, 2) : (undef, '');
    Test::More::is($got, $code, "$what: close code $code")
        or Test::More::diag(Test::More::explain($f));
    Test::More::like($reason, $re, "$what: close reason") if $re;
    Test::More::is($f && $f->{rsv}, 0, "$what: the close frame has RSV1 clear");
    Test::More::ok($ws->wait_eof(3), "$what: the server ends the TCP connection");
}

# The Sec-WebSocket-Extensions headers of the 101 to a handshake with these
# header lines (several: several headers of the same name).
sub handshake_ext {
    my ($ctx, @lines) = @_;
    my $s = $ctx->connect;
    my $req = "GET /ws/Hs HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
            . "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            . "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    $req .= "Sec-WebSocket-Extensions: $_\r\n" for @lines;
    syswrite $s, "$req\r\n";
    my ($raw, $deadline) = ('', time + 3);
    while (index($raw, "\r\n\r\n") < 0 && time < $deadline) {
        IO::Select->new($s)->can_read(0.5) or next;
        sysread($s, $raw, 4096, length $raw) or last;
    }
    close $s;
    my ($status) = $raw =~ m{^HTTP/1\.1 (\d+)};
    my @ext = $raw =~ /^Sec-WebSocket-Extensions: *(.*?)\r$/mgi;
    return ($status // 0, @ext);
}

# ioa_sent_bytes_total and ioa_received_bytes_total of the WebSocket
# transport, from /metrics
sub ws_bytes {
    my $ctx = shift;
    my $text = $ctx->http(GET => '/metrics')->content;
    my %v;
    for my $k (qw(sent received)) {
        ($v{$k}) = $text =~ /^ioa_${k}_bytes_total\{transport="websocket"\} (\d+)/m;
    }
    return \%v;
}

# The peak resident memory of nginx's worker (master_process is off: the
# one process), in kB.
sub vm_hwm {
    my $ctx = shift;
    open my $fh, '<', $ctx->servroot . '/logs/nginx.pid' or return undef;
    my ($pid) = <$fh> =~ /(\d+)/;
    open my $st, '<', "/proc/$pid/status" or return undef;
    while (my $line = <$st>) { return $1 if $line =~ /^VmHWM:\s+(\d+)/ }
    return undef;
}

sub content_sha { sha256_hex(Encode::encode('UTF-8', $_[0]->{content} // '')) }

run_tests();

__DATA__

=== TEST 1: negotiation takes the first acceptable offer, windows and takeover as offered
Negotiation: each offer is parsed, the first acceptable taken; windows and
context takeover as offered.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_ws_deflate on;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $a = $::Agreed;
    my @cases = (
        # [ header lines ], the answer (undef: no extension), what it shows
        [ ['permessage-deflate'], $a, 'bare offer: server_no_context_takeover added' ],
        [ ['Permessage-Deflate'], $a, 'the name in any case' ],
        [ ['permessage-deflate; server_no_context_takeover'], $a,
          'server_no_context_takeover offered' ],
        [ ['permessage-deflate; client_no_context_takeover'],
          "$a; client_no_context_takeover", 'client_no_context_takeover agreed' ],
        [ ['permessage-deflate; client_max_window_bits'],
          "$a; client_max_window_bits=12", 'client_max_window_bits without a value: we choose 12' ],
        [ ['permessage-deflate; client_max_window_bits=10'],
          "$a; client_max_window_bits=10", 'client_max_window_bits=10 kept' ],
        [ ['permessage-deflate; client_max_window_bits=15'],
          "$a; client_max_window_bits=12", 'client_max_window_bits=15 lowered to 12' ],
        [ ['permessage-deflate; client_max_window_bits=8'], $a,
          'client_max_window_bits=8: not named (zlib deflaters cannot keep to it)' ],
        [ ['permessage-deflate; server_max_window_bits=10'],
          "$a; server_max_window_bits=10", 'server_max_window_bits=10 agreed' ],
        [ ['permessage-deflate; server_max_window_bits="9"; client_max_window_bits="11"'],
          "$a; server_max_window_bits=9; client_max_window_bits=11", 'quoted values' ],
        [ ['permessage-deflate ; client_no_context_takeover ;server_max_window_bits = 11'],
          "$a; client_no_context_takeover; server_max_window_bits=11", 'white space around ; and =' ],
        [ ['x-webkit-deflate-frame, permessage-deflate; client_no_context_takeover'],
          "$a; client_no_context_takeover", 'another extension first: skipped' ],
        [ ['foo; bar="x, permessage-deflate; client_max_window_bits=9", permessage-deflate'],
          $a, 'a comma inside a quoted value does not start an offer' ],
        [ ['permessage-deflate; unknown_param, permessage-deflate; client_no_context_takeover'],
          "$a; client_no_context_takeover", 'unknown parameter: the next offer' ],
        [ ['permessage-deflate; server_max_window_bits=8, permessage-deflate; server_max_window_bits=9'],
          "$a; server_max_window_bits=9", 'server_max_window_bits=8 declined (zlib), the next offer taken' ],
        [ ['permessage-deflate; client_no_context_takeover', 'permessage-deflate; client_max_window_bits=11'],
          "$a; client_no_context_takeover", 'two headers: the first acceptable offer of the first' ],
        [ ['permessage-deflate; server_max_window_bits=16', 'permessage-deflate; client_max_window_bits=11'],
          "$a; client_max_window_bits=11", 'two headers: the second when the first has nothing acceptable' ],
    );
    # declined offers, each followed by an acceptable one that says it was taken
    for my $bad ('server_max_window_bits=16', 'server_max_window_bits=7',
                 'server_max_window_bits=08', 'server_max_window_bits',
                 'server_max_window_bits=1a', 'server_max_window_bits=""',
                 'server_max_window_bits="1 0"', 'client_max_window_bits=16',
                 'client_max_window_bits=0', 'client_no_context_takeover=1',
                 'server_no_context_takeover="x"',
                 'client_no_context_takeover; client_no_context_takeover',
                 'client_max_window_bits; client_max_window_bits=10',
                 'server_max_window_bits=10; server_max_window_bits=10',
                 ';', '; =1', 'x y', '"quoted"') {
        push @cases, [ ["permessage-deflate; $bad, permessage-deflate; client_max_window_bits=9"],
                       "$a; client_max_window_bits=9", "declined: $bad" ];
    }
    push @cases,
        [ ['permessage-deflate; server_max_window_bits=16'], undef, 'nothing acceptable: no extension' ],
        [ ['permessage-deflate; a="unterminated, permessage-deflate'], undef,
          'an unterminated quote swallows the rest' ],
        [ ['x-webkit-deflate-frame'], undef, 'only other extensions: none' ],
        [ [''], undef, 'an empty header: none' ],
        [ [], undef, 'no offer: none (as before)' ];
    for my $c (@cases) {
        my ($lines, $want, $what) = @$c;
        my ($status, @ext) = handshake_ext($ctx, @$lines);
        is $status, 101, "$what: 101";
        if (defined $want) {
            is_deeply \@ext, [$want], "$what: $want";
        } else {
            is_deeply \@ext, [], "$what: no Sec-WebSocket-Extensions";
        }
    }
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 2: python3-websockets gets envelopes compressed both ways, a plain client plain
python3-websockets in a room: envelopes of 1-4 KB arrive intact and in order,
compressed both ways; a plain client in the same room gets plain frames; one
compression per envelope serves every deflate member.
--- log_level: debug
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_ws_deflate on;
--- config
    location = /metrics { ioa_metrics; }
    location / { ioa_api; }
--- ioa_scenario
    my $n = 40;
    my $cid = room($ctx, qw(Alice Bob Carol Dave Erin));
    my $carol = dz($ctx, 'Carol', undef);           # no offer: plain
    my $erin = dz($ctx, 'Erin', 'permessage-deflate');
    is $erin->header('Sec-WebSocket-Extensions'), $::Agreed, 'Erin: agreed';
    ok !defined $carol->header('Sec-WebSocket-Extensions'), 'Carol: no extension';
    my $before = ws_bytes($ctx);
    $ctx->log_mark;
    my ($out, $err) = ('', '');
    IPC::Run::run([$::Py, "$::Repo/t/lib/ws-deflate-room.py", $ctx->port, $cid, $n],
                  '<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
    is $?, 0, 'the python3-websockets exchange ran' or diag $err;
    my $r = eval { $::JSON->decode($out) } // {};
    for my $who (qw(Alice Bob Dave)) {
        is $r->{ext}{$who}, "$::Agreed; client_max_window_bits=12",
            "$who (python3-websockets): the extension agreed";
    }
    my @sent = map { $_->[0] } @{ $r->{sent} || [] };
    is scalar @sent, $n, "Alice sent $n envelopes";
    # Carol, plain, and Erin, compressed, read the same envelopes
    my (@carol, @erin, $plain_bytes, $rsv_c, $rsv_e, $smaller, $same);
    for my $i (1 .. $n) {
        my $c = recv_env($carol) // last;
        my $e = recv_env($erin) // last;
        push @carol, [ $c->{json}{id}, content_sha($c->{json}), $c->{json}{sender} ];
        push @erin, [ $e->{json}{id}, content_sha($e->{json}), $e->{json}{sender} ];
        $plain_bytes += $c->{wire};
        $rsv_c++ if $c->{rsv};
        $rsv_e++ if $e->{rsv} == 4;
        $smaller++ if $e->{wire} < 0.7 * $c->{wire};
        $same++ if defined $e->{plain} && $e->{plain} eq $c->{plain};
    }
    is scalar @carol, $n, "Carol got $n envelopes";
    ok !$rsv_c, 'Carol: every frame with RSV bits clear';
    is $rsv_e, $n, 'Erin: every frame with RSV1 set';
    is $smaller, $n, 'Erin: every frame under 70% of the plain one';
    is $same, $n, 'Erin: each inflates to exactly the bytes Carol got';
    is_deeply [ map { $_->[1] } @carol ], \@sent, 'Carol: the contents Alice sent, in order';
    is_deeply \@erin, \@carol, 'Erin: the same envelopes';
    is_deeply $r->{got}{Bob}, \@carol, 'Bob (python3-websockets): the same envelopes, ids and senders';
    is_deeply $r->{got}{Dave}, \@carol, 'Dave (python3-websockets): the same';
    is_deeply $r->{acks}, [ map { $_->[0] } @carol ], "Alice's acks name those ids";
    # compressed once per envelope for Bob, Dave and Erin together
    my $log = $ctx->error_log;
    my $zc = () = $log =~ /ioa ws deflate: message of/g;
    is $zc, $n, "$n compressions for $n envelopes to 3 deflate members";
    # on the wire: Alice's frames compressed, the members' frames too
    my $after = ws_bytes($ctx);
    my $posted = 0;
    $posted += $_->[1] for @{ $r->{sent} || [] };
    my $in = $after->{received} - $before->{received};
    my $outb = $after->{sent} - $before->{sent};
    cmp_ok $in, '<', 0.6 * $posted, "read from the sockets: $in bytes for $posted bytes of envelopes";
    cmp_ok $outb, '<', 0.8 * 4 * $plain_bytes,
        "written: $outb bytes for 4 x $plain_bytes bytes of envelopes";
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 3: RSV1 is on our envelopes only: not short ones, control frames or op frames
Our frames: RSV1 on envelopes, never on control frames or our own op frames; a
short envelope goes plain; server_max_window_bits is kept to.
--- log_level: debug
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_ws_deflate on;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, qw(Alice Bob Carol));
    my $alice = dz($ctx, 'Alice', undef);
    my $bob = dz($ctx, 'Bob', 'permessage-deflate');
    my $carol = dz($ctx, 'Carol', 'permessage-deflate; server_max_window_bits=9');
    is $carol->header('Sec-WebSocket-Extensions'), "$::Agreed; server_max_window_bits=9",
        'Carol: a 512-byte window';
    # an agent quoting itself: the repeat is 2-3 KB back, beyond 512 bytes
    my ($env) = envelopes($cid, 'Alice', 1, size => 3000, seed => 3);
    my $doc = $::JSON->decode($env);
    $doc->{content} .= "\n\nIn short: " . substr $doc->{content}, 0, 800;
    $env = $::JSON->encode($doc);
    $ctx->log_mark;
    $alice->send_text($env);
    my $b = recv_env($bob);
    my $c = recv_env($carol, 9);
    is $b && $b->{rsv}, 4, 'Bob: RSV1 set';
    is $c && $c->{rsv}, 4, 'Carol: RSV1 set';
    is $b->{json}{content}, $doc->{content}, 'Bob: the content';
    is unz_window($c->{payload}, 9), $b->{plain},
        'Carol: the frame inflates with a 512-byte window to the same envelope';
    ok !defined unz_window($b->{payload}, 9),
        "Bob's frame (32 KiB window) does not: it refers further back";
    is unz_window($b->{payload}, 15), $b->{plain}, '(it does with a 32 KiB window)';
    my $zc = () = $ctx->error_log =~ /ioa ws deflate: message of/g;
    is $zc, 2, 'two compressions: one per window in use';
    # a short envelope is sent plain, to deflate clients too
    $alice->send_text($::JSON->encode({ comm_id => $cid, content => 'k' }));
    $b = recv_env($bob);
    cmp_ok length($b->{plain}), '<', 128, 'a short envelope';
    is $b->{rsv}, 0, 'Bob: RSV1 clear on it';
    is $b->{json}{content}, 'k', 'Bob: its content';
    # control frames and our own frames
    $bob->send_ping('p1');
    my $f = $bob->recv_frame(3);
    is_deeply [ $f->{opcode}, $f->{rsv}, $f->{payload} ], [ 10, 0, 'p1' ], 'the pong: plain';
    $bob->send_text('{"content":"no room"}');
    $f = recv_env($bob);
    is $f->{rsv}, 0, 'an error frame of ours: plain';
    is $f->{json}{op}, 'error', 'it is our error frame';
    $bob->close(1000);
    $f = $bob->recv_frame(3);
    is_deeply [ $f->{opcode}, $f->{rsv} ], [ 8, 0 ], 'the close frame: plain';
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 4: client context takeover is kept or not as agreed; a broken stream is 1007
Client context takeover: the inflate stream is kept from message to message,
in the window agreed; under client_no_context_takeover each message stands
alone; a stream that breaks either is 1007.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_ws_deflate on;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, qw(Alice Bob Carol Dave));
    my $bob = dz($ctx, 'Bob', undef);
    my $alice = dz($ctx, 'Alice', 'permessage-deflate; client_max_window_bits', '?echo=0');
    is $alice->header('Sec-WebSocket-Extensions'), "$::Agreed; client_max_window_bits=12",
        'Alice: a 4 KiB window agreed';
    # progress reports: each quotes most of the one before, as agents do
    my @envs = envelopes($cid, 'Alice', 5, size => 1800, seed => 4);
    my $d = deflater(bits => 12);
    my ($raw, $wire) = (0, 0);
    for my $i (0 .. $#envs) {
        my $text = $i ? $::JSON->encode({ %{ $::JSON->decode($envs[0]) },
                                          content => $::JSON->decode($envs[0])->{content}
                                                     . " (update $i)" })
                      : $envs[0];
        my $z = zmsg($d, $text);
        ($raw, $wire) = ($raw + length $text, $wire + length $z) if $i;
        $alice->send_frame(opcode => 1, rsv => 4, payload => $z);
        my $m = recv_env($bob);
        is $m && $m->{json}{content}, $::JSON->decode($text)->{content},
            "message " . ($i + 1) . " arrives intact";
    }
    cmp_ok $wire, '<', 0.1 * $raw,
        "messages 2-5 took $wire bytes for $raw: they refer back into the ones before";
    # the hub keeps the window agreed, 4 KiB: a client that refers 6 KB back
    # breaks the agreement and its stream
    my $dave = dz($ctx, 'Dave', 'permessage-deflate; client_max_window_bits', '?echo=0');
    my ($big) = envelopes($cid, 'Dave', 1, size => 6000, seed => 44);
    my $wide = deflater(bits => 15);
    $dave->send_frame(opcode => 1, rsv => 4, payload => zmsg($wide, $big));
    is recv_env($bob)->{json}{content}, $::JSON->decode($big)->{content},
        "Dave's 6 KB message arrives";
    $dave->send_frame(opcode => 1, rsv => 4, payload => zmsg($wide, $big));
    expect_close($dave, 1007, qr/invalid compressed data/,
                 'the same again from a 32 KiB window, 6 KB back');
    # client_no_context_takeover: a fresh compressor per message
    my $carol = dz($ctx, 'Carol', 'permessage-deflate; client_no_context_takeover', '?echo=0');
    is $carol->header('Sec-WebSocket-Extensions'), "$::Agreed; client_no_context_takeover",
        'Carol: client_no_context_takeover agreed';
    for my $i (1 .. 3) {
        $carol->send_frame(opcode => 1, rsv => 4, payload => zmsg(deflater(), $envs[$i]));
        my $m = recv_env($bob);
        is $m && $m->{json}{content}, $::JSON->decode($envs[$i])->{content},
            "Carol's message $i arrives intact";
    }
    # the server forgot each message: a stream that refers back fails
    my $keep = deflater();
    $carol->send_frame(opcode => 1, rsv => 4, payload => zmsg($keep, $envs[4]));
    is recv_env($bob)->{json}{content}, $::JSON->decode($envs[4])->{content},
        "Carol's message 4 (a new stream) arrives";
    $carol->send_frame(opcode => 1, rsv => 4, payload => zmsg($keep, $envs[4]));
    expect_close($carol, 1007, qr/invalid compressed data/,
                 'a message that refers to the one before, against the agreement');
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 5: a compressed message in fragments arrives intact; RSV1 on a continuation is 1002
A compressed message in fragments (RSV1 on the first only), with a ping
between them and UTF-8 split anywhere, arrives intact; RSV1 on a continuation
frame is 1002.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_ws_deflate on;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, qw(Alice Bob));
    my $bob = dz($ctx, 'Bob', undef);
    my $alice = dz($ctx, 'Alice', 'permessage-deflate', '?echo=0');
    my ($env) = envelopes($cid, 'Alice', 1, size => 3000, seed => 5);
    my $doc = $::JSON->decode($env);
    $doc->{content} .= ' — 王小明的助手, café, 🚀 ' x 20;
    $env = $::JSON->encode($doc);
    my $z = zmsg(deflater(), $env);
    my $third = int(length($z) / 3);
    $alice->send_frame(opcode => 1, rsv => 4, fin => 0, payload => substr $z, 0, $third);
    $alice->send_frame(opcode => 9, payload => 'between');
    my $f = $alice->recv_frame(3);
    is_deeply [ $f->{opcode}, $f->{rsv}, $f->{payload} ], [ 10, 0, 'between' ],
        'the ping between fragments is answered at once, plain';
    $alice->send_frame(opcode => 0, fin => 0, payload => substr $z, $third, $third);
    $alice->send_frame(opcode => 0, fin => 1, payload => substr $z, 2 * $third);
    my $m = recv_env($bob);
    is $m && $m->{json}{content}, $doc->{content}, 'the fragmented message arrives intact';
    # one byte per fragment
    my @bytes = split //, $z;
    $alice->send_frame(opcode => 1, rsv => 4, fin => 0, payload => shift @bytes);
    $alice->send_frame(opcode => 0, fin => @bytes == 1 ? 1 : 0, payload => shift @bytes) while @bytes;
    $m = recv_env($bob);
    is $m && $m->{json}{content}, $doc->{content}, 'in one-byte fragments too';
    # RSV1 belongs on the first frame only
    $alice->send_frame(opcode => 1, rsv => 4, fin => 0, payload => substr $z, 0, $third);
    $alice->send_frame(opcode => 0, rsv => 4, fin => 1, payload => substr $z, $third);
    expect_close($alice, 1002, qr/RSV1 on a continuation frame/, 'RSV1 on a continuation frame');
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 6: misplaced RSV bits are 1002; broken DEFLATE data and bad UTF-8 are 1007
RSV1 on a control frame is 1002, with deflate agreed or not; RSV1 without
deflate and RSV2 with it are 1002; broken DEFLATE data and compressed bad
UTF-8 are 1007.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_ws_deflate on;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $op ([9, 'ping'], [10, 'pong'], [8, 'close']) {
        my $ws = dz($ctx, 'Alice', 'permessage-deflate');
        $ws->send_frame(opcode => $op->[0], rsv => 4,
                        payload => $op->[0] == 8 ? pack('n', 1000) : 'x');
        expect_close($ws, 1002, qr/RSV1 on a control frame/, "RSV1 on a $op->[1]");
    }
    my $ws = dz($ctx, 'Alice', undef);
    $ws->send_frame(opcode => 1, rsv => 4, payload => zmsg(deflater(), '{}'));
    expect_close($ws, 1002, qr/reserved bits set without a negotiated extension/,
                 'RSV1 where deflate was not agreed');
    $ws = dz($ctx, 'Alice', 'permessage-deflate; x, foo');
    ok !defined $ws->header('Sec-WebSocket-Extensions'), 'nothing agreed';
    $ws->send_frame(opcode => 1, rsv => 4, payload => zmsg(deflater(), '{}'));
    expect_close($ws, 1002, qr/reserved bits set without a negotiated extension/,
                 'RSV1 where the offer was declined');
    $ws = dz($ctx, 'Alice', 'permessage-deflate');
    $ws->send_frame(opcode => 1, rsv => 2, payload => '{}');
    expect_close($ws, 1002, qr/RSV2 or RSV3/, 'RSV2 with deflate agreed');
    $ws = dz($ctx, 'Alice', 'permessage-deflate');
    $ws->send_frame(opcode => 1, rsv => 4, payload => "\xff\xff\xff\xff garbage");
    expect_close($ws, 1007, qr/invalid compressed data/, 'data that is not DEFLATE');
    $ws = dz($ctx, 'Alice', 'permessage-deflate');
    $ws->send_frame(opcode => 1, rsv => 4, payload => zmsg(deflater(), "{\"content\":\"\xc3\x28\"}"));
    expect_close($ws, 1007, qr/not valid UTF-8/, 'compressed text that is not UTF-8');
    $ws = dz($ctx, 'Alice', 'permessage-deflate');
    $ws->send_frame(opcode => 1, rsv => 4, payload => zmsg(deflater(), "{\"content\":\"\xe7\x8e"));
    expect_close($ws, 1007, qr/UTF-8/, 'compressed text ending inside a UTF-8 sequence');
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 7: a message ending with a final DEFLATE block is read, and the next refers back
A message that ends with a final DEFLATE block (BFINAL) is read, and the next
one may still refer back into it.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_ws_deflate on;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, qw(Alice Bob));
    my $bob = dz($ctx, 'Bob', undef);
    my $alice = dz($ctx, 'Alice', 'permessage-deflate', '?echo=0');
    my @envs = envelopes($cid, 'Alice', 2, size => 2500, seed => 7);
    $alice->send_frame(opcode => 1, rsv => 4, payload => zmsg(deflater(), $envs[0], final => 1));
    is recv_env($bob)->{json}{content}, $::JSON->decode($envs[0])->{content},
        'a message ending with a final block arrives';
    # a new stream whose dictionary is the first message: back references
    my $doc = $::JSON->decode($envs[1]);
    $doc->{content} = $::JSON->decode($envs[0])->{content} . "\n\n$doc->{content}";
    my $second = $::JSON->encode($doc);
    my $z = zmsg(deflater(dict => $envs[0]), $second);
    cmp_ok length $z, '<', length($second) / 2, 'the next message refers back into it';
    $alice->send_frame(opcode => 1, rsv => 4, payload => $z);
    is recv_env($bob)->{json}{content}, $::JSON->decode($second)->{content},
        'and arrives intact: the context outlived the final block';
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 8: decompression bombs close with 1009 and the worker's memory does not follow
Decompression bombs: 2 MB and 100 MB of zeros in a few KB close with 1009 as
the limit is passed, and the worker's peak memory does not follow the bomb.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_ws_deflate on;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, qw(Alice Bob));
    my $bomb = sub {
        my ($mb) = @_;
        my ($d, $z, $chunk) = (deflater(), '', "\0" x (1 << 20));
        for (1 .. $mb) { my $in = $chunk; $d->deflate($in, $z) == Z_OK or die }
        $d->flush($z, Z_SYNC_FLUSH) == Z_OK or die;
        $z =~ s/\x00\x00\xff\xff\z//;
        return $z;
    };
    my $small = $bomb->(2);
    cmp_ok length $small, '<', 4096, '2 MB of zeros take ' . length($small) . ' bytes';
    my $ws = dz($ctx, 'Alice', 'permessage-deflate');
    $ws->send_frame(opcode => 1, rsv => 4, payload => $small);
    expect_close($ws, 1009, qr/inflates past ioa_max_message_size/, '2 MB bomb');
    # the same in 40 fragments
    $ws = dz($ctx, 'Alice', 'permessage-deflate');
    my $piece = int(length($small) / 40) + 1;
    my @parts = unpack "(a$piece)*", $small;
    $ws->send_frame(opcode => 1, rsv => 4, fin => 0, payload => shift @parts);
    $ws->send_frame(opcode => 0, fin => @parts == 1 ? 1 : 0, payload => shift @parts) while @parts;
    expect_close($ws, 1009, qr/inflates past/, '2 MB bomb in fragments');
    # 100 MB
    my $big = $bomb->(100);
    cmp_ok length $big, '<', 200_000, '100 MB of zeros take ' . length($big) . ' bytes';
    my $hwm = vm_hwm($ctx);
    ok $hwm, "the worker's peak memory before: $hwm kB";
    $ws = dz($ctx, 'Alice', 'permessage-deflate');
    my $t0 = time;
    $ws->send_frame(opcode => 1, rsv => 4, payload => $big);
    expect_close($ws, 1009, qr/inflates past/, '100 MB bomb');
    cmp_ok time - $t0, '<', 3, 'closed at once';
    my $grew = vm_hwm($ctx) - $hwm;
    cmp_ok $grew, '<', 16 * 1024, "the worker's peak memory grew by $grew kB, not 100 MB";
    # the hub goes on
    my $bob = dz($ctx, 'Bob', undef);
    my $alice = dz($ctx, 'Alice', 'permessage-deflate', '?echo=0');
    $alice->send_frame(opcode => 1, rsv => 4,
                       payload => zmsg(deflater(), $::JSON->encode({ comm_id => $cid, content => 'after' x 40 })));
    is recv_env($bob)->{json}{content}, 'after' x 40, 'a compressed envelope after the bombs';
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 9: ioa_max_message_size bounds inflated messages: 64 KiB passes, one more is 1009
ioa_max_message_size 64k: a compressed message inflating to exactly 64 KiB
passes, one byte more is 1009; compressed bytes no such message could take are
1009 at the frame header; a plain one too big still gets too_big and the
connection stays.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_ws_deflate on;
--- config
    location / {
        ioa_api;
        ioa_max_message_size 64k;
    }
--- ioa_scenario
    my $cid = room($ctx, qw(Alice Bob));
    my $bob = dz($ctx, 'Bob', undef);
    my $alice = dz($ctx, 'Alice', 'permessage-deflate', '?echo=0');
    my $pad = 65536 - length $::JSON->encode({ comm_id => $cid, content => '' });
    my $text = $::JSON->encode({ comm_id => $cid, content => 'q' x $pad });
    is length $text, 65536, 'a 65536-byte envelope';
    $alice->send_frame(opcode => 1, rsv => 4, payload => zmsg(deflater(), $text));
    is length(recv_env($bob)->{json}{content} // ''), $pad, 'it arrives whole';
    is recv_env($alice)->{json}{op}, 'ack', 'Alice: its ack';
    # a plain message over the limit: too_big, skipped, the connection goes on
    $alice->send_text('x' x 70000);
    my $f = recv_env($alice);
    is $f && $f->{json}{code}, 'too_big', 'a plain one over the limit: error frame too_big';
    is $f->{rsv}, 0, 'sent plain';
    # one byte more, compressed
    $alice->send_frame(opcode => 1, rsv => 4, payload => zmsg(deflater(), "$text "));
    expect_close($alice, 1009, qr/inflates past/, '65537 bytes inflated');
    # a frame header alone: more compressed bytes than 64 KiB could take
    $alice = dz($ctx, 'Alice', 'permessage-deflate');
    my $hdr = $alice->build_frame(opcode => 1, rsv => 4, payload => 'x' x 70000);
    $alice->send_raw(substr $hdr, 0, 14);
    expect_close($alice, 1009, qr/compressed message larger than ioa_max_message_size/,
                 'a compressed frame header of 70000 bytes');
--- no_error_log
[alert]
[emerg]
[crit]
[error]



=== TEST 10: ioa_ws_deflate is off by default, and a location may turn it on
ioa_ws_deflate is off by default: no extension whatever is offered, RSV1 is
1002, and frames are exactly what they were without deflate; a location may
turn it on.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /z/ { ioa_api; ioa_ws_deflate on; }
    location /off/ { ioa_api; ioa_ws_deflate off; }
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, qw(Alice Bob));
    my $bob = dz($ctx, 'Bob', 'permessage-deflate; client_max_window_bits');
    ok !defined $bob->header('Sec-WebSocket-Extensions'), 'by default: no extension for an offer';
    my $alice = dz($ctx, 'Alice', undef, '?echo=0');
    my ($env) = envelopes($cid, 'Alice', 1, size => 2000, seed => 10);
    $alice->send_text($env);
    my $f = $bob->recv_frame(5);
    my $p = $f->{payload};
    is $f->{rsv}, 0, 'the envelope plain';
    like $p, qr/^\{"id":"\d+-\d+",/, 'the JSON text itself';
    is $bob->build_frame(opcode => 1, payload => $p, mask => 0),
       "\x81\x7e" . pack('n', length $p) . $p, 'FIN, text, 16-bit length, payload';
    $bob->send_frame(opcode => 1, rsv => 4, payload => zmsg(deflater(), '{}'));
    expect_close($bob, 1002, qr/reserved bits set without a negotiated extension/,
                 'RSV1 by default');
    my $z = $ctx->ws('/z/ws/Bob', headers => ['Sec-WebSocket-Extensions' => 'permessage-deflate']);
    is $z->header('Sec-WebSocket-Extensions'), $::Agreed, 'a location with ioa_ws_deflate on: agreed';
    $z = $ctx->ws('/off/ws/Bob', headers => ['Sec-WebSocket-Extensions' => 'permessage-deflate']);
    ok $z->ok && !defined $z->header('Sec-WebSocket-Extensions'), 'ioa_ws_deflate off: none';
--- no_error_log
[alert]
[emerg]
[crit]
[error]
