# t/130-cluster.t -- what only a Redis Cluster does to the hub: slots that
# move (MOVED, ASK, TRYAGAIN), masters that fail over to their replicas,
# masters that are gone together with their replicas, and seeds that do not
# answer.  What must hold is what the hub promises on one Redis: an
# envelope a client was told is stored is stored once, every member sees
# the room's Stream exactly, in its order; what cannot be served is refused
# clearly (503, an error frame); and the hub recovers by itself.
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/130-cluster.t
#
# The file always runs on a Cluster of its own (3 masters with a replica
# each, cluster-node-timeout 2 s), whatever TEST_IOA_REDIS says, and the hub
# (master_on, 2 workers) names every master in ioa_redis.
#
# Traffic is real: a poster child sends numbered envelopes over a WebSocket
# (echo=0, so each one gets an ack or an error frame) while the test moves
# the room's slot or fails its master over, and receiver children read the
# room on WebSockets of their own.  A poster that gets an error frame does
# what the error tells a client to do: it looks at the room (here: the
# Stream) and sends the envelope again only if it is not there.  At the end
# the Stream must hold every numbered envelope once, in the order sent, and
# every receiver must have seen exactly the Stream.

use strict;
use warnings;

use Cwd ();
use File::Basename ();

use vars qw($Repo $WorkerBin $Cl %Kids $KidDir);

BEGIN {
    $Repo = Cwd::abs_path(File::Basename::dirname(__FILE__) . '/..');
    $WorkerBin = $ENV{IOA_WORKER_BIN} || "$Repo/workers/build/ioa-worker";
    $IoaTest::ClusterNodeTimeout = 2000;
}

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest qw(cluster replicas);
use IoaTest::Agent qw(register teamup envelope wait_health fresh_hub json);
use File::Temp ();
use POSIX ();
use Time::HiRes qw(sleep time);

master_on();
workers(2);
no_root_location();
no_shuffle();
log_level('info');

# ------------------------------------------------------------------ helpers
# (scenarios are compiled in package main, so they call these directly)

$Cl = redis_cluster();

sub log_key { "ioa:{room:$_[0]}:log" }
sub slot_of { IoaTest::Cluster::slot(log_key($_[0])) }
sub myid    { $Cl->cmd_on($_[0], 'CLUSTER', 'MYID') }

# The master that owns the room's slot now.
sub owner {
    $Cl->refresh;
    return $Cl->node_for(log_key($_[0]));
}

# A counter of one node: INFO errorstats (errorstat_ASK: how often the
# node answered ASK) or INFO commandstats (cmdstat_asking: ASKING calls).
sub counter {
    my ($port, $name) = @_;
    my $info = $Cl->cmd_on($port, 'INFO',
                           $name =~ /^errorstat_/ ? 'errorstats' : 'commandstats');
    return $info =~ /^\Q$name\E:(?:count|calls)=(\d+)/m ? $1 : 0;
}

# [[id, content], ...] of the room's Stream, wherever it lives now; tries
# again while the Cluster cannot answer (a failover under way).
sub stream {
    my $cid = shift;
    my $err;
    for (1 .. 150) {
        my $r = eval { redis_cmd('XRANGE', log_key($cid), '-', '+') };
        if (ref $r eq 'ARRAY') {
            return [ map { my %f = @{ $_->[1] };
                           [ $_->[0], json->decode($f{e})->{content} ] } @$r ];
        }
        $err = $@ || "$r";
        sleep 0.2;
    }
    die "XRANGE " . log_key($cid) . ": $err\n";
}

sub wait_until {
    my ($cond, $secs) = @_;
    my $deadline = time + $secs;
    while (time < $deadline) {
        return 1 if eval { $cond->() };
        sleep 0.05;
    }
    return 0;
}

# POST /agents/$who/messages: [status, decoded body]
sub say_http {
    my ($ctx, $who, $cid, $text) = @_;
    my $res = $ctx->http(POST => "/agents/$who/messages", timeout => 10,
        body => json->encode({ comm_id => $cid, content => $text }));
    return [ $res->code, eval { json->decode($res->content) } // $res->content ];
}

sub set_slot {
    my ($port, $slot, $state, $id) = @_;
    my $r = $Cl->cmd_on($port, 'CLUSTER', 'SETSLOT', $slot, $state, $id);
    die "CLUSTER SETSLOT $slot $state on $port: $r\n" unless "$r" eq 'OK';
}

# Moves every key of the slot from one master to the other, one MIGRATE at a
# time, $pause seconds apart; returns how many.
sub migrate_keys {
    my ($slot, $from, $to, $pause) = @_;
    my $keys = $Cl->cmd_on($from, 'CLUSTER', 'GETKEYSINSLOT', $slot, 1000);
    for my $k (@$keys) {
        my $r = $Cl->cmd_on($from, 'MIGRATE', '127.0.0.1', $to, '', 0, 5000,
                            'KEYS', $k);
        die "MIGRATE $k: $r\n" unless "$r" eq 'OK';
        sleep $pause if $pause;
    }
    return scalar @$keys;
}

# The end of a migration, as redis-cli --cluster does it: the target first,
# then the source, then the other masters.
sub finish_slot {
    my ($slot, $from, $to) = @_;
    my $id = myid($to);
    my @others = grep { $_ != $from && $_ != $to } $Cl->masters;
    set_slot($_, $slot, 'NODE', $id) for $to, $from, @others;
}

# --- children: a poster and receivers, each reporting in a JSON file

sub kid {
    my ($name, $code) = @_;
    # not in the servroot: upstream Test::Nginx wipes it between blocks
    $KidDir //= File::Temp::tempdir('ioa-cluster-kids-XXXXXX', TMPDIR => 1,
                                    CLEANUP => 1);
    unlink "$KidDir/$name.json", "$KidDir/stop";
    my $pid = fork // die "fork: $!\n";
    if ($pid == 0) {
        $Cl->forget_conns;         # the parent's Redis connections
        my $rc = eval {
            my $r = $code->();
            open my $fh, '>', "$KidDir/$name.json.tmp" or die "$!";
            print $fh json->encode($r);
            close $fh;
            rename "$KidDir/$name.json.tmp", "$KidDir/$name.json";
            0;
        } // do { warn "$name: $@"; 1 };
        POSIX::_exit($rc);         # no END blocks, no Test::Builder here
    }
    $Kids{$name} = $pid;
    return $pid;
}

# Waits for the named children (at most $secs); returns name => report.
sub reap {
    my ($secs, @names) = @_;
    my $deadline = time + $secs;
    my %left = map { $Kids{$_} => $_ } grep { $Kids{$_} } @names;
    while (%left && time < $deadline) {
        for my $pid (keys %left) {
            delete $left{$pid} if waitpid($pid, POSIX::WNOHANG()) == $pid;
        }
        sleep 0.05 if %left;
    }
    for my $pid (keys %left) {         # ours, stopped by pid
        kill 'KILL', $pid;
        waitpid $pid, 0;
    }
    my %res;
    for my $name (@names) {
        delete $Kids{$name};
        open my $fh, '<', "$KidDir/$name.json" or next;
        local $/;
        $res{$name} = json->decode(<$fh>);
    }
    return \%res;
}

END {
    local $?;
    for my $pid (values %Kids) {
        kill 'KILL', $pid;
        waitpid $pid, 0;
    }
}

# The poster: "$tag 1" .. "$tag $n" as Alice, $gap seconds apart.
sub poster {
    my ($ctx, $cid, $tag, $n, $gap) = @_;
    my $a = IoaTest::Agent->connect($ctx, 'Alice', '?echo=0');
    die 'poster: ' . ($a->error // '?') . "\n" unless $a->ok;
    my %r = (acks => 0, found => 0, resent => 0, errors => {});
    for my $i (1 .. $n) {
        my $text = "$tag $i";
        my $done;
        for my $try (1 .. 300) {
            $a->post(envelope(comm_id => $cid, content => $text,
                              next_speaker => ''));
            my ($m) = $a->recv_until(sub { ($_->{op} // '') =~ /^(ack|error)$/ }, 15);
            die "poster: no answer for '$text'\n" unless $m;
            if ($m->{op} eq 'ack') {
                $r{acks}++;
                $done = 1;
                last;
            }
            $r{errors}{ $m->{code} // '?' }++;
            push @{ $r{messages} }, $m->{message} if @{ $r{messages} || [] } < 5;
            # the error says: look at the room before sending it again
            sleep 0.2;
            if (grep { $_->[1] eq $text } @{ stream($cid) }) {
                $r{found}++;
                $done = 1;
                last;
            }
            $r{resent}++;
        }
        die "poster: '$text' never stored\n" unless $done;
        sleep $gap if $gap;
    }
    $r{eof} = $a->ws->eof ? 1 : 0;
    return \%r;
}

# A receiver reads the room until the stop file exists and it has been
# quiet for a second.
sub receiver {
    my ($ag, $cid) = @_;
    my %r = (ids => [], other => [], eof => 0);
    my $quiet;
    while (1) {
        my $m = $ag->recv(0.2);
        if ($m) {
            if (($m->{comm_id} // '') eq $cid && defined $m->{id}
                && !defined $m->{op})
            {
                push @{ $r{ids} }, $m->{id};
            } else {
                push @{ $r{other} }, $m->{_raw};
            }
            undef $quiet;
            next;
        }
        if ($ag->ws->eof) {
            $r{eof} = 1;
            last;
        }
        next unless -e "$KidDir/stop";
        $quiet //= time;
        last if time - $quiet > 1;
    }
    return \%r;
}

sub stop_receivers {
    open my $fh, '>', "$KidDir/stop" or die "$!";
    close $fh;
}

# Bob and Carol receive, Alice posts; the room is made after the receivers
# connected, so they read it from its first envelope.
sub start_traffic {
    my ($ctx, $tag, $n, $gap) = @_;
    register($ctx, qw(Alice Bob Carol));
    my %ag = map { $_ => IoaTest::Agent->connect($ctx, $_) } qw(Bob Carol);
    $ag{$_}->ok or die "$_: " . $ag{$_}->error . "\n" for sort keys %ag;
    my $cid = teamup($ctx, 'Alice', [qw(Bob Carol)]);
    kid($_, sub { receiver($ag{$_}, $cid) }) for sort keys %ag;
    kid('poster', sub { poster($ctx, $cid, $tag, $n, $gap) });
    return $cid;
}

# The checks every run of traffic must pass.
sub check_traffic {
    my ($cid, $tag, $n) = @_;
    my $p = reap(120, 'poster')->{poster};
    stop_receivers();
    my $rx = reap(30, qw(Bob Carol));
    ok $p, 'the poster reported' or return;
    Test::More::note(sprintf 'poster: %d acked, %d found stored after an error, %d sent '
               . 'again; error frames: %s', $p->{acks}, $p->{found},
               $p->{resent}, json->encode($p->{errors}));
    is $p->{acks} + $p->{found}, $n,
        "poster: each of the $n envelopes acknowledged, or found stored after an error";
    ok !$p->{eof}, "poster: the WebSocket stayed open";
    my @log = @{ stream($cid) };
    my @ids = map { $_->[0] } @log;
    is_deeply [ map { $_->[1] } @log ], [ map { "$tag $_" } 1 .. $n ],
        "the Stream holds each envelope once, in the order sent";
    for my $name (qw(Bob Carol)) {
        my $r = $rx->{$name};
        ok $r, "$name reported" or next;
        my %seen;
        my @dups = grep { $seen{$_}++ } @{ $r->{ids} };
        is_deeply \@dups, [], "$name: no duplicate";
        is_deeply [ grep { !$seen{$_} } @ids ], [], "$name: nothing lost";
        is_deeply $r->{ids}, \@ids, "$name: exactly the Stream, in its order";
        is_deeply $r->{other}, [], "$name: no other frames";
        ok !$r->{eof}, "$name: the WebSocket stayed open";
    }
    return $p;
}

run_tests();

__DATA__

=== TEST 1: the hub subscribes and posts each room on its slot's master only
the hub finds the Cluster through its seeds, subscribes each room on the
master of its slot (SSUBSCRIBE) and posts with SPUBLISH: nothing crosses to
another node.
--- http_config
    ioa_redis $TEST_NGINX_REDIS_SEEDS;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, qw(Alice Bob));
    my $b = IoaTest::Agent->connect($ctx, 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    my $own = owner($cid);
    ok wait_until(sub { $Cl->cmd_on($own, 'PUBSUB', 'SHARDNUMSUB',
                                    "ioa:{room:$cid}:ch")->[1] >= 1 }, 5),
       "the room's shard channel is subscribed on its master ($own)";
    my @others = grep { $_ != $own } $Cl->masters;
    is $Cl->cmd_on($_, 'PUBSUB', 'SHARDNUMSUB', "ioa:{room:$cid}:ch")->[1], 0,
        "and not on $_" for @others;
    my %pub = map { $_ => counter($_, 'cmdstat_publish') } $Cl->masters;
    my $r = say_http($ctx, 'Alice', $cid, 'hello');
    is $r->[0], 200, 'posted';
    is $b->recv(5)->{content}, 'hello', 'Bob got it';
    is counter($_, 'cmdstat_publish'), $pub{$_}, "no PUBLISH on $_"
        for $Cl->masters;
    ok counter($own, 'cmdstat_spublish') >= 1, 'SPUBLISH on the owner';
    like nginx_error_log(), qr/is a Redis Cluster node/, 'the log says what it found';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 2: one slot migration, step by step: each envelope stored once and read once
one slot migration, step by step: a post meets TRYAGAIN while the slot
migrates (post.lua names the room's floor, which does not exist yet: Redis
holds multi-key scripts with a missing key until the slot is settled) and is
resent until the slot is the target's (MOVED followed); reads meet ASK once
the keys moved (ASKING on the target); each envelope stored once, and a reader
that caught up during the migration gets every envelope once.
--- http_config
    ioa_redis $TEST_NGINX_REDIS_SEEDS;
    ioa_redis_timeout 3s;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, qw(Alice Bob));
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    my $slot = slot_of($cid);
    my $src = owner($cid);
    my ($dst) = grep { $_ != $src } $Cl->masters;
    is say_http($ctx, 'Alice', $cid, 'before')->[0], 200, 'a post before';
    $Cl->cmd_on($_, 'CONFIG', 'RESETSTAT') for $src, $dst;
    my %maps = map { $_ => counter($_, 'cmdstat_cluster|slots') } $Cl->masters;

    set_slot($dst, $slot, 'IMPORTING', myid($src));
    set_slot($src, $slot, 'MIGRATING', myid($dst));

    my $body = json->encode({ comm_id => $cid, content => 'during' });
    my $s = $ctx->connect;
    print {$s} "POST /agents/Alice/messages HTTP/1.1\r\nHost: localhost\r\n"
             . "Connection: close\r\nContent-Length: " . length($body)
             . "\r\n\r\n$body";
    ok wait_until(sub { counter($src, 'errorstat_TRYAGAIN') >= 2 }, 3),
       'the post meets TRYAGAIN, and asks again';
    is migrate_keys($slot, $src, $dst, 0.05), 4, 'the 4 keys moved (meta, members, log, chain)';

    # reads of keys that moved: ASK, then ASKING and the read on the target
    my $res = $ctx->http(POST => '/fetch_chat_record', timeout => 5,
                         body => json->encode({ comm_id => $cid }));
    is $res->code, 200, '/fetch_chat_record while the slot migrates';
    my $rec = eval { json->decode($res->content)->{$cid}{chat_record} } || [];
    is_deeply [ map { $_->{content} } @$rec ], ['before'], 'reads the room on the target';
    my $b = IoaTest::Agent->connect($ctx, 'Bob', '?since=0-0');
    is $b->recv(5)->{content}, 'before', 'a reader catches up while the slot migrates';
    ok counter($src, 'errorstat_ASK') >= 1, 'the old owner said ASK';
    ok counter($dst, 'cmdstat_asking') >= 1, 'the hub sent ASKING to the target';
    ok counter($dst, 'errorstat_TRYAGAIN') >= 1,
       'the post, asked over, meets TRYAGAIN on the target too';

    my $asked = counter($dst, 'cmdstat_asking');
    finish_slot($slot, $src, $dst);
    my $raw = $ctx->read_all($s, 10);
    like $raw, qr{^HTTP/1\.1 200}, 'the post went through once the slot was settled'
        or diag $raw;
    # the hub follows the slot one of three ways: the old owner's MOVED;
    # its own slot map refreshed meanwhile (every 10 s, which this test may
    # straddle), after which the post goes to the new owner directly; or
    # the post's retry after the target's TRYAGAIN, still sent there with
    # ASKING, landing once the slot is settled (a slow machine's timing)
    my $moved = counter($src, 'errorstat_MOVED');
    my $refreshed = grep { counter($_, 'cmdstat_cluster|slots') > $maps{$_} } $Cl->masters;
    my $asked_on = counter($dst, 'cmdstat_asking') > $asked;
    ok $moved >= 1 || $refreshed || $asked_on, "the hub followed the slot to its new owner (the old owner's MOVED: "
        . "$moved; slot map read again meanwhile: " . ($refreshed ? 'yes' : 'no')
        . '; asked on at the target: ' . ($asked_on ? 'yes' : 'no') . ')';
    is say_http($ctx, 'Alice', $cid, 'after')->[0], 200, 'the next post';

    is owner($cid), $dst, 'the room lives on the target now';
    is_deeply [ map { $_->[1] } @{ stream($cid) } ], [qw(before during after)],
        'each envelope stored once, in order';
    is_deeply [ map { $_->{content} } $b->recv_n(2, 5) ], [qw(during after)],
        'the reader gets the rest from the new owner';
    ok $b->quiet(0.3), 'once';
--- no_error_log
[alert]
[crit]



=== TEST 3: a slot migration under live WebSocket traffic delivers every envelope once
a slot migration under live WebSocket traffic: posts keep flowing (TRYAGAIN,
ASK, MOVED followed), the subscription follows the slot (the old owner drops
it), and every member sees every envelope exactly once.
--- http_config
    ioa_redis $TEST_NGINX_REDIS_SEEDS;
    ioa_redis_timeout 2s;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    my $cid = start_traffic($ctx, 'mig', 200, 0.01);
    my $slot = slot_of($cid);
    my $src = owner($cid);
    my ($dst) = grep { $_ != $src } $Cl->masters;
    sleep 0.5;
    set_slot($dst, $slot, 'IMPORTING', myid($src));
    set_slot($src, $slot, 'MIGRATING', myid($dst));
    sleep 0.3;
    migrate_keys($slot, $src, $dst, 0.1);
    sleep 0.3;
    finish_slot($slot, $src, $dst);
    ok wait_until(sub { $Cl->cmd_on($dst, 'PUBSUB', 'SHARDNUMSUB',
                                    "ioa:{room:$cid}:ch")->[1] >= 1 }, 5),
       'the hub subscribed on the new owner';
    my $p = check_traffic($cid, 'mig', 200);
    is_deeply [ keys %{ $p->{errors} || {} } ], [], 'the poster saw no error frame'
        or diag json->encode($p->{messages});
    is $Cl->cmd_on($src, 'PUBSUB', 'SHARDNUMSUB', "ioa:{room:$cid}:ch")->[1], 0,
        'nothing is subscribed on the old owner';
--- no_error_log
[alert]
[crit]



=== TEST 4: after a failover under traffic the hub finds the new masters, nothing lost
failover: CLUSTER FAILOVER on the room's replica, then kill -9 of the new
master (its replica, the old master, is promoted): posts during the outage get
redis_unavailable and /health_check 503, the hub finds the new masters by
itself, and after the client's resume-and-resend nothing is lost or
duplicated.
--- http_config
    ioa_redis $TEST_NGINX_REDIS_SEEDS;
    ioa_redis_timeout 1s;
    ioa_redis_connect_timeout 500ms;
    ioa_redis_backoff_max 300ms;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    my $cid = start_traffic($ctx, 'fo', 150, 0.03);
    my $m = owner($cid);
    my ($rep) = $Cl->replicas_of($m);
    ok $rep, "the room's master $m has a replica ($rep)";
    sleep 1;

    # graceful: the replica takes over in agreement with its master
    is $Cl->cmd_on($rep, 'CLUSTER', 'FAILOVER'), 'OK', 'CLUSTER FAILOVER';
    ok wait_until(sub { owner($cid) == $rep }, 10), "$rep is the room's master";
    sleep 1;

    # hard: the new master dies; the old one, its replica now, is promoted.
    # Replication is asynchronous: a write acknowledged a moment before the
    # kill may not have reached the replica, which is Redis' own limit, not
    # the hub's.  Holding writes on it first (the hub's commands wait, and
    # die with the node) keeps that out of this test.
    $Cl->cmd_on($rep, 'CLIENT', 'PAUSE', 10000, 'WRITE');
    sleep 0.1;
    $Cl->stop_node($rep, 'KILL');
    is wait_health($ctx, 503, 5)->code, 503, '/health_check 503 while a master is away';
    ok wait_until(sub { owner($cid) == $m }, 30), "$m is promoted back";
    is wait_health($ctx, 200, 20)->code, 200, 'healthy again without a restart of the hub';

    my $p = check_traffic($cid, 'fo', 150);
    ok $p && $p->{errors}{redis_unavailable}, 'the poster was told when Redis was away'
        or diag json->encode($p);
    is_deeply [ grep { $_ ne 'redis_unavailable' } keys %{ $p->{errors} || {} } ], [],
        'and with nothing but redis_unavailable';
    $Cl->start_node($rep);
    $Cl->wait_ok(30);
    pass 'the killed node is back, as a replica';
--- no_error_log
[alert]
[crit]



=== TEST 5: with a master and its replica down the hub answers 503, then recovers itself
a master and its replica both down: the Cluster is down, /health_check answers
503 with Retry-After, posts in any room get redis_unavailable (error frame or
503); once they are back the hub recovers by itself and nothing is lost or
duplicated.
--- http_config
    ioa_redis $TEST_NGINX_REDIS_SEEDS;
    ioa_redis_timeout 1s;
    ioa_redis_connect_timeout 500ms;
    ioa_redis_backoff_max 300ms;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, qw(Dave Eve));
    my $cid = start_traffic($ctx, 'down', 100, 0.03);
    my $m = owner($cid);
    my ($rep) = $Cl->replicas_of($m);
    # a second room on another master, made while everything is up
    my $other;
    for (1 .. 50) {
        my $c = teamup($ctx, 'Dave', ['Eve']);
        if (owner($c) != $m) { $other = $c; last }
    }
    ok $other, 'a room on another master';
    sleep 0.5;

    my ($alive) = grep { $_ != $m } $Cl->masters;
    # both write their data on the way down (the test Cluster has no
    # persistence otherwise), so that they come back with it
    $Cl->shutdown_node($rep);
    $Cl->shutdown_node($m);
    my $res = wait_health($ctx, 503, 5);
    is $res->code, 503, '/health_check 503';
    ok defined $res->header('Retry-After'), 'with Retry-After';
    ok wait_until(sub { $Cl->cmd_on($alive, 'CLUSTER', 'INFO')
                        =~ /cluster_state:fail/ }, 15),
       'the Cluster says it is down';
    my $r = say_http($ctx, 'Dave', $other, 'while down');
    is $r->[0], 503, 'a post in a room whose master is up: 503 too (CLUSTERDOWN)';
    is ref $r->[1] && $r->[1]{code}, 'redis_unavailable', 'redis_unavailable';

    $Cl->start_node($m);
    $Cl->start_node($rep);
    $Cl->wait_ok(30);
    $Cl->forget_dumps;
    is wait_health($ctx, 200, 20)->code, 200, 'healthy again';
    is say_http($ctx, 'Dave', $other, 'back')->[0], 200, 'the other room works again';

    my $p = check_traffic($cid, 'down', 100);
    ok $p && $p->{errors}{redis_unavailable}, 'the poster got redis_unavailable while down'
        or diag json->encode($p);
    is_deeply [ map { $_->[1] } @{ stream($other) } ], ['back'],
        'the refused post was not stored';
--- no_error_log
[alert]
[crit]



=== TEST 6: a seed that does not answer is skipped; the Cluster is found through the next
a seed that does not answer is skipped: the hub and ioa-worker find the
Cluster through the next one.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_RAND_PORT_1 $TEST_NGINX_REDIS_SEEDS;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, qw(Alice Bob));
    my $b = IoaTest::Agent->connect($ctx, 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    is say_http($ctx, 'Alice', $cid, 'hi')->[0], 200, 'posted';
    is $b->recv(5)->{content}, 'hi', 'delivered';
    like nginx_error_log(), qr/cannot connect to 127\.0\.0\.1:\d+/,
        'the dead seed is in the log';

    SKIP: {
        skip "$WorkerBin is not built", 3 unless -x $WorkerBin;
        my $log = $ctx->servroot . '/logs/worker.log';
        my $dead = $ctx->rand_port(1);
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            open STDIN, '<', '/dev/null';
            open STDOUT, '>>', $log;
            open STDERR, '>>', $log;
            exec $WorkerBin, '--redis', "127.0.0.1:$dead," . redis_addrs(),
                 '--scripts', "$Repo/redis-scripts", '--consumer', 'w1'
                or POSIX::_exit(127);
        }
        ok wait_until(sub { defined redis_cmd('ZSCORE', 'ioa:{reg}:agents',
                                              'ioa-coordinator') }, 10),
           'ioa-worker registered its coordinator';
        kill 'TERM', $pid;
        waitpid $pid, 0;
        is $?, 0, 'and stopped cleanly';
        like IoaTest::_slurp($log), qr/connected to the redis cluster/,
            'its log says it found the Cluster';
    }
--- no_error_log
[alert]
[crit]



=== TEST 7: ioa-ceiling against one Cluster master counts every envelope of its slots
bench/build/ioa-ceiling against one Cluster master: every room in that
master's slots, SPUBLISH, and the subscriber counts every envelope (the
per-master ceiling).
--- http_config
    ioa_redis $TEST_NGINX_REDIS_SEEDS;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $bin = "$Repo/bench/build/ioa-ceiling";
    SKIP: {
        skip "$bin is not built (make -C bench/ceiling)", 6 unless -x $bin;
        my ($m, @others) = $Cl->masters;
        # the ceiling's keys are "ceil:{room:...}"; the hub's own keys
        # (its registry epoch, presence) may come and go meanwhile
        my $ceil_keys = sub { scalar @{ $Cl->cmd_on($_[0], 'KEYS', 'ceil:*') // [] } };
        my %keys = map { $_ => $ceil_keys->($_) } $Cl->masters;
        for my $script (qw(bare post)) {
            my $out = `$bin --redis 127.0.0.1:$m --script $script --scripts $Repo/redis-scripts --rooms 20 --procs 1 --duration 1 --json - 2>&1`;
            my ($doc) = $out =~ /^(\{.*\})$/m;
            my $r = eval { json->decode($doc // '') } || {};
            is $r->{redis}, 'cluster master', "$script: found the Cluster" or diag $out;
            ok $r->{calls} > 0 && $r->{errors} == 0 && $r->{received} == $r->{calls},
               "$script: $r->{calls} calls, every one received by the shard subscriber"
                or diag $out;
        }
        is $ceil_keys->($_), $keys{$_}, "no key written on $_" for @others;
    }
--- no_error_log
[alert]
[crit]
