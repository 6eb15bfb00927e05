# t/240-ioactl.t -- scripts/ioactl, the hub's command line, run as a
# subprocess against a real nginx, Redis, ioa-worker and ioa-agent
# processes: what it prints, and its exit status (0 ok, 1 usage, 2 the hub
# refused, 3 unreachable or 5xx, 4 not found, 5 a goal that did not
# conclude, 6 a broken room log).
#
#   make all && TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/240-ioactl.t
#
# `tail` runs against a second nginx (IoaTest::Instance) on the same Redis,
# so a block can kill its worker or stop and restart it under the tail while
# agents keep posting through the runner's nginx.

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(register teamup envelope fresh_hub json);
use IoaTest::Api;
use IoaTest::Goals qw(worker stop_workers id_lt);
use IoaTest::Instance;
use IoaTest::Facade qw(key agent_proc online);
use IoaTest::Proc qw(bg bg_wait bg_stop stop_children slurp lines_of wait_lines);
use Cwd qw(abs_path);
use FindBin;
use IPC::Run ();
use Time::HiRes qw(sleep time);

no_root_location();
log_level('info');

our $Repo = abs_path("$FindBin::Bin/..");
our $Ctl = "$Repo/scripts/ioactl";

# the HS256 key of the authentication block, made the operator's way
$ENV{TEST_NGINX_IOACTL_KEY} = key();

# ------------------------------------------------------------------ helpers

# ctl($ctx, @args): runs ioactl against the block's nginx (--url first; a
# later --url wins); returns (exit status, stdout, stderr).  env => {..}
# sets variables, url => undef leaves --url out.
sub ctl {
    my ($ctx, @args) = @_;
    my %o = ref $args[-1] eq 'HASH' ? %{ pop @args } : ();
    my @url = exists $o{url} ? (defined $o{url} ? ('--url', $o{url}) : ())
                             : ('--url', 'http://127.0.0.1:' . $ctx->port);
    my ($out, $err) = ('', '');
    local %ENV = (%ENV, %{ $o{env} // {} });
    delete $ENV{$_} for grep { !defined $ENV{$_} } keys %ENV;
    IPC::Run::run([$Ctl, @url, @args], '<', \undef, '>', \$out, '2>', \$err,
                  IPC::Run::timeout($o{timeout} // 60));
    return ($? >> 8, $out, $err);
}

# ioactl in the background, its stdout and stderr in files
sub ctl_bg { my ($name, @args) = @_; bg($name, $Ctl, @args) }

# posts an envelope as $sender through the hub at $port; returns its id
sub post {
    my ($ctx, $sender, $cid, %f) = @_;
    my ($code, $doc, $res) = api($ctx, POST => "/agents/$sender/messages",
        envelope(comm_id => $cid, next_speaker => '', %f));
    die "post: " . $res->status_line . ' ' . $res->content . "\n"
        unless $code == 200;
    return $doc->{id};
}

sub log_ids {
    return map { $_->[0] } @{ redis_cmd('XRANGE', "ioa:{room:$_[0]}:log", '-', '+') };
}

# the envelope ids at the start of tail's text lines
sub ids_in { map { /^(\d+-\d+) / ? $1 : () } @_ }

run_tests();

__DATA__

=== TEST 1: health exits 0 if the hub is up, 3 with the error if Redis or nginx is down
health: 0 and "ok" when the hub is up; 3 with the hub's error when Redis is
down or nothing listens.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    my ($rc, $out, $err) = ctl($ctx, 'health');
    is $rc, 0, 'health: exit 0';
    is $out, 'http://127.0.0.1:' . $ctx->port . ": ok\n", 'health: the hub says ok';
    ($rc, $out) = ctl($ctx, 'health', '--json');
    is $out, "\"ok\"\n", '--json: the hub\'s JSON as it is';

    redis_stop();
    ($rc, $out, $err) = ctl($ctx, 'health');
    is $rc, 3, 'Redis down: exit 3';
    like $err, qr/^ioactl: 503 /, 'Redis down: the status on stderr';
    is $out, '', 'and nothing on stdout';
    redis_start();
    wait_until(sub { (ctl($ctx, 'health'))[0] == 0 }, 10);
    is((ctl($ctx, 'health'))[0], 0, 'Redis back: exit 0 again');

    my $closed = IoaTest::Instance::_free_port($ctx->port);
    ($rc, $out, $err) = ctl($ctx, 'health', { url => "http://127.0.0.1:$closed" });
    is $rc, 3, 'nothing listening: exit 3';
    like $err, qr/unreachable/, 'nothing listening: "unreachable"';

    ($rc, $out, $err) = ctl($ctx, 'no-such-command');
    is $rc, 1, 'usage error: exit 1';
    like $err, qr/usage: ioactl/, 'usage error: the usage';
    ($rc, $out) = ctl($ctx, '--help');
    like $out, qr/Exit status:.*\n\s+4\s+not found/s, '--help documents the exit codes';
--- no_error_log
[alert]
[crit]



=== TEST 2: agents and agent show names, presence and records; an unknown agent exits 4
agents and agent: names, type, presence and record; --online and --query; an
unknown agent is exit 4 with the hub's code; --json is the hub's JSON.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    for my $spec ([Poet => 'writes poems about the sea'], [Baker => 'bakes bread'],
                  [Critic => 'reviews poems and stories']) {
        api($ctx, POST => '/register', { name => $spec->[0],
            type => 'Thing Assistant', desc => $spec->[1] });
    }
    my $poet = IoaTest::Agent->connect($ctx, 'Poet');
    ok online($ctx, undef, 'Poet'), 'Poet is online';

    my ($rc, $out, $err) = ctl($ctx, 'agents');
    is $rc, 0, 'agents: exit 0';
    my @rows = split /\n/, $out;
    like $rows[0], qr/^NAME\s+TYPE\s+ONLINE\s+RECORD$/, 'agents: a header';
    is_deeply [sort map { (split ' ')[0] } @rows[1 .. $#rows]], [qw(Baker Critic Poet)],
        'agents: every agent';
    like $out, qr/^Poet\s+Thing Assistant\s+online\s+0 done, 0 partial, 0 failed, 0 timed out$/m,
        'agents: Poet online, with its record';
    like $out, qr/^Baker\s+Thing Assistant\s+offline\s/m, 'agents: Baker offline';

    ($rc, $out) = ctl($ctx, 'agents', '--online');
    is_deeply [map { (split ' ')[0] } grep { !/^NAME/ } split /\n/, $out], ['Poet'],
        '--online: only Poet';

    ($rc, $out) = ctl($ctx, 'agents', '--query', 'poems');
    is $rc, 0, '--query: exit 0';
    is_deeply [sort map { (split ' ')[0] } grep { !/^NAME/ } split /\n/, $out],
        [qw(Critic Poet)], '--query poems: the agents that match, ranked by the hub';
    like((split /\n/, $out)[0], qr/SCORE$/, '--query: with the score');

    ($rc, $out) = ctl($ctx, '--json', 'agents');
    my $list = json()->decode($out);
    is_deeply [sort map { $_->{name} } @$list], [qw(Baker Critic Poet)], '--json agents: an array';
    my ($poet_doc) = grep { $_->{name} eq 'Poet' } @$list;
    is_deeply $poet_doc->{record}, { completed => 0, partial => 0, failed => 0,
        timed_out => 0, latency_ms => undef }, '--json agents: with each record';

    ($rc, $out) = ctl($ctx, 'agent', 'Poet');
    is $rc, 0, 'agent Poet: exit 0';
    like $out, qr/^name: Poet\ntype: Thing Assistant\ndesc: writes poems about the sea\n/, 'agent: its fields';
    like $out, qr/^online: yes$/m, 'agent: online';
    ($rc, $out) = ctl($ctx, 'agent', 'Poet', '--json');
    my (undef, $hub) = api($ctx, POST => '/query_assistant', { name => 'Poet' });
    is_deeply json()->decode($out), $hub, 'agent --json: what /query_assistant answers';

    ($rc, $out, $err) = ctl($ctx, 'agent', 'Nobody');
    is $rc, 4, 'an unknown agent: exit 4';
    is $err, "ioactl: 404 unknown_agent: not registered: Nobody (field: name)\n",
        'the hub\'s code and message on stderr';
    is $out, '', 'nothing on stdout';
    $poet->close;
--- no_error_log
[alert]
[crit]



=== TEST 3: rooms: comm_id, team, members, envelope count and last activity
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, qw(Ann Ben Cat));
    my $one = teamup($ctx, 'Ann', ['Ben'], 'writers');
    my $two = teamup($ctx, 'Cat', ['Ann'], 'bakers');
    post($ctx, 'Ann', $one, content => "line $_") for 1 .. 3;
    my ($rc, $out) = ctl($ctx, 'rooms');
    is $rc, 0, 'rooms: exit 0';
    like $out, qr/^COMM_ID\s+TEAM\s+MEMBERS\s+ENVELOPES\s+LAST$/m, 'rooms: a header';
    like $out, qr/^$one\s+writers\s+(?:Ann,Ben|Ben,Ann)\s+3\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$/m,
        'the writers: members, 3 envelopes, the last one\'s time';
    like $out, qr/^$two\s+bakers\s+(?:Ann,Cat|Cat,Ann)\s+0\s+-$/m, 'the bakers: no envelope yet';
    ($rc, $out) = ctl($ctx, 'rooms', '--limit', 2);
    like $out, qr/^$one\s+writers\s+\S+\s+2\+\s+-$/m, 'more than read: "2+", no last time';
    ($rc, $out) = ctl($ctx, 'rooms', '--json');
    my $doc = json()->decode($out);
    is_deeply [sort keys %$doc], [sort $one, $two], '--json: the hub\'s object by comm_id';
    is scalar @{ $doc->{$one}{chat_record} }, 3, '--json: with the envelopes';
--- no_error_log
[alert]
[crit]



=== TEST 4: tail prints the last N then live, losing and doubling nothing across restarts
tail: the last N, --since, type names, then live; a killed nginx worker and a
full restart lose and double nothing.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, qw(Ann Ben));
    my $cid = teamup($ctx, 'Ann', ['Ben'], 'pair');
    my @early = map { post($ctx, 'Ann', $cid, type => 4, content => "early $_") } 1 .. 5;
    post($ctx, 'Ben', $cid, type => 7, task_conclusion => 'a result', content => '',
         extra => [task_status => 'completed']);
    push @early, (log_ids($cid))[-1];

    my ($rc, $out) = ctl($ctx, 'tail', $cid, '-n', 2, '--no-follow');
    is $rc, 0, 'tail --no-follow: exit 0';
    my @l = split /\n/, $out;
    is_deeply [ids_in(@l)], [@early[4, 5]], '-n 2: the last two';
    like $l[0], qr/^\Q$early[4]\E \d{4}-\d\d-\d\d [\d:.]+ Ann DISCUSSION: early 5$/, 'a DISCUSSION line';
    like $l[1], qr/ Ben INFORM_TASK_RESULT: a result \(completed\)$/, 'a result: its conclusion and status';
    ($rc, $out) = ctl($ctx, 'tail', $cid, '--since', $early[1], '--no-follow');
    is_deeply [ids_in(split /\n/, $out)], [@early[2 .. 5]], '--since: everything after it';
    ($rc, $out) = ctl($ctx, '--json', 'tail', $cid, '-n', 3, '--no-follow');
    is_deeply [map { json()->decode($_)->{id} } split /\n/, $out], [@early[3 .. 5]],
        '--json: one envelope per line';
    ($rc, $out, my $err) = ctl($ctx, 'tail', '0' x 32, '--no-follow');
    is $rc, 4, 'an unknown room: exit 4';
    like $err, qr/404 unknown_room/, 'unknown_room';

    # the tail follows a second nginx, which the block kills and restarts
    my %inst = (dir => $ctx->servroot . '/tail-hub', workers => 1, log_level => 'info',
                http_config => 'ioa_redis 127.0.0.1:' . redis_port() . ';',
                config => 'location / { ioa_api; }');
    my $hub = IoaTest::Instance->start(%inst);
    my $port = $hub->port;
    my @url = ('--url', "http://127.0.0.1:$port");

    # live: the room's feed (GET /rooms/{comm_id}/events) from the last id
    # printed; envelopes posted before it subscribed come from the log
    my $live = ctl_bg('live4', @url, 'tail', $cid, '-n', 1);
    my @got = wait_lines($live->{out}, 1);
    is_deeply [ids_in(@got)], [$early[5]], 'the tail starts with the last one';
    my @want = ($early[5]);
    push @want, map { post($ctx, 'Ann', $cid, type => 8, content => "live $_") } 1 .. 3;
    @got = wait_lines($live->{out}, scalar @want);
    is_deeply [ids_in(@got)], \@want, 'live envelopes, in order';
    like $got[-1], qr/ Ann INFORM_TASK_PROGRESS: live 3$/, 'INFORM_TASK_PROGRESS by name';
    bg_stop($live);

    # outages: the tail reconnects with its Last-Event-ID
    my $t = ctl_bg('tail4', @url, 'tail', $cid, '-n', 4);
    @got = wait_lines($t->{out}, 4);
    is_deeply [ids_in(@got)], \@want, 'a second tail starts where the first was';

    # a killed worker: the connection drops without a goodbye
    kill 'KILL', $hub->worker_pids;
    push @want, map { post($ctx, 'Ann', $cid, type => 4, content => "while killed $_") } 1 .. 3;
    @got = wait_lines($t->{out}, scalar @want, 15);
    is_deeply [ids_in(@got)], \@want, 'a killed worker: every envelope once, in order';

    # a restart: stopped, envelopes posted elsewhere, started again
    $hub->stop;
    push @want, map { post($ctx, 'Ben', $cid, type => 4, content => "while down $_") } 1 .. 3;
    $hub = IoaTest::Instance->start(%inst, port => $port);
    push @want, map { post($ctx, 'Ann', $cid, type => 4, content => "after $_") } 1 .. 2;
    @got = wait_lines($t->{out}, scalar @want, 15);
    is_deeply [ids_in(@got)], \@want, 'a restart: every envelope once, in order';
    is_deeply [ids_in(@got)], [grep { !id_lt($_, $early[5]) } log_ids($cid)],
        'the tail is the room\'s log from where it started';
    push @want, post($ctx, 'Ann', $cid, type => 11, content => 'the end');
    @got = wait_lines($t->{out}, scalar @want, 15);
    is_deeply [ids_in(@got)], \@want, 'nothing more came before the last envelope';
    like $got[-1], qr/ Ann CONCLUSION: the end$/, 'CONCLUSION by name';
    like slurp($t->{err}), qr/feed lost .*; resuming/, 'the outage is reported on stderr';
    bg_stop($t);
    $hub->stop;
--- no_error_log
[alert]
[crit]



=== TEST 5: goal launch --wait and watch exit 0 at the conclusion, watch exits 5 on cancel
goals with the built-in planner and real agents: launch --wait and watch to
the conclusion (0); cancel, watch exits 5; goal_ended and unknown_goal exit 2
and 4.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1');
    agent_proc($ctx, 'Shouter', 'uppercases text, shouts words', undef, 'tr', 'a-z', 'A-Z');
    agent_proc($ctx, 'Sleeper', 'naps on the couch', undef, 'sleep', '30');
    ok online($ctx, undef, 'Shouter', 'Sleeper'), 'the agents are online';

    my ($rc, $out, $err) = ctl($ctx, 'goal', 'launch', 'Shout the words hello world',
                               '--wait', { timeout => 60 });
    is $rc, 0, 'launch --wait: exit 0 on concluded' or diag $err;
    my @l = split /\n/, $out;
    like $l[0], qr/^[0-9a-f]{32}$/, 'the goal id first';
    my $gid = $l[0];
    like $out, qr/^== goal running \(room [0-9a-f]{32}\)$/m, 'the state changes';
    like $out, qr/ ioa-coordinator ASYNC_TASK_ASSIGNMENT: .*\[Shouter: Shout the words hello world\]$/m,
        'the assignment, with whose task it is';
    like $out, qr/ Shouter INFORM_TASK_RESULT: .*\(completed\)$/m, 'the result';
    like $out, qr/^== goal concluded .*\nGoal: Shout the words hello world\n1 of 1 part done\./m,
        'the conclusion, at the end';

    ($rc, my $again) = ctl($ctx, 'goal', 'watch', $gid);
    is $rc, 0, 'watch of a concluded goal: exit 0';
    is $again, join("\n", @l[1 .. $#l]) . "\n", 'the same feed, from the start';
    ($rc, $out) = ctl($ctx, '--json', 'goal', 'watch', $gid);
    my @ev = map { json()->decode($_) } split /\n/, $out;
    is $ev[-1]{state}, 'concluded', '--json: the feed\'s events, one per line';

    ($rc, $out) = ctl($ctx, 'goal', 'launch', 'Nap on the couch', '--member', 'Sleeper');
    chomp(my $nap = $out);
    like $nap, qr/^[0-9a-f]{32}$/, 'launch without --wait: the id';
    my $w = ctl_bg('watch5', '--url', 'http://127.0.0.1:' . $ctx->port, 'goal', 'watch', $nap);
    wait_lines($w->{out}, 1);
    ok wait_until(sub { slurp($w->{out}) =~ /PAUSE/ }, 15), 'the nap is under way';
    ($rc, $out) = ctl($ctx, 'goal', 'say', $nap, 'please hurry');
    like $out, qr/^goal $nap: message \d+-\d+ from user$/, 'say: the message is queued';
    ($rc, $out) = ctl($ctx, 'goal', 'cancel', $nap);
    is $rc, 0, 'cancel: exit 0';
    is $out, "goal $nap: cancelling\n", 'cancel: cancelling';
    is bg_wait($w, 20), 5, 'watch: exit 5 when the goal is cancelled';
    like slurp($w->{out}), qr/^== goal cancelled/m, 'watch: the last state';

    ($rc, $out, $err) = ctl($ctx, 'goal', 'cancel', $nap);
    is $rc, 2, 'cancel of an ended goal: exit 2';
    like $err, qr/^ioactl: 409 goal_ended: /, 'goal_ended';
    ($rc, $out, $err) = ctl($ctx, 'goal', 'watch', 'f' x 32);
    is $rc, 4, 'an unknown goal: exit 4';
    like $err, qr/404 unknown_goal/, 'unknown_goal';
    ($rc, $out) = ctl($ctx, 'goal', 'status', $nap);
    like $out, qr/^state: cancelled$/m, 'status: cancelled';
    stop_children();
    stop_workers();
--- no_error_log
[alert]
[crit]



=== TEST 6: goal watch resumes with Last-Event-ID across a hub restart, each event once
goal watch resumes with Last-Event-ID across a hub restart, printing every
event once.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1');
    agent_proc($ctx, 'Sleeper', 'naps on the couch', undef, 'sleep', '3');
    ok online($ctx, undef, 'Sleeper'), 'Sleeper is online';
    my %inst = (dir => $ctx->servroot . '/watch-hub', workers => 1, log_level => 'info',
                http_config => 'ioa_redis 127.0.0.1:' . redis_port() . ';',
                config => 'location / { ioa_api; }');
    my $hub = IoaTest::Instance->start(%inst);
    my $port = $hub->port;
    my ($rc, $out) = ctl($ctx, 'goal', 'launch', 'Nap on the couch');
    chomp(my $gid = $out);
    my $w = ctl_bg('watch6', '--url', "http://127.0.0.1:$port", 'goal', 'watch', $gid);
    ok wait_until(sub { slurp($w->{out}) =~ /INFORM_TASK_PROGRESS/ }, 15), 'the nap is under way';
    $hub->stop;
    $hub = IoaTest::Instance->start(%inst, port => $port);
    is bg_wait($w, 30), 0, 'watch: exit 0 once concluded';
    ($rc, my $whole) = ctl($ctx, 'goal', 'watch', $gid);
    is slurp($w->{out}), $whole, 'across the restart: the feed exactly, nothing twice';
    like slurp($w->{err}), qr/resuming|retrying/, 'the loss is reported on stderr';
    $hub->stop;
    stop_children();
    stop_workers();
--- no_error_log
[alert]
[crit]



=== TEST 7: verify-room exits 0 for an intact log, 6 for a broken link, 4 if unknown
verify-room: 0 for an intact log, 6 naming the first broken link after an
entry is removed, 4 for an unknown room.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, qw(Ann Ben));
    my $cid = teamup($ctx, 'Ann', ['Ben'], 'pair');
    my @ids = map { post($ctx, 'Ann', $cid, content => "line $_") } 1 .. 4;
    my ($rc, $out) = ctl($ctx, 'verify-room', $cid);
    is $rc, 0, 'intact: exit 0';
    like $out, qr/^room $cid: intact: 4 entries chained from genesis $ids[0]/, 'intact: the hub\'s report';
    ($rc, $out) = ctl($ctx, '--json', 'verify-room', $cid);
    is json()->decode($out)->{status}, 'intact', '--json: the hub\'s answer';

    redis_cmd('XDEL', "ioa:{room:$cid}:log", $ids[1]);
    ($rc, $out) = ctl($ctx, 'verify-room', $cid);
    is $rc, 6, 'an entry removed: exit 6';
    like $out, qr/^room $cid: BROKEN at $ids[2]: hash mismatch/, 'the first broken link, exactly';

    my $err;
    ($rc, $out, $err) = ctl($ctx, 'verify-room', '0' x 32);
    is $rc, 4, 'an unknown room: exit 4';
    like $err, qr/404 unknown_room/, 'unknown_room';
--- no_error_log
[alert]
[crit]



=== TEST 8: without a token or scope ioactl exits 2 readably; it never prints the token
authentication: tokens from `ioactl token`; no token is 401 and a missing
scope 403, both readable (exit 2); the token is never printed.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_IOACTL_KEY; }
--- ioa_scenario
    fresh_hub($ctx);
    my $key = $ENV{TEST_NGINX_IOACTL_KEY};
    my ($rc, $admin) = ctl($ctx, 'token', '--key', $key, '--sub', 'ops', '--scope', 'admin');
    is $rc, 0, 'token: exit 0';
    chomp $admin;
    like $admin, qr/^[\w-]+\.[\w-]+\.[\w-]+$/, 'token: a JWT';
    (undef, my $watcher) = ctl($ctx, 'token', '--key', $key, '--sub', 'eye', '--scope', 'observer');
    chomp $watcher;
    my ($code) = api($ctx, POST => '/register', { name => 'Ann', type => 'Thing Assistant', desc => 'x' });
    is $code, 401, 'the hub wants a token';

    my ($out, $err);
    ($rc, $out, $err) = ctl($ctx, 'agents');
    is $rc, 2, 'no token: exit 2';
    like $err, qr/^ioactl: 401 unauthorized: \S.*\n\z/, 'no token: 401 unauthorized and why, one line';
    ($rc, $out, $err) = ctl($ctx, 'agents', '--token', $watcher);
    is $rc, 2, 'observer token for /list_all_agents: exit 2';
    like $err, qr/^ioactl: 403 forbidden: the token of "eye" lacks the "admin" scope\n\z/,
        '403 forbidden naming the scope';
    unlike $err, qr/\Q$watcher\E/, 'the token is not printed';
    ($rc, $out, $err) = ctl($ctx, 'agents', { env => { IOA_TOKEN => $admin } });
    is $rc, 0, 'admin token from IOA_TOKEN: exit 0' or diag $err;
    like $out, qr/^NAME/, 'the list';
    ($rc, $out) = ctl($ctx, 'rooms', '--token', $admin);
    is $rc, 0, 'rooms with the admin token';
    ($rc, $out, $err) = ctl($ctx, 'token', '--key', "$key.missing", '--sub', 'x');
    is $rc, 1, 'a missing key file: exit 1';
    like $err, qr/missing/, 'naming the file';
    is((ctl($ctx, 'health'))[0], 0, 'health needs no token');
--- no_error_log
[alert]
[crit]
