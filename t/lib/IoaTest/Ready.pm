# IoaTest::Ready -- the one wait for a hub to be ready, used wherever a
# test starts one: the runner after every block's nginx (through the start
# hook IoaTest registers), IoaTest::Instance->ready for the extra
# instances a scenario starts, hub_ready (IoaTest::Api) after a flush.
#
#   my ($ok, $why) = IoaTest::Ready::wait(log => $error_log, from => $pos,
#       workers => 2, index => 1, timeout => 30);
#
# Ready means: nginx listens (the runner and Instance already wait for its
# pid file, written after the listening sockets are bound) and every
# worker process can send every command to Redis: each has written "ioa
# redis: ready" (ngx_ioa_redis_note_health) into error.log since `from`,
# with its own pid.  With index => 1, also that the instance's discovery
# index has been read from Redis ("ioa discovery index: N agents read").
#
# Why the error log and not /health_check: a request reaches whichever
# worker accepts it, so a 200 says nothing of the others, and a first
# request that met one still connecting answered 503 (the start-up races
# of the ASan runs).  Each worker says for itself when it is ready; the
# line needs error_log at notice or below (the suite runs at info or
# debug), and for_conf() says when a configuration can be waited on.
#
# A hub started on purpose while Redis is down is not waited for: its
# block says `--- no_ready_wait`, its Instance is started without ->ready.
# $ENV{TEST_IOA_READY_TIMEOUT} (seconds, default 30) bounds the wait: a
# sanitizer build on a loaded machine takes seconds to connect.

package IoaTest::Ready;

use strict;
use warnings;
use Time::HiRes qw(sleep time);

my $ReadyLine = qr/^\S+ \S+ \[notice\] (\d+)#\d+: .*?ioa redis: ready, every command can be sent/m;
my $IndexLine = qr/\] (\d+)#\d+: .*?ioa discovery index: \d+ agents read from Redis/;

sub timeout { $ENV{TEST_IOA_READY_TIMEOUT} || 30 }

# for_conf($nginx_conf_text, $log_level): how many worker processes to
# wait for, or 0 when the configuration cannot be waited on (no ioa_redis,
# or error_log above notice).
sub for_conf {
    my ($conf, $level) = @_;
    return 0 unless $conf =~ /^\s*ioa_redis\s+\S/m;
    return 0 if ($level // 'debug') !~ /^(debug|info|notice)$/;
    my $master = $conf =~ /^\s*master_process\s+on\s*;/m;
    my ($n) = $conf =~ /^\s*worker_processes\s+(\d+)\s*;/m;
    return $master ? ($n // 1) : 1;
}

sub _slurp_from {
    my ($file, $from) = @_;
    open my $fh, '<', $file or return '';
    binmode $fh;
    seek $fh, $from // 0, 0;
    local $/;
    return scalar(<$fh>) // '';
}

sub wait {
    my %opt = @_;
    my $log = $opt{log} or die "IoaTest::Ready::wait: log => FILE\n";
    my $want = $opt{workers} // 1;
    my $deadline = time + ($opt{timeout} // timeout());
    my ($pids, $index) = (0, 0);
    while (1) {
        my $text = _slurp_from($log, $opt{from});
        my %ready;
        $ready{$1} = 1 while $text =~ /$ReadyLine/g;
        $pids = keys %ready;
        $index = $text =~ $IndexLine ? 1 : 0;
        return (1, '') if $pids >= $want && (!$opt{index} || $index);
        if (time >= $deadline) {
            my @tail = (split /\n/, $text)[-5 .. -1];
            my $why = sprintf '%d of %d worker(s) said "ioa redis: ready"%s '
                . 'within %g s in %s; its last lines: %s', $pids, $want,
                ($opt{index} ? ($index ? '' : ', the discovery index was not read')
                             : ''),
                $opt{timeout} // timeout(), $log,
                join(' | ', grep { defined } @tail) || '(empty)';
            return (0, $why);
        }
        sleep 0.02;
    }
}

1;
