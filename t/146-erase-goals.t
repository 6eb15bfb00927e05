# t/146-erase-goals.t -- an erasure reaches every copy of what the sender
# said: the room, the coordinator's steps quoting it, the goal's feed
# (/goals/{id}/events, A2A streams), the goal's record and conclusion
# (GET /goals/{id}, A2A's artifact, MCP's transcript), a parent goal's
# room, feed and conclusion for a sub-team's; DELETE /agents/{name}?erase=1
# does it in every room of the agent.  Real nginx, Redis and ioa-worker
# processes with the built-in planner; the agents are WebSocket clients
# playing the agent runtime (IoaTest::Goals).
#
#   make all
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/146-erase-goals.t
#   (TEST_IOA_REDIS=cluster: the same against a 3-master Redis Cluster)

use strict;
use warnings;

use Cwd ();
use File::Basename ();

BEGIN {
    my $bin = $ENV{IOA_WORKER_BIN}
              || Cwd::abs_path(File::Basename::dirname(__FILE__) . '/..')
                 . '/workers/build/ioa-worker';
    if (!-x $bin) {
        require Test::More;
        Test::More::plan(skip_all => "$bin is not built; run "
                                   . "`make -C workers/worker` first");
    }
}

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(envelope fresh_hub json);
use IoaTest::Api;
use IoaTest::Goals;
use IoaTest::JWT;
use IoaTest::ScriptedLLM;
use IoaTest::SSE;
use File::Temp ();
use LWP::UserAgent ();
use Time::HiRes qw(time);

no_root_location();
no_shuffle();
log_level('info');

our $KEYDIR = File::Temp::tempdir('ioa-erase-goals-XXXXXX', TMPDIR => 1, CLEANUP => 1);
our $K = jwt_keys($KEYDIR);
$ENV{TEST_NGINX_KEYS} = $KEYDIR;

# the audit stream's entries as field hashes
sub audit {
    my $r = redis_cmd('XRANGE', 'ioa:{audit}:log', '-', '+');
    return map { { @{ $_->[1] } } } @$r;
}

# every stored text of a room, a feed and a record, with where it is
sub copies {
    my ($gid, $cid) = @_;
    my @c;
    push @c, map { [ "room $cid $_->{id}", $_->{_raw} ] } room($cid) if $cid;
    push @c, map { [ "feed $_->{_id}", $_->{_raw} ] } feed($gid) if $gid;
    for my $h ('meta', 'fsm') {
        my %f = @{ redis_cmd('HGETALL', "ioa:{goal:$gid}:$h") };
        push @c, map { [ "$h $_", $f{$_} ] } sort keys %f;
    }
    return @c;
}

# the copies that still hold $text: their names
sub holding {
    my ($text, @c) = @_;
    return map { $_->[0] } grep { index($_->[1], $text) >= 0 } @c;
}

# a JSON-RPC POST: ($code, $doc, $response)
sub rpc {
    my ($ctx, $path, $body, %h) = @_;
    my $ua = LWP::UserAgent->new(timeout => 20);
    my $req = HTTP::Request->new(POST => 'http://127.0.0.1:' . $ctx->port . $path);
    $req->header('Content-Type' => 'application/json');
    $req->header('Accept' => 'application/json, text/event-stream');
    $req->header($_ => $h{$_}) for keys %h;
    $req->content(json()->encode($body));
    my $res = $ua->request($req);
    my $doc = eval { json()->decode($res->content) };
    return ($res->code, $doc, $res);
}

# MCP: a session, then ioa://goals/{id}/transcript's text
sub transcript {
    my ($ctx, $gid) = @_;
    my ($code, $doc, $res) = rpc($ctx, '/mcp', { jsonrpc => '2.0', id => 1, method => 'initialize',
        params => { protocolVersion => '2025-06-18', capabilities => {},
                    clientInfo => { name => 'lwp', version => '0' } } });
    my $sid = $res->header('Mcp-Session-Id') // '';
    ($code, $doc) = rpc($ctx, '/mcp', { jsonrpc => '2.0', id => 2, method => 'resources/read',
                                        params => { uri => "ioa://goals/$gid/transcript" } },
                        'Mcp-Session-Id' => $sid);
    return $doc->{result}{contents}[0]{text} // '';
}

# GET /goals/{id}/events from the start: the data of every event the feed has
sub events {
    my ($ctx, $gid) = @_;
    my $n = scalar(feed($gid));
    my $s = IoaTest::SSE->connect('127.0.0.1', $ctx->port, "/goals/$gid/events");
    my @m = $s->messages($n, 5);
    $s->close;
    return map { $_->{data} } @m;
}

# EVALSHA calls so far, on every master of a Cluster
sub evalsha_calls {
    my $c = redis_cluster();
    my @info = $c ? map { $c->cmd_on($_, 'INFO', 'commandstats') } $c->masters
                  : (redis_cmd('INFO', 'commandstats'));
    my $n = 0;
    $n += /cmdstat_evalsha:calls=(\d+)/ ? $1 : 0 for @info;
    return $n;
}

sub bearer {
    my ($sub, $scope) = @_;
    return [ Authorization => 'Bearer '
             . jwt($K, 'HS256', { sub => $sub, scope => $scope, exp => time + 300 }) ];
}

run_tests();

__DATA__

=== TEST 1: erasing a goal room's member reaches its feed, conclusion, A2A and MCP
erasing a member of a goal's room reaches the goal's feed, its conclusion, A2A
and MCP; a goal still running refuses it, changing nothing.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; subrequest_output_buffer_size 1m; }
    location = /a2a { ioa_a2a; }
    location = /mcp { ioa_mcp; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Ann => 'writes reports', Ben => 'checks figures');
    my $ag = connect_agents($ctx, qw(Ann Ben));
    worker($ctx, 'w1');
    my $gid = launch(goal => 'Write the report. Check the figures.', team_member_names => [qw(Ann Ben)]);
    my $secret = 'Ann did: Write the report';
    my $kept = 'Ben did: Check the figures';

    ok drive(agents => $ag, how => { Ann => 'hold' }, secs => 20, until => sub {
             my $cid = meta($gid)->{comm_id} or return 0;
             @Held && grep { $_->{sender} eq 'Ben' && $_->{type} == 7 } room($cid) }),
       'Ben answered, Ann holds her task' or diag worker_logs($ctx);
    my $cid = meta($gid)->{comm_id};
    my @before = room($cid);
    my ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", { sender => 'Ben' });
    is "$code $d->{code}", '409 goal_running', 'the goal still runs: 409 goal_running';
    like $d->{message}, qr/goal "\Q$gid\E" is running in room "\Q$cid\E".*nothing in the room was erased/,
         'naming the goal and the room';
    is_deeply [ map { $_->{_raw} } room($cid) ], [ map { $_->{_raw} } @before ], 'the room as it was';
    is scalar(audit()), 0, 'nothing audited';

    release();
    ok drive(agents => $ag, secs => 20, until => sub { state_of($gid) eq 'concluded' }),
       'the goal concluded' or diag worker_logs($ctx);
    my @c = copies($gid, $cid);
    ok holding($secret, @c) >= 6,
       'before: Ann\'s result is in the room, the CONCLUSION, the feed and the record';
    like meta($gid)->{conclusion}, qr/\n   Ann: \Q$secret\E/, 'the conclusion quotes it';

    ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", { sender => 'Ann' });
    is $code, 200, 'erase Ann: 200';
    is_deeply [ @$d{qw(comm_id sender erased)} ], [ $cid, 'Ann', 2 ], 'her progress and her result erased';
    ok $d->{quoted} >= 1, "the coordinator's steps quoting her redacted ($d->{quoted})";
    is scalar @{ $d->{goals} }, 1, 'one goal';
    is_deeply [ @{ $d->{goals}[0] }{qw(goal_id comm_id)} ], [ $gid, $cid ], 'the goal of the room';
    ok $d->{goals}[0]{feed} >= 3 && $d->{goals}[0]{record} >= 2,
       "its feed ($d->{goals}[0]{feed} entries) and record ($d->{goals}[0]{record} fields) changed";

    @c = copies($gid, $cid);
    is_deeply [ holding($secret, @c) ], [], 'no copy in Redis holds her result any more';
    is_deeply [ holding('Ann: working on it', @c) ], [], 'nor her progress';
    ok holding($kept, @c) >= 5, 'Ben\'s result is still everywhere it was';

    my @env = room($cid);
    is_deeply [ map { $_->{content} } grep { $_->{sender} eq 'Ann' } @env ], [ '[erased]', '[erased]' ],
              'the room: her envelopes are markers';
    my ($final) = grep { $_->{sender} eq $COORD && $_->{type} == 11 } @env;
    like $final->{content}, qr/\n   Ann: \[erased\]\n/, 'the CONCLUSION: her result "[erased]"';
    like $final->{content}, qr/\n   Ben: \Q$kept\E/, 'Ben\'s kept';
    is_deeply [ @{ $final->{erased} }{qw(by quoting)} ], [ '-', 'Ann' ], 'marked: erased, quoting Ann';
    ($code, $d) = api($ctx, GET => "/rooms/$cid/verify");
    is_deeply [ @$d{qw(status redacted)} ], [ 'intact', 2 + scalar(grep { $_->{erased} && $_->{sender} eq $COORD } @env) ],
              'the chain verifies: her envelopes and the quoting steps redacted, not tampered';
    ($code, $d) = api($ctx, POST => '/fetch_chat_record', { comm_id => $cid });
    unlike json()->encode($d), qr/\Q$secret\E/, '/fetch_chat_record: not there';

    my @f = feed($gid);
    like $_->{_raw}, qr/^\{"sender":"ioa-worker","timestamp":\d+,/, 'feed: sender first still' for @f;
    is_deeply [ map { $_->{envelope}{content} } grep { ($_->{envelope}{sender} // '') eq 'Ann' } @f ],
              [ '[erased]', '[erased]' ], 'the feed: her copies are the markers';
    is_deeply [ map { $_->{envelope}{id} } grep { $_->{event} eq 'envelope' } @f ],
              [ map { $_->{id} } @env ], 'still every envelope of the room, once, in order';
    like $f[-1]{conclusion}, qr/\n   Ann: \[erased\]\n/, 'the final state: the conclusion redacted';
    my @ev = events($ctx, $gid);
    is scalar @ev, scalar @f, '/goals/{id}/events: every event';
    is_deeply [ grep { /\Q$secret\E/ } @ev ], [], 'none with her result';

    ($code, $d) = api($ctx, GET => "/goals/$gid");
    unlike $d->{conclusion}, qr/\Q$secret\E/, 'GET /goals/{id}: the conclusion without her result';
    like $d->{conclusion}, qr/\n   Ann: \[erased\]\n.*\n   Ben: \Q$kept\E/s, 'and with Ben\'s';
    like $d->{erased}, qr/^\d{13} -$/, '"erased": when and by whom';

    ($code, $d) = rpc($ctx, '/a2a', { jsonrpc => '2.0', id => 1, method => 'GetTask', params => { id => $gid } });
    my $art = $d->{result}{artifacts}[0]{parts}[0]{text} // '';
    like $art, qr/Ann: \[erased\]/, 'A2A GetTask: the artifact is the redacted conclusion';
    unlike $art, qr/\Q$secret\E/, 'without her result';
    (undef, undef, my $res) = rpc($ctx, '/a2a', { jsonrpc => '2.0', id => 2, method => 'SubscribeToTask',
                                                  params => { id => $gid } },
                                  'Last-Event-ID' => $f[0]{_id});
    my $stream = $res->content;
    like $stream, qr/"Ann: \[erased\]"/, 'A2A SubscribeToTask from the start: her messages "[erased]"';
    like $stream, qr/\Q$kept\E/, 'Ben\'s there';
    unlike $stream, qr/\Q$secret\E/, 'hers not';
    my $t = transcript($ctx, $gid);
    like $t, qr/\Q$kept\E/, 'MCP transcript: the goal and its room';
    unlike $t, qr/\Q$secret\E/, 'without her result';
    like $t, qr/\[erased\]/, 'the markers instead';

    my @a = audit();
    is_deeply [ map { $_->{action} } @a ], [ 'envelopes_erased', 'goal_erased' ], 'audited: the room, then its goal';
    is_deeply [ @{ $a[0] }{qw(actor target)} ], [ '-', "$cid/Ann" ], 'the room: who, what';
    like $a[0]{detail}, qr/^erased=2 quoted=\d+$/, 'the room: erased and quoted';
    is_deeply [ @{ $a[1] }{qw(actor target)} ], [ '-', "$gid/Ann" ], 'the goal: who, what';
    like $a[1]{detail}, qr/^comm_id=\Q$cid\E feed=\d+ record=\d+$/, 'the goal: its room, feed and record';

    ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", { sender => 'Ann' });
    is_deeply [ $code, @$d{qw(erased quoted)}, @{ $d->{goals}[0] }{qw(feed record)} ], [ 200, 0, 0, 0, 0 ],
              'again: nothing left anywhere';
    is scalar(audit()), 2, 'and nothing more audited';
    stop_workers();
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: erasing a sub-team member in the sub-goal's room redacts the parent's quotes
a sub-team's member erased in the sub-goal's room: the parent's room (the
sub-team's result), feed and conclusion lose the quotes too.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    my %skills = (Ann => 'write the report', Ben => 'check the figures',
                  Cid => 'draw the chart', Dan => 'translate the text',
                  Eve => 'summarise the paper', Fay => 'plan the budget');
    register_agents($ctx, %skills);
    my $ag = connect_agents($ctx, sort keys %skills);
    worker($ctx, 'w1');
    worker($ctx, 'w2');
    my $gid = launch(goal => 'Write the report. Check the figures. Draw the chart. '
                           . 'Translate the text. Summarise the paper. Plan the budget.',
                     team_up_depth => 1);
    ok drive(agents => $ag, secs => 40, until => sub { state_of($gid) eq 'concluded' }),
       'the parent concluded' or diag worker_logs($ctx);
    my $pcid = meta($gid)->{comm_id};
    my ($res) = grep { $_->{type} == 7 && $_->{sender} eq $COORD } room($pcid);
    my $child = $res->{sub_goal};
    my $ccid = meta($child)->{comm_id};
    my $secret = 'Eve did: Summarise the paper';
    ok holding($secret, copies($child, $ccid)) >= 4, 'the sub-goal holds Eve\'s result';
    ok holding($secret, copies($gid, $pcid)) >= 4,
       'and so do the parent\'s room (the sub-team\'s result), feed and record';

    my ($code, $d) = api($ctx, POST => "/rooms/$ccid/erase", { sender => 'Eve' });
    is $code, 200, 'erase Eve in the sub-goal\'s room';
    is_deeply [ map { "$_->{goal_id} $_->{comm_id}" } @{ $d->{goals} } ], [ "$child $ccid", "$gid $pcid" ],
              'the sub-goal, then its parent';
    is_deeply [ holding($secret, copies($child, $ccid), copies($gid, $pcid)) ], [],
              'no copy holds her result: sub-goal, parent room, parent feed, parent record';
    ok holding('Fay did: Plan the budget', copies($gid, $pcid)) >= 3, 'Fay\'s is still in the parent\'s';
    like meta($gid)->{conclusion}, qr/Eve: \[erased\]/, 'the parent\'s conclusion says where';
    ($code, $d) = api($ctx, GET => "/rooms/$pcid/verify");
    is $d->{status}, 'intact', 'the parent\'s room verifies';
    ok $d->{redacted} >= 1, 'with the sub-team\'s result redacted';
    is_deeply [ map { "$_->{action} $_->{target}" } audit() ],
              [ "envelopes_erased $ccid/Eve", "goal_erased $child/Eve",
                "envelopes_erased $pcid/Eve", "goal_erased $gid/Eve" ], 'each room and goal audited';
    like((audit())[2]{detail}, qr/^erased=0 quoted=\d+$/, 'the parent\'s room: none of its own erased, quotes redacted');
    is_deeply stop_workers(), { w1 => 0, w2 => 0 }, 'both exit 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3: DELETE /agents/{name}?erase=1 erases what it said everywhere before deleting it
DELETE /agents/{name}?erase=1 erases what it said in every room (and their
goals) before it deletes it; without the flag nothing of that changes; a
tampered room stops it, the agent kept.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Ann => 'writes reports', Ben => 'checks figures', Cat => 'reads', Dot => 'talks');
    my $ag = connect_agents($ctx, qw(Ann Ben));
    worker($ctx, 'w1');
    my $gid = launch(goal => 'Write the report. Check the figures.', team_member_names => [qw(Ann Ben)]);
    ok drive(agents => $ag, secs => 20, until => sub { state_of($gid) eq 'concluded' }),
       'a goal concluded' or diag worker_logs($ctx);
    my $gcid = meta($gid)->{comm_id};
    my ($code, $d) = api($ctx, POST => '/teamup', { sender => 'Ann', agent_names => [qw(Ben Cat)] });
    my $side = $d->{comm_id};
    for my $m ([ Ann => 'my private side note' ], [ Ben => 'Ben in the side room' ],
               [ Ann => 'another note from Ann' ], [ Cat => 'Cat here' ]) {
        ($code) = api($ctx, POST => "/agents/$m->[0]/messages", { comm_id => $side, content => $m->[1] });
        die "post: $code\n" unless $code == 200;
    }
    my $secret = 'Ann did: Write the report';

    ($code, $d) = api($ctx, DELETE => '/agents/Ann?erase=yes');
    is "$code $d->{code} $d->{field}", '400 invalid_request erase', 'erase=yes: 400 naming it';
    ($code, $d) = api($ctx, DELETE => '/agents/Nobody?erase=1');
    is "$code $d->{code}", '404 unknown_agent', 'an unknown agent: 404';

    ($code, $d) = api($ctx, DELETE => '/agents/Cat?erase=0');
    is_deeply [ $code, $d ], [ 200, { deleted => 'agent', name => 'Cat', rooms => 1 } ],
              'without the flag (erase=0): the answer as before';
    ok grep({ ($_->{content} // '') eq 'Cat here' } room($side)), 'and what it said stays';

    ($code, $d) = api($ctx, DELETE => '/agents/Ann?erase=1');
    is $code, 200, 'DELETE /agents/Ann?erase=1: 200';
    is_deeply $d, { deleted => 'agent', name => 'Ann', rooms => 2,
                    erased => { rooms => 2, envelopes => 4, quoted => $d->{erased}{quoted}, goals => 1 } },
              'her two rooms, four envelopes, one goal';
    ok $d->{erased}{quoted} >= 1, 'and the coordinator\'s quotes';
    is_deeply [ holding($secret, copies($gid, $gcid)) ], [], 'the goal\'s room, feed and record: her result is gone';
    is_deeply [ grep { /private side note|another note/ } map { $_->{_raw} } room($side) ], [], 'the side room: her notes too';
    is_deeply [ map { $_->{content} } grep { $_->{sender} eq 'Ann' } room($side) ], [ '[erased]', '[erased]' ],
              'as markers';
    ok grep({ ($_->{content} // '') eq 'Ben in the side room' } room($side)), 'Ben\'s envelope is his';
    like meta($gid)->{conclusion}, qr/Ben: Ben did: Check the figures/, 'the conclusion keeps Ben\'s result';
    is redis_cmd('EXISTS', 'ioa:{reg}:agent:Ann'), 0, 'she is deleted';
    my @a = grep { $_->{target} =~ /Ann/ } audit();
    is_deeply [ sort map { "$_->{action} $_->{target}" } @a[0 .. 2] ],
              [ sort "envelopes_erased $gcid/Ann", "envelopes_erased $side/Ann", "goal_erased $gid/Ann" ],
              'each erasure audited ...';
    is_deeply [ @{ $a[3] }{qw(action target detail)} ], [ 'agent_deleted', 'Ann', 'rooms=2 left=2 erased=4' ],
              '... before the deletion, which counts them';

    # a room that does not verify stops the erasure, and the agent stays
    ($code, $d) = api($ctx, POST => '/teamup', { sender => 'Dot', agent_names => ['Ben'] });
    my $bad = $d->{comm_id};
    api($ctx, POST => '/agents/Dot/messages', { comm_id => $bad, content => "dot $_" }) for 1 .. 3;
    my $r = redis_cmd('XRANGE', "ioa:{room:$bad}:log", '-', '+');
    my %f = @{ $r->[1][1] };
    redis_cmd('DEL', "ioa:{room:$bad}:log");
    for my $i (0 .. $#$r) {
        my %g = @{ $r->[$i][1] };
        $g{e} =~ s/dot 2/dot forged/ if $i == 1;
        redis_cmd('XADD', "ioa:{room:$bad}:log", $r->[$i][0], map { exists $g{$_} ? ($_ => $g{$_}) : () } qw(e h p d r));
    }
    ($code, $d) = api($ctx, DELETE => '/agents/Dot?erase=1');
    is "$code $d->{code}", '409 room_tampered', 'a tampered room: 409 room_tampered';
    like $d->{message}, qr/room "\Q$bad\E" does not verify/, 'naming it';
    is redis_cmd('EXISTS', 'ioa:{reg}:agent:Dot'), 1, 'the agent is not deleted';
    ok redis_cmd('SISMEMBER', "ioa:{room:$bad}:members", 'Dot'), 'nor out of its room';
    stop_workers();
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3b: a conclusion the LLM wrote from the sender's result loses the model's whole text
a conclusion the LLM wrote from the sender's result loses the model's whole
text, in the record, the room and the feed; the account keeps the other
results.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Ann => 'writes reports', Ben => 'checks figures');
    my $ag = connect_agents($ctx, qw(Ann Ben));
    my $model = 'The report is written and its figures are checked; Ann wrote that '
              . 'the figures were hard to gather.';
    my $llm = scripted_llm(sub {
        my ($req) = @_;
        return '{}' unless ($req->{messages}[0]{content} // '') =~ /write the conclusion/;
        return JSON::PP->new->encode({ conclusion => $model });
    });
    worker($ctx, 'w1', env => { IOA_LLM_BASE_URL => $llm->{url}, IOA_LLM_MAX_ATTEMPTS => 1 });
    my $gid = launch(goal => 'Write the report. Check the figures.', team_member_names => [qw(Ann Ben)]);
    ok drive(agents => $ag, secs => 20, until => sub { state_of($gid) eq 'concluded' }),
       'the goal concluded' or diag worker_logs($ctx);
    my $cid = meta($gid)->{comm_id};
    my $m = meta($gid);
    is $m->{planner}, 'llm', 'planned with the LLM';
    like $m->{conclusion}, qr/^\Q$model\E\n\nGoal: /, 'the conclusion: the model\'s text, then the account';
    ok holding($model, copies($gid, $cid)) >= 5, 'the model\'s text is in the room, the feed and the record';

    my ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", { sender => 'Ann' });
    is $code, 200, 'erase Ann';
    is_deeply [ holding($model, copies($gid, $cid)) ], [], 'the model\'s text is nowhere';
    is_deeply [ holding('Ann did: Write the report', copies($gid, $cid)) ], [], 'nor her result';
    $m = meta($gid);
    like $m->{conclusion}, qr/^\[erased\]\n\nGoal: Write the report\. Check the figures\.\n2 of 2 parts done\./,
         'the conclusion: "[erased]" where the model\'s text was, the account after it';
    like $m->{conclusion}, qr/\n   Ann: \[erased\]\n.*\n   Ben: Ben did: Check the figures/s,
         'her result erased, his kept';
    my ($final) = grep { $_->{sender} eq $COORD && $_->{type} == 11 } room($cid);
    is $final->{content}, $m->{conclusion}, 'the room\'s CONCLUSION says the same';
    is((feed($gid))[-1]{conclusion}, $m->{conclusion}, 'and the feed\'s last state');

    # the model drew on Ben's result too: erasing him after her changes nothing more of it
    ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", { sender => 'Ben' });
    is $code, 200, 'erase Ben' or diag json()->encode($d);
    like meta($gid)->{conclusion}, qr/^\[erased\]\n\nGoal: .*\n   Ann: \[erased\]\n.*\n   Ben: \[erased\]$/s,
         'then Ben: both results erased';
    stop_workers();
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 4: erasing what an agent said takes admin: its own token may only delete it
erasing what an agent said takes admin: its own token may delete it, not
?erase=1.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    for my $n (qw(Ann Ben)) {
        my ($code) = api($ctx, POST => '/register', { name => $n, type => 'Human Assistant', desc => "agent $n" },
                         headers => main::bearer($n, 'agent'));
        die "register $n: $code\n" unless $code == 200;
    }
    my ($code, $d) = api($ctx, POST => '/teamup', { sender => 'Ann', agent_names => ['Ben'] },
                         headers => main::bearer('Ann', 'agent'));
    my $cid = $d->{comm_id};
    api($ctx, POST => '/agents/Ann/messages', { comm_id => $cid, content => 'Ann speaking here' },
        headers => main::bearer('Ann', 'agent'));

    ($code, $d) = api($ctx, DELETE => '/agents/Ann?erase=1', undef, headers => main::bearer('Ann', 'agent'));
    is "$code $d->{code} $d->{field}", '403 forbidden erase', 'its own token with ?erase=1: 403 naming erase';
    like $d->{message}, qr/takes an "admin" token/, 'saying what it takes';
    is redis_cmd('EXISTS', 'ioa:{reg}:agent:Ann'), 1, 'nothing deleted';
    ($code, $d) = api($ctx, DELETE => '/agents/Ben?erase=1', undef, headers => main::bearer('Ann', 'agent'));
    is "$code $d->{code}", '403 forbidden', 'another agent\'s: 403';
    ($code, $d) = api($ctx, DELETE => '/agents/Ann?erase=1', undef, headers => main::bearer('eye', 'observer'));
    is "$code $d->{code}", '403 forbidden', 'an observer: 403';

    ($code, $d) = api($ctx, DELETE => '/agents/Ann?erase=1', undef, headers => main::bearer('root', 'admin'));
    is_deeply [ $code, $d->{erased}{envelopes} ], [ 200, 1 ], 'admin: 200, her envelope erased';
    # the deletion's audit entry is written after its answer: waited for
    my @a;
    wait_until(sub { @a = main::audit(); @a >= 2 }, 5);
    is_deeply [ map { "$_->{action} $_->{actor} $_->{target}" } @a ],
              [ "envelopes_erased root $cid/Ann", 'agent_deleted root Ann' ], 'audited with the actor';
--- no_error_log
[alert]
[crit]



=== TEST 5: a long room and a long feed are redacted in batches of 500, the rest kept
a long room and a long feed are gone through in batches of 500: every copy of
the sender's redacted, every other entry kept, the ids unchanged.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_rate off;
    ioa_limit_room_rate off;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register_agents($ctx, Ann => 'writes reports', Ben => 'checks figures');
    my $ag = connect_agents($ctx, qw(Ann Ben));
    worker($ctx, 'w1');
    my $gid = launch(goal => 'Write the report. Check the figures.', team_member_names => [qw(Ann Ben)]);
    ok drive(agents => $ag, secs => 20, until => sub { state_of($gid) eq 'concluded' }),
       'a goal concluded' or diag worker_logs($ctx);
    stop_workers();
    my $cid = meta($gid)->{comm_id};
    # the room goes on after the goal: 1,200 envelopes more, and the goal's
    # feed gets 1,200 events more (as a long goal's would)
    for my $i (1 .. 600) {
        for my $who (qw(Ann Ben)) {
            my ($code) = api($ctx, POST => "/agents/$who/messages", { comm_id => $cid, content => "$who line $i" });
            die "post: $code\n" unless $code == 200;
        }
    }
    my $fk = "ioa:{room:goal-$gid}:log";
    for my $i (1 .. 600) {
        for my $who (qw(Ann Ben)) {
            redis_cmd('XADD', $fk, '*', e => qq({"sender":"ioa-worker","timestamp":1,"event":"envelope",)
                . qq("goal_id":"$gid","envelope":{"id":"9-$i","sender":"$who","comm_id":"$cid",)
                . qq("type":4,"content":"$who feed line $i"}}));
        }
    }
    my @ids = map { $_->{id} } room($cid);
    my @fids = map { $_->{_id} } feed($gid);
    my $calls = main::evalsha_calls();

    my ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", { sender => 'Ann' });
    is $code, 200, 'erase Ann';
    is $d->{erased}, 602, 'her 600 lines and her 2 envelopes of the goal';
    ok $d->{goals}[0]{feed} >= 602, "the feed: her copies and the quoting events ($d->{goals}[0]{feed})";
    my $n = main::evalsha_calls() - $calls;
    ok $n >= 9, "in batches: three calls each to find the goals, rewrite the room, rewrite the feed ($n in all)";
    is_deeply [ map { $_->{id} } room($cid) ], \@ids, 'the room\'s ids unchanged';
    is_deeply [ map { $_->{_id} } feed($gid) ], \@fids, 'the feed\'s too';
    is scalar(grep { ($_->{content} // '') =~ /^Ann line/ } room($cid)), 0, 'none of her lines in the room';
    is scalar(grep { ($_->{content} // '') =~ /^Ben line/ } room($cid)), 600, 'all of his';
    is scalar(grep { ($_->{envelope}{content} // '') =~ /^Ann feed line/ } feed($gid)), 0, 'none of hers in the feed';
    is scalar(grep { ($_->{envelope}{content} // '') =~ /^Ben feed line/ } feed($gid)), 600, 'all of his';
    ($code, $d) = api($ctx, GET => "/rooms/$cid/verify");
    is $d->{status}, 'intact', 'the room verifies';
    is_deeply [ map { redis_cmd('EXISTS', $_) } "ioa:{room:$cid}:log:rw", "ioa:{room:$cid}:log:rwq", "$fk:rw", "$fk:rwq" ],
              [ 0, 0, 0, 0 ], 'no copy and no texts left behind';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 6: the goal's person erased: the feed's decisions on her messages lose her words
the goal's person erased: the feed's decisions on her messages lose her words,
marked.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    @Held = ();
    register_agents($ctx, Counter => 'counts the words in a text',
                    Shouter => 'shouts a text in upper case');
    my $ag = connect_agents($ctx, qw(Counter Shouter));
    my $ann = IoaTest::Agent->connect($ctx, 'Ann');
    ok $ann->ok, 'Ann is connected' or diag $ann->error;
    worker($ctx, 'w1', task_timeout => 60);
    my $gid = launch(goal => 'Count the words in "a b c".', _person => 'Ann');
    ok drive(agents => $ag, how => { Counter => 'hold' }, until => sub { @Held }),
       'Counter has its task' or diag worker_logs($ctx);
    my $cid = meta($gid)->{comm_id};
    my $secret = 'Also shout "my secret plan"';
    $ann->post(envelope(comm_id => $cid, sender => 'Ann', drop => ['type'], content => $secret));
    my $person = sub { grep { ($_->{event} // '') eq 'person' } feed($gid) };
    ok wait_until(sub { $person->() }, 10), 'her message is decided' or diag worker_logs($ctx);
    release();
    ok drive(agents => $ag, until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my ($p) = $person->();
    is $p->{decision}{message}, $secret, 'before: the feed quotes her';

    my ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", { sender => 'Ann' });
    is $code, 200, 'erase Ann: 200' or diag explain $d;
    ($p) = $person->();
    is_deeply [ @{ $p->{decision} }{qw(decision by sender message text reason)} ],
              [ 'add_work', 'rule', 'Ann', '[erased]', '[erased]', '[erased]' ],
              'after: the decision stands, her words are "[erased]"';
    is $p->{erased}{by}, '-', 'marked as erased';
    is $p->{sender}, 'ioa-worker', 'still the worker\'s event';
    is_deeply [ grep { /^feed / } holding($secret, copies($gid, $cid)) ], [],
              'no entry of the feed holds her message';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]
