#!/usr/bin/perl
# scripts/suite.pl -- runs the test passes of make test (and make
# test-asan) as one parallel prove: every file of every pass is one job,
# prove -j keeps J of them running, and the slowest start first.
#
#   perl scripts/suite.pl [-j N] [--state FILE] PASS=FILES... [PASS=FILES...]
#
# A PASS is standalone, cluster or asan, with what it means in %Passes
# below (the environment its files run with); FILES are its .t files or
# directories, space-separated in one argument:
#
#   perl scripts/suite.pl standalone=t/ "cluster=t/020-rooms.t t/100-goals.t"
#
# Why one prove and not one per pass: the suite mostly waits (a hub
# reconnecting, a goal's agent answering, a token expiring), so its files
# overlap well; two passes in sequence each end with a tail where one slow
# file runs alone on an idle machine.  Every file already starts its own
# Redis and nginx on free loopback ports in its own directories
# (IoaTest, t/lib/Test/Nginx/Socket.pm), which is what makes them safe to
# run side by side.
#
# How a pass's environment reaches its file: for each (pass, file) a small
# wrapper, build/suite/<pass>/<file>, sets the pass's variables and execs
# perl on the real file from the repository's top.  prove's output then
# names every job by pass and file ("build/suite/cluster/020-rooms.t").
#
# Order: longest first, from the times the previous run on this machine
# recorded (--state, default build/suite/times), else from t/slow.list (a
# committed list of the slowest files of each pass, for a fresh clone; its
# lines are what build/suite/times holds, without build/suite/); the rest
# in name order.  Starting the long ones first is what keeps the last minutes
# of a run from being one file alone.
#
# At the end: the ten slowest files with their times, and the times saved
# for the next run's order; then, for every file that failed, its failed
# assertions with their diagnostics and the last lines of its stderr (a
# CI log keeps its tail, and with -j prove's own output interleaves the
# files).  Exit status: prove's.

use strict;
use warnings;
use Cwd ();
use File::Basename ();
use File::Path ();
use Getopt::Long ();

my $Repo = Cwd::abs_path(File::Basename::dirname(__FILE__) . '/..');
chdir $Repo or die "suite: cd $Repo: $!\n";

# The environment of each pass.  standalone and cluster: Debian's nginx
# with the module of the build tree (unless TEST_NGINX_LOAD_MODULES says
# otherwise); cluster: a 3-master Redis Cluster per file (IoaTest::Cluster).
# asan: nginx from Debian's source with ASan + UBSan and the module
# compiled in, and sanitizer builds of the workers (make test-asan builds
# them into build/asan); every sanitized process writes its reports into
# build/asan/logs, and any report there fails the run whatever the tests
# said.  Leak checking is off: nginx leaves its cycle to the kernel at
# exit by design.  t/ubsan.supp names the one UBSan finding in nginx's own
# core.
my $Asan = "$Repo/build/asan";
my $Module = $ENV{TEST_NGINX_LOAD_MODULES}
             // "$Repo/build/ngx_http_ioa_module.so";
my %Passes = (
    standalone => { TEST_NGINX_LOAD_MODULES => $Module },
    cluster    => { TEST_NGINX_LOAD_MODULES => $Module,
                    TEST_IOA_REDIS => 'cluster' },
    asan       => {
        TEST_NGINX_BINARY       => "$Asan/sbin/nginx",
        TEST_NGINX_LOAD_MODULES => '',
        IOA_WORKER_BIN          => "$Asan/workers/ioa-worker",
        IOA_AGENT_BIN           => "$Asan/workers/ioa-agent",
        IOA_LLM_CHECK_BIN       => "$Asan/workers/ioa-llm-check",
        ASAN_OPTIONS  => "log_path=$Asan/logs/asan:detect_leaks=0",
        UBSAN_OPTIONS => "log_path=$Asan/logs/ubsan:print_stacktrace=1:"
                       . "suppressions=$Repo/t/ubsan.supp",
    },
);

my $jobs  = $ENV{TEST_JOBS} || 2 * (`nproc` =~ /(\d+)/ ? $1 : 2) + 2;
my $state = "$Repo/build/suite/times";
Getopt::Long::GetOptions('j=i' => \$jobs, 'state=s' => \$state)
    or die "usage: suite.pl [-j N] [--state FILE] PASS=FILES...\n";
@ARGV or die "usage: suite.pl [-j N] [--state FILE] PASS=FILES...\n";

# previous times: "<seconds> <job>" lines
my %time;
if (open my $fh, '<', $state) {
    while (<$fh>) { $time{$2} = $1 if /^(\d+(?:\.\d+)?) (\S+)$/ }
}
# t/slow.list: "<pass>/<file> <seconds>" lines, for when there is no
# state yet
my %slow;
if (open my $fh, '<', "$Repo/t/slow.list") {
    while (<$fh>) {
        next if /^\s*(#|$)/;
        $slow{"build/suite/$1"} = $2 if /^(\S+)\s+(\d+)/;
    }
}

my (@jobs, %ran);
for my $arg (@ARGV) {
    my ($pass, $list) = $arg =~ /^(\w+)=(.*)$/s
        or die "suite: '$arg' is not PASS=FILES\n";
    my $env = $Passes{$pass}
        or die "suite: unknown pass '$pass' (" . join(', ', sort keys %Passes) . ")\n";
    my @files = map { -d $_ ? sort(glob("$_/*.t")) : $_ } split ' ', $list;
    -f $_ or die "suite: no test file $_\n" for @files;
    my $dir = "build/suite/$pass";
    File::Path::make_path($dir);
    $ran{$pass} = 1;
    if ($pass eq 'asan') {
        -x "$Asan/sbin/nginx" or die "suite: no $Asan/sbin/nginx (make test-asan builds it)\n";
        File::Path::remove_tree("$Asan/logs");
        File::Path::make_path("$Asan/logs");
    }
    for my $file (@files) {
        (my $norm = $file) =~ s{/+}{/}g;
        $norm =~ s{^\./}{};
        my $wrapper = "$dir/" . File::Basename::basename($norm);
        open my $fh, '>', $wrapper or die "suite: $wrapper: $!\n";
        # The file runs under scripts/suite-job.pl: its stderr (Test::More's
        # diagnostics, a die) also into a file of its own (with several
        # files at once prove interleaves them, and the report at the end
        # prints a failed file's own), the CPU time of everything it ran
        # (nginx, Redis, workers, browsers: reaped down the line) next to
        # it (prove's own per-file CPU counts whatever else ended
        # meanwhile), a time limit, and nothing it started left running.
        print $fh "#!/usr/bin/perl\n",
            "# made by scripts/suite.pl: $norm on the $pass pass\n",
            (map { "\$ENV{$_} = '$env->{$_}';\n" } sort keys %$env),
            "chdir '$Repo' or die \"cd $Repo: \$!\\n\";\n",
            "exec \$^X, '$Repo/scripts/suite-job.pl', '$norm',\n",
            "    '$wrapper.stderr', '$wrapper.cpu' or die \"suite-job.pl: \$!\\n\";\n";
        close $fh;
        push @jobs, [$wrapper, $time{$wrapper} // $slow{$wrapper} // 0];
    }
}
@jobs = map { $_->[0] }
        sort { $b->[1] <=> $a->[1] || $a->[0] cmp $b->[0] } @jobs;

my $log = "build/suite/prove.log";
my @cmd = ('prove', "-j$jobs", '--timer', @jobs);
print "suite: ", scalar(@jobs), " files, $jobs at a time\n";
open my $out, '-|', 'bash', '-c', 'exec "$@" 2>&1', 'prove', @cmd
    or die "suite: prove: $!\n";
open my $keep, '>', $log or die "suite: $log: $!\n";
my (%took, @failed, $summary);
while (my $line = <$out>) {
    print $line;
    print $keep $line;
    # --timer: "[12:00:01] build/suite/x/y.t .... ok     1234 ms ( ...)"
    $took{$1} = $2 / 1000
        if $line =~ m{^\[[\d:]+\] (build/suite/\S+?) \.+ .*?(\d+) ms};
    $summary = 1 if $line =~ /^Test Summary Report/;
    push @failed, $1 if $summary && $line =~ m{^(build/suite/\S+\.t)\s+\(Wstat};
}
close $out;
my $rc = $? >> 8;
close $keep;

my @by_time = sort { $took{$b} <=> $took{$a} } keys %took;
if (@by_time) {
    my %cpu;
    for (@by_time) {
        open my $fh, '<', "$_.cpu" or next;
        ($cpu{$_}) = <$fh> =~ /([\d.]+)/;
    }
    print "\nthe ten slowest files (wall time; the CPU time of all they ran):\n";
    printf "  %7.1f s  %7.1f s CPU  %s\n", $took{$_}, $cpu{$_} // 0, $_
        for @by_time[0 .. ($#by_time < 9 ? $#by_time : 9)];
    my $total = 0;
    $total += $_ for values %cpu;
    my @by_cpu = sort { $cpu{$b} <=> $cpu{$a} } keys %cpu;
    printf "the most CPU: %s; all files: %.0f s CPU\n",
        join(', ', map { sprintf '%s %.0f s', s{^build/suite/}{}r, $cpu{$_} }
                   @by_cpu[0 .. ($#by_cpu < 4 ? $#by_cpu : 4)]), $total;
    # this run's times over the previous ones, for the next run's order
    %time = (%time, %took);
    if (open my $fh, '>', $state) {
        printf $fh "%.1f %s\n", $time{$_}, $_
            for sort { $time{$b} <=> $time{$a} } keys %time;
    }
}

# What failed, after prove's summary, where a CI log that keeps only its
# tail still has it: each failed file's failed assertions with their
# diagnostics, and the last lines it wrote to stderr (a die, a bail-out).
for my $job (@failed) {
    open my $fh, '<', "$job.stderr" or next;
    my @lines = <$fh>;
    my ($on, @fail) = (0);
    for (@lines) {
        $on = 1 if /^#   Failed test/;
        $on = 0 unless /^#/;
        push @fail, $_ if $on;
    }
    print "\n==== $job failed: its failed assertions ====\n",
          @fail[0 .. ($#fail < 200 ? $#fail : 199)];
    print "==== $job: the last lines of its stderr ====\n",
          @lines[($#lines > 15 ? $#lines - 15 : 0) .. $#lines];
}
print "\nsuite: failed: @failed\n" if @failed;

# A short list for the end of make test (scripts/phases.sh --summary),
# after the phases that ran after this one: a CI log that keeps only its
# last lines still names the file that failed and its first assertions.
if (open my $brief, '>', 'build/suite/failed.txt') {
    for my $job (@failed) {
        print $brief "$job\n";
        open my $fh, '<', "$job.stderr" or next;
        my @first = grep { /^#   Failed test/ } <$fh>;
        print $brief map { "    $_" } @first[0 .. ($#first < 2 ? $#first : 2)];
    }
}

if ($ran{asan}) {
    my @reports = glob "$Asan/logs/*";
    if (@reports) {
        print "\nsuite: sanitizer reports:\n";
        for my $f (@reports) {
            open my $fh, '<', $f or next;
            print "==== $f\n", <$fh>;
        }
        $rc ||= 1;
        if (open my $brief, '>>', 'build/suite/failed.txt') {
            print $brief "sanitizer reports: ", join(' ', @reports), "\n";
        }
    } else {
        print "suite: no sanitizer report\n";
    }
}
print "suite: ", ($rc ? "FAIL" : "PASS"), "\n";
exit $rc;
