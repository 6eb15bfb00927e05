# t/160-redis-auth.t -- the hub and the goal workers against a Redis that
# requires AUTH, as the least-privilege ACL user README "Redis hardening"
# documents: ioa_redis_user + ioa_redis_password_file on the module,
# --redis-user + --redis-password-file on ioa-worker; the default user is
# off, so a command sent before AUTH (or without it) fails.  A wrong password
# is reported by name, never echoed, and the hub answers 503 meanwhile.
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/160-redis-auth.t
#
# The Redis with the ACL is this file's own (the shared test Redis stays
# open); it is stopped by PID at the end.

use strict;
use warnings;

use Cwd ();
use File::Basename ();
use File::Temp ();

our ($Repo, $WorkerBin, $AclRedisPid, $AclDir);

BEGIN {
    $Repo = Cwd::abs_path(File::Basename::dirname(__FILE__) . '/..');
    $WorkerBin = $ENV{IOA_WORKER_BIN} || "$Repo/workers/build/ioa-worker";
}

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Api;
use IoaTest::WS;
use IO::Socket::INET ();
use JSON::PP ();
use POSIX ();
use Time::HiRes qw(sleep time);

no_root_location();
no_shuffle();
log_level('info');

# The ACL of README "Redis hardening", word for word: keys and channels under
# the prefix, every command but the dangerous ones, plus the two the hub and
# the workers use from that category.
our $ACL = 'on >s3cret-acl-pass ~ioa:* &ioa:* +@all -@dangerous +cluster|slots +client|setname';

$AclDir = File::Temp::tempdir('ioa-acl-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my $port = IoaTest::_free_port();
open my $cf, '>', "$AclDir/redis.conf" or die $!;
print {$cf} "port $port\nbind 127.0.0.1\nsave \"\"\nappendonly no\n"
    . "dir $AclDir\nlogfile $AclDir/redis.log\n"
    . "user default off\nuser ioa $ACL\n";
close $cf;
for my $f (['pass', "s3cret-acl-pass\n"], ['wrong', "not-the-password\n"]) {
    open my $fh, '>', "$AclDir/$f->[0]" or die $!;
    print {$fh} $f->[1];
    close $fh;
}
$AclRedisPid = fork // die "fork: $!";
if ($AclRedisPid == 0) {
    open STDOUT, '>', '/dev/null';
    exec 'redis-server', "$AclDir/redis.conf" or POSIX::_exit(127);
}
for (1 .. 100) {
    last if IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port");
    sleep 0.05;
}
$ENV{TEST_NGINX_ACL_REDIS_PORT} = $port;
$ENV{TEST_NGINX_ACL_DIR} = $AclDir;

END {
    if ($AclRedisPid) {
        kill 'TERM', $AclRedisPid;
        waitpid $AclRedisPid, 0;
    }
}

# A RESP command on the ACL Redis, authenticated or not; the reply's first line.
sub acl_cmd {
    my ($auth, @cmd) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$ENV{TEST_NGINX_ACL_REDIS_PORT}")
        or die "acl redis: $!";
    my $req = '';
    for my $c ($auth ? (['AUTH', 'ioa', 's3cret-acl-pass']) : (), \@cmd) {
        $req .= '*' . @$c . "\r\n" . join '', map { '$' . length($_) . "\r\n$_\r\n" } @$c;
    }
    print {$s} $req;
    my @lines;
    for (1 .. ($auth ? 2 : 1)) {
        my $l = <$s> // '';
        $l =~ s/\r\n$//;
        if ($l =~ /^\*(\d+)/) {
            my @items;
            for (1 .. $1) { <$s>; my $v = <$s>; $v =~ s/\r\n$//; push @items, $v }
            $l = \@items;
        } elsif ($l =~ /^\$(\d+)/) {
            $l = <$s>;
            $l =~ s/\r\n$//;
        }
        push @lines, $l;
    }
    return $lines[-1];
}

sub health {
    my ($ctx) = @_;
    my ($code) = api($ctx, GET => '/health_check');
    return $code;
}

run_tests();

__DATA__

=== TEST 1: the default user is off: without AUTH this Redis refuses everything
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_ACL_REDIS_PORT;
    ioa_redis_user ioa;
    ioa_redis_password_file $TEST_NGINX_ACL_DIR/pass;
--- config
    location / { ioa_api; }
--- ioa_scenario
    like acl_cmd(0, 'PING'), qr/^-NOAUTH/, 'PING without AUTH: NOAUTH';
    is acl_cmd(1, 'PING'), '+PONG', 'PING as ioa: PONG';
    like acl_cmd(1, 'FLUSHALL'), qr/^-NOPERM/, 'the ioa user cannot FLUSHALL';
    like acl_cmd(1, 'SET', 'other:key', 'x'), qr/^-NOPERM/, '... nor touch keys outside the prefix';



=== TEST 2: the hub authenticates every Redis connection; register, teamup, post work
the hub authenticates every connection and works: register, teamup, WebSocket
post and delivery.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_ACL_REDIS_PORT;
    ioa_redis_user ioa;
    ioa_redis_password_file $TEST_NGINX_ACL_DIR/pass;
--- config
    location / { ioa_api; }
--- no_error_log
[error]
NOAUTH
NOPERM
--- ioa_scenario
    ok wait_until(sub { health($ctx) == 200 }, 5), 'health_check: 200 once authenticated';
    for my $n (qw(Alice Bob)) {
        my ($code, $d) = api($ctx, POST => '/register',
                             { name => $n, type => 'Human Assistant', desc => "agent $n" });
        is $code, 200, "register $n" or diag jenc($d);
    }
    my ($code, $d) = api($ctx, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'] });
    is $code, 200, 'teamup';
    my $cid = $d->{comm_id};
    my $alice = $ctx->ws('/ws/Alice');
    my $bob = $ctx->ws('/ws/Bob');
    ok $alice->ok && $bob->ok, 'both connected';
    # the pub/sub connection authenticated too: Bob receives Alice's envelope
    sleep 0.3;
    $alice->send_text(jenc({ comm_id => $cid, content => 'through an ACL' }));
    my $got;
    for (1 .. 3) {
        my $e = jdec($bob->recv_text(3) // last) // next;
        if (($e->{content} // '') eq 'through an ACL') { $got = $e; last }
    }
    ok $got, 'delivered over the authenticated pub/sub connection';
    is acl_cmd(1, 'XLEN', "ioa:{room:$cid}:log"), ':1', 'stored in the room log';
    my $clients = acl_cmd(1, 'CLIENT', 'LIST');
    unlike $clients, qr/user=default/, 'no connection as the default user';



=== TEST 3: a wrong password: 503, the refusal named in the log, the password never
--- no_ready_wait
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_ACL_REDIS_PORT;
    ioa_redis_user ioa;
    ioa_redis_password_file $TEST_NGINX_ACL_DIR/wrong;
--- config
    location / { ioa_api; }
--- request
GET /health_check
--- error_code: 503
--- ioa_scenario
    sleep 0.5;
    is health($ctx), 503, 'still 503';
    my ($code, $d) = api($ctx, POST => '/register',
                         { name => 'Alice', type => 'Human Assistant', desc => 'x' });
    is $code, 503, 'a request gets 503';
    is $d->{code}, 'redis_unavailable', '... redis_unavailable (retry later)';
    my $log = IoaTest::nginx_error_log();
    like $log, qr/refused AUTH as "ioa": WRONGPASS/, 'the log names the user and the refusal';
    unlike $log, qr/not-the-password/, '... and never the password';



=== TEST 4: ioa-worker authenticates with --redis-user and a password file, runs a goal
ioa-worker authenticates with --redis-user / --redis-password-file and runs a
goal.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_ACL_REDIS_PORT;
    ioa_redis_user ioa;
    ioa_redis_password_file $TEST_NGINX_ACL_DIR/pass;
--- config
    location / { ioa_api; }
--- ioa_scenario
    ok wait_until(sub { health($ctx) == 200 }, 5), 'hub up';
    my $log = $ctx->servroot . '/logs/worker.log';
    my @base = ('--redis', "127.0.0.1:$ENV{TEST_NGINX_ACL_REDIS_PORT}",
                '--scripts', "$main::Repo/redis-scripts", '--consumer', 'acl-worker');
    my $start = sub {
        my @extra = @_;
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            delete @ENV{grep { /^(?:IOA_LLM_|OPENAI_|IOA_REDIS_)/ } keys %ENV};
            open STDIN, '<', '/dev/null';
            open STDOUT, '>>', $log;
            open STDERR, '>>', $log;
            exec $main::WorkerBin, @base, @extra or POSIX::_exit(127);
        }
        return $pid;
    };

    # wrong password: refused, by name, and the worker does not get in
    my $pid = $start->('--redis-user', 'ioa', '--redis-password-file', "$main::AclDir/wrong");
    ok wait_until(sub { -e $log && IoaTest::_slurp($log) =~ /refused AUTH as "ioa"/ }, 5),
        'the worker names the refused user';
    kill 'TERM', $pid; waitpid $pid, 0;
    unlike IoaTest::_slurp($log), qr/not-the-password/, '... never the password';

    $pid = $start->('--redis-user', 'ioa', '--redis-password-file', "$main::AclDir/pass");
    my ($code, $d) = api($ctx, POST => '/launch_goal', { goal => 'say hello' });
    is $code, 202, 'goal queued';
    my $gid = $d->{goal_id};
    my $state = '';
    wait_until(sub {
        my ($c, $g) = api($ctx, GET => "/goals/$gid");
        $state = $g->{state} // '';
        $state =~ /^(?:concluded|failed)$/;
    }, 15);
    like $state, qr/^(?:concluded|failed)$/, "the worker took the goal to an end ($state)";
    kill 'TERM', $pid; waitpid $pid, 0;
    unlike IoaTest::_slurp($log), qr/NOPERM|NOAUTH/, 'no command refused by the ACL';
