# IoaTest::SSE -- a small blocking Server-Sent Events client for tests.
#
# Two ways in, one parser:
#
#   # HTTP/1.1 over a raw socket (chunked bodies are decoded as they come)
#   my $s = IoaTest::SSE->connect('127.0.0.1', $port, '/agents/Bob/inbox',
#                                 headers => ['Last-Event-ID' => $id]);
#   # a POST whose answer is a stream (a JSON-RPC facade's)
#   my $s = IoaTest::SSE->connect('127.0.0.1', $port, '/a2a',
#                                 method => 'POST', body => $json);
#
#   # anything curl speaks, e.g. HTTP/2 with prior knowledge; curl is our
#   # child, read through a pipe, and killed by its pid in ->close
#   my $s = IoaTest::SSE->curl("http://127.0.0.1:$port/chatlist",
#                              args => ['--http2-prior-knowledge']);
#
#   ok $s->ok, 'stream open' or diag $s->error;    # status 200 seen
#   $s->status; $s->header('Content-Type'); $s->body  # body: non-200 only
#   my $ev = $s->next_event(2);   # {id, event, data, retry}, or undef
#   my @m  = $s->messages(3, 2);  # the next 3 events without an `event:`
#                                 # field (what EventSource's onmessage gets)
#   $s->raw;                      # every body byte received so far
#   $s->eof || $s->done;          # the connection, or the response, ended
#   $s->close;
#
# Parsing follows the WHATWG rules: lines end in \n (or \r\n); "field: v"
# with one optional space after the colon; ":" starts a comment; a blank
# line dispatches.  Unlike a browser, a block without data (e.g. only
# "retry:") is still returned, with data undef, so a test can see it.
# The last id seen stays in ->last_id, like EventSource's Last-Event-ID.
#
# A body with Content-Encoding: gzip (nginx's gzip filter in front of the
# stream, when the request sent Accept-Encoding: gzip) is inflated as it
# comes, so events are parsed as soon as a flush put them on the wire;
# ->compressed says so, and ->wire counts the bytes before inflation.

package IoaTest::SSE;

use strict;
use warnings;

use Compress::Raw::Zlib ();
use IO::Select ();
use IO::Socket::INET ();
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);

sub connect {
    my ($class, $host, $port, $path, %opt) = @_;
    my $self = $class->_new(%opt);
    my $s = IO::Socket::INET->new(PeerAddr => $host, PeerPort => $port,
        Proto => 'tcp', Timeout => $self->{timeout});
    if (!$s) {
        $self->{error} = "connect to $host:$port failed: $!";
        return $self;
    }
    binmode $s;
    $self->{sock} = $s;
    my @h = (Host => "$host:$port", Accept => 'text/event-stream',
             @{ $opt{headers} || [] });
    push @h, 'Content-Type' => 'application/json',
             'Content-Length' => length $opt{body} if defined $opt{body};
    my $req = ($opt{method} // 'GET') . " $path HTTP/1.1\r\n";
    $req .= "$h[$_]: $h[$_ + 1]\r\n" for grep { $_ % 2 == 0 } 0 .. $#h;
    local $SIG{PIPE} = 'IGNORE';
    syswrite $s, "$req\r\n" . ($opt{body} // '');
    $self->_read_head;
    return $self;
}

sub curl {
    my ($class, $url, %opt) = @_;
    my $self = $class->_new(%opt);
    my @cmd = ('curl', '-sS', '-N', '-i', '--max-time',
               $opt{max_time} // 30, @{ $opt{args} || [] });
    my @h = @{ $opt{headers} || [] };
    push @cmd, '-H', "$h[$_]: $h[$_ + 1]" for grep { $_ % 2 == 0 } 0 .. $#h;
    push @cmd, $url;
    my $pid = open(my $fh, '-|', @cmd);
    if (!$pid) {
        $self->{error} = "cannot run curl: $!";
        return $self;
    }
    binmode $fh;
    @$self{qw(sock pid curl)} = ($fh, $pid, 1);
    $self->_read_head;
    return $self;
}

sub _new {
    my ($class, %opt) = @_;
    return bless { timeout => $opt{timeout} // 5, in => '', body => '',
                   raw => '', events => [], headers => {}, eof => 0,
                   ok => 0, chunked => 0, chunk_left => undef }, $class;
}

sub ok      { $_[0]{ok} }
sub error   { $_[0]{error} }
sub status  { $_[0]{status} }
sub header  { $_[0]{headers}{ lc $_[1] } }
sub headers { $_[0]{headers} }
sub body    { $_[0]{body} }
sub raw     { $_[0]{raw} }
sub eof     { $_[0]{eof} }
sub done    { $_[0]{done} }        # the chunked body's end seen
sub last_id { $_[0]{last_id} }
sub compressed { $_[0]{inflate} ? 1 : 0 }
sub wire    { $_[0]{wire} // 0 }

# Reads the response head (curl -i prints interim and final heads alike).
sub _read_head {
    my $self = shift;
    my $deadline = time + $self->{timeout};
    while (1) {
        my $end = index $self->{in}, "\r\n\r\n";
        if ($end >= 0) {
            my $head = substr $self->{in}, 0, $end;
            substr($self->{in}, 0, $end + 4) = '';
            my ($line, @lines) = split /\r\n/, $head;
            my ($code) = $line =~ m{^HTTP/[\d.]+ (\d{3})} or do {
                $self->{error} = "bad status line '$line'";
                return;
            };
            next if $code =~ /^1/;          # 100 Continue and the like
            $self->{status} = $code;
            for (@lines) {
                my ($k, $v) = /^([^:]+):\s*(.*?)\s*$/ or next;
                $self->{headers}{ lc $k } = $v;
            }
            $self->{chunked} = !$self->{curl}
                && lc($self->{headers}{'transfer-encoding'} // '') eq 'chunked';
            if (lc($self->{headers}{'content-encoding'} // '') eq 'gzip') {
                ($self->{inflate}) = Compress::Raw::Zlib::Inflate->new(
                    -WindowBits => Compress::Raw::Zlib::WANT_GZIP(),
                    -ConsumeInput => 1, -LimitOutput => 0);
            }
            last;
        }
        if (!$self->_fill($deadline)) {
            $self->{error} = 'no complete response head ('
                . ($self->{eof} ? 'connection closed' : 'timed out')
                . "), got '$self->{in}'";
            return;
        }
    }
    if ($self->{status} == 200) {
        $self->{ok} = 1;
        $self->_decode;
        return;
    }
    # An error answer: keep its body for the test.
    my $len = $self->{headers}{'content-length'};
    my $dl = time + $self->{timeout};
    while (!$self->{eof}) {
        $self->_decode;
        last if defined $len && length $self->{body} >= $len;
        $self->_fill($dl) or last;
    }
    $self->_decode;
    $self->{error} = "HTTP $self->{status}";
}

# Moves bytes from {in} to {body}/{raw}, undoing chunked encoding.
sub _decode {
    my $self = shift;
    if (!$self->{chunked}) {
        $self->_body($self->{in});
        $self->{in} = '';
        return;
    }
    while (length $self->{in}) {
        if (!defined $self->{chunk_left}) {
            $self->{in} =~ s/^([0-9a-fA-F]+)[^\r\n]*\r\n// or return;
            $self->{chunk_left} = hex $1;
            if ($self->{chunk_left} == 0) { $self->{done} = 1; return }
        }
        if ($self->{chunk_left} > 0) {
            my $part = substr $self->{in}, 0, $self->{chunk_left}, '';
            $self->{chunk_left} -= length $part;
            $self->_body($part);
        }
        if ($self->{chunk_left} == 0) {
            return if length $self->{in} < 2;
            substr($self->{in}, 0, 2) = '';    # the chunk's CRLF
            undef $self->{chunk_left};
        }
    }
}

# Body bytes as they came off the wire: inflated first when gzipped.
sub _body {
    my ($self, $part) = @_;
    $self->{wire} += length $part;
    if ($self->{inflate} && length $part) {
        my $out = '';
        my $st = $self->{inflate}->inflate($part, $out);
        if ($st != Compress::Raw::Zlib::Z_OK() && $st != Compress::Raw::Zlib::Z_STREAM_END()
            && $st != Compress::Raw::Zlib::Z_BUF_ERROR()) {
            $self->{error} = "gzip: $st";
        }
        $part = $out;
    }
    $self->{body} .= $part;
    $self->{raw} .= $part;
    $self->{pending} .= $part;
}

sub _fill {
    my ($self, $deadline) = @_;
    return 0 if $self->{eof} || !$self->{sock};
    my $left = $deadline - time;
    $left = 0 if $left < 0;
    return 0 unless IO::Select->new($self->{sock})->can_read($left);
    my $n = sysread $self->{sock}, $self->{in}, 65536, length $self->{in};
    if (!$n) {
        $self->{eof} = 1;
        return 0;
    }
    return 1;
}

# Parses complete event blocks out of {pending}.
sub _parse {
    my $self = shift;
    $self->{pending} //= '';
    while ($self->{pending} =~ s/^(.*?)(?:\r?\n){2}//s) {
        my $block = $1;
        my %ev;
        for my $line (split /\r?\n/, $block) {
            next if $line =~ /^:/;
            my ($f, $v) = $line =~ /^([^:]*)(?::[ ]?(.*))?$/s;
            $v //= '';
            if ($f eq 'data') {
                $ev{data} = defined $ev{data} ? "$ev{data}\n$v" : $v;
            } elsif ($f eq 'id' || $f eq 'event' || $f eq 'retry') {
                $ev{$f} = $v;
            }
        }
        next unless %ev;
        $self->{last_id} = $ev{id} if defined $ev{id};
        push @{ $self->{events} }, \%ev;
    }
}

# The next event, or undef after $timeout seconds (or at EOF).
sub next_event {
    my ($self, $timeout) = @_;
    my $deadline = time + ($timeout // $self->{timeout});
    while (1) {
        $self->_decode;
        $self->_parse;
        return shift @{ $self->{events} } if @{ $self->{events} };
        return undef unless $self->_fill($deadline);
    }
}

# The next $n message events (no `event:` field, with data); skips retry
# blocks and named events (pings, ioa control events).  Fewer on timeout.
sub messages {
    my ($self, $n, $timeout) = @_;
    my $deadline = time + ($timeout // $self->{timeout});
    my @out;
    while (@out < $n) {
        my $left = $deadline - time;
        last if $left <= 0;
        my $ev = $self->next_event($left) // last;
        push @out, $ev if defined $ev->{data} && !defined $ev->{event};
    }
    return @out;
}

# Named events too (e.g. event: ioa), skipping only blocks without data.
sub data_events {
    my ($self, $n, $timeout) = @_;
    my $deadline = time + ($timeout // $self->{timeout});
    my @out;
    while (@out < $n) {
        my $left = $deadline - time;
        last if $left <= 0;
        my $ev = $self->next_event($left) // last;
        push @out, $ev if defined $ev->{data};
    }
    return @out;
}

sub close {
    my $self = shift;
    local $?;
    my $fh = delete $self->{sock} or return;
    if ($self->{pid}) {
        kill 'TERM', $self->{pid};
        my $deadline = time + 3;
        while (waitpid($self->{pid}, WNOHANG) == 0) {
            if (time > $deadline) { kill 'KILL', $self->{pid}; waitpid $self->{pid}, 0; last }
            sleep 0.02;
        }
        delete $self->{pid};
    }
    CORE::close $fh;
}

sub DESTROY { local ($?, $@); $_[0]->close }

1;
