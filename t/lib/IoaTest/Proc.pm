package IoaTest::Proc;

# Child processes of a test file (ioactl, Python SDK programs, example
# agents): started in the background with their output in files, waited
# for or stopped by pid, and killed in END whatever happened; plus reading
# those files as they grow.

use strict;
use warnings;

use Exporter 'import';
use File::Temp ();
use IO::Socket::INET ();
use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

use IoaTest::Api ();
use IoaTest::Port ();

our @EXPORT_OK = qw(bg bg_wait bg_stop stop_children slurp lines_of wait_lines
                    redis_child $Scratch %Children);

our $Scratch = File::Temp::tempdir('proc-t-XXXXXX', TMPDIR => 1, CLEANUP => 1);
our %Children;       # pid => what, stopped in END

END {
    local $?;
    for my $pid (keys %Children) {
        kill 'KILL', $pid;
        waitpid $pid, 0;
    }
}

# bg($name, @argv): @argv in the background, stdin /dev/null, stdout and
# stderr in $Scratch/$name.out and .err (append => 1: appended to
# $Scratch/$name.log, both); returns { pid, out, err }
sub bg {
    my ($name, @argv) = @_;
    my %o = ref $argv[-1] eq 'HASH' ? %{ pop @argv } : ();
    my %p = $o{append} ? (out => "$Scratch/$name.log", err => "$Scratch/$name.log")
                       : (out => "$Scratch/$name.out", err => "$Scratch/$name.err");
    my $pid = fork // die "fork: $!\n";
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, $o{append} ? '>>' : '>', $p{out};
        open STDERR, $o{append} ? '>>' : '>', $p{err};
        exec @argv or POSIX::_exit(127);
    }
    $Children{$pid} = $name;
    $p{pid} = $pid;
    return \%p;
}

# its exit status once it exits within $secs, else undef
sub bg_wait {
    my ($p, $secs) = @_;
    my $deadline = time + $secs;
    while (time < $deadline) {
        if (waitpid($p->{pid}, WNOHANG) == $p->{pid}) {
            delete $Children{ $p->{pid} };
            return $? >> 8;
        }
        sleep 0.05;
    }
    return undef;
}

sub bg_stop {
    my $p = shift;
    return unless $Children{ $p->{pid} };
    kill 'TERM', $p->{pid};
    waitpid $p->{pid}, 0;
    delete $Children{ $p->{pid} };
}

sub stop_children {
    for my $pid (keys %Children) {
        kill 'TERM', $pid;
        waitpid $pid, 0;
        delete $Children{$pid};
    }
}

# redis_child(): a Redis of this file's own on a free loopback port, in the
# foreground as our child (stopped in END); returns its port once it accepts
# (in list context its pid too).  bind => '127.0.0.2' and port => P put it
# at another loopback address, a given port.
sub redis_child {
    my %opt = @_;
    my $bind = $opt{bind} // '127.0.0.1';
    my $port = $opt{port} || IoaTest::Port::free_port();
    my $pid = fork // die "IoaTest::Proc: fork: $!\n";
    if (!$pid) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', '/dev/null';
        exec('redis-server', '--port', $port, '--bind', $bind,
             '--daemonize', 'no', '--dir', $Scratch, '--save', '',
             '--appendonly', 'no',
             '--logfile', "$Scratch/redis-$bind-$port.log")
            or POSIX::_exit(127);
    }
    $Children{$pid} = 'redis';
    for (1 .. 200) {
        return wantarray ? ($port, $pid) : $port
            if IO::Socket::INET->new(PeerAddr => "$bind:$port");
        sleep 0.05;
    }
    die "IoaTest::Proc: redis-server on $bind:$port did not start\n";
}

sub slurp {
    open my $fh, '<', $_[0] or return '';
    local $/;
    return <$fh> // '';
}

sub lines_of { grep { length } split /\n/, slurp($_[0]) }

# the lines of $file once it has at least $n (or what it has after $secs)
sub wait_lines {
    my ($file, $n, $secs) = @_;
    IoaTest::Api::wait_until(sub { lines_of($file) >= $n }, $secs // 15);
    return lines_of($file);
}

1;
