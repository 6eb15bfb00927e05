# t/080-make-run.t -- `make run`, the first command of the README, end to
# end: it starts Redis and nginx with the module from conf.d/ioa.conf, runs
# the demo against them (agents register, discover each other, team up and
# talk, an observer follows), and IOA_RUN_ONCE=1 stops everything after it.
# Ports and the run directory are private to this test, so a developer's own
# `make run` is left alone.  (A plain Test::More file: it starts no nginx of
# its own through the runner.)

use strict;
use warnings;
use Test::More;
use File::Temp ();
use IO::Socket::INET ();

sub free_port {
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                  LocalPort => 0, Proto => 'tcp') or die $!;
    return $s->sockport;
}

my $dir = File::Temp::tempdir('ioa-run-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my ($port, $rport) = (free_port(), free_port());

my $out = `IOA_RUN_ONCE=1 IOA_RUN_DIR=$dir IOA_PORT=$port IOA_REDIS_PORT=$rport make -s run 2>&1`;
my $rc = $? >> 8;

is $rc, 0, 'make run exits 0 with IOA_RUN_ONCE=1' or diag $out;
like $out, qr/ioa is up: http:\/\/127\.0\.0\.1:$port/, 'the hub came up on IOA_PORT';
like $out, qr/registered as Human Assistant/, 'agents registered';
like $out, qr/found Coder \(score [\d.]+, online True\)/, 'discovery found an online agent';
like $out, qr/room [0-9a-f]{32} with /, 'a team formed';
like $out, qr/observer \| team 'demo-team' formed/, 'the observer saw the team-up';
like $out, qr/Conclusion: BM25 explained/, 'the agents talked';
like $out, qr/4 envelopes stored/, 'the transcript holds every envelope';
like $out, qr/demo done/, 'the demo finished';
like $out, qr/stopped/, 'and everything was stopped';

ok !-e "$dir/nginx.pid", 'no nginx pid file left';
ok !-e "$dir/redis.pid", 'no redis pid file left';
my $log = do { local (@ARGV, $/) = "$dir/logs/error.log"; <> } // '';
unlike $log, qr/\[(?:alert|crit|emerg)\]/, 'a clean error.log';

done_testing();
