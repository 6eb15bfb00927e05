# IoaTest::Port -- the one way the tests pick a loopback port for a server
# they are about to start.
#
#   use IoaTest::Port qw(free_port);
#   my $port = free_port();                 # free for TCP now
#   my $port = free_port(avoid => [$p1]);   # and not one of these
#   my $port = free_port(udp => 1);         # free for TCP and UDP (DNS)
#
# Why not "bind port 0 and read the port back": the kernel hands out port
# 0 from the ephemeral range (32768-60999), the same range every outgoing
# connection's local port comes from.  With make test running many files
# side by side, the port was often free when the test looked and the
# local end of some other file's connection (nginx to Redis, a client to
# nginx) a moment later, and the server the test then started failed with
# "Address already in use" (t/080-make-run.t on CI).  20000-32767 lies below
# that range, so only another server can take a port of it, and a server
# picks its port here too.
#
# A port is never handed out twice by one test process, and each one is
# checked by binding it; what remains is the window between this check
# and the server's own bind, in which another file may pick the same port
# (1 in 12,768 per pair).  Callers that can, start the server again on a
# new port when it says the address is in use (the runner does).

package IoaTest::Port;

use strict;
use warnings;

use Exporter ();
use IO::Socket::INET ();

our @ISA = ('Exporter');
our @EXPORT_OK = qw(free_port);

use constant { LOW => 20000, HIGH => 32767 };

my %Given;         # ports this process already handed out

sub free_port {
    my (%opt) = @_;
    my %avoid = map { $_ => 1 } grep { defined } @{ $opt{avoid} // [] };
    for (1 .. 2000) {
        my $port = LOW + int rand(HIGH - LOW + 1);
        next if $avoid{$port} || $Given{$port};
        my $tcp = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
            LocalPort => $port, Proto => 'tcp', Listen => 1, ReuseAddr => 1)
            or next;
        if ($opt{udp}) {
            my $udp = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                LocalPort => $port, Proto => 'udp') or next;
            close $udp;
        }
        close $tcp;
        $Given{$port} = 1;
        return $port;
    }
    die "IoaTest::Port: no free loopback port in " . LOW . "-" . HIGH . "\n";
}

1;
