# t/250-console.t -- the web console (console/) in a real browser: headless
# Chromium driven by t/lib/console-drive.py (selenium, chromium-driver)
# against a real nginx serving the console with conf.d/ioa.conf's own
# location, Redis, ioa-worker with the built-in planner, and ioa-agent
# example agents.  The driver prints what the page showed as JSON lines;
# the blocks assert on that and compare it with what Redis holds.
#
#   make all && TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/250-console.t
#
# Screenshots of every view go to build/console-screenshots/<block>/;
# docs/console.png is TEST 3's goal-top.png (the goal view, 1280 x 1000).  The browser, chromedriver,
# the workers and the agents are stopped by PID, whatever happens.

use strict;
use warnings;

use Cwd ();
use File::Basename ();

BEGIN {
    my @missing = grep { !-x $_ } '/usr/bin/chromium', '/usr/bin/chromedriver';
    push @missing, 'python3-selenium'
        if system('/usr/bin/python3', '-c', 'import selenium') != 0;
    if (@missing) {
        require Test::More;
        Test::More::plan(skip_all => "no browser: @missing (make deps installs them)");
    }
}

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(fresh_hub json);
use IoaTest::Api;
use IoaTest::Goals qw(worker stop_workers);
use IoaTest::Instance;
use IoaTest::Console;
use File::Path qw(make_path remove_tree);
use File::Temp ();
use FindBin;
use IPC::Run ();
use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

no_root_location();
no_shuffle();
log_level('info');

our $Repo = Cwd::abs_path("$FindBin::Bin/..");
our $Drive = "$Repo/t/lib/console-drive.py";
our $AgentBin = $ENV{IOA_AGENT_BIN} || "$Repo/workers/build/ioa-agent";
our $Scratch = File::Temp::tempdir('console-t-XXXXXX', TMPDIR => 1, CLEANUP => 1);
our $Shots = "$Repo/build/console-screenshots";

# the HS256 key the authenticated blocks verify with, and another one for
# a token that does not verify
for my $k ('jwt.key', 'other.key') {
    system("$Repo/scripts/ioa-token", 'new-key', "$Scratch/$k") == 0
        or die "ioa-token new-key failed\n";
}
$ENV{TEST_NGINX_CONSOLE_KEY} = "$Scratch/jwt.key";

# the console's locations as conf.d/ioa.conf ships them (IoaTest::Console)
$ENV{TEST_NGINX_CONSOLE_CONF} = console_conf($Scratch);

our %Children;       # pid => what, stopped in END

END {
    local $?;
    for my $pid (keys %Children) {
        kill 'KILL', $pid;
        waitpid $pid, 0;
    }
}

sub token {
    my ($sub, $scope, $key) = @_;
    my $t = qx{$Repo/scripts/ioa-token sign --key $Scratch/@{[ $key // 'jwt.key' ]} --sub $sub --scope "$scope"};
    chomp $t;
    die "ioa-token sign failed\n" unless $t =~ /^[\w-]+\.[\w-]+\.[\w-]+$/;
    return $t;
}

sub bearer { [Authorization => "Bearer $_[0]"] }

# drive($ctx, $scenario, %args): runs the browser; returns { check => value }
# (screenshots in ->{shots}) and the driver's exit status and stderr
sub drive {
    my ($ctx, $scenario, %args) = @_;
    return drive_finish(drive_start($ctx, $scenario, %args));
}

# the driver in the background, for a block that acts while the page is
# open: drive_finish() waits for it and reads what it printed
sub drive_start {
    my ($ctx, $scenario, %args) = @_;
    my $dir = "$Shots/" . ($ctx->name =~ /TEST (\d+)/ ? "test$1" : 'other');
    remove_tree($dir);
    make_path($dir);
    my $port = delete $args{port} // $ctx->port;
    my @cmd = ('/usr/bin/python3', $Drive, $scenario, '--url', "http://127.0.0.1:$port",
               '--shots', $dir, map { ("--$_", $args{$_}) } sort keys %args);
    my $run = { scenario => $scenario, out => '', err => '' };
    $run->{h} = IPC::Run::start(\@cmd, '<', \undef, '>', \$run->{out}, '2>', \$run->{err},
                                IPC::Run::timeout(240));
    return $run;
}

sub drive_finish {
    my ($run) = @_;
    my ($scenario, $out, $err) = ($run->{scenario});
    eval { $run->{h}->finish };
    ($out, $err) = ($run->{out}, $run->{err});
    my $rc = $@ ? "died: $@" : $? >> 8;
    my %r = (shots => []);
    for my $line (split /\n/, $out) {
        my $d = eval { json()->decode($line) } or next;
        if ($d->{check} eq 'shot') {
            push @{ $r{shots} }, $d->{value};
        } else {
            $r{ $d->{check} } = $d->{value};
        }
    }
    diag "console-drive $scenario: exit $rc\n$err" . ($r{timeout} ? "timeout: $r{timeout}\npage: "
         . ($r{page_text} // '') . "\n" : '') unless $r{done};
    return \%r;
}

# ioa-agent as a child process with its token: registers $name, runs @exec
sub agent_proc {
    my ($ctx, $name, $desc, @exec) = @_;
    my $log = $ctx->servroot . "/logs/agent-$name.log";
    my @tok = $ctx->block->config =~ /ioa_auth jwt/ ? ('--token', token($name, 'agent')) : ();
    my $pid = fork // die "fork: $!\n";
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>>', $log;
        open STDERR, '>>', $log;
        exec $AgentBin, '--hub', 'http://127.0.0.1:' . $ctx->port, @tok,
             '--name', $name, '--desc', $desc, '--backoff-max', 1,
             '--exec', @exec or POSIX::_exit(127);
    }
    $Children{$pid} = "agent $name";
    return $pid;
}

sub stop_children {
    for my $pid (keys %Children) {
        kill 'TERM', $pid;
        waitpid $pid, 0;
        delete $Children{$pid};
    }
}

sub online {
    my ($ctx, $tok, @names) = @_;
    return wait_until(sub {
        my ($code, $d) = api($ctx, POST => '/query_assistant', { name => [@names] },
                             headers => $tok ? bearer($tok) : []);
        $code == 200 && !grep { !$_ || !$_->{online} } @$d;
    }, 15);
}

sub post_as {
    my ($ctx, $tok, $sender, %env) = @_;
    my ($code, $doc, $res) = api($ctx, POST => "/agents/$sender/messages",
        { next_speaker => '', %env }, headers => $tok ? bearer($tok) : []);
    die "post: " . $res->status_line . ' ' . $res->content . "\n" unless $code == 200;
    return $doc->{id};
}

# GET /goals is newer than GET /goals/{id}: an older hub answers
# unknown_endpoint, and the console lists the goals its tab launched
sub has_goal_list {
    my ($code, $doc) = api($_[0], GET => '/goals?limit=1');
    return !($code == 404 && ($doc->{code} // '') eq 'unknown_endpoint');
}

sub log_ids {
    return map { $_->[0] } @{ redis_cmd('XRANGE', $_[0], '-', '+') };
}

run_tests();

__DATA__

=== TEST 1: the console is served by nginx with its security headers and no inline script
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_CONSOLE_KEY; }
    include $TEST_NGINX_CONSOLE_CONF;
--- request
GET /console/
--- error_code: 200
--- response_headers_like
Content-Type: ^text/html; charset=utf-8$
Content-Security-Policy: ^default-src 'self'; script-src 'self'; style-src 'self'; .*frame-ancestors 'none'$
X-Content-Type-Options: ^nosniff$
Referrer-Policy: ^no-referrer$
--- response_body_like: <script type="module" src="app.js"></script>
--- ioa_scenario
    my $html = $ctx->body;
    my @inline = $html =~ /<script(?![^>]*\bsrc=)[^>]*>/g;
    is scalar(@inline), 0, 'no inline script in index.html';
    unlike $html, qr/\sstyle=|<style/, 'no inline style either';
    for my $f (qw(app.js api.js sse.js dom.js transcript.js)) {
        my $res = $ctx->http(GET => "/console/$f");
        is $res->code, 200, "$f: 200";
        like $res->header('Content-Type'), qr{^application/javascript}, "$f: served as JavaScript";
        is $res->header('X-Content-Type-Options'), 'nosniff', "$f: nosniff";
        unlike $res->content, qr/\.innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(/,
            "$f: never builds markup from strings";
    }
    like $ctx->http(GET => '/console/console.css')->header('Content-Type'), qr{^text/css}, 'the CSS as text/css';
    my $r = $ctx->http(GET => '/console');
    is $r->code, 301, '/console redirects';
    like $r->header('Location'), qr{/console/$}, 'to /console/';
    is $ctx->http(GET => '/console/nope.js')->code, 404, 'nothing else is served';
    unlike $ctx->http(GET => '/console/../conf.d/ioa.conf')->content, qr/ioa_redis/,
        'no way out of the directory';
    is $ctx->http(GET => '/list_all_agents')->code, 401, 'the API itself still wants a token';
--- no_error_log
[alert]
[crit]



=== TEST 2: with auth on the console explains 401/403, signs out, shows XSS as text
auth on: a bad token is a readable 401, a token without the scope a readable
403; sign-out clears the tab; agents with presence and record, search, a room,
and XSS probes shown as text.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_CONSOLE_KEY; }
    include $TEST_NGINX_CONSOLE_CONF;
--- ioa_scenario
    fresh_hub($ctx);
    my $xss_desc = '<img src=x onerror=alert(1)>';
    my $xss_text = 'hello <script>alert(2)</script> <b>bold</b> there';
    my %tok = map { $_ => token($_, 'agent') } qw(Ann Ben);
    for my $who ([Ann => 'writes short reports'], [Ben => $xss_desc]) {
        my ($code) = api($ctx, POST => '/register', { name => $who->[0],
            type => 'Thing Assistant', desc => $who->[1] }, headers => bearer($tok{ $who->[0] }));
        is $code, 200, "$who->[0] registered";
    }
    agent_proc($ctx, 'Poet', 'writes poems about the sea', 'tr', 'a-z', 'A-Z');
    my $admin = token('console', 'observer launch admin agent');
    ok online($ctx, $admin, 'Poet'), 'Poet is online';
    my (undef, $team) = api($ctx, POST => '/teamup', { sender => 'Ann',
        agent_names => ['Ben'], team_name => 'pair' }, headers => bearer($tok{Ann}));
    my $cid = $team->{comm_id};
    post_as($ctx, $tok{Ann}, 'Ann', comm_id => $cid, type => 4, content => $xss_text,
            next_speaker => 'Ben');
    post_as($ctx, $tok{Ben}, 'Ben', comm_id => $cid, type => 7, task_id => 't1',
            task_conclusion => 'the report, checked', task_status => 'completed', content => '');

    my $r = drive($ctx, 'signin', token => $admin, bad => token('console', 'admin', 'other.key'),
                  noscope => token('eye', 'observer'), cid => $cid, lines => 2, query => 'poems');
    ok $r->{done}, 'the driver went through';
    is $r->{signin_first}, '#/signin', 'without a token: the sign-in view';
    like $r->{bad_token_message}, qr/^Sign in: the hub did not accept the token \(401 unauthorized: the token's signature does not verify/,
        '401: the hub\'s reason, in words';
    is $r->{stored_after_bad}, 0, 'a refused token is not kept';
    like $r->{forbidden_message}, qr/403 forbidden: the token of "eye" lacks the "admin" scope/,
        '403: names the missing scope';
    is $r->{who_noscope}, 'signed in as eye (observer)', 'the header: subject and scopes';
    ok $r->{launch_disabled}, 'launch: disabled without the launch scope';
    is $r->{launch_hint}, 'needs the launch scope', 'and says why';
    if (has_goal_list($ctx)) {
        like $r->{goals_noscope}, qr/403 forbidden: .*"launch" scope/, 'the goal list: the hub\'s 403 in words';
    } else {
        like $r->{goals_noscope}, qr/does not list goals/, 'a hub without GET /goals: said so';
    }
    is $r->{storage_after_signout}, 0, 'sign-out empties sessionStorage';
    is $r->{who}, 'signed in as console (observer launch admin agent)', 'signed in';
    ok $r->{token_in_storage}, 'the token is kept in sessionStorage';

    my $ag = $r->{agents} // {};
    is_deeply [sort keys %$ag], [qw(Ann Ben Poet)], 'every agent';
    is $ag->{Poet}{presence}, 'online', 'Poet online';
    is $ag->{Ann}{presence}, 'offline', 'Ann offline';
    is $ag->{Ann}{record}, 'record: 0 done, 0 partial, 0 failed, 0 timed out', 'with its record';
    is $ag->{Ben}{desc}, $xss_desc, 'XSS: the description is shown as its literal text';
    is $r->{img_elements}, 0, 'XSS: no <img> element was made';
    ok $r->{no_alert}, 'XSS: no alert';
    is_deeply $r->{search}, ['Poet'], 'search: /retrieve_assistant\'s match'
        or diag $r->{search_text};
    like $r->{rooms}, qr/^pair\n$cid\nmembers: Ann, Ben/, 'the room list';
    is $r->{room_members}, 'Ann, Ben', 'the room: its members';
    is_deeply $r->{room_kinds}, ['discussion', 'result'], 'IoA types by name';
    like $r->{room_lines}[0], qr/^Ann\ndiscussion\n.*\x{2192} Ben\n.*\Q$xss_text\E$/s,
        'XSS: the <script> envelope as text, with sender, type, next speaker';
    like $r->{room_lines}[1], qr/^Ben\nresult\n.*completed the report, checked$/s, 'a result with its status';
    is $r->{script_elements_in_main}, 0, 'XSS: no <script> element in the page';
    is $r->{img_elements_room}, 0, 'no <img> either';
    ok $r->{no_alert_room}, 'no alert';
    is $r->{aria_live}, 'polite', 'the transcript is a live region';
    is_deeply $r->{js_errors}, [], 'no error in the browser console';
    my $log = IoaTest::_slurp($ctx->servroot . '/logs/access.log');
    unlike $log, qr/access_token|eyJ/, 'no token in the access log';
    stop_children();
--- no_error_log
[alert]
[crit]



=== TEST 3: a goal launched from the console form is watched live to its conclusion
a goal launched from the form is watched live to its conclusion; a person's
message and a cancel on a second goal.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_CONSOLE_KEY; }
    include $TEST_NGINX_CONSOLE_CONF;
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1', task_timeout => 60);
    # make run's example agents
    agent_proc($ctx, 'Counter', 'counts the words in a text',
               '/usr/bin/python3', "$::Repo/scripts/demo_agent.py", 'count');
    agent_proc($ctx, 'Shouter', 'shouts a text in upper case',
               '/usr/bin/python3', "$::Repo/scripts/demo_agent.py", 'shout');
    agent_proc($ctx, 'Sleeper', 'naps on the couch', 'sleep', '60');
    my $tok = token('console', 'observer launch admin agent');
    ok online($ctx, $tok, 'Counter', 'Shouter', 'Sleeper'), 'the agents are online';

    my $goal = 'Count the words in "agents that cooperate". Shout "agents that cooperate" in upper case.';
    my $r = drive($ctx, 'goals', token => $tok, goal => $goal,
                  goal2 => 'Nap on the couch', say => 'please hurry, <i>now</i>');
    ok $r->{done}, 'the driver went through';
    my $gid = $r->{gid} // '';
    like $gid, qr/^[0-9a-f]{32}$/, 'the form launched a goal and opened its view';
    my $meta = { @{ redis_cmd('HGETALL', "ioa:{goal:$gid}:meta") } };
    is $meta->{state}, 'concluded', 'Redis: the goal concluded';
    is $meta->{launched_by}, 'console', 'launched as the token\'s subject';
    is_deeply [grep { $_ ne 'queued' } @{ $r->{states} // [] }], [qw(forming running concluded)],
        'the timeline: every state, live';
    my %kinds = map { $_ => 1 } @{ $r->{kinds} // [] };
    ok $kinds{$_}, "the timeline shows a $_" for 'discussion', 'task assignment', 'pause',
        'progress', 'result', 'concluding', 'conclusion';
    my %senders = map { $_ => 1 } @{ $r->{senders} // [] };
    ok $senders{Counter} && $senders{Shouter}, 'the agents\' own envelopes';
    my @feed = log_ids("ioa:{room:goal-$gid}:log");
    is scalar @{ $r->{timeline_ids} // [] }, scalar @feed, 'one timeline line per feed event: none lost or doubled';
    my @tasks = sort @{ $r->{tasks} // [] };
    is scalar @tasks, 2, 'two tasks';
    like $tasks[0], qr/^Counter\ncompleted\nCount the words in "agents that cooperate"\n.*\b3\b/s,
        'a task: its agent, status, part and result';
    like $tasks[1], qr/^Shouter\ncompleted\nShout "agents that cooperate" in upper case\nAGENTS THAT COOPERATE/s,
        'the other one';
    like $r->{conclusion}, qr/\Q$meta->{conclusion}\E/, 'the conclusion, as the record has it';
    like $r->{conclusion}, qr/2 of 2 parts done/, 'which accounts for every part';
    like $r->{tokens}, qr/^0\b/, 'tokens used: none with the built-in planner';
    ok $r->{send_disabled_after}, 'an ended goal takes no message';

    my $gid2 = $r->{gid2} // '';
    like $r->{say_message}, qr/^Sent as console \(message \d+-\d+\)\.$/, 'the person\'s message is queued';
    my @inbox = @{ redis_cmd('XRANGE', "ioa:{goal:$gid2}:inbox", '-', '+') };
    like "@{ $inbox[0][1] // [] }", qr/please hurry, <i>now<\/i>/, 'Redis: in the goal\'s inbox, as typed';
    like $r->{confirm_text}, qr/^Cancel this goal\?/, 'cancel asks first';
    like $r->{cancel_message}, qr/Cancelling/, 'then cancels';
    is((@{ $r->{states2} // [] })[-1], 'cancelled', 'the timeline ends cancelled');
    is redis_cmd('HGET', "ioa:{goal:$gid2}:meta", 'state'), 'cancelled', 'Redis: cancelled';
    ok $r->{cancel_disabled_after}, 'a cancelled goal cannot be cancelled again';
    if (has_goal_list($ctx)) {
        like $r->{goal_list}[0], qr/^cancelled\n.*\nNap on the couch/s, 'the goal list: newest first, with its state';
        like $r->{goal_list}[1], qr/^concluded\n.*\nCount the words/s, 'and the first goal';
    } else {
        is_deeply $r->{goal_list}, [$gid2, $gid], 'a hub without GET /goals: the goals of this tab';
    }
    is_deeply $r->{js_errors}, [], 'no error in the browser console';
    stop_children();
    stop_workers();
--- no_error_log
[alert]
[crit]



=== TEST 4: in open mode a room's live transcript survives reloads with no line lost
open mode: no sign-in; a room's transcript live and across reloads with no
line lost or doubled; no horizontal scrolling at 390 px.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth off; }
    include $TEST_NGINX_CONSOLE_CONF;
--- ioa_scenario
    fresh_hub($ctx);
    for my $n (qw(Ann Ben)) {
        api($ctx, POST => '/register', { name => $n, type => 'Thing Assistant',
            desc => "$n writes and checks very long words like pneumonoultramicroscopicsilicovolcanoconiosis" });
    }
    my (undef, $team) = api($ctx, POST => '/teamup', { sender => 'Ann',
        agent_names => ['Ben'], team_name => 'a team with a rather long name that has to wrap on a phone' });
    my $cid = $team->{comm_id};
    post_as($ctx, undef, 'Ann', comm_id => $cid, type => 4, content => "early $_") for 1 .. 3;

    my $r = drive($ctx, 'room', cid => $cid, lines => 3);
    ok $r->{done}, 'the driver went through';
    like $r->{who_open}, qr/^open mode/, 'open mode is detected: no sign-in';
    ok $r->{signout_hidden}, 'and no sign-out';
    like $r->{feed_status}, qr/^live$/, 'the room feed is live (SSE)';
    my @log = log_ids("ioa:{room:$cid}:log");
    is scalar @log, 3 + 7, 'Redis: every envelope the driver posted';
    is_deeply $r->{shown_ids}, \@log, 'across two reloads: every line once, in order';
    is(($r->{last_kept} // '') =~ /(\d+-\d+)$/ ? $1 : undef, $log[-1],
       'sessionStorage keeps the last id shown');
    my $ov = $r->{overflow} // {};
    is $r->{viewport}, 390, 'a phone-wide window';
    ok exists $ov->{$_} && $ov->{$_} <= 0, "$_: no horizontal scrolling at 390 px"
        for '#/agents', '#/rooms', "#/rooms/$cid", '#/goals', '#/launch';
    is_deeply $r->{js_errors}, [], 'no error in the browser console';
--- no_error_log
[alert]
[crit]



=== TEST 5: after a hub restart an open room view reconnects and shows every line once
a hub restart behind an open room view: the page reconnects with its
Last-Event-ID and shows every line once, also those posted while the hub was
down.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth off; }
--- ioa_scenario
    fresh_hub($ctx);
    for my $n (qw(Ann Ben)) {
        api($ctx, POST => '/register', { name => $n, type => 'Thing Assistant', desc => "agent $n" });
    }
    my (undef, $team) = api($ctx, POST => '/teamup', { sender => 'Ann', agent_names => ['Ben'] });
    my $cid = $team->{comm_id};
    post_as($ctx, undef, 'Ann', comm_id => $cid, type => 4, content => "early $_") for 1 .. 3;

    # the page's hub: an nginx of its own, which the block restarts
    my %hub = (dir => $ctx->servroot . '/page-hub', workers => 1, log_level => 'info',
               http_config => 'ioa_redis 127.0.0.1:' . $ctx->redis_port . ';',
               config => 'location / { ioa_api; ioa_auth off; } '
                         . "include $ENV{TEST_NGINX_CONSOLE_CONF};");
    my $hub = IoaTest::Instance->start(%hub);
    my $port = $hub->port;
    my $sync = File::Temp::tempdir('console-sync-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    my $run = drive_start($ctx, 'restart', port => $port, cid => $cid, lines => 3, sync => $sync);
    ok wait_until(sub { -e "$sync/ready" }, 60), 'the room view shows the first lines';

    my $via = sub {
        my ($p, $who, $text) = @_;
        my ($code) = api($ctx, POST => "/agents/$who/messages",
                         { comm_id => $cid, content => $text, type => 4 }, port => $p);
        die "post through $p: $code\n" unless $code == 200;
    };
    ok wait_until(sub { (api($ctx, GET => '/health_check', undef, port => $port))[0] == 200 }, 30),
        "the page's hub is connected to Redis";
    $via->($port, 'Ben', "before the restart $_") for 1 .. 2;
    $hub->stop;
    $via->($ctx->port, 'Ann', "while the page's hub is down $_") for 1 .. 3;
    $hub = IoaTest::Instance->start(%hub, port => $port);
    # started is not yet connected to Redis (an ASan build takes a while):
    # the posts through it wait for its /health_check, as a load balancer would
    ok wait_until(sub { (api($ctx, GET => '/health_check', undef, port => $port))[0] == 200 }, 30),
        'the restarted hub is connected to Redis';
    $via->($port, 'Ben', "after the restart $_") for 1 .. 2;
    my @log = log_ids("ioa:{room:$cid}:log");
    is scalar @log, 3 + 2 + 3 + 2, 'Redis: every envelope';
    open my $fh, '>', "$sync/go" or die "$sync/go: $!\n";
    print $fh scalar(@log), "\n";
    close $fh;
    my $r = drive_finish($run);
    ok $r->{done}, 'the driver went through';
    is_deeply $r->{shown_ids}, \@log, 'every line once, in order, across the restart';
    is $r->{feed_status}, 'live', 'and the feed is live again';
    $hub->stop;
--- no_error_log
[alert]
[crit]
