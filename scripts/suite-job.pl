#!/usr/bin/perl
# scripts/suite-job.pl -- runs one test file as one job of scripts/suite.pl,
# and makes sure the job ends.
#
#   perl scripts/suite-job.pl FILE STDERR_COPY CPU_FILE
#
# The wrapper suite.pl writes for each (pass, file) sets the pass's
# environment and execs this.  It runs `perl -It/lib FILE` with:
#
#   - its stderr copied into STDERR_COPY as well (suite.pl's report prints
#     a failed file's own diagnostics from it; prove interleaves them);
#   - the CPU time of everything the file ran written into CPU_FILE;
#   - a time limit, TEST_FILE_TIMEOUT seconds (default 900; the slowest
#     file takes about 200 s on 2 cores under ASan): a file still running
#     then is stopped and fails with "suite: TIMEOUT", so that one hung file
#     costs make test minutes and a named failure, not CI's whole budget;
#   - everything it started stopped when it ends.  Each job's processes
#     carry IOA_SUITE_JOB=<this job> in their environment, inherited down
#     every fork and exec, even by daemons that left the file's process
#     group (nginx, a daemonized Redis); when the file has exited, any of
#     them still alive is named on stderr and killed.  A leftover that
#     holds the file's stdout would otherwise keep prove reading the job,
#     and so make test waiting, forever.
#
# Exit status: the file's (128 + signal if a signal ended it); 124 on the
# time limit.

use strict;
use warnings;
use IO::Handle ();
use IO::Select ();
use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

my ($file, $copy, $cpu_file) = @ARGV;
defined $cpu_file or die "usage: suite-job.pl FILE STDERR_COPY CPU_FILE\n";
my $limit = $ENV{TEST_FILE_TIMEOUT} || 900;
my $job = "$file\@$$";
$ENV{IOA_SUITE_JOB} = $job;

open my $keep, '>', $copy or die "suite-job: $copy: $!\n";
$keep->autoflush(1);
STDERR->autoflush(1);

pipe my $err_r, my $err_w or die "suite-job: pipe: $!\n";
my $pid = fork // die "suite-job: fork: $!\n";
if (!$pid) {
    close $err_r;
    # its own process group: the time limit stops the file and all it
    # forked that stayed in the group at once
    POSIX::setpgid(0, 0);
    open STDERR, '>&', $err_w or POSIX::_exit(127);
    close $err_w;
    exec $^X, '-It/lib', $file or POSIX::_exit(127);
}
close $err_w;

sub say_err {
    print STDERR @_;
    print $keep @_;
}

# stderr through to both places until the file exits or the time is up
my $sel = IO::Select->new($err_r);
my $deadline = time + $limit;
my ($status, $timed_out);
while (1) {
    if (waitpid($pid, WNOHANG) == $pid) { $status = $?; last }
    if (time > $deadline) { $timed_out = 1; last }
    for my $fh ($sel->can_read(0.2)) {
        my $n = sysread $fh, my $buf, 65536;
        if ($n) { say_err($buf) } else { $sel->remove($fh) }
    }
}

if ($timed_out) {
    say_err("\nsuite: TIMEOUT: $file still running after $limit s "
            . "(TEST_FILE_TIMEOUT); stopped\n");
    kill 'TERM', -$pid;
    my $until = time + 10;
    while (time < $until) {
        last if waitpid($pid, WNOHANG) == $pid;
        sleep 0.1;
    }
    kill 'KILL', -$pid;
    waitpid $pid, 0;
    $status = 124 << 8;
}

# what is left in the pipe, without waiting on a writer that never ends
$err_r->blocking(0);
while (1) {
    my $n = sysread $err_r, my $buf, 65536;
    last unless $n;
    say_err($buf);
}

# everything of this job still alive: named, then stopped
my @left = leftovers();
if (@left) {
    say_err("suite: $file left " . scalar(@left) . " process(es) running, "
            . "stopped: " . join(', ', map { "$_->[0] ($_->[1])" } @left)
            . "\n");
    kill 'TERM', map { $_->[0] } @left;
    my $until = time + 5;
    sleep 0.1 while time < $until && grep { kill 0, $_->[0] } @left;
    kill 'KILL', map { $_->[0] } @left;
}

my (undef, undef, $cu, $cs) = times;
if (open my $t, '>', $cpu_file) { printf $t "%.1f\n", $cu + $cs }

exit($timed_out ? 124 : $status & 127 ? 128 + ($status & 127) : $status >> 8);


# [pid, command] of every process whose environment names this job
sub leftovers {
    my @found;
    opendir my $proc, '/proc' or return;
    for my $p (grep { /^\d+$/ } readdir $proc) {
        next if $p == $$;
        open my $fh, '<', "/proc/$p/environ" or next;
        local $/;
        my $env = <$fh> // next;
        next unless index("\0$env", "\0IOA_SUITE_JOB=$job\0") >= 0;
        my $cmd = '';
        if (open my $c, '<', "/proc/$p/cmdline") {
            $cmd = <$c> // '';
            $cmd =~ s/\0+$//;
            $cmd =~ tr/\0/ /;
        }
        # a zombie has an empty environment: already gone
        push @found, [$p, substr($cmd, 0, 60)];
    }
    return @found;
}
