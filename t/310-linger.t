# t/310-linger.t -- ioa_linger, the bounded wait of a busy worker at the end
# of a turn (ngx_ioa_module/transports/ngx_ioa_linger.c).
#
# What must hold, on real processes (a Redis and nginx of our own, loaded by
# bench/ioa-bench, the generator of BENCHMARKS.md):
#
#   - the directive: "off", microseconds and milliseconds are taken; zero,
#     more than 5ms, a number without a unit and a word are refused at
#     start-up with a message that names the directive and the range;
#   - an idle hub, and an agent posting now and then, never linger
#     (ioa_lingers_total stays 0): the linger costs nothing below "busy"
#     (one envelope per linger or more in a millisecond; a burst of a few
#     agents posting in the same millisecond is busy, and may linger once);
#   - a busy worker lingers (ioa_lingers_total grows), and every envelope
#     still arrives exactly once and in order at every member, at a steady
#     rate (evenly spaced and Poisson) and saturated: the linger holds the
#     worker, never an envelope;
#   - with "ioa_linger off" the same load lingers never.
#
# No timing is asserted: what the linger buys and costs in latency and CPU
# is measured by make bench (BENCHMARKS.md, "Open loop against nchan").
#
#   make -C bench && TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/310-linger.t

use strict;
use warnings;

use Cwd ();
use File::Basename ();
use IO::Socket::INET ();
use JSON::PP ();
use Test::More;
use Time::HiRes qw(sleep);

use lib 't/lib';
use IoaTest::Instance;
use IoaTest::Proc qw(redis_child slurp $Scratch);

my $Repo = Cwd::abs_path(File::Basename::dirname(__FILE__) . '/..');
my $Bench = $ENV{IOA_BENCH_BIN} || "$Repo/bench/build/ioa-bench";
my $Dir = $Scratch;

if (!$ENV{IOA_BENCH_BIN} && system("make -s -C $Repo/bench >/dev/null") != 0
    || !-x $Bench)
{
    BAIL_OUT("make -C bench failed, or $Bench is not there");
}

$ENV{TEST_NGINX_LOAD_MODULES} //= "$Repo/build/ngx_http_ioa_module.so";

my $RedisPort = redis_child();

sub hub {
    my ($name, $linger) = @_;
    return IoaTest::Instance->start(
        dir         => "$Dir/$name",
        workers     => 1,
        log_level   => 'warn',
        http_config => "ioa_redis 127.0.0.1:$RedisPort; $linger "
                     . "ioa_limit_rate off; ioa_limit_room_rate off; "
                     . "ioa_limit_teamup_rate off; ioa_limit_conn 0;",
        config      => 'location / { ioa_api; } '
                     . 'location = /metrics { ioa_metrics; }',
    );
}

sub get {
    my ($hub, $path) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . $hub->port,
                                  Timeout => 5) or return '';
    print {$s} "GET $path HTTP/1.0\r\n\r\n";
    local $/;
    my $r = <$s> // '';
    return $r;
}

sub wait_ready {
    my $hub = shift;
    for (1 .. 200) {
        return 1 if get($hub, '/health_check') =~ m{^HTTP/1\.\d 200};
        sleep 0.05;
    }
    return 0;
}

sub lingers {
    my $hub = shift;
    my $m = get($hub, '/metrics');
    return $m =~ /^ioa_lingers_total (\d+)$/m ? $1 : undef;
}

sub bench {
    my ($hub, $name, @args) = @_;
    my $json = "$Dir/$name.json";
    my $out = `timeout 60 $Bench --target ioa --url http://127.0.0.1:@{[ $hub->port ]} --quiet --size 200 --json $json @args 2>&1`;
    my $rc = $? >> 8;
    my $doc = -s $json ? eval { JSON::PP::decode_json(slurp($json)) } : undef;
    is $rc, 0, "$name: the generator exits 0" or diag $out;
    ok $doc, "$name: its report parses" or return;
    ok $doc->{published} > 0, "$name: envelopes were posted";
    is $doc->{integrity}{$_}, 0, "$name: $_ 0"
        for qw(lost duplicated reordered);
    is $doc->{integrity}{received}, $doc->{integrity}{expected},
        "$name: every member got every envelope";
    is $doc->{errors}{total}, 0, "$name: no errors";
    return $doc;
}

# ------------------------------------------------------------ the directive

for my $bad ('0us', '6ms', '5001us', '200', 'fast', 'us') {
    my $err = '';
    my $h = eval { hub("bad", "ioa_linger $bad;") };
    $err = $@;
    $h->stop if $h;
    like $err, qr/"ioa_linger" takes "off" or a time from 1us to 5ms, such as 200us, not "\Q$bad\E"/,
        "ioa_linger $bad is refused, saying what it takes";
}

for my $good ('off', '1us', '250us', '5ms') {
    my $h = eval { hub("good", "ioa_linger $good;") };
    ok $h, "ioa_linger $good is taken" or diag $@;
    $h->stop if $h;
}

{
    my $h = eval { hub("dup", "ioa_linger 100us; ioa_linger 200us;") };
    like $@, qr/"ioa_linger" directive is duplicate/, 'a second ioa_linger is refused';
    $h->stop if $h;
}

# ------------------------------------------------------------ busy and idle

my $Hub = hub('linger', 'ioa_linger 300us;');
ok wait_ready($Hub), 'the hub with ioa_linger 300us answers';
is lingers($Hub), 0, 'an idle hub has not lingered';

# an agent talking now and then: a room of 2, 5 envelopes/s (--count: no
# ready message, which the first scheduled one would follow at once)
bench($Hub, 'quiet', qw(--rooms 1 --members 2 --rate 5 --count 8
                         --duration 2));
is lingers($Hub), 0, 'an agent posting now and then: no linger';

# busy: 20 rooms x 4 at 200 envelopes/s each (4,000 posts/s, 16,000
# deliveries/s), evenly spaced and Poisson, then saturated
bench($Hub, 'steady', qw(--rooms 20 --members 4 --rate 200 --duration 3
                          --warmup 1));
my $after_steady = lingers($Hub);
ok $after_steady > 0, "4,000 posts/s: the worker lingered ($after_steady turns)";

bench($Hub, 'poisson', qw(--rooms 20 --members 4 --rate 200 --duration 3
                           --warmup 1 --arrivals poisson --seed 7));
ok lingers($Hub) > $after_steady, 'Poisson arrivals: it lingered again';

bench($Hub, 'saturated', qw(--rooms 20 --members 4 --saturate --window 8
                             --duration 3 --warmup 1));

# the error log has nothing above a warning
unlike slurp($Hub->error_log_file), qr/\[(?:alert|crit|emerg)\]/,
    'the error log has no alert';
$Hub->stop;

# ------------------------------------------------------------ off

my $Off = hub('off', 'ioa_linger off;');
ok wait_ready($Off), 'the hub with ioa_linger off answers';
bench($Off, 'off', qw(--rooms 20 --members 4 --rate 200 --duration 2
                       --warmup 1));
is lingers($Off), 0, 'ioa_linger off: the same load never lingers';
$Off->stop;

done_testing();
