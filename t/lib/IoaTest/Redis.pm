# IoaTest::Redis -- a tiny blocking RESP2 client for tests.
#
# Why not redis-cli: tests need byte-exact values (binary payloads, CRLF in
# strings), typed replies (nil vs "", integers vs strings, errors) and
# several connections at once (a SUBSCRIBE connection next to a command
# one).  RESP2 is small enough that a client is ~100 lines of pure Perl on
# IO::Socket::INET, so nothing beyond core Perl is needed.
#
# Replies map to Perl as: status/bulk -> string, nil -> undef, integer ->
# number, array -> array ref, error -> an IoaTest::Redis::Error object that
# stringifies to the message ("WRONGTYPE ...") so like($r, qr/^ERR/) works.
# A command that gets no reply within the timeout dies: a hung test is worse
# than a failed one.

package IoaTest::Redis;

use strict;
use warnings;

use IO::Select ();
use IO::Socket::INET ();
use Time::HiRes qw(time);

sub new {
    my ($class, %opt) = @_;
    my $self = bless {
        host    => $opt{host} // '127.0.0.1',
        port    => $opt{port} // die("IoaTest::Redis: port required\n"),
        timeout => $opt{timeout} // 5,
        buf     => '',
    }, $class;
    $self->{sock} = IO::Socket::INET->new(PeerAddr => $self->{host},
        PeerPort => $self->{port}, Proto => 'tcp',
        Timeout => $self->{timeout})
        or die "IoaTest::Redis: connect $self->{host}:$self->{port}: $!\n";
    binmode $self->{sock};
    return $self;
}

# Send a command and return its reply.
sub cmd {
    my ($self, @args) = @_;
    $self->send(@args);
    return $self->read_reply;
}

sub send {
    my ($self, @args) = @_;
    my $out = '*' . @args . "\r\n";
    $out .= '$' . length($_) . "\r\n$_\r\n" for map { $_ // '' } @args;
    local $SIG{PIPE} = 'IGNORE';
    my $off = 0;
    while ($off < length $out) {
        my $n = syswrite $self->{sock}, $out, length($out) - $off, $off;
        die "IoaTest::Redis: write: $!\n" unless defined $n;
        $off += $n;
    }
    return 1;
}

# The next reply; dies on timeout or closed connection.
sub read_reply {
    my ($self, $timeout) = @_;
    my $deadline = time + ($timeout // $self->{timeout});
    return $self->_parse($deadline);
}

# The next reply, or an empty list when none arrives in $timeout seconds
# (for pub/sub, where the test waits for a message that may not come).
sub try_read_reply {
    my ($self, $timeout) = @_;
    my $deadline = time + ($timeout // $self->{timeout});
    my @r = eval { ($self->_parse($deadline)) };
    if ($@) {
        die $@ unless $@ =~ /timed out/;
        return;
    }
    return @r;
}

sub close {
    my $self = shift;
    CORE::close($self->{sock}) if $self->{sock};
    delete $self->{sock};
}

# Reads more bytes into the buffer before $deadline.
sub _fill {
    my ($self, $deadline) = @_;
    my $left = $deadline - time;
    die "IoaTest::Redis: read timed out\n"
        if $left <= 0 || !IO::Select->new($self->{sock})->can_read($left);
    my $n = sysread $self->{sock}, $self->{buf}, 65536, length $self->{buf};
    die "IoaTest::Redis: connection closed by server\n" unless $n;
}

sub _line {
    my ($self, $deadline) = @_;
    my $i;
    $self->_fill($deadline) while ($i = index $self->{buf}, "\r\n") < 0;
    my $line = substr $self->{buf}, 0, $i;
    substr($self->{buf}, 0, $i + 2) = '';
    return $line;
}

# Nothing is consumed until a whole line (or a whole bulk body) is buffered,
# so a read that times out before a reply starts can simply be retried; a
# timeout in the middle of an array reply leaves the connection unusable.
sub _parse {
    my ($self, $deadline) = @_;
    my $line = $self->_line($deadline);
    my ($type, $rest) = (substr($line, 0, 1), substr($line, 1));
    return $rest if $type eq '+';
    return $rest + 0 if $type eq ':';
    return IoaTest::Redis::Error->new($rest) if $type eq '-';
    if ($type eq '$') {
        return undef if $rest < 0;
        $self->_fill($deadline) while length $self->{buf} < $rest + 2;
        my $data = substr $self->{buf}, 0, $rest;
        substr($self->{buf}, 0, $rest + 2) = '';
        return $data;
    }
    if ($type eq '*') {
        return undef if $rest < 0;
        return [ map { $self->_parse($deadline) } 1 .. $rest ];
    }
    die "IoaTest::Redis: protocol error, got line '$line'\n";
}

package IoaTest::Redis::Error;

use overload '""' => sub { ${ $_[0] } }, 'bool' => sub { 1 }, fallback => 1;

sub new { my ($class, $msg) = @_; bless \$msg, $class }

1;
