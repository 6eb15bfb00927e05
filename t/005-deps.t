# t/005-deps.t -- what each make target installs (scripts/deps.list), and
# the preflight that names what is still missing (scripts/deps.sh check).
#
# - With a PATH that lacks one program a set needs, the preflight fails
#   and names that program and the Debian package it comes from: a shell
#   of our own whose PATH holds links to every program of the real PATH
#   but the one taken away (iptables for the docker set, which podman's
#   network stack runs and --no-install-recommends does not bring;
#   redis-server for the run set).
# - make run installs the run set and nothing else, before it builds, and
#   the run set holds no browser, driver, debugger, DNS server, container
#   engine or fuzzing compiler: `make -n run`'s commands, and the set's
#   package list.
# - Every target that builds or tests starts with its own set's install
#   (and so its preflight), before its first compiler or prove.
# - README's "What each target installs" lists exactly each set's packages.

use strict;
use warnings;
use Test::More;
use File::Temp ();
use FindBin ();

my $Repo = "$FindBin::Bin/..";
my $Deps = "$Repo/scripts/deps.sh";

sub packages {
    my @p = split /\n/, `bash $Deps packages @_`;
    is $? >> 8, 0, "deps.sh packages @_";
    return @p;
}

# A directory of links to every program on PATH but @without.
sub path_without {
    my %skip = map { $_ => 1 } @_;
    my $dir = File::Temp::tempdir('ioa-deps-XXXXXX', TMPDIR => 1,
                                  CLEANUP => 1);
    for my $d (split /:/, "$ENV{PATH}:/usr/sbin:/sbin") {
        opendir my $dh, $d or next;
        for my $f (readdir $dh) {
            next if $skip{$f} || -e "$dir/$f" || !-x "$d/$f" || -d "$d/$f";
            symlink "$d/$f", "$dir/$f";
        }
    }
    return $dir;
}

# ------------------------------------------------ the preflight names it

for my $case (['docker', 'iptables', 'iptables'],
              ['run', 'redis-server', 'redis-server'],
              ['test', 'chromedriver', 'chromium-driver']) {
    my ($set, $prog, $pkg) = @$case;
    my $path = path_without($prog);
    # the preflight alone: check does not install
    my $out = `PATH=$path /bin/bash $Deps check $set 2>&1`;
    my $rc = $? >> 8;
    # the full PATH passes first, or the message below could be about
    # something else (make test installs the test set before it runs us)
    my $full = `bash $Deps check $set 2>&1`;
    is $? >> 8, 0, "$set: the preflight passes with the whole PATH"
        or diag $full;
    isnt $rc, 0, "$set without $prog: the preflight fails";
    like $out, qr/^missing: \Q$prog\E \(program\), from Debian package \Q$pkg\E$/m,
        "$set without $prog: it names $prog and $pkg" or diag $out;
    unlike $out, qr/^missing: (?!\Q$prog\E )/m,
        "$set without $prog: nothing else is named";
}

{
    my $out = `bash $Deps check no-such-set 2>&1`;
    is $? >> 8, 2, 'an unknown set: exit 2';
    like $out, qr/no set 'no-such-set'/, 'an unknown set: said so';
}

# ------------------------------------------------ make run installs little

my @run = packages('run');
ok scalar(grep { $_ eq 'redis-server' } @run), 'run set: redis-server';
ok scalar(grep { $_ eq 'nginx' } @run), 'run set: nginx';
my @test_only = grep {
    /^(chromium|chromium-driver|firefox-esr|python3-selenium|gdb|valgrind
       |dnsmasq-base|podman|iptables|debootstrap|clang|lintian|cmake|npm
       |libfirefox-marionette-perl|libtest-base-perl)$/x } @run;
is "@test_only", '', 'run set: no browser, driver, debugger, DNS server, '
    . 'container engine, packager or fuzzing compiler';

my @test = packages('test');
for my $p (qw(chromium chromium-driver firefox-esr gdb dnsmasq-base podman
              iptables cmake lintian libtest-base-perl)) {
    ok scalar(grep { $_ eq $p } @test), "test set: $p";
}
my %test = map { $_ => 1 } @test;
is join(' ', grep { !$test{$_} } @run), '', 'the test set holds the run set';

# `make -n TARGET`: its first command installs its set, and that comes
# before any compiler, configure or prove
for my $case (['run', 'run'], ['test', 'asan fuzz'], ['test-asan', 'asan'],
              ['test-cluster', 'test'], ['bench', 'bench'], ['deb', 'deb'],
              ['docker', 'docker'], ['fuzz-build', 'fuzz'], ['all', 'build']) {
    my ($target, $set) = @$case;
    my @cmds = grep { /\S/ } split /\n/,
        `make -n -C $Repo --no-print-directory $target 2>&1`;
    like $cmds[0] // '', qr{scripts/deps\.sh install \Q$set\E$},
        "make $target: first installs the $set set" or diag "@cmds[0..3]";
}

# ------------------------------------------------ the README's table

open my $fh, '<', "$Repo/README.md" or die "README.md: $!";
my $readme = do { local $/; <$fh> };
my ($table) = $readme =~ /^### What each target installs\n(.*?)^#/ms;
ok $table, 'README has "What each target installs"';
for my $set (qw(build run test asan bench deb docker fuzz llama)) {
    my ($row) = ($table // '') =~ /^\| `\Q$set\E` \|[^|]*\|([^|]*)\|/m;
    ok defined $row, "README: a row for the $set set" or next;
    my %row = map { $_ => 1 } $row =~ /([a-z0-9][a-z0-9.+-]+)/g;
    # a row names the packages the set adds to the sets it includes
    my @own = own_packages($set);
    is join(' ', sort grep { !$row{$_} } @own), '',
        "README $set row: names each of its packages";
    my %own = map { $_ => 1 } @own;
    is join(' ', sort grep { !$own{$_} } keys %row), '',
        "README $set row: names nothing else";
}

# the packages a set's own lines name (not those of the sets it includes)
sub own_packages {
    my ($set) = @_;
    open my $l, '<', "$Repo/scripts/deps.list" or die $!;
    my @p;
    while (<$l>) {
        s/#.*//;
        my ($s, $pkg) = split;
        push @p, $pkg if defined $pkg && $s eq $set && $pkg !~ /^@/;
    }
    return @p;
}

done_testing;
