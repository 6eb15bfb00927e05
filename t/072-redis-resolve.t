# t/072-redis-resolve.t -- ioa_redis by name (ngx_ioa_redis_resolve.c):
# what a hub in a container network needs, where Redis is a name that may
# not resolve yet when nginx starts and may move when Redis is recreated.
#
# What must hold, on real processes (nginx, Redis, and Debian's dnsmasq as
# the DNS server, all our own on loopback):
#
#   - without "resolver", a name is resolved when the configuration is
#     read, as before ("localhost" works); a name that does not resolve
#     fails `nginx -t` with a message naming the host and the cure;
#   - with "resolver", `nginx -t` passes and nginx starts while the name
#     does not resolve: /health_check answers 503, the error log says
#     which name was not found, /metrics counts resolve_failed for it;
#   - once the name appears in DNS the hub connects by itself and works
#     (an envelope posted is in that Redis);
#   - when the name moves to another address (Redis recreated elsewhere:
#     here 127.0.0.2, same port) and the old Redis goes away, the hub
#     follows the name on its next reconnect, logs the new address, and
#     what is posted then is in the new Redis;
#   - a Redis Cluster's seed by name: found, detected as a Cluster (the
#     other masters come from its map as addresses), envelopes stored.
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/072-redis-resolve.t

use strict;
use warnings;

use Cwd ();
use File::Basename ();
use IO::Socket::INET ();
use JSON::PP ();
use Test::More;
use POSIX ();
use Time::HiRes qw(sleep time);

use lib 't/lib';
use IoaTest::Api qw(wait_until);
use IoaTest::Cluster;
use IoaTest::Instance;
use IoaTest::Port ();
use IoaTest::Proc qw(bg bg_stop redis_child slurp $Scratch);

my $Repo = Cwd::abs_path(File::Basename::dirname(__FILE__) . '/..');
$ENV{TEST_NGINX_LOAD_MODULES} //= "$Repo/build/ngx_http_ioa_module.so";

my $Dnsmasq = '/usr/sbin/dnsmasq';
plan skip_all => "$Dnsmasq is not installed (make test installs dnsmasq-base)"
    unless -x $Dnsmasq;

my $Name = 'redis.ioa.test';

# a port free for UDP and TCP both: dnsmasq listens on the two
sub free_dns_port { IoaTest::Port::free_port(udp => 1) }

# the DNS server: names of ioa.test from a hosts file, re-read on SIGHUP;
# any other name of ioa.test is NXDOMAIN, nothing is forwarded.  Started
# again on another port if the one chosen was taken meanwhile.
my $Hosts = "$Scratch/hosts";
sub set_hosts { open my $fh, '>', $Hosts or die "$Hosts: $!\n"; print $fh @_; close $fh }
set_hosts('');
my ($DnsPort, $Dns);
for my $try (1 .. 5) {
    $DnsPort = free_dns_port();
    $Dns = bg("dnsmasq-$try", $Dnsmasq, '--keep-in-foreground', '--conf-file=/dev/null',
        '--no-resolv', '--no-hosts', '--local=/ioa.test/', "--addn-hosts=$Hosts",
        '--listen-address=127.0.0.1', '--bind-interfaces', "--port=$DnsPort",
        '--user=root', '--group=root', '--log-facility=-', '--log-queries',
        "--pid-file=$Scratch/dnsmasq.pid");
    sleep 0.5;
    last if kill 0, $Dns->{pid} and waitpid($Dns->{pid}, POSIX::WNOHANG()) == 0;
    diag "dnsmasq on $DnsPort did not stay up: " . slurp($Dns->{err});
    undef $Dns;
}
BAIL_OUT('dnsmasq does not start') unless $Dns;
sub reload_dns {
    kill 'HUP', $Dns->{pid};
    sleep 0.3;
}

sub hub {
    my ($name, $http, %o) = @_;
    return IoaTest::Instance->start(
        dir         => "$Scratch/$name",
        workers     => 1,
        log_level   => 'info',
        http_config => $http,
        config      => 'location / { ioa_api; } '
                     . 'location = /metrics { ioa_metrics; }',
        %o,
    );
}

sub get {
    my ($hub, $method, $path, $body) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . $hub->port,
                                  Timeout => 5) or return (0, '');
    $body //= '';
    print {$s} "$method $path HTTP/1.0\r\nContent-Type: application/json\r\n"
        . "Content-Length: " . length($body) . "\r\n\r\n$body";
    local $/;
    my $r = <$s> // '';
    my ($code) = $r =~ m{^HTTP/1\.\d (\d+)};
    my (undef, $b) = split /\r\n\r\n/, $r, 2;
    return ($code // 0, $b // '');
}


sub health { (get($_[0], GET => '/health_check'))[0] }

sub redis_cli {
    my ($host, $port, @cmd) = @_;
    my $out = `redis-cli -h $host -p $port @cmd 2>&1`;
    chomp $out;
    return $out;
}

# an agent, a room, an envelope through the hub: the room's comm_id
sub post_through {
    my ($hub, $text) = @_;
    for my $n ('Alice', 'Bob') {
        my ($c) = get($hub, POST => '/register', JSON::PP::encode_json(
            { name => $n, type => 'Human Assistant', desc => "agent $n" }));
        return "register $n: $c" unless $c == 200;
    }
    my ($c, $b) = get($hub, POST => '/teamup', JSON::PP::encode_json(
        { sender => 'Alice', agent_names => ['Bob'] }));
    return "teamup: $c $b" unless $c == 200;
    my $cid = JSON::PP::decode_json($b)->{comm_id};
    ($c, $b) = get($hub, POST => '/agents/Alice/messages', JSON::PP::encode_json(
        { comm_id => $cid, content => $text }));
    return "post: $c $b" unless $c == 200;
    return $cid;
}

my $RedisPort;
my $RedisPid;
($RedisPort, $RedisPid) = redis_child();

# ---------------------------------------------------- without "resolver"

{
    my $h = eval { hub('norecord', "ioa_redis $Name:$RedisPort;") };
    my $err = $@;
    $h->stop if $h;
    like $err, qr/host "\Q$Name\E" of "ioa_redis" not found; set "resolver" in the http block to look it up when connecting instead/,
        'no resolver, a name that does not resolve: refused at start, naming the host and the cure';

    my $hub = hub('localhost', "ioa_redis localhost:$RedisPort;");
    ok wait_until(sub { health($hub) == 200 }, 30),
        'no resolver, "localhost": resolved when the configuration is read, as before';
    $hub->stop;
}

# ------------------------------------------------------- with "resolver"

my $http = "resolver 127.0.0.1:$DnsPort valid=1s ipv6=off;\n"
         . "ioa_redis $Name:$RedisPort;\n"
         . "ioa_redis_backoff_max 500ms;";

# started before the name resolves: not waited for (no_ready_wait), as
# the point is what it does meanwhile
my $hub = hub('resolver', $http, no_ready_wait => 1);
my $binary = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
my $conf = $hub->dir . '/conf/nginx.conf';
my $t = `$binary -t -p @{[ $hub->dir ]}/ -c $conf 2>&1`;
is $?, 0, 'nginx -t passes while the name does not resolve' or diag $t;

is health($hub), 503, 'the hub runs, /health_check 503 (no Redis yet)';
ok wait_until(sub { $hub->error_log =~ /cannot look up "\Q$Name\E": Host not found/ }, 10),
    'the error log names the host that was not found'
    or diag $hub->error_log;
my ($mc, $metrics) = get($hub, GET => '/metrics');
like $metrics, qr/^ioa_redis_errors_total\{node="\Q$Name:$RedisPort\E",error="resolve_failed"\} [1-9]/m,
    '/metrics counts resolve_failed for the name';

set_hosts("127.0.0.1 $Name\n");
reload_dns();
ok wait_until(sub { health($hub) == 200 }, 15),
    'the name appears in DNS: the hub connects by itself';
like $hub->error_log, qr/ioa redis: "\Q$Name\E" is 127\.0\.0\.1/, 'and logs the address it found';
my $cid = post_through($hub, 'before the move');
like $cid, qr/^[0-9a-f]{8,}/, 'an envelope through the hub' or diag $cid;
is redis_cli('127.0.0.1', $RedisPort, 'XLEN', "ioa:{room:$cid}:log"), 1,
    'it is in the Redis the name points at';

# ------------------------------------------------------ the name moves

my ($p2) = redis_child(bind => '127.0.0.2', port => $RedisPort);
is $p2, $RedisPort, 'a second Redis at 127.0.0.2, the same port';
set_hosts("127.0.0.2 $Name\n");
reload_dns();
sleep 1.2;                    # past the resolver's valid=1s
bg_stop({ pid => $RedisPid });
ok wait_until(sub { $hub->error_log =~ /ioa redis: "\Q$Name\E" is 127\.0\.0\.2/ }, 15),
    'the old Redis gone, the hub looks the name up again and finds the new address'
    or diag $hub->error_log;
ok wait_until(sub { health($hub) == 200 }, 15), 'and is connected there';
my $cid2 = post_through($hub, 'after the move');
like $cid2, qr/^[0-9a-f]{8,}/, 'an envelope through the hub after the move' or diag $cid2;
is redis_cli('127.0.0.2', $RedisPort, 'XLEN', "ioa:{room:$cid2}:log"), 1,
    'it is in the new Redis';
unlike $hub->error_log, qr/\[(alert|crit|emerg)\]/, 'no alert, crit or emerg';

$hub->stop;

# ----------------------------------------------- a Cluster seed by name

# the seed resolves to an address the Cluster's map names too: the same
# node, and the other masters come from the map as addresses
my $cl = IoaTest::Cluster->new(masters => 3, replicas => 0,
    free_port => sub { IoaTest::Instance::_free_port() });
$cl->start;
set_hosts("127.0.0.1 $Name\n");
reload_dns();
$hub = hub('cluster', "resolver 127.0.0.1:$DnsPort valid=1s ipv6=off;\n"
                    . "ioa_redis $Name:" . $cl->seed . ";");
ok wait_until(sub { health($hub) == 200 }, 30), 'a Cluster seed by name: the hub connects';
like $hub->error_log, qr/ioa redis: \Q$Name:@{[ $cl->seed ]}\E is a Redis Cluster node/,
    'and finds a Cluster there (the seed named in the log by its name)';
my $cid3 = post_through($hub, 'in a Cluster');
like $cid3, qr/^[0-9a-f]{8,}/, 'an envelope through the hub' or diag $cid3;
is $cl->cmd('XLEN', "ioa:{room:$cid3}:log"), 1, 'it is in the Cluster';
unlike $hub->error_log, qr/\[(alert|crit|emerg)\]/, 'no alert, crit or emerg';
$hub->stop;
$cl->stop;

bg_stop($Dns);

done_testing();
