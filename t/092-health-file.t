# t/092-health-file.t -- --health-file of ioa-worker and ioa-agent
# (workers/common/ioa_health.c): what the worker and agent images'
# HEALTHCHECK reads (docker/ioa-alive).
#
# What must hold, on real processes (Redis, nginx, the two programs):
#
#   - the worker touches its file after heartbeats Redis took: it appears,
#     and its time moves on while Redis is there; with Redis gone it stops
#     (the file grows old), and moves on again once Redis is back;
#   - the agent touches its file once its inbox is open (and whenever the
#     inbox delivers): it appears only then, not while the hub is down;
#   - a file that cannot be written is said once on stderr, and the
#     program goes on working (the agent still registers and connects);
#   - docker/ioa-alive FILE SECONDS says healthy or unhealthy by the age.
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/092-health-file.t

use strict;
use warnings;

use Cwd ();
use File::Basename ();
use IO::Socket::INET ();
use Test::More;
use Time::HiRes qw(sleep time);

use lib 't/lib';
use IoaTest::Api qw(wait_until);
use IoaTest::Instance;
use IoaTest::Proc qw(bg bg_stop redis_child slurp $Scratch);

my $Repo = Cwd::abs_path(File::Basename::dirname(__FILE__) . '/..');
$ENV{TEST_NGINX_LOAD_MODULES} //= "$Repo/build/ngx_http_ioa_module.so";
my $Worker = $ENV{IOA_WORKER_BIN} || "$Repo/workers/build/ioa-worker";
my $Agent = $ENV{IOA_AGENT_BIN} || "$Repo/workers/build/ioa-agent";
my $Alive = "$Repo/docker/ioa-alive";


sub mtime { my @s = stat $_[0]; return @s ? $s[9] : undef }

sub alive { system("$Alive $_[0] $_[1] >/dev/null 2>&1") == 0 }

my ($RedisPort, $RedisPid) = redis_child();

# ---------------------------------------------------------------- worker

my $wfile = "$Scratch/worker.alive";
my $w = bg('worker', $Worker, '--redis', "127.0.0.1:$RedisPort",
           '--scripts', "$Repo/redis-scripts", '--consumer', 'health-1',
           '--health-file', $wfile);
ok wait_until(sub { -e $wfile }, 15), 'the worker touches its health file once Redis took a heartbeat'
    or diag slurp($w->{err});
my $t1 = mtime($wfile);
ok wait_until(sub { (mtime($wfile) // 0) > $t1 }, 5), 'and again while Redis is there (each second)';
ok alive($wfile, 15), 'ioa-alive: healthy';

bg_stop({ pid => $RedisPid });
sleep 1.5;                                # a beat in flight may land
my $t2 = mtime($wfile);
sleep 3;
is mtime($wfile), $t2, 'Redis gone: the file is touched no more';
ok !alive($wfile, 2), 'ioa-alive with a bound below its age: unhealthy';
like `$Alive $wfile 2`, qr/^unhealthy: \Q$wfile\E last touched \d+s ago \(more than 2s\)/,
    'saying how old the file is';

($RedisPort, $RedisPid) = redis_child(port => $RedisPort);
ok wait_until(sub { (mtime($wfile) // 0) > $t2 }, 20), 'Redis back: the worker touches it again';
bg_stop($w);

# ----------------------------------------------------------------- agent

my $afile = "$Scratch/agent.alive";
my $port = IoaTest::Instance::_free_port();
my @agent = ($Agent, '--hub', "http://127.0.0.1:$port", '--name', 'Healthy',
             '--desc', 'counts words', '--backoff-max', '1');
my $a = bg('agent', @agent, '--health-file', $afile, '--exec', 'wc', '-w');
sleep 2;
ok !-e $afile, 'the agent does not touch its file while its hub is down';
like `$Alive $afile 50`, qr/^unhealthy: \Q$afile\E not touched yet/, 'ioa-alive: not touched yet';

my $hub = IoaTest::Instance->start(
    dir => "$Scratch/hub", workers => 1, log_level => 'info', port => $port,
    http_config => "ioa_redis 127.0.0.1:$RedisPort;",
    config => 'location / { ioa_api; }')->ready;
ok wait_until(sub { -e $afile }, 20), 'the hub up: the file is touched once the inbox is open'
    or diag slurp($a->{err});
like slurp($a->{err}), qr/inbox open/, 'the agent says its inbox is open';
ok alive($afile, 50), 'ioa-alive: healthy';
bg_stop($a);

my $b = bg('agent-ro', @agent, '--name', 'Unhealthy', '--health-file',
           "$Scratch/no-such-dir/agent.alive", '--exec', 'wc', '-w');
ok wait_until(sub { slurp($b->{err}) =~ /inbox open/ }, 20),
    'a health file that cannot be written: the agent still connects';
my @said = slurp($b->{err}) =~ /cannot touch the health file \Q$Scratch\E\/no-such-dir\/agent\.alive: No such file or directory/g;
is scalar @said, 1, 'and says so once';
bg_stop($b);
$hub->stop;

done_testing();
