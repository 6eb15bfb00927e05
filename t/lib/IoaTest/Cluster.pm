# IoaTest::Cluster -- a Redis Cluster on loopback for tests, and a client
# that routes like a cluster client does.
#
#   my $cl = IoaTest::Cluster->new(masters => 3, replicas => 0);
#   $cl->start;                       # redis-server per node, then
#                                     # redis-cli --cluster create
#   $cl->cmd('XADD', 'ioa:{room:x}:log', '*', e => 1);   # routed by slot
#   $cl->stop;                        # TERM by PID, reaped
#   $cl->start;                       # same ports and dirs: nodes.conf and
#                                     # a SAVEd dump come back
#
# Every node is a child of the test process (`--daemonize no`), started on
# a free loopback port with its cluster bus on another free port
# (--cluster-port, so the bus never lands in the ephemeral range), its own
# directory, no persistence, and stopped by PID.
#
# cmd() is what a cluster client does, in blocking Perl: the slot of the
# first key (CRC16/XMODEM of the key or its {hash tag}, mod 16384), the map
# from CLUSTER SLOTS, MOVED (refresh the map, resend), ASK (ASKING, resend to
# that node), TRYAGAIN and CLUSTERDOWN (wait a little, resend; a test helper
# asserts the outcome, not the transient).  Commands that concern the whole
# data set go to every master and their answers are merged: FLUSHALL,
# FLUSHDB, SAVE, SCRIPT, CONFIG SET (the first answer), KEYS (concatenated),
# DBSIZE (summed), CLIENT LIST (concatenated).  Commands without a key
# (PING, TIME, INFO, PUBLISH, which a Cluster broadcasts) go to the first
# master.  Tests that need one node's view use node_for($key) / conn($port).

package IoaTest::Cluster;

use strict;
use warnings;

use File::Temp ();
use IO::Select ();
use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

use IoaTest::Redis ();

sub new {
    my ($class, %opt) = @_;
    my $self = bless {
        masters  => $opt{masters} // 3,
        replicas => $opt{replicas} // 0,
        timeout  => $opt{node_timeout} // 3000,
        free_port => $opt{free_port} // die("IoaTest::Cluster: free_port\n"),
        dir      => $opt{dir}
                    // File::Temp::tempdir('ioa-cluster-XXXXXX', TMPDIR => 1),
        nodes    => [],            # { port, bus, dir, pid }
        conns    => {},            # port => IoaTest::Redis
        slots    => [],            # slot => port
    }, $class;
    my $n = $self->{masters} * (1 + $self->{replicas});
    my %used;
    for my $i (1 .. $n) {
        my ($port, $bus);
        do { $port = $self->{free_port}->() } while $used{$port}++;
        do { $bus = $self->{free_port}->() } while $used{$bus}++;
        my $dir = "$self->{dir}/$port";
        mkdir $dir;
        push @{ $self->{nodes} }, { port => $port, bus => $bus, dir => $dir };
    }
    return $self;
}

sub dir     { $_[0]{dir} }
sub ports   { map { $_->{port} } @{ $_[0]{nodes} } }
sub seed    { $_[0]{nodes}[0]{port} }
sub running { scalar grep { $_->{pid} } @{ $_[0]{nodes} } }

# Starts every node that is not running; the first start creates the
# cluster, later ones find it in nodes.conf.  Returns when every slot is
# served (cluster_state:ok on every running master) and replicas are in sync.
sub start {
    my $self = shift;
    my $created = -e "$self->{nodes}[0]{dir}/nodes.conf";
    $self->start_node($_->{port}) for grep { !$_->{pid} } @{ $self->{nodes} };
    unless ($created) {
        my @addrs = map { "127.0.0.1:$_->{port}" } @{ $self->{nodes} };
        my $out = `redis-cli --cluster create @addrs --cluster-replicas $self->{replicas} --cluster-yes 2>&1`;
        die "IoaTest::Cluster: redis-cli --cluster create failed:\n$out"
            if $? || $out !~ /All 16384 slots covered/;
    }
    $self->wait_ok(30);
    return $self;
}

sub start_node {
    my ($self, $port) = @_;
    my ($n) = grep { $_->{port} == $port } @{ $self->{nodes} };
    die "IoaTest::Cluster: no node $port\n" unless $n;
    return if $n->{pid};
    my $log = "$n->{dir}/log";
    for my $attempt (1 .. 5) {
        my $pid = fork // die "IoaTest::Cluster: fork: $!\n";
        if ($pid == 0) {
            open STDIN, '<', '/dev/null';
            open STDOUT, '>', '/dev/null';
            open STDERR, '>>', "$n->{dir}/stderr";
            exec('redis-server', '--port', $port, '--bind', '127.0.0.1',
                 '--daemonize', 'no', '--dir', $n->{dir},
                 '--pidfile', "$n->{dir}/pid", '--logfile', $log,
                 '--save', '', '--appendonly', 'no',
                 '--cluster-enabled', 'yes', '--cluster-port', $n->{bus},
                 '--cluster-config-file', "$n->{dir}/nodes.conf",
                 '--cluster-node-timeout', $self->{timeout})
                or POSIX::_exit(127);
        }
        my $deadline = time + 10;
        while (time < $deadline) {
            last if waitpid($pid, WNOHANG) == $pid;
            my $info = eval {
                IoaTest::Redis->new(port => $port, timeout => 1)
                    ->cmd('INFO', 'server') } // '';
            if ($info =~ /^process_id:$pid\r?$/m) {
                $n->{pid} = $pid;
                return $pid;
            }
            sleep 0.02;
        }
        _reap($pid, 'KILL');
        sleep 0.2;
    }
    die "IoaTest::Cluster: redis-server did not start on $port:\n"
      . `tail -20 $log`;
}

# Stops one node (TERM, or KILL for a crash) and forgets its connection.
sub stop_node {
    my ($self, $port, $sig) = @_;
    my ($n) = grep { $_->{port} == $port } @{ $self->{nodes} };
    return unless $n && $n->{pid};
    if (my $c = delete $self->{conns}{$port}) { $c->close }
    _reap(delete $n->{pid}, $sig // 'TERM');
}

# SHUTDOWN SAVE: the node writes its data set to dump.rdb in its directory
# and exits; start_node() loads it again (a node without persistence that
# is only stopped comes back empty).
sub shutdown_node {
    my ($self, $port) = @_;
    my ($n) = grep { $_->{port} == $port } @{ $self->{nodes} };
    return unless $n && $n->{pid};
    if (my $c = delete $self->{conns}{$port}) { $c->close }
    my $c = IoaTest::Redis->new(port => $port, timeout => 10);
    $c->send('SHUTDOWN', 'SAVE');
    eval { $c->read_reply(10) };       # the connection just closes
    $c->close;
    _reap(delete $n->{pid}, 'TERM');
}

sub forget_dumps { unlink glob "$_[0]{dir}/*/dump.rdb" }

sub stop {
    my $self = shift;
    $self->stop_node($_->{port}) for @{ $self->{nodes} };
    $self->{slots} = [];
}

sub _reap {
    my ($pid, $sig) = @_;
    kill $sig, $pid;
    my $deadline = time + 5;
    while (time < $deadline) {
        return if waitpid($pid, WNOHANG) != 0;
        sleep 0.02;
    }
    kill 'KILL', $pid;
    waitpid $pid, 0;
}

# Every running master says cluster_state:ok, every slot has a master that
# runs, and every running replica's link to its master is up.
sub wait_ok {
    my ($self, $secs) = @_;
    my $deadline = time + ($secs // 30);
    my $why = '';
    while (time < $deadline) {
        $why = $self->_not_ok // return 1;
        sleep 0.1;
    }
    die "IoaTest::Cluster: not ok after ${secs}s: $why\n";
}

sub _not_ok {
    my $self = shift;
    my %running = map { $_->{port} => 1 } grep { $_->{pid} } @{ $self->{nodes} };
    my $map = eval { $self->refresh } or return 'no map: ' . ($@ // '');
    my %masters = map { $_ => 1 } grep { defined } @$map;
    return 'slots without a master' if grep { !defined } @$map[0 .. 16383];
    for my $p (keys %masters) {
        return "master $p is not running" unless $running{$p};
        my $info = eval { $self->conn($p)->cmd('CLUSTER', 'INFO') } // '';
        return "$p: cluster_state not ok" unless $info =~ /cluster_state:ok/;
    }
    for my $p (grep { !$masters{$_} } keys %running) {
        my $info = eval { $self->conn($p)->cmd('INFO', 'replication') } // '';
        return "$p: cluster_state not ok"
            unless (eval { $self->conn($p)->cmd('CLUSTER', 'INFO') } // '')
                   =~ /cluster_state:ok/;
        next unless $info =~ /role:slave/;
        return "replica $p: link down" unless $info =~ /master_link_status:up/;
    }
    return undef;
}

# In a forked child: the parent's connections are the parent's; the child
# opens its own.
sub forget_conns { $_[0]{conns} = {} }

# A connection to one node (kept; reopened when the node closed it).
sub conn {
    my ($self, $port) = @_;
    my $c = $self->{conns}{$port};
    if ($c && IO::Select->new($c->{sock})->can_read(0)) {
        $c->close;
        undef $c;
    }
    return $self->{conns}{$port} = $c
        // IoaTest::Redis->new(port => $port, timeout => 5);
}

# The slot map from the first running node that answers: [slot => port].
sub refresh {
    my $self = shift;
    for my $n (grep { $_->{pid} } @{ $self->{nodes} }) {
        my $r = eval { $self->conn($n->{port})->cmd('CLUSTER', 'SLOTS') };
        next unless ref $r eq 'ARRAY';
        my @map;
        for my $e (@$r) {
            $map[$_] = $e->[2][1] for $e->[0] .. $e->[1];
        }
        $#map = 16383;
        return $self->{slots} = \@map;
    }
    die "no running node answers CLUSTER SLOTS\n";
}

sub masters {
    my $self = shift;
    my $map = @{ $self->{slots} } ? $self->{slots} : $self->refresh;
    my %seen;
    return grep { defined && !$seen{$_}++ } @$map;
}

# The replicas of a master, from CLUSTER NODES (running or not).
sub replicas_of {
    my ($self, $port) = @_;
    my $nodes = $self->cmd_on($self->seed_running, 'CLUSTER', 'NODES');
    my ($id) = $nodes =~ /^(\S+) 127\.0\.0\.1:$port\@/m or return;
    return map { /127\.0\.0\.1:(\d+)\@/ ? $1 : () }
           grep { /\bslave $id\b/ } split /\n/, $nodes;
}

sub seed_running {
    my $self = shift;
    my ($n) = grep { $_->{pid} } @{ $self->{nodes} };
    return $n->{port};
}

sub node_for {
    my ($self, $key) = @_;
    my $map = @{ $self->{slots} } ? $self->{slots} : $self->refresh;
    return $map->[ slot($key) ] // $self->refresh->[ slot($key) ];
}

sub cmd_on {
    my ($self, $port, @args) = @_;
    return $self->conn($port)->cmd(@args);
}

# ----------------------------------------------------------- key slots

my @Crc;
for my $i (0 .. 255) {
    my $c = $i << 8;
    $c = $c & 0x8000 ? (($c << 1) ^ 0x1021) & 0xffff : ($c << 1) & 0xffff
        for 1 .. 8;
    $Crc[$i] = $c;
}

sub slot {
    my $key = shift;
    if ((my $o = index $key, '{') >= 0) {
        my $c = index $key, '}', $o + 1;
        $key = substr $key, $o + 1, $c - $o - 1 if $c > $o + 1;
    }
    my $crc = 0;
    $crc = (($crc << 8) & 0xffff) ^ $Crc[(($crc >> 8) ^ ord) & 0xff]
        for split //, $key;
    return $crc & 16383;
}

# The position of the first key, undef for none.
sub _key_index {
    my @a = @_;
    my $name = lc $a[0];
    return (@a > 3 && $a[2] > 0 ? 3 : undef) if $name =~ /^(evalsha|eval|fcall)$/;
    return 2 if $name =~ /^(xgroup|xinfo|object|memory)$/;
    if ($name =~ /^(xread|xreadgroup)$/) {
        for my $i (1 .. $#a - 1) { return $i + 1 if lc $a[$i] eq 'streams' }
        return undef;
    }
    return undef if $name =~ /^(ping|time|info|client|cluster|publish|pubsub|
                                 echo|command|config|wait|role|debug|
                                 monitor|lastsave|bgsave)$/x;
    return @a > 1 ? 1 : undef;
}

my %FanOut = map { $_ => 1 } qw(flushall flushdb save script keys dbsize);

sub cmd {
    my ($self, @args) = @_;
    my $name = lc $args[0];
    if ($FanOut{$name} || ($name eq 'client' && lc($args[1] // '') eq 'list')
        || ($name eq 'config' && lc($args[1] // '') eq 'set'))
    {
        $self->refresh;
        my @r = map { $self->_retry($_, undef, @args) } $self->masters;
        return [ map { @$_ } @r ] if $name eq 'keys';
        return 0 + eval { my $s = 0; $s += $_ for @r; $s } if $name eq 'dbsize';
        return join '', @r if $name eq 'client';
        my ($err) = grep { ref } @r;
        return $err // $r[0];
    }
    my $i = _key_index(@args);
    return $self->_retry(undef, defined $i ? $args[$i] : undef, @args);
}

# Sends to $port (or the owner of $key's slot, or the first master) and
# follows MOVED / ASK / TRYAGAIN / CLUSTERDOWN, and waits out a node that
# does not answer (a failover: the map changes).
sub _retry {
    my ($self, $port, $key, @args) = @_;
    my $ask;
    my $deadline = time + 10;
    while (1) {
        $port //= defined $key ? $self->node_for($key) : ($self->masters)[0];
        my $r = eval {
            my $c = $self->conn($port);
            $c->cmd('ASKING') if $ask;
            $c->cmd(@args);
        };
        if (!defined $r && $@) {
            die $@ if time > $deadline;
            delete $self->{conns}{$port};
            sleep 0.1;
            eval { $self->refresh };
            ($port, $ask) = (undef, 0);
            next;
        }
        return $r unless ref $r eq 'IoaTest::Redis::Error';
        if ("$r" =~ /^MOVED \d+ [\d.]+:(\d+)/) {
            $port = $1;
            $ask = 0;
            $self->refresh;
        } elsif ("$r" =~ /^ASK \d+ [\d.]+:(\d+)/) {
            $port = $1;
            $ask = 1;
        } elsif ("$r" =~ /^(TRYAGAIN|CLUSTERDOWN|LOADING)/ && time < $deadline) {
            sleep 0.05;
            eval { $self->refresh };
            ($port, $ask) = (undef, 0) if defined $key;
        } else {
            return $r;
        }
    }
}

sub DESTROY { }

1;
