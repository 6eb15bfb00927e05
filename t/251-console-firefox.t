# t/251-console-firefox.t -- the web console in Firefox: Debian's
# firefox-esr, headless, driven through its own Marionette protocol by
# Debian's libfirefox-marionette-perl (no WebDriver in between), against a
# real nginx serving the console with conf.d/ioa.conf's locations and a
# real Redis.  t/250-console.t drives Chromium through every page; this
# file shows the same console works in the other engine: a room's
# transcript live and across a reload, data rendered as text, the agents
# page, and no horizontal scrolling in the narrowest window Firefox makes
# (500 px; phone width, 390 px, is t/250's, in Chromium).
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/251-console-firefox.t
#
# Screenshots go to build/console-screenshots/firefox/.

use strict;
use warnings;

BEGIN {
    my @missing = grep { !-x $_ } '/usr/bin/firefox-esr';
    push @missing, 'libfirefox-marionette-perl'
        unless eval { require Firefox::Marionette; 1 };
    if (@missing) {
        require Test::More;
        Test::More::plan(skip_all => "no Firefox: @missing (make deps installs them)");
    }
}

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(fresh_hub);
use IoaTest::Api;
use IoaTest::Console;

use Cwd ();
use File::Path qw(make_path);
use File::Temp ();
use FindBin;
use Time::HiRes qw(sleep time);

no_root_location();
no_shuffle();
log_level('info');

our $Repo = Cwd::abs_path("$FindBin::Bin/..");
our $Scratch = File::Temp::tempdir('console-ff-XXXXXX', TMPDIR => 1, CLEANUP => 1);
our $Shots = "$Repo/build/console-screenshots/firefox";
$ENV{TEST_NGINX_CONSOLE_CONF} = console_conf($Scratch);

sub post_as {
    my ($ctx, $who, $cid, $content) = @_;
    my ($code, $d) = api($ctx, POST => "/agents/$who/messages",
                         { comm_id => $cid, content => $content, type => 4 });
    die "post as $who: $code\n" unless $code == 200;
    return $d->{id};
}

sub log_ids {
    return map { $_->[0] } @{ redis_cmd('XRANGE', "ioa:{room:$_[0]}:log", '-', '+') };
}

# polls $cond (a Perl sub that asks the page) for up to $secs
sub until_page {
    my ($secs, $cond) = @_;
    return wait_until(sub { my $v = eval { $cond->() }; $v }, $secs);
}

sub shot {
    my ($ff, $name) = @_;
    make_path($Shots);
    my $png = $ff->selfie;
    open my $out, '>:raw', "$Shots/$name" or die "$Shots/$name: $!\n";
    local $/;
    print {$out} <$png>;
    close $out;
}

run_tests();

__DATA__

=== TEST 1: Firefox shows a room's transcript live and across a reload, every line once
Firefox: a room's transcript live and across a reload, every line once; HTML
in data shown as text; the agents page; no horizontal scrolling in its
narrowest window (500 px).
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth off; }
    include $TEST_NGINX_CONSOLE_CONF;
--- ioa_scenario
    fresh_hub($ctx);
    api($ctx, POST => '/register', { name => 'Ann', type => 'Thing Assistant',
                                     desc => '<img src=x onerror="window.__xss=1">' });
    api($ctx, POST => '/register', { name => 'Ben', type => 'Thing Assistant',
                                     desc => 'checks the work' });
    my (undef, $team) = api($ctx, POST => '/teamup', { sender => 'Ann', agent_names => ['Ben'],
                                                     team_name => 'firefox team' });
    my $cid = $team->{comm_id};
    post_as($ctx, 'Ann', $cid, "early $_") for 1 .. 2;
    post_as($ctx, 'Ben', $cid, '<script>window.__xss=2</script><b>bold?</b>');

    my $ff = Firefox::Marionette->new(visible => 0, width => 1280, height => 900);
    my $base = 'http://127.0.0.1:' . $ctx->port . '/console/';
    my $lines = sub { $ff->script('return Array.from(document.querySelectorAll("#transcript > li"), li => li.dataset.id)') };
    $ff->go("$base#/rooms/$cid");
    ok until_page(15, sub { @{ $lines->() } == 3 }), 'the transcript shows the log'
        or diag $ff->script('return document.body.innerText');
    like $ff->script('return document.querySelector(".feed-status").textContent'), qr/^live$/,
        'the feed is live (SSE read with fetch)';
    post_as($ctx, 'Ann', $cid, "live $_") for 1 .. 2;
    ok until_page(10, sub { @{ $lines->() } == 5 }), 'live lines arrive';
    $ff->refresh;
    post_as($ctx, 'Ben', $cid, 'after the reload');
    ok until_page(15, sub { @{ $lines->() } == 6 }), 'after a reload, and a line posted meanwhile';
    sleep 0.5;
    is_deeply $lines->(), [ log_ids($cid) ], 'every line once, in order, as Redis holds them';
    my $text = $ff->script('return document.querySelector("#transcript").innerText');
    like $text, qr{<script>window\.__xss=2</script><b>bold\?</b>}, 'HTML in a message is shown as text';
    is $ff->script('return document.querySelectorAll("#transcript script, #transcript b").length'), 0,
        'and makes no element';
    shot($ff, 'room.png');

    $ff->go("$base#/agents");
    ok until_page(15, sub { $ff->script('return document.body.innerText') =~ /checks the work/ }),
        'the agents page lists the agents';
    like $ff->script('return document.body.innerText'), qr{<img src=x onerror="window\.__xss=1">},
        'a description with HTML is shown as text';
    is $ff->script('return document.querySelectorAll("main img").length'), 0, 'no image made of it';
    is $ff->script('return window.__xss === undefined'), 1, 'no script of the data ran';
    shot($ff, 'agents.png');

    $ff->quit;

    # narrow: Firefox keeps a window at least 500 px wide (zoom prefs do not
    # narrow a headless viewport), so this is the narrowest it shows;
    # t/250-console.t checks 390 px, a phone's, in Chromium
    $ff = Firefox::Marionette->new(visible => 0, width => 390, height => 844);
    $ff->go("$base#/agents");
    until_page(15, sub { $ff->script('return document.body.dataset.ready') });
    cmp_ok $ff->script('return window.innerWidth'), '<=', 500, 'a window as narrow as Firefox allows';
    my %over;
    for my $view ('#/agents', '#/rooms', "#/rooms/$cid", '#/goals', '#/launch') {
        $ff->script('location.hash = arguments[0]', args => [$view]);
        until_page(10, sub { $ff->script('return document.querySelector("main").innerText') !~ /Loading/ });
        sleep 0.3;
        $over{$view} = $ff->script('return document.documentElement.scrollWidth - window.innerWidth');
    }
    is_deeply [ grep { $over{$_} > 0 } sort keys %over ], [], 'no view scrolls sideways'
        or diag join " ", map { "$_=$over{$_}" } sort keys %over;
    $ff->script('location.hash = arguments[0]', args => ["#/rooms/$cid"]);
    until_page(10, sub { @{ $lines->() } == 6 });
    shot($ff, 'phone-room.png');
    $ff->quit;
--- no_error_log
[alert]
[crit]
