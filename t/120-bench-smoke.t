# t/120-bench-smoke.t -- bench/ioa-bench, the WebSocket room load generator,
# end to end and small: against a private hub (its own Redis and an nginx
# with the module, on free loopback ports) it runs 4 rooms x 4 members for
# about 2 s at a modest rate and once saturated with a small window, and
# the JSON it writes must say: every field there, messages delivered, none
# lost, duplicated or reordered, a latency, no errors.  Idle agents are held
# through the hub's keepalive pings (ioa_ping_interval 1s here): a generator
# that did not answer them would see its connections closed.
#
# The checks must be able to fail, so two runs are made to fail: against a
# port where nothing listens the generator exits non-zero and says why; and
# against a fake nchan (below) that drops one message, repeats one and swaps
# two for one subscriber (sending every message in two fragments with a ping
# between them) it reports exactly one lost, one duplicated, one reordered,
# answers the pings, and exits 3.  The same fake in its "corrupt" mode
# relays 64 KiB messages (fragmented to one subscriber, in single frames
# with a 64-bit length to the other) and alters one letter of one message's
# padding: the generator must call that message altered, and lost.
#
# --replay, the HTTP load of bench/discovery-load.sh, registers agents and
# then finds them, closed and open loop, and fails on answers that are not
# 2xx.
#
# What bench/run.sh and bench/callgrind.sh build on is checked cheaply too:
# --count (exactly M messages per publisher, and a run that cannot fit them
# fails), --on-measure (the hook runs around the measured time), 64 KiB
# messages through the hub, report.py on a results directory with sections
# missing or broken, and bench/callgrind.sh on a tiny workload when
# valgrind is installed (skipped, saying so, when it is not;
# `make deps-test` installs it).
#
#   make -C bench && TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/120-bench-smoke.t
#
# (bench/ is built by this file when needed, and so is the module.)
# IOA_BENCH_BIN=/path/to/ioa-bench runs another build (e.g. a sanitizer one,
# see bench/Makefile).
#
# A plain Test::More file: the hub is an IoaTest::Instance, Redis and the
# fake server are our children, and everything is stopped by PID whatever
# way the file ends.

use strict;
use warnings;

use Cwd ();
use Digest::SHA qw(sha1_base64);
use File::Basename ();
use File::Temp ();
use IO::Select ();
use IO::Socket::INET ();
use JSON::PP ();
use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(sleep time);

use lib 't/lib';
use IoaTest::Port ();
use IoaTest::Instance;

my $Repo = Cwd::abs_path(File::Basename::dirname(__FILE__) . '/..');
my $Bench = $ENV{IOA_BENCH_BIN} || "$Repo/bench/build/ioa-bench";
my $Dir = File::Temp::tempdir('ioa-bench-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my %Children;      # pid -> what, stopped in END

# ------------------------------------------------------------------ helpers

sub free_port { IoaTest::Port::free_port() }

sub slurp {
    open my $fh, '<', $_[0] or return '';
    local $/;
    return scalar(<$fh>) // '';
}

sub stop_child {
    my $pid = shift;
    return unless delete $Children{$pid};
    kill 'TERM', $pid;
    for (1 .. 100) {
        return if waitpid($pid, WNOHANG) == $pid;
        sleep 0.02;
    }
    kill 'KILL', $pid;
    waitpid $pid, 0;
}

END {
    local $?;
    stop_child($_) for keys %Children;
}

# Runs the generator with a time limit; returns its exit status, its JSON
# (decoded, or undef) and everything it printed.
sub bench {
    my ($name, @args) = @_;
    my $json = "$Dir/$name.json";
    unlink $json;
    my $pid = open(my $out, '-|') // die "fork: $!";
    if (!$pid) {
        open STDERR, '>&', \*STDOUT;
        exec 'timeout', '30', $Bench, @args, '--json', $json;
        exit 127;
    }
    my $text = do { local $/; <$out> } // '';
    close $out;
    my $rc = $? >> 8;
    my $doc = -s $json ? eval { JSON::PP::decode_json(slurp($json)) } : undef;
    return ($rc, $doc, $text);
}

# the fields every load run's JSON must have, and the checks that make a run
# clean
sub check_clean_run {
    my ($what, $rc, $doc, $text) = @_;
    is $rc, 0, "$what: exit 0" or diag $text;
    ok $doc, "$what: the JSON parses" or return;
    for my $k (qw(version params duration_s connections published
                  publish_rate delivered delivery_rate latency_us integrity
                  errors server generator))
    {
        ok exists $doc->{$k}, "$what: \"$k\" is there";
    }
    for my $k (qw(count min p50 p90 p99 p99_9 max)) {
        ok defined $doc->{latency_us}{$k}, "$what: latency_us.$k is there";
    }
    ok $doc->{published} > 0, "$what: messages published";
    ok $doc->{delivered} > 0, "$what: messages delivered";
    is $doc->{integrity}{$_}, 0, "$what: $_ = 0"
        for qw(lost duplicated reordered);
    is $doc->{integrity}{received}, $doc->{integrity}{expected},
        "$what: every member received every message";
    ok $doc->{latency_us}{p99} > 0, "$what: p99 > 0";
    ok $doc->{latency_us}{p50} <= $doc->{latency_us}{p99}
       && $doc->{latency_us}{p99} <= $doc->{latency_us}{max},
       "$what: p50 <= p99 <= max";
    is $doc->{errors}{total}, 0, "$what: no errors"
        or diag $doc->{errors}{first};
    is $doc->{connections}{open_at_end}, 16, "$what: 16 connections held";
    my @procs = @{ $doc->{server}{processes} };
    ok @procs && !grep({ !$_->{readable} } @procs),
        "$what: the server's processes were sampled";
    ok $doc->{server}{rss_end_kb} > 0, "$what: with their RSS";
    like $text, qr/^latency\s+p50 .* p99 .* max /m, "$what: the table";
}

# ------------------------------------------------------------ build, start

if (!$ENV{IOA_BENCH_BIN} && system("make -s -C $Repo/bench >/dev/null") != 0
    || !-x $Bench)
{
    BAIL_OUT("make -C bench failed, or $Bench is not there");
}

my $Module = (split ' ', $ENV{TEST_NGINX_LOAD_MODULES} // '')[0]
             || "$Repo/build/ngx_http_ioa_module.so";
if (!-f $Module && system("make -s -C $Repo $Module >/dev/null") != 0) {
    BAIL_OUT("cannot build $Module");
}
$ENV{TEST_NGINX_LOAD_MODULES} //= $Module;

# Redis in the foreground, as our child (we reap it)
my $RedisPort = free_port();
my $RedisPid = fork // die "fork: $!";
if (!$RedisPid) {
    open STDIN, '<', '/dev/null';
    open STDOUT, '>', '/dev/null';
    exec 'redis-server', '--port', $RedisPort, '--bind', '127.0.0.1',
         '--daemonize', 'no', '--dir', $Dir, '--save', '', '--appendonly',
         'no', '--logfile', "$Dir/redis.log";
    exit 127;
}
$Children{$RedisPid} = 'redis';
for (1 .. 100) {
    last if IO::Socket::INET->new(PeerAddr => "127.0.0.1:$RedisPort");
    sleep 0.05;
}

my $Hub = IoaTest::Instance->start(
    dir         => "$Dir/hub",
    workers     => 2,
    log_level   => 'info',
    # keepalive_requests: the setup connection is closed after every 10th
    # request (nginx's default is 1000; make bench registers thousands),
    # so every run here goes through the generator's reconnection; the
    # limits are off as in bench/run.sh (a generator posts far above one
    # agent's default rate)
    http_config => "ioa_redis 127.0.0.1:$RedisPort; keepalive_requests 10; "
                 . "ioa_limit_rate off; ioa_limit_room_rate off; ioa_limit_teamup_rate off; ioa_limit_conn 0; ioa_limit_launch_rate off;",
    config      => 'location / { ioa_api; ioa_ping_interval 1s; }',
);
my $Url = 'http://127.0.0.1:' . $Hub->port;
my $Pids = join ',', $Hub->pid, $Hub->worker_pids, $RedisPid;

# The hub connects to Redis after it starts (slower under ASan): the runs
# begin once it answers its health check, as a load balancer would wait.
{
    my $ready_by = time + 15;
    while (time < $ready_by) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $Hub->port,
                                      Timeout => 1) or do { sleep 0.1; next };
        print {$s} "GET /health_check HTTP/1.0\r\n\r\n";
        local $/;
        my $r = <$s> // '';
        last if $r =~ m{^HTTP/1\.\d 200};
        sleep 0.1;
    }
}

# ------------------------------------------------------------- clean runs

{
    my @r = bench('rate', '--url', $Url, '--rooms', 4, '--members', 4,
                  '--rate', 100, '--duration', 2, '--warmup', 0.5,
                  '--size', 300, '--server-pid', $Pids);
    check_clean_run('rate 100/s', @r);
    my $doc = $r[1] || {};
    is $doc->{params}{mode}, 'rate', 'rate 100/s: the mode is recorded';
    is $doc->{params}{arrivals}, 'even', 'rate 100/s: evenly spaced by default';
    is $doc->{params}{message_bytes}, 300, 'rate 100/s: messages are --size';
    my $rate = $doc->{publish_rate} // 0;
    ok $rate > 300 && $rate < 500, "rate 100/s: 4 publishers publish ~400/s "
                                   . "($rate)";
    my $fan = $doc->{published} ? $doc->{delivered} / $doc->{published} : 0;
    ok $fan > 3.5 && $fan < 4.5, "rate 100/s: each message reaches the 4 "
                                 . "members ($fan)";
}

# --arrivals poisson: exponential gaps from --seed, still open loop and
# exact (every message reaches every member once, in order)
{
    my @r = bench('poisson', '--url', $Url, '--rooms', 4, '--members', 4,
                  '--rate', 100, '--arrivals', 'poisson', '--seed', 42,
                  '--duration', 2, '--warmup', 0.5, '--server-pid', $Pids);
    check_clean_run('poisson 100/s', @r);
    my $doc = $r[1] || {};
    is $doc->{params}{arrivals}, 'poisson', 'poisson: the arrivals are recorded';
    is $doc->{params}{seed}, 42, 'poisson: the seed is recorded';
    is $doc->{generator}{behind}, 0, 'poisson: nothing left behind the schedule';
    my $rate = $doc->{publish_rate} // 0;
    ok $rate > 300 && $rate < 500, "poisson: 4 publishers publish ~400/s "
                                   . "($rate)";
    like $r[2], qr/poisson arrivals \(seed 42\)/, 'poisson: the table says so';
}

{
    my @r = bench('saturate', '--url', $Url, '--rooms', 4, '--members', 4,
                  '--saturate', '--window', 4, '--duration', 2, '--warmup',
                  0.5, '--server-pid', $Pids);
    check_clean_run('saturate window 4', @r);
    is +($r[1] || {})->{params}{window}, 4, 'saturate: the window is recorded';
}

{
    my @r = bench('idle', '--url', $Url, '--idle', 20, '--duration', 2.5,
                  '--server-pid', join(',', $Hub->worker_pids));
    my ($rc, $doc, $text) = @r;
    is $rc, 0, 'idle: exit 0' or diag $text;
    is $doc && $doc->{errors}{total}, 0,
        'idle: no connection closed through two ping intervals (pongs)'
        or diag $doc && $doc->{errors}{first};
    is $doc && $doc->{connections}{open_at_end}, 20, 'idle: 20 agents held';
    ok $doc && defined $doc->{server}{rss_per_conn_bytes},
        'idle: RSS per connection reported';
}

# --count: every publisher sends exactly M, all inside the measured time
# (no warmup), and --on-measure runs around it
{
    my $hook = "$Dir/hook.sh";
    my $hook_log = "$Dir/hook.log";
    open my $fh, '>', $hook or die "$hook: $!";
    print $fh "#!/bin/sh\necho \"\$1\" >> $hook_log\n";
    close $fh;
    chmod 0755, $hook;

    my ($rc, $doc, $text) = bench('count', '--url', $Url, '--rooms', 4,
        '--members', 4, '--rate', 50, '--count', 7, '--duration', 1,
        '--on-measure', $hook, '--server-pid', $Pids);
    is $rc, 0, '--count 7: exit 0' or diag $text;
    is $doc && $doc->{params}{count}, 7, '--count 7: recorded';
    is $doc && $doc->{params}{warmup_s}, 0, '--count 7: no warmup';
    is $doc && $doc->{integrity}{published_total}, 28,
        '--count 7: 4 publishers sent exactly 7 each';
    is $doc && $doc->{published}, 28, '--count 7: all in the measured time';
    is $doc && $doc->{integrity}{received}, 112,
        '--count 7: every member got every one';
    is slurp($hook_log), "start\nstop\n",
        '--on-measure: "start" before, "stop" after the measured time';
    like $text, qr/50 msg\/s per publisher, 7 each/, '--count: the table';

    ($rc, $doc, $text) = bench('count-short', '--url', $Url, '--rooms', 1,
        '--members', 2, '--rate', 10, '--count', 100, '--duration', 0.5,
        '--drain', 1);
    is $rc, 3, '--count that does not fit in --duration: exit 3';
    like $text, qr/--count 100: \d+ of 100 messages were sent/,
        '--count that does not fit: it says so';
}

# more agents than keepalive_requests (10 here, 1000 by default): the hub
# closes the setup connection after the 10th pipelined registration, and
# the generator must carry on with a fresh one, not misread the old
# connection's last answer (make bench's room-size sweep registers 6400)
{
    my ($rc, $doc, $text) = bench('keepalive', '--url', $Url, '--rooms', 9,
        '--members', 4, '--rate', 5, '--duration', 0.3, '--warmup', 0,
        '--quiet');
    is $rc, 0, '36 agents, 9 rooms: set up past keepalive_requests'
        or diag $text;
    is $doc && $doc->{connections}{open_at_end}, 36,
        '36 agents, 9 rooms: every one connected';
}

# 64 KiB messages, the largest of make bench's size sweep, through the hub
# (ioa_max_message_size is 64k by default): whole, every one checked
{
    my @r = bench('64k', '--url', $Url, '--rooms', 4, '--members', 4,
                  '--rate', 20, '--duration', 1, '--warmup', 0.2,
                  '--size', 65536, '--server-pid', $Pids);
    check_clean_run('64 KiB messages', @r);
    is +($r[1] || {})->{params}{message_bytes}, 65536,
        '64 KiB messages: messages are 65536 bytes';
}

# --replay: an HTTP load instead of rooms (bench/discovery-load.sh).  POST
# /register of 30 agents, one request in flight, carries on past
# keepalive_requests (10 here) on fresh connections; then their discovery,
# closed loop and open loop, every answer counted and tallied by a header
{
    open my $fh, '>', "$Dir/register.txt" or die $!;
    printf $fh qq({"name":"rp_agent_%d","type":"Thing Assistant",)
        . qq("desc":"Translates %s documents"}\n),
        $_, $_ % 2 ? 'legal' : 'medical' for 1 .. 30;
    close $fh;
    open $fh, '>', "$Dir/queries.txt" or die $!;
    print $fh qq({"capabilities":["legal documents"]}\n),
              qq({"capabilities":["medical"],"limit":5}\n);
    close $fh;

    my ($rc, $doc, $text) = bench('replay-register', '--url', $Url,
        '--replay', "$Dir/register.txt", '--path', '/register',
        '--count', 30, '--duration', 10, '--quiet');
    is $rc, 0, '--replay --count 30: exit 0' or diag $text;
    is $doc && $doc->{answers}{ok}, 30, '--replay --count 30: 30 agents, '
        . 'past keepalive_requests' or diag $doc && $doc->{errors}{first};

    ($rc, $doc, $text) = bench('replay-closed', '--url', $Url, '--replay',
        "$Dir/queries.txt", '--connections', 2, '--duration', 1,
        '--warmup', 0.2, '--tally', 'X-Ioa-Discovery', '--server-pid', $Pids);
    is $rc, 0, '--replay closed loop: exit 0' or diag $text;
    ok $doc && $doc->{answered} > 0 && $doc->{latency_us}{p99} > 0,
        '--replay closed loop: answers, timed';
    my $t = $doc && $doc->{tally} || {};
    my $tallied = $t->{none} // 0;
    $tallied += $_ for values %{ $t->{values} || {} };
    is $tallied, $doc && $doc->{answers}{answered_total},
        '--replay --tally: every answer counted by its X-Ioa-Discovery';
    like $text, qr/^answers\s+2xx \d+, other 0, lost 0.*X-Ioa-Discovery:/m,
        '--replay: the table';

    ($rc, $doc, $text) = bench('replay-open', '--url', $Url, '--replay',
        "$Dir/queries.txt", '--rate', 200, '--connections', 4, '--duration',
        1, '--warmup', 0.2);
    is $rc, 0, '--replay --rate 200: exit 0' or diag $text;
    my $r = $doc ? $doc->{answer_rate} : 0;
    ok $r > 150 && $r < 250, "--replay --rate 200: ~200 answers/s ($r)";
    is $doc && $doc->{params}{rate}, 200, '--replay --rate: recorded';

    open $fh, '>', "$Dir/bad.txt" or die $!;
    print $fh qq({"capabilities":"not a list"}\n);
    close $fh;
    ($rc, $doc, $text) = bench('replay-bad', '--url', $Url, '--replay',
        "$Dir/bad.txt", '--count', 3, '--duration', 5);
    is $rc, 3, '--replay, answers other than 2xx: exit 3';
    like $doc && $doc->{errors}{first}, qr{^POST /retrieve_assistant answered 400},
        '--replay, answers other than 2xx: the first one is reported';
}

unlike $Hub->error_log, qr/\[(?:alert|crit|emerg)\]/, 'a clean error.log';

# ------------------------------------------------------ runs that must fail

{
    my $port = free_port();    # closed again: nothing listens there
    my ($rc, $doc, $text) = bench('nothing', '--url', "http://127.0.0.1:$port",
                                  '--rooms', 2, '--members', 2, '--duration',
                                  1);
    isnt $rc, 0, 'nothing listening: exit status is not 0';
    like $text, qr/cannot reach the hub at http:\/\/127\.0\.0\.1:$port: POST \/register: connect to 127\.0\.0\.1:$port: Connection refused/,
        'nothing listening: it says what it could not reach';
    ok !$doc, 'nothing listening: no JSON claims a result';

    ($rc, $doc, $text) = bench('nothing-nchan', '--target', 'nchan', '--url',
                               "http://127.0.0.1:$port", '--rooms', 1,
                               '--members', 2, '--duration', 1);
    is $rc, 1, 'nchan, nothing listening: exit 1';
    like $text, qr/3 of 3 connections failed .*Connection refused/,
        'nchan, nothing listening: it says the connections failed and why';
}

{
    my ($rc, $doc, $text) = bench('usage', '--rooms', 'many');
    is $rc, 2, 'a bad option: exit 2';
    like $text, qr/--rooms wants a whole number/, 'a bad option: named';
}

# A fake nchan: /pub/<ch> and /sub/<ch> WebSockets.  Each message published
# goes to every subscriber of the channel, except that the first subscriber
# never gets message 3, gets message 5 twice, and gets 8 before 7.  Every
# delivered message is sent as two fragments with a ping between them; each
# pong that comes back is written to $pong_log.
#
# In the "corrupt" mode nothing is dropped, repeated or swapped: the first
# subscriber gets every message in two fragments, the others in one frame,
# and message 4 reaches the first subscriber with one letter of its padding
# changed.
sub fake_nchan {
    my ($listen, $pong_log, $mode) = @_;
    $mode //= 'faulty';
    my $sel = IO::Select->new($listen);
    my (%cl, %subs, %count);
    my $frame = sub {
        my ($b0, $data) = @_;
        my $n = length $data;
        return pack('CC', $b0, $n) . $data if $n < 126;
        return pack('CCn', $b0, 126, $n) . $data if $n < 65536;
        return pack('CCQ>', $b0, 127, $n) . $data;
    };
    my $send = sub {
        my ($c, $bytes) = @_;
        my $off = 0;
        while ($off < length $bytes) {
            my $w = syswrite $c->{fh}, $bytes, length($bytes) - $off, $off;
            return unless $w;
            $off += $w;
        }
    };
    my $deliver = sub {
        my ($c, $data) = @_;
        my $h = int(length($data) / 2);
        $send->($c, $frame->(0x01, substr($data, 0, $h))
                  . $frame->(0x89, 'are you there')
                  . $frame->(0x80, substr($data, $h)));
    };
    open my $log, '>>', $pong_log or die "$pong_log: $!";
    $log->autoflush(1);
    for (;;) {
        for my $fh ($sel->can_read(1)) {
            if ($fh == $listen) {
                my $s = $listen->accept or next;
                $sel->add($s);
                $cl{fileno $s} = { fh => $s, buf => '' };
                next;
            }
            my $c = $cl{fileno $fh};
            my $n = sysread $fh, $c->{buf}, 65536, length $c->{buf};
            if (!$n) {
                $sel->remove($fh);
                delete $cl{fileno $fh};
                close $fh;
                next;
            }
            if (!$c->{ws}) {
                next unless $c->{buf} =~ s/^(.*?)\r\n\r\n//s;
                my $head = $1;
                my ($kind, $ch) = $head =~ m{^GET /(pub|sub)/(\S+) HTTP/1\.1};
                my ($key) = $head =~ /^Sec-WebSocket-Key:[ \t]*(\S+)/mi;
                my $accept = sha1_base64(
                    $key . '258EAFA5-E914-47DA-95CA-C5AB0DC85B11') . '=';
                $send->($c, "HTTP/1.1 101 Switching Protocols\r\n"
                    . "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                    . "Sec-WebSocket-Accept: $accept\r\n\r\n");
                @$c{qw(ws kind ch)} = (1, $kind, $ch);
                push @{ $subs{$ch} }, $c if $kind eq 'sub';
            }
            while (length $c->{buf} >= 2) {
                my ($b0, $b1) = unpack 'CC', $c->{buf};
                my ($len, $off) = ($b1 & 0x7f, 2);
                if ($len == 126) {
                    last if length $c->{buf} < 4;
                    ($len, $off) = (unpack('n', substr $c->{buf}, 2, 2), 4);
                } elsif ($len == 127) {
                    last if length $c->{buf} < 10;
                    ($len, $off) = (unpack('Q>', substr $c->{buf}, 2, 8), 10);
                }
                last if length $c->{buf} < $off + 4 + $len;
                my $mask = substr $c->{buf}, $off, 4;
                my $data = substr($c->{buf}, $off + 4, $len)
                         ^ substr($mask x ($len / 4 + 1), 0, $len);
                substr($c->{buf}, 0, $off + 4 + $len) = '';
                my $op = $b0 & 0x0f;
                if ($op == 0xa) {
                    print $log "pong $data\n";
                } elsif ($op == 0x8) {
                    $send->($c, $frame->(0x88, substr $data, 0, 2));
                } elsif ($op == 0x1 && $c->{kind} eq 'pub') {
                    my $seq = ++$count{ $c->{ch} };
                    $send->($c, $frame->(0x81, "queued messages: $seq"));
                    my @subs = @{ $subs{ $c->{ch} } || [] };
                    for my $i (0 .. $#subs) {
                        my $s = $subs[$i];
                        next if !$s->{ws} || !$cl{fileno $s->{fh}};
                        if ($mode eq 'corrupt') {
                            if ($i > 0) {
                                $send->($s, $frame->(0x81, $data));
                                next;
                            }
                            my $d = $data;
                            if ($seq == 4) {
                                my $at = index($d, '"content":"') + 100;
                                substr($d, $at, 1) =
                                    substr($d, $at, 1) eq 'A' ? 'B' : 'A';
                            }
                            $deliver->($s, $d);
                        } elsif ($i == 0 && $seq == 3) {
                            next;
                        } elsif ($i == 0 && $seq == 5) {
                            $deliver->($s, $data) for 1, 2;
                        } elsif ($i == 0 && $seq == 7) {
                            $s->{held} = $data;
                        } elsif ($i == 0 && $seq == 8) {
                            $deliver->($s, $data);
                            $deliver->($s, delete $s->{held});
                        } else {
                            $deliver->($s, $data);
                        }
                    }
                }
            }
        }
    }
}

{
    my $listen = IO::Socket::INET->new(Listen => 64, LocalAddr => '127.0.0.1',
        LocalPort => 0, Proto => 'tcp', ReuseAddr => 1) or die $!;
    my $port = $listen->sockport;
    my $pongs = "$Dir/pongs.log";
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        $SIG{TERM} = sub { POSIX::_exit(0) };
        fake_nchan($listen, $pongs);
        POSIX::_exit(0);
    }
    $Children{$pid} = 'fake nchan';
    close $listen;

    my ($rc, $doc, $text) = bench('faulty', '--target', 'nchan', '--url',
        "http://127.0.0.1:$port", '--rooms', 1, '--members', 2, '--rate', 40,
        '--duration', 1, '--warmup', 0, '--drain', 1);
    stop_child($pid);

    is $rc, 3, 'a faulty server: exit 3' or diag $text;
    ok $doc, 'a faulty server: the JSON is still written';
    is $doc && $doc->{integrity}{lost}, 1, 'a faulty server: 1 lost';
    is $doc && $doc->{integrity}{duplicated}, 1,
        'a faulty server: 1 duplicated';
    is $doc && $doc->{integrity}{reordered}, 1,
        'a faulty server: 1 reordered';
    ok $doc && !$doc->{integrity}{ok}, 'a faulty server: integrity not ok';
    is $doc && $doc->{errors}{total}, 0,
        'a faulty server: fragments and pings are no protocol errors'
        or diag $doc->{errors}{first};
    like $text, qr/lost 1, duplicated 1, reordered 1\s+FAILED/,
        'a faulty server: the table says FAILED';
    like slurp($pongs), qr/^pong are you there$/m,
        'a faulty server: pings answered with their payload';
}

{
    my $listen = IO::Socket::INET->new(Listen => 64, LocalAddr => '127.0.0.1',
        LocalPort => 0, Proto => 'tcp', ReuseAddr => 1) or die $!;
    my $port = $listen->sockport;
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        $SIG{TERM} = sub { POSIX::_exit(0) };
        fake_nchan($listen, "$Dir/pongs-corrupt.log", 'corrupt');
        POSIX::_exit(0);
    }
    $Children{$pid} = 'fake nchan (corrupt)';
    close $listen;

    my ($rc, $doc, $text) = bench('corrupt', '--target', 'nchan', '--url',
        "http://127.0.0.1:$port", '--rooms', 1, '--members', 2, '--rate', 20,
        '--count', 10, '--duration', 1, '--drain', 1, '--size', 65536);
    stop_child($pid);

    is $rc, 3, 'an altered 64 KiB message: exit 3' or diag $text;
    is $doc && $doc->{integrity}{received}, 19,
        'an altered 64 KiB message: the 19 others arrived whole (fragmented '
        . 'and in 64-bit-length frames)';
    is $doc && $doc->{integrity}{lost}, 1,
        'an altered 64 KiB message: counted lost, not received';
    is $doc && $doc->{errors}{protocol}, 1,
        'an altered 64 KiB message: one protocol error';
    like $doc && $doc->{errors}{first}, qr/publisher 0's message 4 arrived altered/,
        'an altered 64 KiB message: named';
}

# ------------------------------------------------------------ report.py

# the report from a results directory with most of it missing, one sweep
# point, an idle section and a broken goal section: it must still be
# written, say what is missing, and draw the sweep (when gnuplot is there)
{
    my $res = "$Dir/results";
    mkdir $res;
    my $json = slurp("$Dir/saturate.json");
    for my $name ('sweep-room-4-ioa', 'sweep-size-100-nchan-mem') {
        open my $fh, '>', "$res/$name.json" or die $!;
        print $fh $json;
    }
    open my $fh, '>', "$res/idle.json" or die $!;
    print $fh '{"rss_per_conn_bytes": 4321, "server": {"workers": 2}}';
    open $fh, '>', "$res/goal.json" or die $!;
    print $fh '{"broken';
    close $fh;
    open $fh, '>', "$res/sweep-room-4-nchan-redis.cmd" or die $!;
    print $fh "bench/build/ioa-bench --target nchan ...\n";
    close $fh;
    my $out = `/usr/bin/python3 $Repo/bench/report.py $res $Dir/BENCH.md 2>&1`;
    is $? >> 8, 0, 'report.py: exit 0 with sections missing' or diag $out;
    my $md = slurp("$Dir/BENCH.md");
    like $md, qr/^## Sweeps/m, 'report.py: the sweeps section';
    like $md, qr/^\| 4 \| \d+, [\d.]+ \| failed: no result \S+ \| not run \|$/m,
        'report.py: a sweep point with a result, one that failed, one not run';
    like $md, qr/^## Idle connections.*rss_per_conn_bytes \| 4321/ms,
        'report.py: a section from idle.json';
    like $md, qr/goal\.json is there but unreadable/,
        'report.py: a broken goal.json is said, not fatal';
    unlike $md, qr/^## Discovery/m, 'report.py: no discovery.json, no section';
    like $md, qr/callgrind\).*\n\nNot measured in this run/,
        'report.py: no callgrind.json, said so';
  SKIP: {
        skip 'gnuplot is not installed (make deps-bench or make deps-test installs it)', 2
            unless `sh -c 'command -v gnuplot'`;
        ok -s "$res/sweep-room.png" && slurp("$res/sweep-room.png") =~ /^\x89PNG/,
            'report.py: sweep-room.png drawn';
        like $md, qr{!\[deliveries/s and p99 against members per room\]\(results/sweep-room\.png\)},
            'report.py: the plot is referenced';
    }
}

# ------------------------------------------------------------ callgrind.sh

SKIP: {
    skip 'valgrind is not installed: bench/callgrind.sh not checked (make '
         . 'deps-test installs it)', 6
        unless `sh -c 'command -v valgrind'`;
    my $out = "$Dir/callgrind";
    my $text = `CALLGRIND_ROOMS=2 CALLGRIND_MEMBERS=2 CALLGRIND_COUNT=5 CALLGRIND_RATE=20 CALLGRIND_RUNS=2 CALLGRIND_OUT=$out IOA_MODULE=$Module timeout 120 bash $Repo/bench/callgrind.sh 2>&1`;
    is $? >> 8, 0, 'callgrind.sh: exit 0' or diag $text;
    my $doc = eval { JSON::PP::decode_json(slurp("$out/callgrind.json")) };
    is $doc && $doc->{publishes}, 10, 'callgrind.sh: 2 publishers x 5';
    is $doc && $doc->{deliveries}, 20, 'callgrind.sh: each to 2 members';
    ok $doc && $doc->{ir_per_delivery} > 1000
       && abs($doc->{ir_per_publish} - 2 * $doc->{ir_per_delivery}) < 1,
        'callgrind.sh: Ir per delivery and per publish ('
        . ($doc && $doc->{ir_per_delivery}) . ')';
    # 20 deliveries: the once-a-second work of the module (ticks, presence)
    # weighs on so few, more when a busy machine stretches the phase; the
    # full bench's 8,000 agree within 2%
    ok $doc && @{ $doc->{runs} } == 2 && $doc->{spread_pct} < 10,
        'callgrind.sh: two runs agree within 10% ('
        . ($doc && $doc->{spread_pct}) . '%)';
    like slurp("$out/callgrind.txt"),
        qr/top 15 by inclusive Ir.*ngx_ioa_.*top 15 by self Ir/s,
        'callgrind.sh: the top functions, the module\'s among them';
}

# ------------------------------------------------------------ ioa-ceiling

# the Redis ceiling of the post path: every call done and published once,
# with the bare script and with the hub's own post.lua, one call in flight
# and pipelined
if (system("make -s -C $Repo/bench/ceiling >/dev/null") == 0) {
    for my $run (['bare', 1], ['post', 1], ['post', 16]) {
        my ($script, $depth) = @$run;
        my $what = "ioa-ceiling $script, pipeline $depth";
        my $json = "$Dir/ceiling-$script-$depth.json";
        my $text = `$Repo/bench/build/ioa-ceiling --redis 127.0.0.1:$RedisPort --script $script --scripts $Repo/redis-scripts --procs 3 --pipeline $depth --duration 1 --rooms 10 --json $json 2>&1`;
        is $? >> 8, 0, "$what: exit 0" or diag $text;
        my $doc = eval { JSON::PP::decode_json(slurp($json)) };
        ok $doc && $doc->{calls} > 0, "$what: calls made";
        is $doc && $doc->{errors}, 0, "$what: no errors";
        is $doc && $doc->{received}, $doc && $doc->{calls},
            "$what: every call published once, received by the subscriber";
    }
} else {
    fail('make -C bench/ceiling');
}

# ------------------------------------------------------------ ioa-floor

# the bare relay of the open-loop profile: every record of the measured
# phase back at every member, at a rate and saturated, with its CPU read;
# and a usage error is one
if (system("make -s -C $Repo/bench/floor >/dev/null") == 0) {
    my $bin = "$Repo/bench/build/ioa-floor";
    for my $mode (['--rate', 2000], ['--saturate']) {
        my $what = "ioa-floor @$mode";
        my $json = "$Dir/floor.json";
        unlink $json;
        my $text = `$bin --rooms 10 --members 4 --size 200 --duration 1 --warmup 0.2 --pidfile $Dir/floor.pid --json $json @$mode 2>&1`;
        is $? >> 8, 0, "$what: exit 0" or diag $text;
        my $doc = eval { JSON::PP::decode_json(slurp($json)) };
        ok $doc && $doc->{publish_rate} > 0, "$what: records posted";
        is $doc && $doc->{lost}, 0, "$what: none lost";
        is $doc && $doc->{delivered}, $doc && 4 * int($doc->{publish_rate} + 0.5),
            "$what: each record of the phase at each of 4 members";
        ok $doc && $doc->{relay_cpu_us_per_post} > 0, "$what: the relay's CPU read";
        like slurp("$Dir/floor.pid"), qr/^\d+$/, "$what: the relay's pid written";
    }
    my $text = `$bin --rate 10 --saturate 2>&1`;
    is $? >> 8, 2, 'ioa-floor: --rate and --saturate together is a usage error';
    like $text, qr/one of --rate or --saturate/, 'ioa-floor: the error says why';
} else {
    fail('make -C bench/floor');
}

# ------------------------------------------------------- concurrent.sh

# many goals at once against one worker process (issue 30's bench), in
# small: both builds (the base one built from git), every goal right, the
# figures and the ratio written, and the report renders them.  A checkout
# without the base commit (a tarball) runs the current build only.
{
    my $out = "$Dir/conc";
    my $builds = system("git -C $Repo rev-parse -q --verify 31ad6a3^{commit} >/dev/null 2>&1") == 0
                 ? 'base current' : 'current';
    my $text = `CONC_GOALS=3 CONC_REPEATS=1 CONC_TASK_S=1 CONC_LLM_MS=200 CONC_BUILDS="$builds" BENCH_OUT=$out bash $Repo/bench/concurrent.sh 2>&1`;
    is $? >> 8, 0, 'concurrent.sh: exit 0' or diag $text;
    my $doc = eval { JSON::PP::decode_json(slurp("$out/concurrent.json")) };
    my @sum = $doc ? @{ $doc->{summary} } : ();
    is scalar(@sum), 2 * scalar(split ' ', $builds),
        "concurrent.sh: a summary per build ($builds) and planner (builtin, llm)";
    for my $s (@sum) {
        my $what = "concurrent.sh: $s->{mode}, $s->{build}";
        is $s->{right}, 3, "$what: every goal concluded with its agent's result";
        ok $s->{first_to_last_s} >= 1, "$what: the time to the last conclusion, at least one task long";
        ok $s->{rss_kib} > 0 && defined $s->{cpu_ms_per_goal} && defined $s->{kib_per_goal},
           "$what: the worker's RSS, per goal, and CPU read";
    }
    my ($llm) = grep { $_->{mode} eq 'llm' && $_->{build} eq 'current' } @sum;
    ok $llm && $llm->{first_to_last_s} >= 1.4,
       'concurrent.sh: llm: each goal also waited on the model (plan and conclusion, 200 ms each)'
        or diag explain $llm;
    like slurp("$out/concurrent.txt"), qr/^builtin\s+3 current /m, 'concurrent.sh: the table written';
    like slurp("$out/concurrent.txt"), qr{builtin, 3 goals: base/current time to the last conclusion [\d.]+},
        'concurrent.sh: with the ratio' if $builds =~ /base/;
    my $md = `/usr/bin/python3 -c 'import json,sys; sys.path.insert(0,"$Repo/bench"); import report; report.render_concurrent(json.load(open("$out/concurrent.json")), print)' 2>&1`;
    like $md, qr/\| llm \| 3 \| current \| [\d.]+ s \|/, 'concurrent.sh: report.py renders it' or diag $md;
}

$Hub->stop;
stop_child($RedisPid);

done_testing();
