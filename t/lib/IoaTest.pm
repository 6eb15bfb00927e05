# IoaTest -- ioa's extras for Test::Nginx-format tests: a private Redis, an
# error.log reader, and interactive multi-client scenarios inside a block.
#
# It works under both runners: ioa's own t/lib/Test/Nginx/Socket.pm and
# upstream openresty/test-nginx.  Only APIs both provide are used:
# add_response_body_check, add_block_preprocessor, server_port_for_client,
# server_root, and Test::Base's "unknown sections are ignored".
#
# Usage (order matters, see "Loading order" below):
#
#     use Test::Nginx::Socket 'no_plan';
#     use lib 't/lib';
#     use IoaTest;                   # or: use IoaTest 'no_redis';
#     run_tests();
#
# Redis.  On import a redis-server is started on a free loopback port with
# its own directory, no persistence, and $ENV{TEST_NGINX_REDIS_PORT} /
# $ENV{TEST_NGINX_REDIS_HOST} are set, so config sections can say
#     ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
# It is stopped by PID in END.  It runs in the foreground as our child
# (`--daemonize no`, not `yes`) so that we reap it: PID 1 in a container may
# never reap a daemonized server, which would leave zombies in `pgrep`.
# Exported: redis_cmd(@args) (typed reply, see IoaTest::Redis), redis_connect()
# (a new connection, e.g. for SUBSCRIBE), redis_flush(), redis_stop(),
# redis_start() (same port and directory: for "Redis went away" tests),
# redis_port(), nginx_error_log() (the current block's error.log).
#
# Redis Cluster.  With TEST_IOA_REDIS=cluster in the environment (or
# `use IoaTest 'cluster'`) a 3-master Redis Cluster is started instead
# (IoaTest::Cluster; `use IoaTest qw(cluster replicas)` adds a replica per
# master), and everything above keeps working: $TEST_NGINX_REDIS_PORT is the
# first master, so `ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;` finds the
# whole cluster from it (the module detects the setup), redis_cmd() routes
# by key slot and follows MOVED/ASK, FLUSHALL/KEYS/SAVE/CLIENT LIST go to
# every master, redis_stop()/redis_start() stop and restart every node.
# $TEST_NGINX_REDIS_SEEDS holds every master ("127.0.0.1:p1 127.0.0.1:p2
# ..."; the standalone port alone otherwise), redis_addrs() the same
# comma-separated, as ioa-worker --redis takes it.  Helpers that differ by
# setup: redis_mode() ("standalone" or "cluster"), redis_cluster() (the
# IoaTest::Cluster, or undef), redis_connect(key => $k) (the node that owns
# $k's slot), redis_spy(@channels) (a connection that sees what is
# published on those room channels: PSUBSCRIBE, plus SSUBSCRIBE on a
# Cluster), redis_kill_clients(qr/name=.../) (CLIENT KILL on every node),
# redis_forget_dump() (removes the dumps SAVE wrote), redis_numsub($ch)
# (subscribers of a room channel: PUBSUB NUMSUB, or SHARDNUMSUB on the
# owner), redis_numpat() (pattern subscriptions, summed over the masters).
#
# Ready before the first request.  With our runner, once a block's nginx
# is up and before its first request, every worker of a configuration with
# ioa_redis is waited for until it can talk to Redis (IoaTest::Ready: each
# worker's "ioa redis: ready" in error.log); a hub that is not ready within
# $TEST_IOA_READY_TIMEOUT (30 s) fails the block, saying what is missing.
# Sections: `--- no_ready_wait` for a hub started on purpose without a
# Redis it can use; `--- empty_redis` empties Redis before the block's
# nginx starts (rather than a FLUSHALL in the scenario, which the hub's
# discovery index notices only up to a second later).
#
# Scenarios.  A block may carry a `--- ioa_scenario` section of Perl code.
# IoaTest registers an add_response_body_check hook, which both runners call
# after each response's status/header/body checks and before the error.log
# checks; for blocks with the section it runs the code once per repetition,
# after the block's first response, so nginx is up and its port known.
# Upstream ignores sections it does not know, which is what makes this safe.
# The code is compiled in package main (so is/like/ok/is_deeply/diag work)
# with `$ctx`, an IoaTest::Context:
#
#     === TEST 7: two clients see each other's messages
#     --- config
#         location = /ws { ioa_websocket; }
#     --- ioa_scenario
#         my $a = $ctx->ws('/ws?room=r1');
#         my $b = $ctx->ws('/ws?room=r1');
#         ok $a->ok && $b->ok, 'both upgraded' or diag $a->error;
#         $a->send_text('{"text":"hi"}');
#         like $b->recv_text(2), qr/"hi"/, 'b got it';
#         is $ctx->redis('XLEN', 'ioa:room:r1'), 1, 'one entry in the stream';
#     --- no_error_log
#     [error]
#
# Without `--- request` the scenario is the whole block: our runner sends
# no request of its own (`--- no_request`), it runs the scenario once nginx
# is up and ready; under upstream's runner, which needs a request, the
# block gets `GET /health_check` with any status.  $ctx->body is then
# undef.  Blocks with a scenario are
# marked `--- no_http2` (WebSocket needs HTTP/1.1), unless they say --- http2.
# A scenario that dies fails one test named "<block> - ioa_scenario died";
# assertions count as tests, so use 'no_plan' (or count them in the plan).
#
# $ctx methods: name, block, body (first response's body), rep (repetition
# index), host, port, servroot, redis_port, rand_port(N) (the block's
# $TEST_NGINX_RAND_PORT_N), ws($path, %opt) (IoaTest::WS, port => to override),
# http($method, $path, headers => [..], body => .., port => ..) (an
# HTTP::Response, HTTP/1.1, Connection: close), connect(port => ..) (a raw
# socket), read_all($sock, $secs) (bytes until the peer closes; dies on
# timeout), redis(@cmd), error_log() (text written since the scenario began),
# log_mark() and wait_for_log(qr/../, $secs) (first matching line written
# after the mark, or undef).
#
# Loading order.  `use lib 't/lib'` puts t/lib FIRST in @INC; if it runs before
# `use Test::Nginx::Socket`, our runner shadows an operator's upstream one.
# So load Test::Nginx::Socket first; IoaTest warns when it had to load the
# runner itself from t/lib while another copy was further down @INC.

package IoaTest;

use strict;
use warnings;

use Cwd ();
use Exporter ();
use File::Path qw(remove_tree);
use File::Temp ();
use IO::Select ();
use IO::Socket::INET ();
use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

my $LoadedRunner;
BEGIN { $LoadedRunner = !$INC{'Test/Nginx/Socket.pm'} }
use Test::Nginx::Socket ();     # whichever copy comes first in @INC
use IoaTest::Cluster ();
use IoaTest::Port ();
use IoaTest::Ready ();
use IoaTest::Redis ();
use IoaTest::WS ();

our @ISA = ('Exporter');
our @EXPORT = qw(redis_cmd redis_connect redis_flush redis_start redis_stop
                 redis_port nginx_error_log redis_mode redis_cluster
                 redis_spy redis_kill_clients redis_forget_dump redis_addrs
                 redis_numsub redis_numpat);

our ($RedisPort, $RedisDir, $RedisPid);
our ($Cluster, $ClusterWanted, $ClusterReplicas);
our $ClusterNodeTimeout;     # cluster-node-timeout; set it in a BEGIN block
my $Redis;               # the shared connection behind redis_cmd
my $MainPid = $$;
my $HooksRegistered;

sub import {
    my ($class, @opts) = @_;
    my %opt = map { $_ => 1 } @opts;
    $ClusterWanted = 1 if $opt{cluster}
                          || ($ENV{TEST_IOA_REDIS} // '') eq 'cluster';
    $ClusterReplicas = 1 if $opt{replicas};
    _check_runner_origin() if $LoadedRunner;
    _register_hooks();
    redis_start() unless $opt{no_redis} || $RedisPid;
    $class->export_to_level(1, $class, @EXPORT);
}

# Let Ctrl-C and `kill` still run END (which stops redis).
my %SigNum = (HUP => 1, INT => 2, TERM => 15);
for my $sig (keys %SigNum) {
    $SIG{$sig} = sub { exit 128 + $SigNum{$sig} }
        if !$SIG{$sig} || $SIG{$sig} eq 'DEFAULT';
}

sub _check_runner_origin {
    no warnings 'once';
    return unless $Test::Nginx::Socket::IoaRunner;
    my $ours = Cwd::abs_path($INC{'Test/Nginx/Socket.pm'}) // '';
    my ($other) = grep { -f $_ && Cwd::abs_path($_) ne $ours }
                  map { "$_/Test/Nginx/Socket.pm" } grep { !ref } @INC;
    warn "IoaTest: loaded ioa's Test::Nginx::Socket ($ours) although \@INC "
       . "also has $other; put `use Test::Nginx::Socket` before "
       . "`use lib 't/lib'`\n" if $other;
}

sub _slurp {
    my ($file, $from) = @_;
    open my $fh, '<', $file or return '';
    binmode $fh;
    seek $fh, $from, 0 if $from;
    local $/;
    return scalar(<$fh>) // '';
}

# ------------------------------------------------------------------ Redis

# IoaTest::Port, never the runner's nginx port
sub _free_port {
    IoaTest::Port::free_port(avoid => [$ENV{TEST_NGINX_SERVER_PORT}]);
}

sub redis_port { $RedisPort }

sub redis_mode { $ClusterWanted ? 'cluster' : 'standalone' }

sub redis_cluster { $Cluster }

sub redis_addrs {
    return join ',', map { "127.0.0.1:$_" } $Cluster->masters if $Cluster;
    return "127.0.0.1:$RedisPort";
}

sub _cluster_start {
    return $RedisPort if $RedisPid;
    $Cluster //= IoaTest::Cluster->new(masters => 3,
        replicas => $ClusterReplicas ? 1 : 0, free_port => \&_free_port,
        node_timeout => $ClusterNodeTimeout);
    $Cluster->start;
    $RedisPid = -1;          # "running"; the nodes have their own pids
    $RedisPort = $Cluster->seed;
    $ENV{TEST_NGINX_REDIS_PORT} = $RedisPort;
    $ENV{TEST_NGINX_REDIS_HOST} = '127.0.0.1';
    $ENV{TEST_NGINX_REDIS_SEEDS} = join ' ', map { "127.0.0.1:$_" }
                                             $Cluster->masters;
    return $RedisPort;
}

# Starts (or restarts, on the same port and directory) the private redis.
sub redis_start {
    return _cluster_start() if $ClusterWanted;
    return $RedisPort if $RedisPid;
    $RedisDir //= File::Temp::tempdir('ioa-redis-XXXXXX', TMPDIR => 1);
    my $fixed_port = defined $RedisPort;
    my $log = "$RedisDir/log";
    for my $attempt (1 .. 5) {
        $RedisPort = _free_port() unless $fixed_port;
        my $log_from = -s $log // 0;
        my $pid = fork // die "IoaTest: fork: $!\n";
        if ($pid == 0) {
            open STDIN, '<', '/dev/null';
            open STDOUT, '>', '/dev/null';
            open STDERR, '>>', "$RedisDir/stderr";
            exec('redis-server', '--port', $RedisPort, '--bind', '127.0.0.1',
                 '--daemonize', 'no', '--dir', $RedisDir,
                 '--pidfile', "$RedisDir/pid", '--logfile', $log,
                 '--save', '', '--appendonly', 'no')
                or POSIX::_exit(127);
        }
        # Ready when *our* server answers: INFO names its process id, so a
        # stranger that grabbed the port in the meantime is not mistaken.
        my $deadline = time + 10;
        while (time < $deadline) {
            last if waitpid($pid, WNOHANG) == $pid;
            my $info = eval {
                IoaTest::Redis->new(port => $RedisPort, timeout => 1)
                    ->cmd('INFO', 'server') } // '';
            if ($info =~ /^process_id:$pid\r?$/m) {
                $RedisPid = $pid;
                $ENV{TEST_NGINX_REDIS_PORT} = $RedisPort;
                $ENV{TEST_NGINX_REDIS_HOST} = '127.0.0.1';
                $ENV{TEST_NGINX_REDIS_SEEDS} = "127.0.0.1:$RedisPort";
                return $RedisPort;
            }
            sleep 0.02;
        }
        _reap($pid, 'KILL');
        my $why = substr _slurp($log, $log_from), -2000;
        if ($why =~ /Address already in use/ && $attempt < 5) {
            sleep 0.2 if $fixed_port;    # a restart: let the old socket go
            next;
        }
        die "IoaTest: redis-server did not start on 127.0.0.1:$RedisPort:\n"
          . $why . _slurp("$RedisDir/stderr");
    }
}

sub redis_stop {
    my $pid = $RedisPid // return;
    undef $RedisPid;
    if ($Redis) { $Redis->close; undef $Redis }
    return $Cluster->stop if $Cluster;
    _reap($pid, 'TERM');
}

# Signal and wait (at most ~5 s, then KILL): we are redis's parent.
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

# A new connection: to the standalone Redis, or to a Cluster node (the
# owner of key => $k's slot, port => $p, or the first master).
sub redis_connect {
    my %opt = @_;
    die "IoaTest: redis is not running\n" unless $RedisPid;
    my $key = delete $opt{key};
    my $port = delete $opt{port};
    $port //= $Cluster->node_for($key) if $Cluster && defined $key;
    return IoaTest::Redis->new(port => $port // $RedisPort, %opt);
}

# A connection that sees what the hub publishes on these room channels
# (and anything PUBLISHed under ioa:), for "nothing was published" checks.
sub redis_spy {
    my @channels = @_;
    my $r = redis_connect(@channels ? (key => $channels[0]) : ());
    $r->cmd('PSUBSCRIBE', 'ioa:*');
    if ($Cluster) {
        $r->cmd('SSUBSCRIBE', $_) for @channels;
    }
    return $r;
}

# CLIENT KILL for every client whose CLIENT LIST line matches $re, on every
# node; returns how many were cut.
sub redis_kill_clients {
    my $re = shift;
    my @ports = $Cluster ? $Cluster->ports : ($RedisPort);
    my $n = 0;
    for my $port (@ports) {
        my $c = eval { IoaTest::Redis->new(port => $port, timeout => 2) }
            or next;
        for my $line (split /\n/, $c->cmd('CLIENT', 'LIST')) {
            next unless $line =~ $re && $line =~ /\bid=(\d+)/;
            $n += $c->cmd('CLIENT', 'KILL', 'ID', $1) || 0;
        }
        $c->close;
    }
    return $n;
}

sub redis_numsub {
    my $ch = shift;
    my $r = $Cluster
        ? $Cluster->cmd_on($Cluster->node_for($ch), 'PUBSUB', 'SHARDNUMSUB', $ch)
        : redis_cmd('PUBSUB', 'NUMSUB', $ch);
    return ref $r eq 'ARRAY' ? $r->[1] : 0;
}

sub redis_numpat {
    return redis_cmd('PUBSUB', 'NUMPAT') unless $Cluster;
    my $n = 0;
    $n += $Cluster->cmd_on($_, 'PUBSUB', 'NUMPAT') for $Cluster->masters;
    return $n;
}

sub redis_forget_dump {
    unlink "$RedisDir/dump.rdb" if $RedisDir;
    unlink glob($Cluster->dir . '/*/dump.rdb') if $Cluster;
}

sub redis_cmd {
    return $Cluster->cmd(@_) if $Cluster;
    # An idle connection that reads as ready was closed by the server
    # (e.g. redis was restarted): reconnect rather than fail.
    if ($Redis && IO::Select->new($Redis->{sock})->can_read(0)) {
        $Redis->close;
        undef $Redis;
    }
    $Redis //= redis_connect();
    return $Redis->cmd(@_);
}

sub redis_flush { redis_cmd('FLUSHALL') }

END {
    if ($$ == $MainPid) {
        local $?;
        redis_stop();
        remove_tree($RedisDir) if $RedisDir && !$ENV{TEST_NGINX_NO_CLEAN};
        remove_tree($Cluster->dir) if $Cluster && !$ENV{TEST_NGINX_NO_CLEAN};
    }
}

# ------------------------------------------------------------ nginx logs

sub nginx_error_log {
    return _slurp(Test::Nginx::Socket::server_root() . '/logs/error.log');
}

# -------------------------------------------------------------- scenarios

sub _register_hooks {
    return if $HooksRegistered++;
    Test::Nginx::Socket::add_response_body_check(\&_scenario_check);
    # ours only: upstream's runner has no start hook, and there the first
    # request meets the hub as it is
    Test::Nginx::Socket::add_start_hook(\&_ready_hook)
        if Test::Nginx::Socket->can('add_start_hook');
    # & bypasses the (&) prototype, which wants a literal block.
    &Test::Nginx::Socket::add_block_preprocessor(\&_scenario_preprocess);
}

# After a block's nginx started: wait until every worker can talk to Redis
# (IoaTest::Ready), so that no first request meets a hub still connecting.
# A block whose hub starts on purpose without Redis says --- no_ready_wait.
sub _ready_hook {
    my ($block, $conf) = @_;
    return if defined $block->no_ready_wait;
    my ($ok, $why) = runner_ready($conf);
    Test::More::fail($block->name . " - the hub is ready before the first "
                     . "request") unless $ok;
    Test::More::diag("the hub is not ready: $why") unless $ok;
}

# runner_ready([$nginx_conf_text]): the wait of IoaTest::Ready for the
# runner's current nginx (its configuration read from its file when not
# given); (1, '') at once for one that cannot be waited on
sub runner_ready {
    my $conf = shift
        // Test::Nginx::Socket::slurp($Test::Nginx::Socket::ConfFile) // '';
    my $workers = IoaTest::Ready::for_conf($conf,
        $Test::Nginx::Socket::LogLevel) or return (1, '');
    return IoaTest::Ready::wait(log => $Test::Nginx::Socket::ErrLogFile,
                                workers => $workers);
}

# A configuration that serves ioa_api must say how clients authenticate
# (ngx_ioa_auth.c).  The tests of everything but authentication run in
# IoA's open mode, stated explicitly (IoaTest::Instance::auth_default),
# unless the block configures ioa_auth itself (t/150-auth.t does).
sub _auth_preprocess {
    my $block = shift;
    require IoaTest::Instance;
    my $all = join '', map { $block->$_ // '' }
                       qw(main_config http_config config);
    my $auth = IoaTest::Instance::auth_default($all) or return;
    $block->set_value(http_config => $auth . ($block->http_config // ''));
}

# A block that starts from an empty Redis (`--- empty_redis`, or hub_ready
# in its init) gets it empty before its nginx starts: the hub's discovery
# index reads the registry at start, and a FLUSHALL after that reaches it
# only at its next epoch check (ngx_ioa_index_sync.c), up to a second
# later, while the scenario already registers and searches.
sub _flush_preprocess {
    my $block = shift;
    eval { redis_flush() }
        if defined $block->empty_redis || ($block->init // "") =~ /hub_ready/;
}

sub _scenario_preprocess {
    my $block = shift;
    _auth_preprocess($block);
    _flush_preprocess($block);
    return unless defined $block->ioa_scenario;
    $block->set_value(no_http2 => 1) unless defined $block->http2;
    return if defined $block->request || defined $block->raw_request
              || defined $block->pipelined_requests;
    # No request of its own: the scenario is the block.  Our runner sends
    # none (nginx is up and every worker ready before the scenario runs);
    # upstream's cannot do without one, so it gets GET /health_check and any
    # status (an ioa_api location answers it, 200 or 503).
    no warnings 'once';
    if ($Test::Nginx::Socket::IoaRunner) {
        $block->set_value(no_request => 1);
    } else {
        $block->set_value(request => "GET /health_check\n");
        $block->set_value(error_code_like => '^\d{3}$');
    }
}

# Called by either runner as ($block, $body, $req_idx, $repeat_idx, $dry_run).
sub _scenario_check {
    my ($block, $body, $req_idx, $rep, $dry_run) = @_;
    my $code = $block->ioa_scenario;
    return unless defined $code && $req_idx == 0;
    my $name = $block->name;
    if ($dry_run) {
        SKIP: { Test::More::skip("$name - ioa_scenario - skipped due to $dry_run", 1) }
        return;
    }
    my $sub = ref $code eq 'CODE' ? $code : _compile($name, $code) or return;
    my $ctx = IoaTest::Context->new(block => $block, body => $body, rep => $rep);

    # Name the scenario's own assertions "<block> - <description>", like the
    # runner's, so a failure says which block it came from.  Every Test::More
    # assertion ends in Test::Builder::ok; the extra Level keeps the reported
    # file and line those of the scenario code.
    my $orig_ok = \&Test::Builder::ok;
    my ($ok, $err);
    {
        no warnings 'redefine';
        local *Test::Builder::ok = sub {
            my ($tb, $test, $desc) = @_;
            local $Test::Builder::Level = $Test::Builder::Level + 1;
            return $orig_ok->($tb, $test, "$name - " . ($desc // 'ioa_scenario'));
        };
        local $@;
        $ok = eval { $sub->($ctx); 1 };
        $err = $@;
    }
    if (!$ok) {
        Test::More::fail("$name - ioa_scenario died");
        Test::More::diag($err);
    }
}

sub _compile {
    my ($name, $code) = @_;
    (my $file = "$name --- ioa_scenario") =~ s/"/'/g;
    # `#line` makes errors and failed assertions point into the section.
    my $sub = eval "package main; use strict; use warnings;\n"
                 . "sub { my \$ctx = shift;\n#line 1 \"$file\"\n$code\n}";
    return $sub if $sub;
    Test::More::fail("$name - ioa_scenario compiles");
    Test::More::diag($@);
    return undef;
}

# ---------------------------------------------------------------- context

package IoaTest::Context;

use HTTP::Response ();
use IO::Select ();
use IO::Socket::INET ();
use Time::HiRes qw(sleep time);

sub new {
    my ($class, %args) = @_;
    my $self = bless {%args}, $class;
    $self->{log_start} = $self->{log_mark} = -s $self->error_log_file // 0;
    return $self;
}

sub block      { $_[0]{block} }
sub name       { $_[0]{block}->name }
sub body       { $_[0]{body} }
sub rep        { $_[0]{rep} }
sub host       { '127.0.0.1' }
sub port       { Test::Nginx::Socket::server_port_for_client() }
sub servroot   { Test::Nginx::Socket::server_root() }
sub redis_port { $IoaTest::RedisPort }
sub redis      { shift; IoaTest::redis_cmd(@_) }
sub error_log_file { $_[0]->servroot . '/logs/error.log' }

# $TEST_NGINX_RAND_PORT_N of this block, from whichever runner is loaded.
sub rand_port {
    my ($self, $n) = @_;
    my $var = $n =~ /^\d+$/ ? "TEST_NGINX_RAND_PORT_$n" : $n;
    no warnings 'once';
    my $ports = $Test::Nginx::Util::RandPorts || $Test::Nginx::Socket::RandPorts
                || {};
    return $ports->{$var}
        // die "rand_port: \$$var is not used in this block's config\n";
}

sub ws {
    my ($self, $path, %opt) = @_;
    my $port = delete $opt{port} // $self->port;
    return IoaTest::WS->connect($self->host, $port, $path, %opt);
}

sub connect {
    my ($self, %opt) = @_;
    my $port = $opt{port} // $self->port;
    my $s = IO::Socket::INET->new(PeerAddr => $self->host, PeerPort => $port,
        Proto => 'tcp', Timeout => $opt{timeout} // 5,
        ($opt{local} ? (LocalAddr => $opt{local}) : ()))
        or die "connect to " . $self->host . ":$port failed: $!\n";
    binmode $s;
    return $s;
}

# Everything the peer sends until it closes; dies after $timeout seconds so
# a scenario cannot hang the run.
sub read_all {
    my ($self, $s, $timeout) = @_;
    my ($raw, $deadline) = ('', time + ($timeout // 5));
    while (1) {
        my $left = $deadline - time;
        die "read_all: timed out, got '$raw'\n"
            if $left <= 0 || !IO::Select->new($s)->can_read($left);
        sysread($s, $raw, 65536, length $raw) or return $raw;
    }
}

# One HTTP/1.1 request on a fresh connection, read until the server closes.
sub http {
    my ($self, $method, $path, %opt) = @_;
    my $timeout = $opt{timeout} // 5;
    my $body = $opt{body} // '';
    my @h = (Host => 'localhost', Connection => 'close', @{ $opt{headers} || [] });
    push @h, 'Content-Length' => length $body
        if length $body || $method =~ /^(POST|PUT|PATCH)$/;
    my $req = "$method $path HTTP/1.1\r\n";
    $req .= "$h[$_]: $h[$_ + 1]\r\n" for grep { $_ % 2 == 0 } 0 .. $#h;
    my $s = $self->connect(port => $opt{port}, timeout => $timeout, local => $opt{local});
    local $SIG{PIPE} = 'IGNORE';
    print {$s} "$req\r\n$body";
    my $raw = $self->read_all($s, $timeout);
    close $s;
    my $res = HTTP::Response->parse($raw);
    if (lc($res->header('Transfer-Encoding') // '') eq 'chunked') {
        my ($in, $out) = ($res->content, '');
        while ($in =~ s/^([0-9a-fA-F]+)[^\r\n]*\r\n//) {
            my $len = hex $1 or last;
            $out .= substr $in, 0, $len, '';
            $in =~ s/^\r\n//;
        }
        $res->content($out);
    }
    return $res;
}

sub error_log {
    my $self = shift;
    return IoaTest::_slurp($self->error_log_file, $self->{log_start});
}

sub log_mark { $_[0]{log_mark} = -s $_[0]->error_log_file // 0 }

sub wait_for_log {
    my ($self, $re, $timeout) = @_;
    my $deadline = time + ($timeout // 3);
    while (1) {
        my $text = IoaTest::_slurp($self->error_log_file, $self->{log_mark});
        for my $line (split /^/m, $text) {
            return $line if $line =~ $re;
        }
        return undef if time > $deadline;
        sleep 0.05;
    }
}

1;
