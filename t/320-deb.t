# t/320-deb.t -- the Debian packages, installed as an operator would:
# `make deb` builds libnginx-mod-http-ioa and ioa (lintian clean), apt
# installs both into this machine's Debian nginx, the module is enabled the
# Debian way (modules-enabled) and Debian's own nginx.conf passes nginx -t;
# the units pass systemd-analyze verify; then Debian's nginx serves the
# packaged conf.d example on a loopback port, and a goal worker and two
# agents run exactly as their units would start them (no systemd here: the
# installed unit's ExecStart, with its EnvironmentFile= settings and
# specifiers, run as its User=), and a goal launched with the packaged
# ioactl concludes.  Last, apt purges both packages and nothing of them is
# left.
#
# It changes the system (packages, a system user), so it runs only as root,
# only when neither package is installed already, and only for Debian's
# nginx: with TEST_NGINX_BINARY naming another binary (make test-asan) it
# skips.  Whatever happens, the END block stops what it started, purges the
# packages and removes the ioa user if the test made it.
# TEST_IOA_DEB_DIR=DIR uses the .debs in DIR instead of running make deb.

use strict;
use warnings;
use Test::More;
use File::Temp ();
use IO::Socket::INET ();
use lib 't/lib';
use IoaTest::Port ();
use POSIX ();
use Time::HiRes qw(sleep time);

my @PKGS = qw(libnginx-mod-http-ioa ioa);
my $NGINX = '/usr/sbin/nginx';

sub installed {
    my $st = `dpkg-query -W -f='\${Status}' $_[0] 2>/dev/null`;
    return $st =~ /install ok installed/;
}

sub present {               # installed, or removed with its conffiles left
    my $st = `dpkg-query -W -f='\${Status}' $_[0] 2>/dev/null`;
    return $st ne '' && $st !~ /not-installed/;
}

plan skip_all => 'installs Debian packages: needs root' if $> != 0;
plan skip_all => "tests Debian's nginx package, not TEST_NGINX_BINARY=$ENV{TEST_NGINX_BINARY}"
    if ($ENV{TEST_NGINX_BINARY} // '') ne '' && $ENV{TEST_NGINX_BINARY} ne $NGINX;
plan skip_all => 'apt-get, dpkg-query or Debian\'s nginx missing'
    unless -x '/usr/bin/apt-get' && -x '/usr/bin/dpkg-query' && -x $NGINX;
plan skip_all => 'ioa packages are installed on this machine already: not replacing them'
    if grep { present($_) } @PKGS;

my $dir = File::Temp::tempdir('ioa-deb-XXXXXX', TMPDIR => 1, CLEANUP => 1);
chmod 0755, $dir;
my $had_user = getpwnam('ioa') ? 1 : 0;
my (@pids, %pidfile, $installed);

sub purge {
    my @left = grep { present($_) } @PKGS;
    return '' unless @left;
    return scalar `DEBIAN_FRONTEND=noninteractive apt-get purge -y -q @left 2>&1`;
}

END {
    kill 'TERM', $_ for @pids;
    for my $what (keys %pidfile) {
        my ($pid) = slurp($pidfile{$what}) =~ /^(\d+)/;
        kill $what eq 'nginx' ? 'QUIT' : 'TERM', $pid if $pid;
    }
    waitpid $_, 0 for @pids;
    if ($installed) {
        purge();
        remove_user() if !$had_user;
    }
}

# userdel, not deluser: deluser warns about crontabs without cron
sub remove_user {
    system 'userdel', 'ioa' if getpwnam('ioa');
    system 'groupdel', 'ioa' if getgrnam('ioa');
}

sub free_port { IoaTest::Port::free_port() }

sub slurp { local (@ARGV, $/) = @_; return -e $_[0] ? <> : '' }

sub spew {
    my ($path, $text, $mode) = @_;
    open my $fh, '>', $path or die "$path: $!";
    print $fh $text;
    close $fh;
    chmod $mode, $path if defined $mode;
}

sub wait_for {
    my ($what, $cond, $secs) = @_;
    my $until = time + ($secs // 10);
    while (time < $until) {
        return 1 if $cond->();
        sleep 0.1;
    }
    return 0;
}

# 1. the packages: built by make deb (lintian fails it on any warning)
my $debs = $ENV{TEST_IOA_DEB_DIR};
unless ($debs) {
    my $t0 = time;
    my $out = `make -s deb 2>&1`;
    is $? >> 8, 0, 'make deb builds the packages and lintian passes them' or diag $out;
    note sprintf 'make deb: %.0f s', time - $t0;
    $debs = 'build/deb';
}
my %deb = map { my ($f) = glob "$debs/${_}_*_*.deb"; ($_ => $f) } @PKGS;
ok $deb{$_} && -f $deb{$_}, "$_: a .deb in $debs" for @PKGS;
BAIL_OUT("no packages to install") if grep { !$deb{$_} } @PKGS;

my %field = map { $_ => scalar `dpkg-deb -f $deb{$_} Depends` } @PKGS;
my ($abi) = `dpkg-query -W -f='\${Provides}' nginx` =~ /(nginx-abi-[\w.~+-]+)/;
ok $abi, "Debian's nginx provides an ABI ($abi)";
like $field{'libnginx-mod-http-ioa'}, qr/(?:^|, )\Q$abi\E(?:,|$)/m,
    'the module depends on exactly that nginx ABI, as Debian\'s modules do';
like $field{ioa}, qr/\badduser\b/, 'ioa depends on adduser (its system user)';

# what of the packages' paths this machine has already (/usr/bin, /lib,
# /etc/default, ...): after the purge, exactly these may be left
my %before = map { $_ => 1 } grep { -e $_ || -l $_ } map {
    map { m{^\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+\.(/\S*?)/?(?:\s|$)} ? $1 : () }
        split /\n/, `dpkg-deb -c $_`
} values %deb;
ok $before{'/usr/bin'} && !$before{'/usr/bin/ioa-worker'},
    'the paths the packages bring, and which exist before they come';

# 2. install into this machine's nginx
$installed = 1;
my $out = `DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ./$deb{'libnginx-mod-http-ioa'} ./$deb{ioa} 2>&1`;
is $? >> 8, 0, 'apt-get installs both packages' or diag $out;
ok installed($_), "$_ is installed" for @PKGS;

my %files = map { $_ => [ grep { $_ ne '/.' } split /\n/, `dpkg -L $_` ] } @PKGS;
my @ours = map { @$_ } values %files;
my $conf = '/usr/share/nginx/modules-available/mod-http-ioa.conf';
ok((grep { $_ eq '/usr/lib/nginx/modules/ngx_http_ioa_module.so' } @ours),
   'the module is in nginx\'s module directory');
is slurp($conf), "load_module modules/ngx_http_ioa_module.so;\n",
    "$conf loads it";
my $link = '/etc/nginx/modules-enabled/50-mod-http-ioa.conf';
is readlink($link), $conf, 'enabled the Debian way: a link in modules-enabled';

$out = `$NGINX -T 2>&1`;
is $? >> 8, 0, 'Debian\'s own nginx.conf passes nginx -t with the module enabled'
    or diag $out;
like $out, qr/^load_module modules\/ngx_http_ioa_module\.so;$/m,
    'and loads it through the modules-enabled include';

my @pw = getpwnam('ioa');
ok @pw, 'the ioa user exists';
ok @pw && $pw[2] < 1000, 'a system user';
like $pw[8] // '', qr{/(?:nologin|false)$}, 'without a login shell';
ok getgrnam('ioa'), 'and its group';

for my $unit ('ioa-worker@.service', 'ioa-agent@.service') {
    # Documentation=man:... is checked with man(1), when there is one
    my $man = -x '/usr/bin/man' ? 'yes' : 'no';
    my $v = `systemd-analyze verify --man=$man /lib/systemd/system/$unit 2>&1`;
    is $? >> 8, 0, "systemd-analyze verify $unit" or diag $v;
    is $v, '', "$unit: no complaint" or diag $v;
    # systemd's own measure of the sandbox (0 = locked down, 10 = none);
    # the units score 1.2 (worker) and 1.8 (agent, no ProcSubset= as its
    # program may need /proc); --threshold counts in tenths
    $v = `systemd-analyze security --offline=yes --threshold=20 /lib/systemd/system/$unit 2>&1`;
    is $? >> 8, 0, "$unit: exposure under 2 by systemd-analyze security"
        or diag $v =~ /(Overall exposure.*)/;
}
ok -f '/etc/default/ioa', 'the default file is /etc/default/ioa';
ok -d '/etc/ioa', '/etc/ioa for the instances\' settings';

# 3. Redis, and Debian's nginx with the packaged conf.d example
my ($port, $rport) = (free_port(), free_port());
my $hub = "http://127.0.0.1:$port";
mkdir "$dir/redis";
system('redis-server', '--port', $rport, '--bind', '127.0.0.1', '--daemonize', 'yes',
       '--dir', "$dir/redis", '--pidfile', "$dir/redis.pid",
       '--logfile', "$dir/redis.log", '--save', '', '--appendonly', 'no') == 0
    or BAIL_OUT('redis-server did not start');
$pidfile{redis} = "$dir/redis.pid";
wait_for(redis => sub { `redis-cli -p $rport ping 2>/dev/null` =~ /PONG/ });

is system('/usr/bin/ioa-token', 'new-key', "$dir/jwt.key"), 0, 'ioa-token makes a key';
sub token {
    my ($sub, $scope) = @_;
    my $t = `/usr/bin/ioa-token sign --key $dir/jwt.key --sub '$sub' --scope '$scope'`;
    chomp $t;
    return $t;
}

my $ioa_conf = slurp('/usr/share/ioa/conf.d/ioa.conf');
ok $ioa_conf =~ s/^ioa_redis .*/ioa_redis 127.0.0.1:$rport;/m
   && $ioa_conf =~ s/^    listen 7788;/    listen 127.0.0.1:$port;/m
   && $ioa_conf =~ s/^ioa_auth_jwt_key .*/ioa_auth_jwt_key $dir\/jwt.key;/m,
   'the packaged conf.d example, pointed at this test\'s ports and key';
spew("$dir/ioa.conf", $ioa_conf);
spew("$dir/nginx.conf", <<CONF);
include /etc/nginx/modules-enabled/*.conf;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log info;
events { worker_connections 1024; }
http {
    access_log $dir/access.log;
    client_body_temp_path $dir/body;
    include $dir/ioa.conf;
}
CONF
# no -p: "load_module modules/..." resolves against Debian's prefix
# (/usr/share/nginx/modules is a link to /usr/lib/nginx/modules)
$out = `$NGINX -c $dir/nginx.conf 2>&1`;
is $? >> 8, 0, 'Debian\'s nginx starts with it' or diag $out;
$pidfile{nginx} = "$dir/nginx.pid";
ok wait_for(hub => sub { `curl -s -o /dev/null -w '%{http_code}' $hub/health_check` eq '200' }),
    'the hub answers /health_check';
like `curl -s $hub/console/`, qr/<html/i, 'and serves the packaged console';

# 4. a worker and two agents, started the way their units would
sub unit_command {
    my ($unit, $instance) = @_;
    my (@envfiles, %u);
    for (split /\n/, slurp("/lib/systemd/system/$unit")) {
        next unless /^(\w+)=(.*)$/;
        if ($1 eq 'EnvironmentFile') { push @envfiles, $2 } else { $u{$1} = $2 }
    }
    my $host = `hostname`;
    chomp $host;
    my %spec = (i => $instance, I => $instance, H => $host, '%' => '%');
    my $expand = sub { (my $s = shift) =~ s/%([iIH%])/$spec{$1}/g; $s };
    my %env;
    for my $f (map { $expand->($_) } @envfiles) {
        my $optional = $f =~ s/^-//;
        unless (-e $f) {
            die "$unit: $f missing\n" unless $optional;
            next;
        }
        for (split /\n/, slurp($f)) {
            next if /^\s*(?:#|$)/;
            my ($k, $v) = /^\s*(\w+)=(.*)$/ or die "$f: $_\n";
            $v =~ s/^"(.*)"$/$1/;
            $env{$k} = $v;
        }
    }
    # systemd's rules: "$X" alone is split at whitespace into words,
    # "${X}" is one word; both are empty when X is unset
    my @argv;
    for my $w (split ' ', $expand->($u{ExecStart})) {
        if ($w =~ /^\$(\w+)$/) {
            push @argv, split ' ', $env{$1} // '';
        } else {
            $w =~ s/\$\{(\w+)\}/$env{$1} \/\/ ''/ge;
            push @argv, $w;
        }
    }
    return (\@argv, \%env, \%u);
}

sub start_unit {
    my ($unit, $instance) = @_;
    my ($argv, $env, $u) = unit_command($unit, $instance);
    my @priv = ('setpriv', "--reuid=$u->{User}", "--regid=$u->{Group}",
                '--init-groups', ($u->{NoNewPrivileges} eq 'yes' ? '--no-new-privs' : ()));
    my $log = "$dir/$unit-$instance.log";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        chdir '/';
        %ENV = (PATH => '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
                LANG => 'C.UTF-8', %$env);
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $log;
        open STDERR, '>&', \*STDOUT;
        exec @priv, '--', @$argv or POSIX::_exit(127);
    }
    push @pids, $pid;
    return ($pid, $argv);
}

my $inst = "t320-$$";
spew("/etc/ioa/worker-$inst.env", "IOA_REDIS=127.0.0.1:$rport\n", 0600);
my ($wpid, $wargv) = start_unit('ioa-worker@.service', $inst);
is_deeply [ @$wargv[0 .. 8] ],
    [ '/usr/bin/ioa-worker', '--redis', "127.0.0.1:$rport", '--prefix', 'ioa:',
      '--scripts', '/usr/share/ioa/redis-scripts', '--consumer', $wargv->[8] ],
    'the worker\'s command: /etc/ioa/worker-NAME.env over /etc/default/ioa';
like $wargv->[8], qr/-\Q$inst\E$/, 'its consumer name is host-instance';

my %agents = (
    Counter => ['counts the words in a text', '/usr/bin/wc -w'],
    Shouter => ['shouts a text in upper case', '/usr/bin/tr a-z A-Z'],
);
for my $name (sort keys %agents) {
    my ($desc, $prog) = @{ $agents{$name} };
    spew("/etc/ioa/agent-$name.env", "IOA_HUB=$hub\nIOA_AGENT_DESC=$desc\n"
         . "IOA_AGENT_OPTS=--timeout 20\nIOA_AGENT_ADAPTER=--exec $prog\n"
         . 'IOA_TOKEN=' . token($name, 'agent') . "\n", 0600);
    my (undef, $argv) = start_unit('ioa-agent@.service', $name);
    is "@$argv[0..5]", "/usr/bin/ioa-agent --hub $hub --name $name --desc",
        "agent $name: the instance is its name";
    is $argv->[6], $desc, "agent $name: the description is one argument";
}

$ENV{IOA_URL} = $hub;
$ENV{IOA_TOKEN} = token('ops', 'launch observer admin');
ok wait_for(agents => sub {
        my $list = `/usr/bin/ioactl agents --online 2>&1`;
        $list =~ /\bCounter\b/ && $list =~ /\bShouter\b/;
    }, 20), 'both agents are online' or diag slurp("$dir/ioa-agent\@.service-Counter.log");

# 5. a goal, end to end, with the packaged ioactl
my $t0 = time;
$out = `timeout 60 /usr/bin/ioactl goal launch 'Count the words in "agents that cooperate solve harder problems".' --wait 2>&1`;
is $? >> 8, 0, 'ioactl goal launch --wait: the goal concluded' or diag $out,
    slurp("$dir/ioa-worker\@.service-$inst.log");
like $out, qr/== goal concluded/, 'its feed says so';
like $out, qr/ Counter INFORM_TASK_RESULT: .*\(completed\)/,
    'Counter ran its task (the unit\'s --exec /usr/bin/wc -w)';
like $out, qr/^1 of 1 part done\.\n.*\n\s+Counter: \d+$/m,
    'and the conclusion carries wc\'s count';
note sprintf 'goal: %.1f s', time - $t0;
like slurp("$dir/ioa-worker\@.service-$inst.log"), qr/started as/,
    'the worker ran as the unit starts it' or diag slurp("$dir/ioa-worker\@.service-$inst.log");
my ($uid) = slurp("/proc/$wpid/status") =~ /^Uid:\s+(\d+)/m;
is $uid, scalar getpwnam('ioa'), 'as the ioa user';
ok kill(0, $wpid), 'and is still running';

# 6. stop everything, then purge
kill 'TERM', @pids;
waitpid $_, 0 for @pids;
@pids = ();
for my $what (qw(nginx redis)) {
    my ($pid) = slurp($pidfile{$what}) =~ /^(\d+)/;
    $pid or next;
    kill($what eq 'nginx' ? 'QUIT' : 'TERM', $pid);
    ok wait_for($what => sub { !kill 0, $pid }), "$what stopped";
}
unlike slurp("$dir/error.log"), qr/\[(?:alert|crit|emerg)\]/, 'a clean error.log';

$out = purge();
is $?, 0, 'apt-get purge removes both packages' or diag $out;
ok !present($_), "$_ is gone from dpkg's database" for @PKGS;
my @left = grep { !$before{$_} && (-e $_ || -l $_) } @ours;
is "@left", '', 'nothing the packages installed is left (dpkg -L before the purge)';
ok !-e '/etc/ioa', '/etc/ioa is gone with the instances\' settings';
ok !(glob '/etc/nginx/modules-enabled/*ioa*'), 'no modules-enabled link, nor its .removed';
$out = `$NGINX -t 2>&1`;
is $? >> 8, 0, 'Debian\'s nginx.conf still passes nginx -t' or diag $out;
ok getpwnam('ioa'), 'the ioa user stays, as Debian\'s packages keep system users';
if (!$had_user) {
    remove_user();
    ok !getpwnam('ioa') && !getgrnam('ioa'), 'the user this test made is removed again';
}
$installed = 0;

done_testing();
