# t/180-faults.t -- faults under traffic, every envelope counted: Redis
# killed (-9) and restarted with appendfsync always, nginx reloaded, a
# consumer that stops reading, and a crowd of clients sending junk, each
# while agents keep talking.  The clients here behave as README "Resume"
# tells them to: after an error or a close they resume from their last id,
# and resend only what the room does not hold.  What must hold every time:
# every envelope accepted (echoed back with its id) is in the room's log,
# each sent envelope is stored exactly once, and every member receives the
# log exactly, in order, without a duplicate.
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/180-faults.t
#
# The Redis here is this file's own, with appendonly yes and appendfsync
# always, so it can be killed and started again on the same port and data.

use strict;
use warnings;

use File::Temp ();

our ($RedisDir, $RedisPort, $RedisPid);

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(register teamup envelope wait_health);
use IoaTest::Api;
use IoaTest::Redis;
use IO::Socket::INET ();
use POSIX ();
use Time::HiRes qw(sleep time);

no_root_location();
no_shuffle();
master_on();          # a reload needs a master; the worker is its child
log_level('info');
worker_connections(1024);   # TEST 5 holds 600 connections

$RedisDir = File::Temp::tempdir('ioa-faults-XXXXXX', TMPDIR => 1, CLEANUP => 1);
$RedisPort = IoaTest::_free_port();
$ENV{TEST_NGINX_AOF_REDIS_PORT} = $RedisPort;

sub aof_redis_start {
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', '/dev/null';
        exec 'redis-server', '--port', $RedisPort, '--bind', '127.0.0.1',
             '--dir', $RedisDir, '--save', '', '--appendonly', 'yes',
             '--appendfsync', 'always', '--logfile', "$RedisDir/log"
            or POSIX::_exit(127);
    }
    $RedisPid = $pid;
    for (1 .. 200) {
        my $r = eval { IoaTest::Redis->new(port => $RedisPort, timeout => 1) };
        if ($r && eval { $r->cmd('PING') } && !eval { ($r->cmd('INFO', 'persistence') =~ /loading:1/) }) {
            $r->close;
            return 1;
        }
        sleep 0.05;
    }
    return 0;
}

sub aof_redis_kill9 {
    kill 'KILL', $RedisPid;
    waitpid $RedisPid, 0;
    undef $RedisPid;
}

sub aof {
    my $r = IoaTest::Redis->new(port => $RedisPort, timeout => 5);
    my $v = $r->cmd(@_);
    $r->close;
    return $v;
}

aof_redis_start() or die "the AOF Redis did not start\n";

END {
    if ($RedisPid) {
        kill 'TERM', $RedisPid;
        waitpid $RedisPid, 0;
    }
}

# The room's log: [ [id, content], ... ] in order.
sub room_log {
    my ($cid) = @_;
    my $entries = aof('XRANGE', "ioa:{room:$cid}:log", '-', '+');
    return [ map { [ $_->[0], IoaTest::Agent::json()->decode($_->[1][1])->{content} ] } @$entries ];
}

# A member as README "Resume" describes it: it remembers the last id it
# saw in the room, and reconnects with ?resume=<comm_id>:<id>.
sub member {
    my ($ctx, $name, $cid) = @_;
    my $m = bless { ctx => $ctx, name => $name, cid => $cid, last => '0-0',
                    seen => [], errors => 0 }, 'FaultMember';
    $m->reconnect;
    return $m;
}

package FaultMember;

sub reconnect {
    my ($self) = @_;
    $self->{connects}++;
    for (1 .. 50) {
        $self->{a} = IoaTest::Agent->connect($self->{ctx}, $self->{name},
                                             "?resume=$self->{cid}:$self->{last}");
        return 1 if $self->{a}->ok;
        Time::HiRes::sleep(0.1);
    }
    return 0;
}

# Reads what is there (for up to $secs); an envelope of the room is kept
# once per id (a duplicate id would be counted by the caller's check).
sub drain {
    my ($self, $secs) = @_;
    my $deadline = Time::HiRes::time() + ($secs // 0.2);
    while (1) {
        my $left = $deadline - Time::HiRes::time();
        last if $left <= 0;
        my $m = $self->{a}->recv($left) // last;
        if (defined $m->{op}) {
            $self->{errors}++ if $m->{op} eq 'error';
            next;
        }
        next unless ($m->{comm_id} // '') eq $self->{cid} && $m->{id};
        push @{ $self->{seen} }, [ $m->{id}, $m->{content} ];
        $self->{last} = $m->{id};
    }
    return $self->{a}->ws->close_code;
}

# Sends; false when the connection is gone (the caller reconnects).
sub send {
    my ($self, $content) = @_;
    return eval {
        $self->{a}->post(IoaTest::Agent::envelope(comm_id => $self->{cid},
                                                  content => $content));
        1;
    };
}

sub contents { [ map { $_->[1] } @{ $_[0]{seen} } ] }

package main;

# After the fault: until every content the sender meant to send is in the
# room (as it sees it through resume), reconnect if needed, read, and resend
# only what the room does not hold.
sub settle {
    my ($sender, $want, @others) = @_;
    for my $round (1 .. 20) {
        for my $m ($sender, @others) {
            my $code = $m->drain(0.3);
            $m->reconnect if defined $code || !$m->{a}->ws->ok || $m->{a}->ws->eof;
        }
        # only once the sender has caught up with everything the room
        # holds (large envelopes take a while to read)
        my $until = time + 30;
        while (@{ $sender->{seen} } < aof('XLEN', "ioa:{room:$sender->{cid}}:log") && time < $until) {
            my $code = $sender->drain(0.3);
            $sender->reconnect if defined $code || !$sender->{a}->ws->ok || $sender->{a}->ws->eof;
        }
        my %have = map { $_ => 1 } @{ $sender->contents };
        my @missing = grep { !$have{$_} } @$want;
        return 1 unless @missing;
        for my $c (@missing) {
            $sender->send($c) or do { $sender->reconnect; last };
        }
        $_->drain(0.5) for $sender, @others;
    }
    return 0;
}

sub check_exactly_once {
    my ($cid, $want, $what, @members) = @_;
    my $log = room_log($cid);
    my %count;
    $count{ $_->[1] }++ for @$log;
    is scalar(grep { ($count{$_} // 0) == 1 } @$want), scalar @$want,
        "$what: each of the " . @$want . " envelopes is stored exactly once";
    is scalar(keys %count), scalar @$want, "$what: and nothing else is stored";
    for my $m (@members) {
        # a member reads on, resuming after any close, until it has as much
        # as the log holds (or 30 s: 10 MB through a sanitized hub on a
        # loaded machine takes more than 10)
        my $until = time + 30;
        while (@{ $m->{seen} } < @$log && time < $until) {
            my $code = $m->drain(0.3);
            $m->reconnect if defined $code || $m->{a}->ws->eof;
        }
        is_deeply [ map { $_->[0] } @{ $m->{seen} } ], [ map { $_->[0] } @$log ],
            "$what: $m->{name} received the log exactly, in order, once";
    }
}

# Every block's start: an empty Redis, the hub up, Alice and Bob (and
# @others) registered and in one room, Alice and Bob connected as members.
sub talking_room {
    my ($ctx, @others) = @_;
    aof('FLUSHALL');
    ok wait_health($ctx, 200, 10)->code == 200, 'hub up';
    register($ctx, 'Alice', 'Bob', @others);
    my $cid = teamup($ctx, 'Alice', ['Bob', @others]);
    return ($cid, member($ctx, 'Alice', $cid), member($ctx, 'Bob', $cid));
}

sub nginx_master {
    my ($ctx) = @_;
    my $pidfile = $ctx->servroot . '/logs/nginx.pid';
    open my $fh, '<', $pidfile or die "$pidfile: $!";
    chomp(my $master = <$fh>);
    return $master;
}

run_tests();

__DATA__

=== TEST 1: Redis killed -9 under traffic and restarted: nothing accepted is lost or doubled
Redis killed -9 under traffic and restarted (appendfsync always): nothing
accepted is lost, nothing is stored twice, the open connections recover.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_AOF_REDIS_PORT;
    ioa_redis_timeout 1s;
    ioa_limit_rate off;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my ($cid, $alice, $bob) = talking_room($ctx);
    sleep 0.3;
    my @want = map { "k$_" } 1 .. 150;
    my %accepted;
    for my $i (1 .. 150) {
        $alice->send("k$i") or $alice->reconnect;
        $alice->drain(0.005);
        if ($i == 60) {
            $accepted{$_->[1]} = $_->[0] for @{ $alice->{seen} };
            main::aof_redis_kill9();
        }
        main::aof_redis_start() if $i == 90;
    }
    ok scalar(keys %accepted) > 0, scalar(keys %accepted) . ' envelopes accepted before the kill';
    ok $alice->{errors} > 0, "posts during the outage got errors ($alice->{errors})";
    ok wait_health($ctx, 200, 10)->code == 200, 'the hub is healthy again';
    my %log = map { $_->[1] => $_->[0] } @{ room_log($cid) };
    is scalar(grep { ($log{$_} // '') eq $accepted{$_} } keys %accepted), scalar(keys %accepted),
        'every envelope accepted before the kill is in the log after the restart, with its id';
    ok settle($alice, \@want, $bob), 'the sender got every envelope in by resuming and resending';
    check_exactly_once($cid, \@want, 'Redis kill', $alice, $bob);



=== TEST 2: nginx reload under traffic: clients resume and resend, nothing lost or doubled
nginx reload under traffic: clients get 1001, reconnect with resume, resend
what is missing; nothing lost or doubled.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_AOF_REDIS_PORT;
    ioa_limit_rate off;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my ($cid, $alice, $bob) = talking_room($ctx);
    sleep 0.3;
    my $master = nginx_master($ctx);
    my @want = map { "r$_" } 1 .. 150;
    my ($closes, $reconnects) = (0, 0);
    for my $i (1 .. 150) {
        if (!$alice->send("r$i")) {
            $alice->reconnect;
            $reconnects++;
        }
        my $code = $alice->drain(0.005);
        if (defined $code) {
            $closes++ if $code == 1001;
            $alice->reconnect;
            $reconnects++;
        }
        kill 'HUP', $master if $i == 50;
    }
    ok settle($alice, \@want, $bob), 'the sender got every envelope in by resuming and resending';
    ok $alice->{connects} > 1 && $bob->{connects} > 1,
        "the old worker ended both connections and they resumed ($closes close 1001 seen while sending)";
    check_exactly_once($cid, \@want, 'reload', $alice, $bob);
--- no_error_log
[alert]
[crit]



=== TEST 3: a member that stops reading is closed with 1008, the worker's memory bounded
a member that stops reading: the worker's memory stays bounded, it is closed
with 1008, resumes and gets everything; the others are unaffected.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_AOF_REDIS_PORT;
    ioa_limit_rate off;
    ioa_limit_room_rate off;
--- config
    location / { ioa_api; ioa_send_queue_limit 256k; }
--- ioa_scenario
    my ($cid, $alice, $bob) = talking_room($ctx, 'Slow');
    # a small receive buffer, and never read: the hub's queue for it fills
    my $slow = IoaTest::Agent->connect($ctx, 'Slow', '', rcvbuf => 4096);
    ok $slow->ok, 'Slow connected';
    sleep 0.3;
    my $master = nginx_master($ctx);
    my ($worker) = grep { /^\d+$/ } split ' ', `pgrep -P $master`;
    my $rss = sub { my $s = `ps -o rss= -p $worker`; $s =~ s/\s+//g; $s };
    my $before = $rss->();
    # more than the kernel's socket buffers hold (several MB on loopback),
    # so the hub's own queue must fill
    my $pad = 'x' x 16000;
    my @want = map { "s$_" } 1 .. 600;
    for my $c (@want) {
        $alice->send("$c $pad") or last;
        $alice->drain(0.001);
        $bob->drain(0.001);
    }
    my $after = $rss->();
    SKIP: {
        # ASan keeps freed memory in quarantine: RSS says nothing there
        skip 'worker RSS under AddressSanitizer includes its quarantine', 1
            if ($ENV{ASAN_OPTIONS} // '') ne '';
        ok $after - $before < 16 * 1024, "worker RSS grew by " . ($after - $before)
            . " KiB while 9.6 MB went to a member that does not read (bounded by the queue limit)";
    }
    # the 1008 close frame queues behind what Slow never read, so it sees
    # it (if at all) after reading through; the hub's log says why
    ok wait_until(sub { IoaTest::nginx_error_log() =~ /"Slow" reads too slowly, closing/ }, 5),
        'the slow member was closed (1008: reads too slowly)';
    my ($close) = $slow->ws->recv_close(5);
    ok !defined $close || $close == 1008, 'and if a close frame reached it, it was 1008';
    # 9.6 MB through an AOF with appendfsync always: seconds when busy.
    # Alice and Bob read as they go, but on a loaded machine (the ASan
    # pass beside five other files) a test client can fall behind a 256k
    # queue too and be closed like Slow: then it resumes, as README
    # "Resume" says, and still has every envelope exactly once, in order
    my @sent = map { "$_ $pad" } @want;
    ok settle($alice, \@sent, $bob), 'every envelope Alice meant to send is in the room';
    my $log = room_log($cid);
    my %count;
    $count{ $_->[1] }++ for @$log;
    is scalar(grep { ($count{"$_ $pad"} // 0) == 1 } @want), 600, 'each of the 600 is stored once';
    my $until = time + 30;
    while (@{ $bob->{seen} } < @$log && time < $until) {
        my $code = $bob->drain(0.3);
        $bob->reconnect if defined $code || $bob->{a}->ws->eof;
    }
    is_deeply [ map { $_->[0] } @{ $bob->{seen} } ], [ map { $_->[0] } @$log ],
        'Bob, who reads, got the whole log exactly once, in order';
    diag "Alice connected $alice->{connects} time(s), Bob $bob->{connects}"
        if $alice->{connects} + $bob->{connects} > 2;
    # Slow comes back and resumes from the start of the room
    my $again = member($ctx, 'Slow', $cid);
    $log = room_log($cid);
    $until = time + 30;
    $again->drain(0.5) while @{ $again->{seen} } < @$log && time < $until;
    is_deeply [ map { $_->[0] } @{ $again->{seen} } ], [ map { $_->[0] } @$log ],
        'after resuming, Slow has the whole log exactly once';



=== TEST 4: junk from fifty clients at once: every envelope arrives, the worker survives
fifty clients sending junk at once (bytes, bad handshakes, bad frames) while
two agents talk: every envelope arrives, the worker survives.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_AOF_REDIS_PORT;
    ioa_limit_rate off;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my ($cid, $alice, $bob) = talking_room($ctx);
    sleep 0.3;
    my $master = nginx_master($ctx);
    my @workers = sort grep { /^\d+$/ } split ' ', `pgrep -P $master`;

    srand 7;
    my $hs = "GET /ws/Junk%d HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           . "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
    my @junk = (
        sub { join('', map { chr int rand 256 } 1 .. 2000) . "\r\n\r\n" },   # bytes
        sub { "GET /ws/\x00\xff HTTP/1.1\r\nHost: x\r\n\r\n" },               # bad path
        sub { sprintf($hs, $_[0]) . "\x81\x05hello" },                        # unmasked frame
        sub { sprintf($hs, $_[0]) . "\x83\x80abcd" },                         # reserved opcode
        sub { sprintf($hs, $_[0]) . "\x81\xff" . ("\xff" x 8) . "abcd" },     # 2^64-1 length
        sub { sprintf($hs, $_[0]) . "\x81\x84abcd" . ("\xc3\x28\xa0\xa1" ^ "abcd") },  # bad UTF-8
        sub { sprintf($hs, $_[0]) . "\x81\x88abcd" . ("{\"x\":[[[" ^ "abcdabcd") },     # bad JSON
        sub { "POST /register HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{{{{{" },
        sub { "POST /teamup HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n[" },
        sub { "GET / HTTP/1.1\r\n" . ("X-Long: " . ('a' x 9000) . "\r\n") x 3 . "\r\n" },
    );
    my @socks;
    my $i = 0;
    for my $n (1 .. 50) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $ctx->port) or next;
        push @socks, [$s, $junk[$n % @junk]->($n)];
    }
    my @want = map { "j$_" } 1 .. 200;
    for my $c (@want) {
        $alice->send($c) or last;
        if (@socks && $i < @socks) {
            my ($s, $bytes) = @{ $socks[$i++] };
            local $SIG{PIPE} = 'IGNORE';
            print {$s} $bytes;
        }
        $alice->drain(0.002);
        $bob->drain(0.002);
    }
    $_->drain(1) for $alice, $bob;
    check_exactly_once($cid, \@want, 'junk', $alice, $bob);
    my @now = sort grep { /^\d+$/ } split ' ', `pgrep -P $master`;
    ok kill(0, $master), 'the master is alive';
    is "@now", "@workers", "the same worker (@workers) serves: nothing crashed";
    # every one got an answer: an HTTP error, an error frame (a text frame
    # that is not JSON leaves the connection open, as a bad envelope does),
    # or a close
    my ($answered, @silent) = (0);
    for (@socks) {
        my $s = $_->[0];
        $s->blocking(0);
        my $buf = '';
        my $t = time + 2;
        while (time < $t) {
            my $n = sysread($s, $buf, 65536, length $buf);
            last if defined $n && $n == 0;
            last if length $buf && $buf !~ m{^HTTP/1\.1 101 } ;
            last if $buf =~ m{^HTTP/1\.1 101 .*?\r\n\r\n.}s;
            sleep 0.02;
        }
        if (time < $t) { $answered++ } else { push @silent, substr($_->[1], 0, 40) }
    }
    is $answered, scalar @socks, 'every junk client got an answer (an error or a close)'
        or diag "no answer: " . join ' | ', map { s/[^ -~]/./gr } @silent;
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 5: a worker too busy to read Redis's answer in time is not a Redis timeout
a worker too busy to read Redis's answer within ioa_redis_timeout is not Redis
timing out: the answer is read, the post is acknowledged and delivered once,
no reconnect (frozen with SIGSTOP while 600 clients' frames line up before
Redis's reply).
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_AOF_REDIS_PORT;
    ioa_redis_timeout 1s;
    ioa_limit_rate off;
    ioa_limit_room_rate off;
    ioa_limit_conn 0;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my ($cid, $alice, $bob) = talking_room($ctx);
    my @idle = map { $ctx->ws('/chatlist_ws') } 1 .. 600;
    is scalar(grep { $_->ok } @idle), 600, '600 observers connected';
    my $master = nginx_master($ctx);
    my ($worker) = grep { /^\d+$/ } split ' ', `pgrep -P $master`;
    # Redis holds the post's script until the worker is frozen and the 600
    # frames are waiting: its answer is then behind them in epoll's ready
    # list, past the first batch (512 events), and the 1 s timer expires in
    # the same turn of the worker's loop
    aof('CLIENT', 'PAUSE', 1500, 'ALL');
    ok $alice->send('while the worker is busy'), 'Alice posts';
    sleep 0.2;
    kill 'STOP', $worker;
    $_->send_ping('busy') for @idle;
    sleep 1.8;                                  # Redis has answered by now
    kill 'CONT', $worker;
    $alice->drain(3);
    $bob->drain(1);
    is $alice->{errors}, 0, 'Alice got no error frame';
    is_deeply $bob->contents, ['while the worker is busy'], 'Bob got the envelope';
    is_deeply $alice->contents, ['while the worker is busy'], '... and Alice its echo';
    is scalar @{ room_log($cid) }, 1, 'stored once';
    my $pongs = grep { my $f = $_->recv_frame(2); $f && $f->{opcode} == 0xA } @idle[0 .. 9];
    is $pongs, 10, 'the observers were answered too';
    unlike IoaTest::nginx_error_log(), qr/timed out, reconnecting/, 'no Redis timeout was logged';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 6: Redis killed -9 in a burst of large envelopes: nothing lost or doubled, in order
a burst of large envelopes (40 x 256 KiB, past the 512 KiB the hub hands
hiredis at once: the rest waits in its backlog) with Redis killed -9 in the
middle: the backlog is answered with errors, nothing accepted is lost, nothing
stored twice, and the order is the sender's.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_AOF_REDIS_PORT;
    ioa_limit_rate off;
    ioa_limit_room_rate off;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my ($cid, $alice, $bob) = talking_room($ctx);
    sleep 0.3;
    my $pad = 'y' x (256 * 1024);
    my @want = map { sprintf "big%02d %s", $_, $pad } 1 .. 40;
    # the first half at once: all of it reaches the hub before Redis
    # answers the first, so most of it waits in the backlog
    $alice->send($_) for @want[0 .. 19];
    # 5 MB through Redis's AOF and back: seconds on a busy machine
    my $until = time + 20;
    $alice->drain(0.5) while @{ $alice->contents } < 20 && time < $until;
    is $alice->{errors}, 0, 'the first 20 were all accepted';
    is_deeply [ map { substr $_, 0, 5 } @{ $alice->contents } ], [ map { sprintf 'big%02d', $_ } 1 .. 20 ],
        '... in the order sent';
    # Redis stopped first, so the second half is sure to be in flight or
    # in the backlog when it dies, however fast this machine is today
    kill 'STOP', $main::RedisPid;
    $alice->send($_) or last for @want[20 .. 39];
    main::aof_redis_kill9();
    $alice->drain(1);
    ok $alice->{errors} > 0, "posts caught by the kill got errors ($alice->{errors})";
    main::aof_redis_start();
    ok wait_health($ctx, 200, 10)->code == 200, 'the hub is healthy again';
    ok settle($alice, \@want, $bob), 'the sender got every envelope in by resuming and resending';
    check_exactly_once($cid, \@want, 'large burst', $alice, $bob);
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 7: with ioa_catchup_window 2m a resuming member reads about 1 MiB per round trip
with ioa_catchup_window 2m, a member resuming in a room of large envelopes
reads about 1 MiB per round trip (COUNT 3 for 256 KiB envelopes, not
ioa_catchup_batch's 256), and gets all of them in order.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_AOF_REDIS_PORT;
    ioa_limit_rate off;
    ioa_limit_room_rate off;
    ioa_catchup_window 2m;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my ($cid, $alice, $bob) = talking_room($ctx);
    sleep 0.3;
    my $pad = 'z' x (256 * 1024);
    $alice->send("first $pad");
    $bob->drain(1);
    is scalar @{ $bob->{seen} }, 1, 'Bob got the first';
    $bob->{a}->disconnect;
    my @later = map { sprintf "later%02d %s", $_, $pad } 1 .. 12;
    $alice->send($_) for @later;
    # 3 MB through an AOF with appendfsync always: seconds when busy
    my $live_by = time + 20;
    $alice->drain(0.5) while @{ $alice->{seen} } < 13 && time < $live_by;
    is scalar @{ $alice->{seen} }, 13, 'Alice saw all 13 live';
    my $mon = IoaTest::Redis->new(port => $main::RedisPort, timeout => 5);
    $mon->cmd('MONITOR');
    $bob->reconnect;
    my $until = time + 10;
    $bob->drain(0.5) while @{ $bob->{seen} } < 13 && time < $until;
    is_deeply [ map { substr $_, 0, 7 } @{ $bob->contents } ], [ 'first z', map { substr $_, 0, 7 } @later ],
        'Bob, back, has all 13 in order';
    my @counts;
    while (my ($line) = $mon->try_read_reply(0.3)) {
        push @counts, $1 if $line =~ /"XRANGE" "ioa:\{room:\Q$cid\E\}:log" .* "COUNT" "(\d+)"/;
    }
    $mon->close;
    ok scalar(@counts) >= 4, 'the backlog was read in ' . scalar(@counts) . ' round trips';
    is scalar(grep { $_ == 3 } @counts), scalar(@counts), 'each asked for 3 envelopes (about 1 MiB)'
        or diag "COUNT @counts";
--- no_error_log
[alert]
[crit]
[emerg]
=== TEST 7b: with the default window a member reads one 256 KiB envelope per round trip
with the default window (512k), the same member reads half of it per round
trip: one 256 KiB envelope at a time, all 13 in order.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_AOF_REDIS_PORT;
    ioa_limit_rate off;
    ioa_limit_room_rate off;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my ($cid, $alice, $bob) = talking_room($ctx);
    sleep 0.3;
    my $pad = 'z' x (256 * 1024);
    $alice->send("first $pad");
    $bob->drain(1);
    is scalar @{ $bob->{seen} }, 1, 'Bob got the first';
    $bob->{a}->disconnect;
    my @later = map { sprintf "later%02d %s", $_, $pad } 1 .. 12;
    $alice->send($_) for @later;
    # 3 MB through an AOF with appendfsync always: seconds when busy
    my $live_by = time + 20;
    $alice->drain(0.5) while @{ $alice->{seen} } < 13 && time < $live_by;
    is scalar @{ $alice->{seen} }, 13, 'Alice saw all 13 live';
    my $mon = IoaTest::Redis->new(port => $main::RedisPort, timeout => 5);
    $mon->cmd('MONITOR');
    $bob->reconnect;
    my $until = time + 10;
    $bob->drain(0.5) while @{ $bob->{seen} } < 13 && time < $until;
    is_deeply [ map { substr $_, 0, 7 } @{ $bob->contents } ], [ 'first z', map { substr $_, 0, 7 } @later ],
        'Bob, back, has all 13 in order';
    my @counts;
    while (my ($line) = $mon->try_read_reply(0.3)) {
        push @counts, $1 if $line =~ /"XRANGE" "ioa:\{room:\Q$cid\E\}:log" .* "COUNT" "(\d+)"/;
    }
    $mon->close;
    ok scalar(@counts) >= 12, 'the backlog was read in ' . scalar(@counts) . ' round trips';
    is scalar(grep { $_ == 1 } @counts), scalar(@counts), 'each asked for 1 envelope (256 KiB, half the window)'
        or diag "COUNT @counts";
--- no_error_log
[alert]
[crit]
[emerg]
