# IoaTest::WS -- a small blocking WebSocket (RFC 6455) client for tests.
#
# Why hand-rolled: tests of a WebSocket server must send what a well-behaved
# library refuses to send (unmasked frames, RSV bits, wrong lengths, bytes
# split at odd places, invalid UTF-8) and must see exactly what came back
# (each frame, its FIN bit, ping/pong, the close code).  Frames are simple
# enough to build and parse here in a few dozen lines.
#
# Everything blocks with a timeout; nothing dies on a protocol surprise:
#   - connect() always returns an object; ->ok is false when the TCP connect
#     or the handshake failed, and ->status / ->header / ->body / ->error say
#     why (a 403 from the server is a result to assert on, not an exception);
#   - recv_* return undef on timeout or EOF (->eof tells which).
#
#   my $ws = IoaTest::WS->connect('127.0.0.1', $port, '/ws',
#                                 protocols => ['ioa.v1'], timeout => 5);
#   ok $ws->ok, 'handshake' or diag $ws->error;
#   $ws->send_text('{"type":"hello"}');
#   my $msg = $ws->recv_text(2);              # answers pings by itself
#   $ws->send_frame(opcode => 1, payload => 'x', rsv => 4);   # malformed
#   my ($code, $reason) = $ws->recv_close(2);
#
# Text payloads are sent as UTF-8 (a Perl character string is encoded) and
# returned as bytes: decode them yourself (e.g. JSON::PP->new->decode).

package IoaTest::WS;

use strict;
use warnings;
use feature 'bitwise';

use Digest::SHA qw(sha1_base64);
use Encode ();
use IO::Select ();
use IO::Socket::INET ();
use MIME::Base64 qw(encode_base64);
use Socket qw(IPPROTO_TCP TCP_NODELAY SOL_SOCKET SO_RCVBUF pack_sockaddr_in
              inet_aton);
use Time::HiRes qw(time);

use constant {
    OP_CONT => 0x0, OP_TEXT => 0x1, OP_BINARY => 0x2,
    OP_CLOSE => 0x8, OP_PING => 0x9, OP_PONG => 0xA,
};

my $GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

# connect($host, $port, $path, %opt)
#   timeout   => seconds for connect, handshake and default recv (5)
#   protocols => [..]            Sec-WebSocket-Protocol offer
#   origin    => 'http://x'      Origin header
#   headers   => [k => v, ...]   extra headers; a default header with the same
#                                name is replaced, and v = undef removes it
#                                (e.g. [Upgrade => undef] for a bad handshake)
#   key       => '...'           Sec-WebSocket-Key (random by default)
#   auto_pong => 0               let recv_text/recv_message leave pings alone
#   pipeline  => [text, ...]     text frames sent in the same write as the
#                                handshake, before its response is read
#   pipeline_raw => $bytes       raw bytes (e.g. from build_frame) sent after
#                                those, still in the handshake's write
#   rcvbuf    => $bytes          SO_RCVBUF, set before connecting so that it
#                                bounds the advertised window (a client that
#                                does not read then fills up quickly)
#   ssl       => 1               wss://: TLS (certificate not verified)
sub connect {
    my ($class, $host, $port, $path, %opt) = @_;
    my $self = bless {
        timeout   => $opt{timeout} // 5,
        auto_pong => $opt{auto_pong} // 1,
        buf => '', ok => 0, eof => 0, status => undef, headers => {},
        body => '',
    }, $class;

    if (defined $opt{rcvbuf}) {
        my $s = IO::Socket::INET->new(Proto => 'tcp');
        if ($s && setsockopt($s, SOL_SOCKET, SO_RCVBUF, $opt{rcvbuf})
            && $s->connect(pack_sockaddr_in($port, inet_aton($host))))
        {
            $self->{sock} = $s;
        }
    } else {
        $self->{sock} = IO::Socket::INET->new(PeerAddr => $host,
            PeerPort => $port, Proto => 'tcp', Timeout => $self->{timeout});
    }
    if (!$self->{sock}) {
        $self->{error} = "connect to $host:$port failed: $!";
        return $self;
    }
    binmode $self->{sock};
    # Small frames must leave at once, not wait for Nagle.
    setsockopt $self->{sock}, IPPROTO_TCP, TCP_NODELAY, 1;

    if ($opt{ssl}) {
        require IO::Socket::SSL;
        if (!IO::Socket::SSL->start_SSL($self->{sock},
                SSL_verify_mode => 0, SSL_hostname => '',
                Timeout => $self->{timeout}))
        {
            $self->{error} = "TLS handshake failed: "
                             . IO::Socket::SSL::errstr();
            return $self;
        }
    }

    my $key = $opt{key} // encode_base64(join('', map { chr rand 256 } 1 .. 16), '');
    my @hdrs = (
        Host                    => "$host:$port",
        Upgrade                 => 'websocket',
        Connection              => 'Upgrade',
        'Sec-WebSocket-Key'     => $key,
        'Sec-WebSocket-Version' => 13,
    );
    push @hdrs, Origin => $opt{origin} if defined $opt{origin};
    push @hdrs, 'Sec-WebSocket-Protocol' => join(', ', @{ $opt{protocols} })
        if $opt{protocols};
    my @extra = @{ $opt{headers} || [] };
    while (my ($k, $v) = splice @extra, 0, 2) {
        my @keep;
        while (my ($hk, $hv) = splice @hdrs, 0, 2) {
            push @keep, $hk, $hv if lc $hk ne lc $k;
        }
        @hdrs = (@keep, defined $v ? ($k, $v) : ());
    }
    my $req = "GET $path HTTP/1.1\r\n";
    for (my $i = 0; $i < @hdrs; $i += 2) {
        $req .= "$hdrs[$i]: $hdrs[$i + 1]\r\n";
    }
    my $after = join '', map {
        $self->build_frame(opcode => OP_TEXT, payload => utf8::is_utf8($_)
                           ? Encode::encode('UTF-8', $_) : $_)
    } @{ $opt{pipeline} || [] };
    $after .= $opt{pipeline_raw} // '';
    if (!defined $self->send_raw("$req\r\n$after")) {
        $self->{error} = "sending the handshake failed: $!";
        return $self;
    }

    # Read the response head; bytes after it are already frames.
    my $deadline = time + $self->{timeout};
    my $end;
    while (($end = index $self->{buf}, "\r\n\r\n") < 0) {
        if (!$self->_fill($deadline)) {
            $self->{error} = "no complete handshake response ("
                . ($self->{eof} ? 'connection closed' : 'timed out')
                . "), got: '$self->{buf}'";
            return $self;
        }
    }
    my $head = substr $self->{buf}, 0, $end;
    substr($self->{buf}, 0, $end + 4) = '';
    my ($status_line, @lines) = split /\r\n/, $head;
    ($self->{status}, $self->{reason}) =
        $status_line =~ m{^HTTP/1\.\d (\d{3}) ?(.*)$} ? ($1, $2) : (0, '');
    for (@lines) {
        my ($k, $v) = /^([^:]+):\s*(.*?)\s*$/ or next;
        $k = lc $k;
        $self->{headers}{$k} = exists $self->{headers}{$k}
            ? "$self->{headers}{$k}, $v" : $v;
    }

    if ($self->{status} != 101) {
        # Keep the error page: the test may want to check it.
        my $len = $self->{headers}{'content-length'};
        while (!$self->{eof} && (!defined $len || length $self->{buf} < $len)) {
            last unless $self->_fill(time + ($len ? $self->{timeout} : 0.2));
        }
        $self->{body} = $self->{buf};
        $self->{buf} = '';
        $self->{error} = "handshake failed: HTTP $self->{status} $self->{reason}";
        return $self;
    }
    my $want = sha1_base64($key . $GUID) . '=';
    my $got  = $self->{headers}{'sec-websocket-accept'} // '';
    if ($got ne $want) {
        $self->{error} = "bad Sec-WebSocket-Accept '$got' (expected '$want')";
    } elsif (lc($self->{headers}{upgrade} // '') ne 'websocket') {
        $self->{error} = "101 without 'Upgrade: websocket'";
    } else {
        $self->{ok} = 1;
    }
    return $self;
}

# ------------------------------------------------------------ accessors

sub ok      { $_[0]{ok} }
sub error   { $_[0]{error} }
sub status  { $_[0]{status} }
sub headers { $_[0]{headers} }
sub header  { $_[0]{headers}{ lc $_[1] } }
sub body    { $_[0]{body} }
sub eof     { $_[0]{eof} }
sub socket  { $_[0]{sock} }
sub close_code   { $_[0]{close_code} }
sub close_reason { $_[0]{close_reason} }

# ------------------------------------------------------------ sending

# Bytes as they are, e.g. half a frame.  Returns the count, undef on error.
sub send_raw {
    my ($self, $bytes) = @_;
    return undef unless $self->{sock};
    local $SIG{PIPE} = 'IGNORE';
    my $off = 0;
    while ($off < length $bytes) {
        my $n = syswrite $self->{sock}, $bytes, length($bytes) - $off, $off;
        return undef unless defined $n;
        $off += $n;
    }
    return $off;
}

# One frame, well-formed or not, as bytes.
#   opcode (1), payload (''), fin (1), rsv (0..7), mask (1),
#   mask_key (4 random bytes), length (declared length; default the real one)
sub build_frame {
    my ($self, %f) = @_;
    my $payload = $f{payload} // '';
    my $mask = $f{mask} // 1;
    my $len = $f{length} // length $payload;
    my $out = chr((($f{fin} // 1) ? 0x80 : 0) | ((($f{rsv} // 0) & 7) << 4)
                  | (($f{opcode} // OP_TEXT) & 0xf));
    my $m = $mask ? 0x80 : 0;
    if    ($len < 126)   { $out .= chr($m | $len) }
    elsif ($len < 65536) { $out .= chr($m | 126) . pack 'n', $len }
    else                 { $out .= chr($m | 127) . pack 'Q>', $len }
    if ($mask) {
        my $key = $f{mask_key} // join '', map { chr rand 256 } 1 .. 4;
        $out .= $key . _xor($payload, $key);
    } else {
        $out .= $payload;
    }
    return $out;
}

sub send_frame { my ($self, %f) = @_; $self->send_raw($self->build_frame(%f)) }

sub send_text {
    my ($self, $text, %f) = @_;
    $text = Encode::encode('UTF-8', $text) if utf8::is_utf8($text);
    $self->send_frame(%f, opcode => OP_TEXT, payload => $text);
}

sub send_binary { my ($self, $b, %f) = @_; $self->send_frame(%f, opcode => OP_BINARY, payload => $b) }
sub send_ping   { my ($self, $p) = @_; $self->send_frame(opcode => OP_PING, payload => $p // '') }
sub send_pong   { my ($self, $p) = @_; $self->send_frame(opcode => OP_PONG, payload => $p // '') }

# Starts the closing handshake; code undef sends an empty close frame.
sub close {
    my ($self, $code, $reason) = @_;
    my $payload = defined $code ? pack('n', $code) . ($reason // '') : '';
    $self->send_frame(opcode => OP_CLOSE, payload => $payload);
}

# Drops the TCP connection without a close frame.
sub disconnect {
    my $self = shift;
    CORE::close($self->{sock}) if $self->{sock};
    delete $self->{sock};
}

# ------------------------------------------------------------ receiving

# The next frame: { opcode, payload, fin, rsv, masked }, or undef on
# timeout/EOF.  No control-frame handling: you see exactly what came.
sub recv_frame {
    my ($self, $timeout) = @_;
    my $deadline = time + ($timeout // $self->{timeout});
    while (1) {
        my $f = $self->_parse_frame;
        return $f if $f;
        return undef unless $self->_fill($deadline);
    }
}

# The next data message, reassembled from fragments: { opcode, payload }.
# Pings are answered (unless auto_pong => 0) and pongs skipped; a close
# frame ends it: { opcode => 8, code, reason }, also kept in ->close_code.
sub recv_message {
    my ($self, $timeout) = @_;
    my $deadline = time + ($timeout // $self->{timeout});
    my $msg;
    while (1) {
        my $f = $self->recv_frame(_left($deadline)) // return undef;
        my $op = $f->{opcode};
        if ($op == OP_PING) {
            $self->send_pong($f->{payload}) if $self->{auto_pong};
            next;
        }
        next if $op == OP_PONG;
        if ($op == OP_CLOSE) {
            my ($code, $reason) = length $f->{payload} >= 2
                ? (unpack('n', $f->{payload}), substr $f->{payload}, 2)
                : (1005, '');
            @$self{qw(close_code close_reason)} = ($code, $reason);
            return { opcode => OP_CLOSE, code => $code, reason => $reason };
        }
        if ($op == OP_CONT) {
            $msg //= { opcode => OP_CONT, payload => '' };   # stray: surface it
            $msg->{payload} .= $f->{payload};
        } else {
            $msg = { opcode => $op, payload => $f->{payload} };
        }
        return $msg if $f->{fin};
    }
}

# The payload of the next text message; undef on timeout, EOF, close frame
# (see ->close_code) or a binary message (kept in ->{last_message}).
sub recv_text {
    my ($self, $timeout) = @_;
    my $m = $self->recv_message($timeout) // return undef;
    $self->{last_message} = $m;
    return $m->{opcode} == OP_TEXT ? $m->{payload} : undef;
}

# Waits for the peer's close frame, skipping data; returns (code, reason)
# (code only in scalar context) or undef on timeout/EOF.
sub recv_close {
    my ($self, $timeout) = @_;
    my $deadline = time + ($timeout // $self->{timeout});
    while (!defined $self->{close_code}) {
        $self->recv_message(_left($deadline)) // last;
    }
    return undef unless defined $self->{close_code};
    return wantarray ? ($self->{close_code}, $self->{close_reason})
                     : $self->{close_code};
}

# True once the server has closed the TCP connection (data is discarded).
sub wait_eof {
    my ($self, $timeout) = @_;
    my $deadline = time + ($timeout // $self->{timeout});
    while (!$self->{eof}) {
        $self->{buf} = '';
        $self->_fill($deadline) or last;
    }
    return $self->{eof};
}

# ------------------------------------------------------------ internals

sub _left { my $l = $_[0] - time; $l > 0 ? $l : 0 }

# Payload XOR the repeated 4-byte key (string-wise: `^.`).
sub _xor {
    my ($data, $key) = @_;
    return '' if $data eq '';
    my $k = substr $key x (int(length($data) / 4) + 1), 0, length $data;
    return "$data" ^. $k;
}

# Reads what is available into the buffer; false on timeout or EOF.
sub _fill {
    my ($self, $deadline) = @_;
    return 0 if $self->{eof} || !$self->{sock};
    my $left = _left($deadline);
    # TLS may hold decrypted bytes that select() cannot see
    my $pending = $self->{sock}->can('pending') && $self->{sock}->pending;
    return 0 unless $pending
                    || IO::Select->new($self->{sock})->can_read($left);
    my $n = sysread $self->{sock}, $self->{buf}, 65536, length $self->{buf};
    if (!$n) {       # 0 = EOF, undef = error (ECONNRESET): both end it
        $self->{eof} = 1;
        return 0;
    }
    return 1;
}

# One complete frame off the buffer, or undef if more bytes are needed.
sub _parse_frame {
    my $self = shift;
    my $b = \$self->{buf};
    return undef if length $$b < 2;
    my ($b0, $b1) = unpack 'CC', $$b;
    my ($len, $off) = ($b1 & 0x7f, 2);
    if ($len == 126) {
        return undef if length $$b < 4;
        ($len, $off) = (unpack('n', substr $$b, 2, 2), 4);
    } elsif ($len == 127) {
        return undef if length $$b < 10;
        ($len, $off) = (unpack('Q>', substr $$b, 2, 8), 10);
    }
    my $masked = $b1 & 0x80;
    my $key;
    if ($masked) {    # servers must not mask, but show it if one does
        return undef if length $$b < $off + 4;
        $key = substr $$b, $off, 4;
        $off += 4;
    }
    return undef if length $$b < $off + $len;
    my $payload = substr $$b, $off, $len;
    substr($$b, 0, $off + $len) = '';
    $payload = _xor($payload, $key) if $masked;
    return { fin => ($b0 >> 7) & 1, rsv => ($b0 >> 4) & 7, opcode => $b0 & 0xf,
             masked => $masked ? 1 : 0, payload => $payload };
}

1;
