# t/270-mcp.t -- the hub as an MCP server (ioa_mcp, ngx_ioa_mcp.c), driven
# by the real @modelcontextprotocol/sdk Client over Streamable HTTP
# (t/node/mcp-client.mjs, the version pinned in t/node/package-lock.json)
# against a real nginx, Redis, ioa-worker with the built-in planner and
# ioa-agent example agents; the transport's rules by hand with LWP.
#
#   make all node-deps && \
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/270-mcp.t

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(fresh_hub json);
use IoaTest::Api;
use IoaTest::Facade qw(key token agent_proc stop_children online node_steps);
use IoaTest::Goals qw(worker stop_workers);
use Cwd qw(abs_path);
use FindBin;
use LWP::UserAgent ();

no_root_location();
log_level('info');

our $Repo = abs_path("$FindBin::Bin/..");

die "t/node/node_modules is missing: make node-deps\n"
    unless -d "$Repo/t/node/node_modules/\@modelcontextprotocol/sdk";

$ENV{TEST_NGINX_MCP_KEY} = key();

# ------------------------------------------------------------------ helpers

# mcp($ctx, $token, @steps): the steps through the SDK's client in one
# session (t/node/mcp-client.mjs); returns its outcomes
sub mcp {
    my ($ctx, $token, @steps) = @_;
    return node_steps('mcp-client.mjs', ['http://127.0.0.1:' . $ctx->port . '/mcp', $token // '-'],
                      @steps);
}

# one HTTP exchange with the endpoint, by hand: ($code, $doc, $response)
sub raw {
    my ($ctx, $method, $body, %h) = @_;
    my $ua = LWP::UserAgent->new(timeout => 10);
    my $req = HTTP::Request->new($method, 'http://127.0.0.1:' . $ctx->port . '/mcp');
    $req->header('Content-Type' => 'application/json');
    $req->header('Accept' => 'application/json, text/event-stream');
    $req->header($_ => $h{$_}) for keys %h;
    $req->content(ref $body ? json()->encode($body) : $body) if defined $body;
    my $res = $ua->request($req);
    my $doc = eval { json()->decode($res->content) };
    return ($res->code, $doc, $res);
}

sub text_of { $_[0]{result}{content}[0]{text} }

run_tests();

__DATA__

=== TEST 1: the SDK's MCP client initializes, lists tools and templates, pings (open mode)
initialize, tools with their schemas, templates, ping: the SDK's client in
open mode.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth off; subrequest_output_buffer_size 1m; }
    location = /mcp { ioa_mcp; ioa_auth off; }
--- ioa_scenario
    fresh_hub($ctx);
    my ($init, $tools, $tpl, $ping) = mcp($ctx, undef,
        { op => 'connect' }, { op => 'tools' }, { op => 'templates' }, { op => 'ping' });
    ok $init->{ok}, 'initialize' or diag json()->encode($init);
    is $init->{result}{protocolVersion}, '2025-11-25', 'the SDK\'s newest version is spoken';
    is $init->{result}{server}{name}, 'ioa', 'server info: the name';
    like $init->{result}{server}{version}, qr/^\d+\.\d+\.\d+$/, 'and a version';
    ok $init->{result}{capabilities}{tools}, 'tools are a capability';
    ok $init->{result}{capabilities}{resources}, 'and resources';
    like $init->{result}{sessionId}, qr/^[0-9a-f]{64}$/, 'a session id';
    like $init->{result}{instructions}, qr/launch_goal/, 'instructions for the model';

    ok $tools->{ok}, 'tools/list' or diag json()->encode($tools);
    my %t = map { ($_->{name} => $_) } @{ $tools->{result}{tools} };
    is_deeply [sort keys %t], [qw(cancel_goal find_agents goal_status launch_goal post_to_goal)],
        'the five tools';
    is_deeply $t{find_agents}{inputSchema}{required}, ['capabilities'], 'find_agents needs capabilities';
    is $t{find_agents}{inputSchema}{properties}{capabilities}{type}, 'array', 'an array';
    is $t{find_agents}{inputSchema}{properties}{capabilities}{items}{type}, 'string', 'of strings';
    is $t{find_agents}{inputSchema}{properties}{limit}{type}, 'integer', 'limit: an integer';
    is_deeply $t{launch_goal}{inputSchema}{required}, ['goal'], 'launch_goal needs the goal';
    is_deeply $t{post_to_goal}{inputSchema}{required}, [qw(goal_id content)],
        'post_to_goal needs goal_id and content';
    is_deeply $t{$_}{inputSchema}{required}, ['goal_id'], "$_ needs goal_id"
        for qw(goal_status cancel_goal);
    ok !$t{$_}{inputSchema}{additionalProperties}, "$_: no other argument"
        for keys %t;
    ok $t{goal_status}{annotations}{readOnlyHint}, 'goal_status reads only';
    ok $t{cancel_goal}{annotations}{destructiveHint}, 'cancel_goal is destructive';

    is $tpl->{result}{resourceTemplates}[0]{uriTemplate}, 'ioa://goals/{goal_id}/transcript',
        'the transcript template';
    ok $ping->{ok}, 'ping';
--- no_error_log
[alert]
[crit]



=== TEST 2: the MCP transport by hand answers methods, sessions, errors and versions
the transport by hand: 405 for GET and DELETE, 202 for notifications, session
required and checked, parse errors, batches, protocol versions.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth off; subrequest_output_buffer_size 1m; }
    location = /mcp { ioa_mcp; ioa_auth off; }
--- ioa_scenario
    fresh_hub($ctx);
    my ($code, $doc, $res) = raw($ctx, 'GET');
    is $code, 405, 'GET: 405 (no stream of the server\'s own)';
    is $res->header('Allow'), 'POST', 'Allow: POST';
    ($code) = raw($ctx, 'DELETE');
    is $code, 405, 'DELETE: 405';

    my $init = { jsonrpc => '2.0', id => 1, method => 'initialize',
                 params => { protocolVersion => '2025-06-18', capabilities => {},
                             clientInfo => { name => 'lwp', version => '0' } } };
    ($code, $doc, $res) = raw($ctx, POST => $init);
    is $code, 200, 'initialize: 200';
    is $res->header('Content-Type'), 'application/json', 'application/json';
    is $doc->{result}{protocolVersion}, '2025-06-18', 'an older version we speak is kept';
    my $sid = $res->header('Mcp-Session-Id');
    like $sid, qr/^[0-9a-f]{64}$/, 'the session id';
    $init->{params}{protocolVersion} = '2024-11-05';
    ($code, $doc) = raw($ctx, POST => $init);
    is $doc->{result}{protocolVersion}, '2025-11-25', 'one we do not: our newest is offered';

    ($code, $doc, $res) = raw($ctx, POST => { jsonrpc => '2.0', method => 'notifications/initialized' },
                              'Mcp-Session-Id' => $sid);
    is $code, 202, 'a notification: 202';
    is $res->content, '', 'no body';
    ($code) = raw($ctx, POST => { jsonrpc => '2.0', id => 7, result => {} }, 'Mcp-Session-Id' => $sid);
    is $code, 202, 'a response from the client: 202';

    my $list = { jsonrpc => '2.0', id => 'a', method => 'tools/list' };
    ($code, $doc) = raw($ctx, POST => $list);
    is $code, 400, 'no session id: 400';
    is $doc->{error}{code}, -32600, 'invalid request';
    ($code, $doc) = raw($ctx, POST => $list, 'Mcp-Session-Id' => 'f' x 64);
    is $code, 404, 'a session id we did not make: 404';
    (my $other = $sid) =~ s/.$/$& eq '0' ? '1' : '0'/e;
    ($code) = raw($ctx, POST => $list, 'Mcp-Session-Id' => $other);
    is $code, 404, 'one bit changed: 404';
    ($code, $doc) = raw($ctx, POST => $list, 'Mcp-Session-Id' => $sid,
                        'MCP-Protocol-Version' => '2025-06-18');
    is $code, 200, 'with the session: 200';
    is $doc->{id}, 'a', 'the id answered as it came';
    is scalar @{ $doc->{result}{tools} }, 5, 'the tools';
    ($code, $doc) = raw($ctx, POST => $list, 'Mcp-Session-Id' => $sid,
                        'MCP-Protocol-Version' => '1999-01-01');
    is $code, 400, 'an unsupported MCP-Protocol-Version: 400';

    ($code, $doc) = raw($ctx, POST => '{"jsonrpc":"2.0","id":1,', 'Mcp-Session-Id' => $sid);
    is $code, 400, 'not JSON: 400';
    is $doc->{error}{code}, -32700, 'parse error';
    is $doc->{id}, undef, 'with id null';
    ($code, $doc) = raw($ctx, POST => [$list, $list], 'Mcp-Session-Id' => $sid);
    is $doc->{error}{code}, -32600, 'a batch: invalid request';
    ($code, $doc) = raw($ctx, POST => { jsonrpc => '2.0', id => 3, method => 'sampling/nothing' },
                        'Mcp-Session-Id' => $sid);
    is $doc->{error}{code}, -32601, 'an unknown method: -32601';
    ($code, $doc) = raw($ctx, POST => { jsonrpc => '2.0', id => 4, method => 'resources/read',
                                        params => { uri => 'file:///etc/passwd' } },
                        'Mcp-Session-Id' => $sid);
    is $doc->{error}{code}, -32002, 'a resource we do not have: -32002';
--- no_error_log
[alert]
[crit]



=== TEST 2b: a browser page of an origin not listed is refused 403 (DNS rebinding)
ioa_mcp and the A2A endpoint refuse an Origin that ioa_cors_origins does not
list (none where there is no such directive) with 403 and a JSON-RPC error
naming it, as MCP requires against DNS rebinding; a listed origin and a
request without Origin go on; the public agent card stays readable.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth off; subrequest_output_buffer_size 1m; }
    location = /mcp { ioa_mcp; ioa_auth off; ioa_cors_origins http://app.example; }
    location = /mcp-closed { ioa_mcp; ioa_auth off; }
    location = /.well-known/agent-card.json { ioa_a2a url=/a2a; ioa_auth off; }
    location = /a2a { ioa_a2a; ioa_auth off; ioa_cors_origins http://app.example; }
--- ioa_scenario
    fresh_hub($ctx);
    my $base = 'http://127.0.0.1:' . $ctx->port;
    my $ua = LWP::UserAgent->new(timeout => 10, keep_alive => 1);
    my $post = sub {
        my ($path, $body, %h) = @_;
        my $req = HTTP::Request->new(POST => "$base$path");
        $req->header('Content-Type' => 'application/json');
        $req->header('Accept' => 'application/json, text/event-stream');
        $req->header($_ => $h{$_}) for keys %h;
        $req->content(json()->encode($body));
        my $res = $ua->request($req);
        return ($res->code, eval { json()->decode($res->content) }, $res);
    };
    my $init = { jsonrpc => '2.0', id => 1, method => 'initialize',
                 params => { protocolVersion => '2025-06-18', capabilities => {},
                             clientInfo => { name => 'lwp', version => '0' } } };

    my ($code, $doc, $res) = $post->('/mcp', $init, Origin => 'http://evil.example.com',
                                     Host => 'evil.example.com');
    is $code, 403, 'MCP: an origin not listed, with its own Host: 403';
    is $doc->{error}{code}, -32600, 'a JSON-RPC error';
    is $doc->{id}, undef, 'id null';
    like $doc->{error}{message}, qr/"http:\/\/evil\.example\.com" may not call this endpoint: it is not in ioa_cors_origins/,
        'naming the origin and the directive';
    ($code, $doc, $res) = $post->('/mcp', $init);
    is $code, 200, 'the same connection then answers a request without Origin: 200';
    ($code, $doc, $res) = $post->('/mcp', $init, Origin => 'http://app.example');
    is $code, 200, 'a listed origin: 200';
    is $res->header('Access-Control-Allow-Origin'), 'http://app.example', 'with CORS';
    ($code) = $post->('/mcp-closed', $init, Origin => 'http://app.example');
    is $code, 403, 'no ioa_cors_origins: any Origin is refused';
    ($code) = $post->('/mcp-closed', $init);
    is $code, 200, 'and a request without one goes on';
    my $opt = HTTP::Request->new(OPTIONS => "$base/mcp");
    $opt->header(Origin => 'http://evil.example.com');
    $opt->header('Access-Control-Request-Method' => 'POST');
    is $ua->request($opt)->code, 403, 'a preflight from an origin not listed: 403';

    my $send = { jsonrpc => '2.0', id => 2, method => 'message/send',
                 params => { message => { role => 'user', messageId => 'm1',
                                          parts => [{ kind => 'text', text => 'hi' }] } } };
    ($code, $doc) = $post->('/a2a', $send, Origin => 'http://evil.example.com');
    is $code, 403, 'A2A: an origin not listed: 403';
    is $doc->{error}{code}, -32600, 'a JSON-RPC error there too';
    my $card = HTTP::Request->new(GET => "$base/.well-known/agent-card.json");
    $card->header(Origin => 'http://evil.example.com');
    is $ua->request($card)->code, 200, 'the agent card stays public';
--- no_error_log
[alert]
[crit]



=== TEST 3: with tokens an MCP client finds agents and launches, follows, cancels goals
with tokens: find agents, launch a goal and follow it to its conclusion, read
its transcript, post to another and cancel it.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_MCP_KEY;
                 subrequest_output_buffer_size 1m; }
    location = /mcp { ioa_mcp; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_MCP_KEY; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1');
    agent_proc($ctx, 'Shouter', 'uppercases text, shouts words', token('Shouter', 'agent'),
               'tr', 'a-z', 'A-Z');
    agent_proc($ctx, 'Sleeper', 'naps on the couch', token('Sleeper', 'agent'), 'sleep', '30');
    my $ann = token('Ann', 'agent launch');
    ok online($ctx, $ann, 'Shouter', 'Sleeper'), 'the agents are online';

    my @o = mcp($ctx, $ann,
        { op => 'connect' },
        { op => 'call', name => 'find_agents', arguments => { capabilities => ['shouts words'] } },
        { op => 'call', name => 'launch_goal', arguments => { goal => 'Shout the words hello world' },
          save => 'goal_id' },
        { op => 'until', name => 'goal_status', arguments => { goal_id => '$goal_id' },
          field => 'state', values => [qw(concluded failed cancelled)], seconds => 60 },
        { op => 'read', uri => 'ioa://goals/$goal_id/transcript' },
        { op => 'resources' },
        { op => 'call', name => 'launch_goal',
          arguments => { goal => 'Nap on the couch', team_member_names => ['Sleeper'] },
          save => 'goal_id' },
        { op => 'until', name => 'goal_status', arguments => { goal_id => '$goal_id' },
          field => 'state', values => ['running'], seconds => 30 },
        { op => 'call', name => 'post_to_goal',
          arguments => { goal_id => '$goal_id', content => 'please hurry' } },
        { op => 'call', name => 'cancel_goal', arguments => { goal_id => '$goal_id' } },
        { op => 'until', name => 'goal_status', arguments => { goal_id => '$goal_id' },
          field => 'state', values => ['cancelled'], seconds => 30 },
        { op => 'call', name => 'cancel_goal', arguments => { goal_id => '$goal_id' } },
    );
    my ($init, $find, $launch, $done, $read, $list, $nap, $running, $post, $cancel, $cancelled,
        $again) = @o;
    ok $init->{ok}, 'initialize with a token' or diag json()->encode($init);

    ok $find->{ok} && !$find->{result}{isError}, 'find_agents' or diag json()->encode($find);
    my @names = map { $_->{name} } @{ $find->{result}{structuredContent}{agents} };
    is $names[0], 'Shouter', 'finds the agent that shouts, first';
    is_deeply json()->decode(text_of($find)), $find->{result}{structuredContent}{agents},
        'the text is the JSON of what /retrieve_assistant answered';

    my $gid = $launch->{result}{structuredContent}{goal_id};
    like $gid, qr/^[0-9a-f]{32}$/, 'launch_goal: the goal id' or diag json()->encode($launch);
    is $launch->{result}{structuredContent}{state}, 'queued', 'queued';
    ok $done->{ok}, 'goal_status until it ended' or diag json()->encode($done);
    is $done->{result}{structuredContent}{state}, 'concluded', 'concluded';
    like $done->{result}{structuredContent}{conclusion}, qr/1 of 1 part done/, 'with its conclusion';
    is $done->{result}{structuredContent}{launched_by}, 'Ann', 'launched by the token\'s subject';

    ok $read->{ok}, 'the transcript resource' or diag json()->encode($read);
    my $c = $read->{result}{contents}[0];
    is $c->{uri}, "ioa://goals/$gid/transcript", 'its uri';
    is $c->{mimeType}, 'application/json', 'JSON';
    my $tr = json()->decode($c->{text});
    is $tr->{goal}{state}, 'concluded', 'the goal';
    is $tr->{room}{comm_id}, $done->{result}{structuredContent}{comm_id}, 'and its room';
    my @result = grep { $_->{sender} eq 'Shouter' } @{ $tr->{room}{chat_record} };
    ok @result, 'the Shouter spoke in it';
    like join(' ', map { $_->{task_conclusion} // $_->{content} // '' } @result),
         qr/HELLO WORLD/, 'its result is there';

    ok grep({ $_->{uri} eq "ioa://goals/$gid/transcript" } @{ $list->{result}{resources} }),
        'resources/list names the goal\'s transcript' or diag json()->encode($list);

    my $nid = $nap->{result}{structuredContent}{goal_id};
    isnt $nid, $gid, 'a second goal';
    ok $running->{ok}, 'it runs' or diag json()->encode($running);
    ok !$post->{result}{isError}, 'post_to_goal' or diag json()->encode($post);
    like $post->{result}{structuredContent}{message_id}, qr/^\d+-\d+$/, 'the message is queued';
    is $post->{result}{structuredContent}{sender}, 'Ann', 'as the token\'s subject';
    is $cancel->{result}{structuredContent}{state}, 'cancelling', 'cancel_goal: cancelling'
        or diag json()->encode($cancel);
    is $cancelled->{result}{structuredContent}{state}, 'cancelled', 'then cancelled';
    ok $again->{result}{isError}, 'cancelling it again: a tool error';
    is $again->{result}{structuredContent}{status}, 409, 'the endpoint\'s 409';
    is $again->{result}{structuredContent}{error}{code}, 'goal_ended', 'goal_ended';
    like text_of($again), qr/goal_ended/, 'said in the text the model reads';

    # a launcher without the agent scope reads the rooms of its goals (it
    # is their person), not another's goal
    my $lia = token('Lia', 'launch');
    @o = mcp($ctx, $lia,
        { op => 'connect' },
        { op => 'call', name => 'launch_goal', arguments => { goal => 'Shout the words good night' },
          save => 'goal_id' },
        { op => 'until', name => 'goal_status', arguments => { goal_id => '$goal_id' },
          field => 'state', values => [qw(concluded failed cancelled)], seconds => 60 },
        { op => 'read', uri => 'ioa://goals/$goal_id/transcript' },
        { op => 'read', uri => "ioa://goals/$gid/transcript" },
        { op => 'call', name => 'goal_status', arguments => { goal_id => $gid } },
    );
    is $o[2]{result}{structuredContent}{state}, 'concluded', 'a launch-only token: concluded'
        or diag json()->encode($o[2]);
    $tr = json()->decode($o[3]{result}{contents}[0]{text} // 'null');
    ok grep({ ($_->{task_conclusion} // '') =~ /GOOD NIGHT/ } @{ $tr->{room}{chat_record} // [] }),
        'its transcript, with the result' or diag json()->encode($o[3]);
    ok !$o[4]{ok}, 'Ann\'s goal\'s transcript: refused';
    is $o[4]{error}{code}, -32002, '... as a goal that does not exist'
        or diag json()->encode($o[4]);
    is $o[5]{result}{structuredContent}{status}, 404, 'and its status: 404, as an unknown goal\'s';
    stop_children();
    stop_workers();
--- no_error_log
[alert]
[crit]



=== TEST 4: MCP refuses bad arguments, missing tokens and scopes each in its own way
bad arguments are -32602; an endpoint's refusal is a tool error; no token is
401 with WWW-Authenticate; a token without the launch scope is told so.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_MCP_KEY;
                 subrequest_output_buffer_size 1m; }
    location = /mcp { ioa_mcp; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_MCP_KEY; }
--- ioa_scenario
    fresh_hub($ctx);
    my ($none) = mcp($ctx, undef, { op => 'connect' });
    ok !$none->{ok}, 'no token: the client cannot connect';
    is $none->{error}{code}, 401, 'HTTP 401' or diag json()->encode($none);
    like $none->{error}{message}, qr/unauthorized/, 'the hub\'s reason';
    my ($code, $doc, $res) = raw($ctx, POST => { jsonrpc => '2.0', id => 1, method => 'ping' });
    is $code, 401, 'by hand: 401';
    like $res->header('WWW-Authenticate'), qr/^Bearer /, 'WWW-Authenticate: Bearer';
    ($code) = raw($ctx, POST => { jsonrpc => '2.0', id => 1, method => 'ping' },
                  Authorization => 'Bearer not.a.token');
    is $code, 401, 'a bad token: 401';

    my $ann = token('Ann', 'agent launch');
    my @o = mcp($ctx, $ann,
        { op => 'connect' },
        { op => 'call', name => 'goal_status', arguments => { goal_id => 42 } },
        { op => 'call', name => 'goal_status', arguments => { goal_id => '../list_all_agents' } },
        { op => 'call', name => 'launch_goal', arguments => {} },
        { op => 'call', name => 'launch_goal', arguments => { goal => 'x', colour => 'red' } },
        { op => 'call', name => 'find_agents', arguments => { capabilities => 'poems' } },
        { op => 'call', name => 'no_such_tool', arguments => {} },
        { op => 'call', name => 'goal_status', arguments => { goal_id => 'f' x 32 } },
        { op => 'call', name => 'launch_goal', arguments => { goal => 'x', max_turns => -5 } },
        { op => 'read', uri => 'ioa://goals/' . ('e' x 32) . '/transcript' },
    );
    ok $o[0]{ok}, 'connected';
    for my $i (1 .. 6) {
        ok !$o[$i]{ok}, "bad arguments $i: an error, no result" or diag json()->encode($o[$i]);
        is $o[$i]{error}{code}, -32602, "bad arguments $i: -32602 invalid params";
    }
    like $o[1]{error}{message}, qr/"goal_id" must be a string/, 'says what is wrong';
    like $o[2]{error}{message}, qr/not a goal id/, 'no path through a goal id';
    like $o[3]{error}{message}, qr/"goal" is required/, 'a missing argument';
    like $o[4]{error}{message}, qr/unknown argument "colour"/, 'an unknown argument';
    like $o[6]{error}{message}, qr/unknown tool "no_such_tool"/, 'an unknown tool';
    ok $o[7]{result}{isError}, 'an unknown goal: a tool error';
    is $o[7]{result}{structuredContent}{error}{code}, 'unknown_goal', 'unknown_goal';
    is $o[7]{result}{structuredContent}{status}, 404, 'the endpoint\'s 404';
    ok $o[8]{result}{isError}, 'a value the endpoint refuses: a tool error';
    is $o[8]{result}{structuredContent}{error}{field}, 'max_turns', 'naming the field';
    is $o[9]{error}{code}, -32002, 'the transcript of no goal: resource not found';

    my $bob = token('Bob', 'agent');
    @o = mcp($ctx, $bob,
        { op => 'connect' },
        { op => 'call', name => 'launch_goal', arguments => { goal => 'Shout' } },
        { op => 'call', name => 'find_agents', arguments => { capabilities => ['anything'] } },
        { op => 'resources' },
    );
    ok $o[0]{ok}, 'an agent-only token connects';
    ok $o[1]{result}{isError}, 'launch_goal without the launch scope: a tool error';
    is $o[1]{result}{structuredContent}{status}, 403, '403';
    like text_of($o[1]), qr/lacks the \\?"launch\\?" scope/, 'the text says which scope is missing';
    ok !$o[2]{result}{isError}, 'find_agents with the agent scope works' or diag json()->encode($o[2]);
    is_deeply $o[3]{result}{resources}, [], 'no goals to list: an empty list';

    my $eve = token('Eve', 'launch');
    @o = mcp($ctx, $eve, { op => 'connect' },
        { op => 'call', name => 'find_agents', arguments => { capabilities => ['anything'] } });
    ok $o[1]{result}{isError}, 'find_agents without the agent scope: a tool error';
    like text_of($o[1]), qr/lacks the \\?"agent\\?" scope/, 'saying so';

    # a session is the identity's: Bob's id with Ann's token is unknown
    ($code, $doc, $res) = raw($ctx, POST => { jsonrpc => '2.0', id => 1, method => 'initialize',
        params => { protocolVersion => '2025-06-18', capabilities => {},
                    clientInfo => { name => 'lwp', version => '0' } } },
        Authorization => "Bearer $bob");
    my $sid = $res->header('Mcp-Session-Id');
    ($code) = raw($ctx, POST => { jsonrpc => '2.0', id => 2, method => 'ping' },
                  Authorization => "Bearer $bob", 'Mcp-Session-Id' => $sid);
    is $code, 200, 'Bob\'s session with Bob\'s token';
    ($code) = raw($ctx, POST => { jsonrpc => '2.0', id => 2, method => 'ping' },
                  Authorization => "Bearer $ann", 'Mcp-Session-Id' => $sid);
    is $code, 404, 'with Ann\'s: unknown';
--- no_error_log
[alert]
[crit]
