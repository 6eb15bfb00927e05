# t/080-make-run.t -- `make run`, the first command of the README, end to
# end: it starts Redis, nginx with the module from conf.d/ioa.conf, two
# ioa-workers and three ioa-agents, runs the demo against them (agents
# register, discover each other, team up and talk, an observer follows; then
# a goal is launched and followed to its conclusion), and IOA_RUN_ONCE=1
# stops everything after it.
# Ports and the run directory are private to this test, so a developer's own
# `make run` is left alone.  (A plain Test::More file: it starts no nginx of
# its own through the runner.)

use strict;
use warnings;
use Test::More;
use File::Temp ();
use Cwd ();
use IO::Socket::INET ();
use lib 't/lib';
use IoaTest::Port ();

sub free_port { IoaTest::Port::free_port() }

# make run with IOA_RUN_ONCE=1 in a run directory and on ports of its own;
# ($dir, $port, $out, $rc).  Started again on new ports when one of them
# was taken by another test file between IoaTest::Port's check and the
# server's bind (make run then says so and stops what it had started).
sub make_run_once {
    my ($env) = @_;
    my ($dir, $port, $out, $rc);
    for my $try (1 .. 3) {
        $dir = File::Temp::tempdir('ioa-run-XXXXXX', TMPDIR => 1, CLEANUP => 1);
        ($port, my $rport) = (free_port(), free_port());
        $out = `$env IOA_RUN_ONCE=1 IOA_RUN_DIR=$dir IOA_PORT=$port IOA_REDIS_PORT=$rport make -s run 2>&1`;
        $rc = $? >> 8;
        last unless $rc && $out =~ /did not start \(is 127\.0\.0\.1:\d+ taken/;
        diag "make run lost a port to another test, again on new ones:\n$out";
    }
    return ($dir, $port, $out, $rc);
}

my ($dir, $port, $out, $rc) = make_run_once('');

is $rc, 0, 'make run exits 0 with IOA_RUN_ONCE=1' or diag $out;
like $out, qr/ioa is up: http:\/\/127\.0\.0\.1:$port/, 'the hub came up on IOA_PORT';
# conf.d as shipped has authentication on: the demo only gets through with
# the tokens make run made, and prints them
like $out, qr/authentication: ioa_auth jwt, key \Q$dir\E\/jwt\.key/, 'auth is on, with a key of its own';
like $out, qr/^  Planner +eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+$/m, 'the demo tokens are printed';
like $out, qr{^console: http://127\.0\.0\.1:$port/console/ }m, 'the console\'s address is printed';
like $out, qr/^console: .*\n.*\n  eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+$/m, 'with a token to sign in with';
{
    open my $fh, '<', "$dir/ioa.conf" or die "$dir/ioa.conf: $!\n";
    my $conf = do { local $/; <$fh> };
    my $repo = Cwd::abs_path('.');
    like $conf, qr{alias \Q$repo\E/console/;}, 'the console is served from the checkout';
}
like $out, qr/registered as Human Assistant/, 'agents registered';
like $out, qr/found Coder \(score [\d.]+, online True\)/, 'discovery found an online agent';
like $out, qr/room [0-9a-f]{32} with /, 'a team formed';
like $out, qr/observer \| team 'demo-team' formed/, 'the observer saw the team-up';
like $out, qr/Conclusion: BM25 explained/, 'the agents talked';
like $out, qr/4 envelopes stored/, 'the transcript holds every envelope';
like $out, qr/goal [0-9a-f]{32}: Count the words/, 'a goal was launched';
like $out, qr/Counter \| \[task result\] "agents that cooperate solve harder problems" has 6 words/,
    'an ioa-agent ran its task';
like $out, qr/state concluded \(room [0-9a-f]{32}\)/, 'the goal concluded';
like $out, qr/3 of 3 parts done/, 'with every task completed';
like $out, qr/\n\s+Reverser: problems harder solve cooperate that agents/,
    'and the conclusion carries the results';
like $out, qr/demo done/, 'the demo finished';
like $out, qr/stopped/, 'and everything was stopped';

ok !-e "$dir/nginx.pid", 'no nginx pid file left';
ok !-e "$dir/redis.pid", 'no redis pid file left';
ok !(glob "$dir/*.pid"), 'no worker or agent left running';
my $log = do { local (@ARGV, $/) = "$dir/logs/error.log"; <> } // '';
unlike $log, qr/\[(?:alert|crit|emerg)\]/, 'a clean error.log';

# the same command with IOA_LLM_BASE_URL set: the workers plan with the LLM
# (a real llama-server on a tiny random-weight model, t/lib/IoaTest/Llama.pm)
{
    use lib 't/lib';
    require IoaTest::Llama;
    my $llm = IoaTest::Llama::llama_server();
    my ($dir2, undef, $out2, $rc2) =
        make_run_once("IOA_LLM_BASE_URL=$llm IOA_LLM_MAX_TOKENS=1000");
    is $rc2, 0, 'LLM: make run exits 0' or diag $out2;
    like $out2, qr/planner: the LLM at \Q$llm\E/, 'LLM: make run says which planner';
    like $out2, qr/a goal, end to end \(POST \/launch_goal, LLM planner at /, 'LLM: so does the demo';
    like $out2, qr/state concluded \(room [0-9a-f]{32}\)/, 'LLM: the goal concluded';
    like $out2, qr/\nconclusion:\n  \S/, 'LLM: with a conclusion';
    my $wlog = join '', map { local (@ARGV, $/) = $_; <> } glob "$dir2/logs/worker-*.log";
    like $wlog, qr/LLM planner: \S+ at \Q$llm\E/, 'LLM: the workers planned with it';
    like $wlog, qr/llm: \w+ from /, 'LLM: and called it';
    ok !(glob "$dir2/*.pid"), 'LLM: everything stopped';
}

# make run on a port something already listens on: a clear error naming
# the port, exit 1, and nothing it had started is left running (the
# Redis before it, here), and on a taken Redis port no PONG from that
# other server is taken for ours
{
    my $taken = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
        LocalPort => free_port(), Proto => 'tcp', ReuseAddr => 1) or die $!;
    my $tp = $taken->sockport;
    for my $case (['IOA_PORT', 'nginx'], ['IOA_REDIS_PORT', 'Redis']) {
        my ($var, $what) = @$case;
        my $d = File::Temp::tempdir('ioa-run-XXXXXX', TMPDIR => 1, CLEANUP => 1);
        my %env = (IOA_PORT => free_port(), IOA_REDIS_PORT => free_port(), $var => $tp);
        my $o = `IOA_RUN_ONCE=1 IOA_RUN_DIR=$d IOA_PORT=$env{IOA_PORT} IOA_REDIS_PORT=$env{IOA_REDIS_PORT} make -s run 2>&1`;
        isnt $? >> 8, 0, "$what on a taken port: make run fails";
        like $o, qr/\Q$what\E did not start \(is 127\.0\.0\.1:$tp taken\? $var picks another port\)/,
            "$what on a taken port: says which port and what to set" or diag $o;
        like $o, qr/make run failed \(exit 1\); stopped what it had started; logs in \Q$d\E\/logs\//,
            "$what on a taken port: and that it stopped what it started";
        ok !(glob "$d/*.pid"), "$what on a taken port: nothing left running";
    }
}

done_testing();
