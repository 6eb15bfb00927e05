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
# answers the pings, and exits 3.
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
use IoaTest::Instance;

my $Repo = Cwd::abs_path(File::Basename::dirname(__FILE__) . '/..');
my $Bench = $ENV{IOA_BENCH_BIN} || "$Repo/bench/build/ioa-bench";
my $Dir = File::Temp::tempdir('ioa-bench-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my %Children;      # pid -> what, stopped in END

# ------------------------------------------------------------------ helpers

sub free_port {
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                  LocalPort => 0, Proto => 'tcp') or die $!;
    return $s->sockport;
}

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
    http_config => "ioa_redis 127.0.0.1:$RedisPort;",
    config      => 'location / { ioa_api; ioa_ping_interval 1s; }',
);
my $Url = 'http://127.0.0.1:' . $Hub->port;
my $Pids = join ',', $Hub->pid, $Hub->worker_pids, $RedisPid;

# ------------------------------------------------------------- clean runs

{
    my @r = bench('rate', '--url', $Url, '--rooms', 4, '--members', 4,
                  '--rate', 100, '--duration', 2, '--warmup', 0.5,
                  '--size', 300, '--server-pid', $Pids);
    check_clean_run('rate 100/s', @r);
    my $doc = $r[1] || {};
    is $doc->{params}{mode}, 'rate', 'rate 100/s: the mode is recorded';
    is $doc->{params}{message_bytes}, 300, 'rate 100/s: messages are --size';
    my $rate = $doc->{publish_rate} // 0;
    ok $rate > 300 && $rate < 500, "rate 100/s: 4 publishers publish ~400/s "
                                   . "($rate)";
    my $fan = $doc->{published} ? $doc->{delivered} / $doc->{published} : 0;
    ok $fan > 3.5 && $fan < 4.5, "rate 100/s: each message reaches the 4 "
                                 . "members ($fan)";
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
sub fake_nchan {
    my ($listen, $pong_log) = @_;
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
                        if ($i == 0 && $seq == 3) {
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

$Hub->stop;
stop_child($RedisPid);

done_testing();
