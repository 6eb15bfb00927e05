# t/280-a2a-server.t -- the hub as an A2A agent (ioa_a2a, ngx_ioa_a2a.c),
# driven by the real @a2a-js/sdk Client over its JSON-RPC transport, both
# protocol versions (t/node/a2a-client.mjs, the version pinned in
# t/node/package-lock.json), against a real nginx, Redis, ioa-worker with
# the built-in planner and ioa-agent example agents; the wire by hand with
# LWP where the SDK hides it.
#
#   make all node-deps && \
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/280-a2a-server.t

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(fresh_hub json);
use IoaTest::Api;
use IoaTest::Facade qw(key token agent_proc stop_children online node_steps);
use IoaTest::Goals qw(worker stop_workers);
use IoaTest::SSE;
use Cwd qw(abs_path);
use FindBin;
use LWP::UserAgent ();
use MIME::Base64 ();
use Time::HiRes qw(time);

no_root_location();
log_level('info');

our $Repo = abs_path("$FindBin::Bin/..");

die "t/node/node_modules is missing: make node-deps\n"
    unless -d "$Repo/t/node/node_modules/\@a2a-js/sdk";

$ENV{TEST_NGINX_A2A_KEY} = key();

# ------------------------------------------------------------------ helpers

sub base { 'http://127.0.0.1:' . $_[0]->port }

# a2a($ctx, $token, @steps): the steps through the SDK's client
sub a2a {
    my ($ctx, $token, @steps) = @_;
    return node_steps('a2a-client.mjs', [base($ctx), $token // '-'], @steps);
}

# one HTTP exchange, by hand: ($code, $doc, $response)
sub raw {
    my ($ctx, $method, $path, $body, %h) = @_;
    my $ua = LWP::UserAgent->new(timeout => 30);
    my $req = HTTP::Request->new($method, base($ctx) . $path);
    $req->header('Content-Type' => 'application/json');
    $req->header($_ => $h{$_}) for keys %h;
    $req->content(ref $body ? json()->encode($body) : $body) if defined $body;
    my $res = $ua->request($req);
    my $doc = eval { json()->decode($res->content) };
    return ($res->code, $doc, $res);
}

sub rpc {
    my ($ctx, $method, $params, %h) = @_;
    return raw($ctx, POST => '/a2a', { jsonrpc => '2.0', id => 7, method => $method,
                                        params => $params }, %h);
}

# the events of an SSE answer: the data of each, decoded
sub sse_events {
    my ($res) = @_;
    my @ev;
    for my $block (split /\n\n/, $res->content) {
        my ($id) = $block =~ /^id: (.*)$/m;
        my @data = $block =~ /^data: (.*)$/mg;
        next unless @data;
        my $d = eval { json()->decode(join "\n", @data) };
        push @ev, { id => $id, data => $d, text => join("\n", @data) };
    }
    return @ev;
}

# a JWT's "exp"
sub exp_of {
    my $p = (split /\./, $_[0])[1];
    $p =~ tr{-_}{+/};
    return json()->decode(MIME::Base64::decode_base64($p))->{exp};
}

sub states_of { map { $_->{statusUpdate} ? $_->{statusUpdate}{status}{state} : () } @_ }

run_tests();

__DATA__

=== TEST 1: in open mode the card, send, stream and get work in both protocol versions
open mode: the card, a blocking send, a stream to the end, get, both protocol
versions through the SDK.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth off; subrequest_output_buffer_size 1m; }
    location = /.well-known/agent-card.json { ioa_a2a url=/a2a name=test-hub; ioa_auth off; }
    location = /a2a { ioa_a2a; ioa_auth off; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1');
    agent_proc($ctx, 'Shouter', 'uppercases text, shouts words', undef, 'tr', 'a-z', 'A-Z');
    ok online($ctx, undef, 'Shouter'), 'the agent is online';

    my ($code, $card) = raw($ctx, GET => '/.well-known/agent-card.json');
    is $code, 200, 'the card';
    is $card->{name}, 'test-hub', 'its name';
    my $url = base($ctx) . '/a2a';
    is_deeply [map { "$_->{protocolBinding} $_->{protocolVersion} $_->{url}" }
               @{ $card->{supportedInterfaces} }],
        ["JSONRPC 1.0 $url", "JSONRPC 0.3 $url"], 'the endpoint, for 1.0 and for 0.3';
    is $card->{url}, $url, '0.3: url';
    is $card->{protocolVersion}, '0.3.0', '0.3: protocolVersion';
    ok $card->{capabilities}{streaming}, 'streaming';
    ok !$card->{capabilities}{pushNotifications}, 'no push notifications';
    is_deeply $card->{securitySchemes}, {}, 'open mode: no security scheme';
    is $card->{skills}[0]{id}, 'goal', 'the hub\'s own skill';
    my ($shout) = grep { $_->{id} eq 'agent:Shouter' } @{ $card->{skills} };
    is $shout->{description}, 'uppercases text, shouts words', 'a skill per agent of the network';

    for my $v ('1.0', '0.3') {
        my @o = a2a($ctx, undef,
            { op => 'connect', version => $v },
            { op => 'send', text => 'Shout the words hello world', save => 't' },
            { op => 'get', id => '$t' },
            { op => 'stream', text => 'Shout the words good night', save => 's' },
            { op => 'get', id => '$s', historyLength => 0 },
        );
        my ($conn, $sent, $got, $stream, $got2) = @o;
        ok $conn->{ok}, "$v: connect" or diag json()->encode($conn);
        is $conn->{result}{version}, $v, "$v: the client speaks $v";

        ok $sent->{ok}, "$v: send" or diag json()->encode($sent);
        my $t = $sent->{result};
        is $t->{status}{state}, 'TASK_STATE_COMPLETED', "$v: a blocking send answers the ended task";
        like $t->{artifacts}[0]{parts}[0]{text}, qr/HELLO WORLD/, "$v: the conclusion is the artifact";
        is $t->{contextId}, $t->{id}, "$v: the context is the task";
        like $t->{id}, qr/^[0-9a-f]{32}$/, "$v: the task id is the goal id";
        ok scalar(@{ $t->{history} }) > 2, "$v: history: the user's message and the team's";
        is $t->{history}[0]{role}, 'ROLE_USER', "$v: first the user's";
        like $t->{history}[0]{messageId}, qr/^m-\d+-\d+$/, "$v: with the messageId the client gave";
        ok((grep { ($_->{parts}[0]{text} // '') =~ /^Shouter: .*HELLO WORLD/s } @{ $t->{history} }),
           "$v: the agent's result among them") or diag json()->encode($t->{history});

        ok $got->{ok}, "$v: get" or diag json()->encode($got);
        is $got->{result}{status}{state}, 'TASK_STATE_COMPLETED', "$v: get: completed";
        like $got->{result}{artifacts}[0]{parts}[0]{text}, qr/HELLO WORLD/, "$v: get: the artifact";

        ok $stream->{ok}, "$v: stream" or diag json()->encode($stream);
        my @ev = @{ $stream->{result} // [] };
        ok $ev[0]{task}, "$v: the stream starts with the task";
        is $ev[0]{task}{status}{state}, 'TASK_STATE_SUBMITTED', "$v: submitted";
        my @st = states_of(@ev);
        is $st[-1], 'TASK_STATE_COMPLETED', "$v: the stream ends completed";
        ok((grep { $_ eq 'TASK_STATE_WORKING' } @st), "$v: working on the way");
        my ($art) = grep { $_->{artifactUpdate} } @ev;
        like $art->{artifactUpdate}{artifact}{parts}[0]{text}, qr/GOOD NIGHT/,
            "$v: the conclusion streams as the artifact";
        ok((grep { ($_->{statusUpdate}{status}{message}{parts}[0]{text} // '') =~ /^Shouter: /
                 } @ev), "$v: the team's envelopes stream as messages");
        is $got2->{result}{status}{state}, 'TASK_STATE_COMPLETED', "$v: get after the stream";
    }

    # each version's own default: 0.3 answers at once unless blocking is
    # true, 1.0 waits unless returnImmediately is true
    my $m03 = { message => { kind => 'message', messageId => 'd1', role => 'user',
                             parts => [{ kind => 'text', text => 'Shout the words one' }] } };
    my ($code, $doc) = rpc($ctx, 'message/send', $m03);
    is $code, 200, '0.3 without configuration: 200';
    like $doc->{result}{status}{state}, qr/^(submitted|working)$/, '0.3: not blocking by default';
    ($code, $doc) = rpc($ctx, 'message/send', { %$m03, configuration => { blocking => JSON::PP::true() } });
    is $doc->{result}{status}{state}, 'completed', '0.3 with blocking true: the ended task';
    my $m10 = { message => { messageId => 'd2', role => 'ROLE_USER',
                             parts => [{ text => 'Shout the words two' }] } };
    ($code, $doc) = rpc($ctx, 'SendMessage', $m10);
    is $doc->{result}{task}{status}{state} // $doc->{result}{status}{state}, 'TASK_STATE_COMPLETED',
        '1.0 without configuration: blocking';
    ($code, $doc) = rpc($ctx, 'SendMessage', { %$m10, configuration => { returnImmediately => JSON::PP::true() } });
    like $doc->{result}{task}{status}{state} // $doc->{result}{status}{state},
        qr/^TASK_STATE_(SUBMITTED|WORKING)$/, '1.0 with returnImmediately: at once';
--- no_error_log
[alert]
[crit]



=== TEST 2: with tokens, no token is 401 and every malformed request gets A2A's error
with tokens: the card's security scheme, the extended card, 401 without a
token, and every malformed request answered with A2A's error.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_A2A_KEY;
                 subrequest_output_buffer_size 1m; }
    location = /.well-known/agent-card.json { ioa_a2a url=/a2a; ioa_auth jwt;
                                              ioa_auth_jwt_key $TEST_NGINX_A2A_KEY; }
    location = /a2a { ioa_a2a; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_A2A_KEY; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1');
    agent_proc($ctx, 'Shouter', 'uppercases text, shouts words', token('Shouter', 'agent'),
               'tr', 'a-z', 'A-Z');
    my $ann = token('Ann', 'agent launch');
    my $admin = token('root', 'admin');
    ok online($ctx, $ann, 'Shouter'), 'the agent is online';

    my ($code, $card) = raw($ctx, GET => '/.well-known/agent-card.json');
    is $code, 200, 'the card needs no token';
    my $bearer = $card->{securitySchemes}{bearer};
    is $bearer->{type}, 'http', '0.3: an http scheme';
    is $bearer->{scheme}, 'bearer', '0.3: bearer';
    is $bearer->{bearerFormat}, 'JWT', 'a JWT';
    is $bearer->{httpAuthSecurityScheme}{scheme}, 'Bearer', '1.0: httpAuthSecurityScheme';
    is_deeply $card->{security}, [{ bearer => [] }], '0.3: required';
    is_deeply $card->{securityRequirements}, [{ schemes => { bearer => { list => [] } } }],
        '1.0: required';
    ok $card->{capabilities}{extendedAgentCard}, 'an extended card for callers with a token';
    is_deeply [map { $_->{id} } @{ $card->{skills} }], ['goal'],
        'without a token the card shows the hub\'s own skill only';

    my @o = a2a($ctx, $admin, { op => 'connect' }, { op => 'extended' });
    ok $o[1]{ok}, 'GetExtendedAgentCard' or diag json()->encode($o[1]);
    ok((grep { $_->{id} eq 'agent:Shouter' } @{ $o[1]{result}{skills} }),
       'an administrator\'s extended card lists the network\'s agents');
    @o = a2a($ctx, $ann, { op => 'connect', version => '0.3' }, { op => 'extended' });
    ok $o[1]{ok}, '0.3: agent/getAuthenticatedExtendedCard' or diag json()->encode($o[1]);

    # no token, a bad one: HTTP 401 with WWW-Authenticate, through the SDK too
    @o = a2a($ctx, undef, { op => 'connect' },
             { op => 'send', text => 'Shout the words no token' });
    ok !$o[1]{ok}, 'the SDK: no token, no task';
    like $o[1]{error}{message}, qr/401/, 'HTTP 401' or diag json()->encode($o[1]);
    my $res;
    ($code, undef, $res) = rpc($ctx, 'SendMessage', {});
    is $code, 401, 'by hand: 401';
    like $res->header('WWW-Authenticate'), qr/^Bearer /, 'WWW-Authenticate: Bearer';
    ($code) = rpc($ctx, 'SendMessage', {}, Authorization => 'Bearer not.a.token');
    is $code, 401, 'a bad token: 401';

    # a token without the launch scope: the endpoint's refusal
    my $agent = token('Shouter', 'agent');
    my $doc;
    ($code, $doc) = rpc($ctx, 'SendMessage',
        { message => { messageId => 'x', role => 'ROLE_USER', parts => [{ text => 'hi' }] } },
        Authorization => "Bearer $agent");
    is $code, 403, 'no launch scope: 403';
    like $doc->{error}{message}, qr/launch/, 'the scope it needs is named';
    is $doc->{id}, 7, 'the request\'s id';

    my %auth = (Authorization => "Bearer $ann");
    my $msg = sub { { message => { messageId => 'm', role => 'ROLE_USER', parts => [@_] } } };
    my @cases = (
        # A2A carries every JSON-RPC error in a 200 (its TCK checks it)
        [ 'not JSON', [ POST => '/a2a', '{"jsonrpc":', %auth ], 200, -32700 ],
        [ 'a batch', [ POST => '/a2a', [{ jsonrpc => '2.0', id => 1, method => 'GetTask' }], %auth ],
          200, -32600 ],
        [ 'no jsonrpc', [ POST => '/a2a', { id => 1, method => 'GetTask' }, %auth ], 200, -32600 ],
        [ 'jsonrpc 1.0', [ POST => '/a2a', { jsonrpc => '1.0', id => 1, method => 'GetTask' }, %auth ],
          200, -32600 ],
        [ 'no method', [ POST => '/a2a', { jsonrpc => '2.0', id => 1 }, %auth ], 200, -32600 ],
        [ 'unknown method', [ rpc => 'tasks/delete', {} ], 200, -32601 ],
        [ 'ListTasks', [ rpc => 'ListTasks', {} ], 200, -32601 ],
        [ 'push notifications', [ rpc => 'tasks/pushNotificationConfig/set', {} ], 200, -32003 ],
        [ 'push notifications, 1.0', [ rpc => 'CreateTaskPushNotificationConfig', {} ], 200, -32003 ],
        [ 'no message', [ rpc => 'SendMessage', {} ], 200, -32602 ],
        [ 'no parts', [ rpc => 'message/send', $msg->() ], 200, -32602 ],
        [ 'no messageId', [ rpc => 'message/send',
          { message => { role => 'user', parts => [{ kind => 'text', text => 'x' }] } } ], 200, -32602 ],
        [ 'an empty messageId', [ rpc => 'SendMessage',
          { message => { messageId => '', role => 'ROLE_USER', parts => [{ text => 'x' }] } } ], 200, -32602 ],
        [ 'an agent\'s message', [ rpc => 'SendMessage',
          { message => { messageId => 'm', role => 'ROLE_AGENT', parts => [{ text => 'x' }] } } ],
          200, -32602 ],
        [ 'a file part', [ rpc => 'message/send', $msg->({ kind => 'file', file => { uri => 'http://x/y' } }) ],
          200, -32005 ],
        [ 'a url part', [ rpc => 'SendMessage', $msg->({ url => 'http://x/y' }) ], 200, -32005 ],
        [ 'a bad launch field', [ rpc => 'SendMessage',
          { %{ $msg->({ text => 'x' }) }, metadata => { ioa => { max_turns => 'many' } } } ], 200, -32602 ],
        [ 'no task id', [ rpc => 'GetTask', {} ], 200, -32602 ],
        [ 'an unknown task', [ rpc => 'GetTask', { id => 'f' x 32 } ], 200, -32001 ],
        [ 'an unknown task, 0.3', [ rpc => 'tasks/cancel', { id => 'e' x 32 } ], 200, -32001 ],
        [ 'a task id that is no goal id', [ rpc => 'tasks/get', { id => '../list_all_agents' } ], 200,
          qr/^-3200[12]$|^-32602$/ ],
        [ 'A2A-Version 2.0', [ rpc => 'GetTask', { id => 'f' x 32 }, 'A2A-Version' => '2.0' ],
          200, -32009 ],
    );
    for my $c (@cases) {
        my ($name, $req, $want_code, $want_err) = @$c;
        my ($k, $d);
        if ($req->[0] eq 'rpc') {
            my (undef, $m, $p, %h) = @$req;
            ($k, $d) = rpc($ctx, $m, $p, %auth, %h);
        } else {
            ($k, $d) = raw($ctx, @$req);
        }
        is $k, $want_code, "$name: HTTP $want_code";
        if (ref $want_err) {
            like $d->{error}{code}, $want_err, "$name: its error" or diag json()->encode($d);
        } else {
            is $d->{error}{code}, $want_err, "$name: $want_err" or diag json()->encode($d);
        }
        ok length($d->{error}{message} // '') > 5, "$name: a message says why";
    }
    ($code, undef, $res) = raw($ctx, DELETE => '/a2a', undef, %auth);
    is $code, 405, 'DELETE: 405';
    is $res->header('Allow'), 'GET, HEAD, POST', 'Allow';
--- no_error_log
[alert]
[crit]



=== TEST 3: a dropped stream resubscribes; a running task takes a message and a cancel
a dropped stream resubscribed, Last-Event-ID, the 0.3 wire by hand, a person's
message to a running task, cancel both ways.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_A2A_KEY;
                 subrequest_output_buffer_size 1m; }
    location = /.well-known/agent-card.json { ioa_a2a url=/a2a; ioa_auth jwt;
                                              ioa_auth_jwt_key $TEST_NGINX_A2A_KEY; }
    location = /a2a { ioa_a2a; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_A2A_KEY; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1');
    agent_proc($ctx, 'Shouter', 'uppercases text, shouts words', token('Shouter', 'agent'),
               'tr', 'a-z', 'A-Z');
    agent_proc($ctx, 'Sleeper', 'naps on the couch', token('Sleeper', 'agent'), 'sleep', '30');
    my $ann = token('Ann', 'agent launch');
    ok online($ctx, $ann, 'Shouter', 'Sleeper'), 'the agents are online';

    for my $v ('1.0', '0.3') {
        my @o = a2a($ctx, $ann,
            { op => 'connect', version => $v },
            { op => 'stream', text => 'Shout the words dropped line', drop => 1, save => 't' },
            { op => 'until', id => '$t', states => ['TASK_STATE_COMPLETED'], seconds => 60 },
            { op => 'resubscribe', id => '$t' },
            { op => 'send', text => 'Nap on the couch', returnImmediately => 1, save => 'n',
              metadata => { ioa => { team_member_names => ['Sleeper'] } } },
            { op => 'until', id => '$n', states => ['TASK_STATE_WORKING'], seconds => 30 },
            { op => 'sleep', ms => 1500 },
            { op => 'send', text => 'please hurry', taskId => '$n', returnImmediately => 1 },
            { op => 'cancel', id => '$n' },
            { op => 'get', id => '$n' },
            { op => 'cancel', id => '$n' },
            { op => 'resubscribe', id => '$n' },
        );
        my ($conn, $dropped, $done, $resub, $nap, $working, undef, $person, $cancel, $got,
            $again, $resub2) = @o;
        ok $conn->{ok}, "$v: connect" or diag json()->encode($conn);
        ok $dropped->{ok}, "$v: a stream, dropped after its first event"
            or diag json()->encode($dropped);
        is scalar(@{ $dropped->{result} }), 1, "$v: one event read";
        ok $done->{ok}, "$v: the task went on without its reader" or diag json()->encode($done);

        ok $resub->{ok}, "$v: resubscribe to the ended task" or diag json()->encode($resub);
        my @ev = @{ $resub->{result} // [] };
        is scalar(@ev), 1, "$v: an ended task: the task alone, then the stream ends";
        is $ev[0]{task}{status}{state}, 'TASK_STATE_COMPLETED', "$v: completed";
        like $ev[0]{task}{artifacts}[0]{parts}[0]{text}, qr/DROPPED LINE/, "$v: with its artifact";

        ok $nap->{ok}, "$v: a non-blocking send" or diag json()->encode($nap);
        like $nap->{result}{status}{state}, qr/^TASK_STATE_(?:SUBMITTED|WORKING)$/,
            "$v: answered at once, not ended";
        ok $working->{ok}, "$v: the nap runs" or diag json()->encode($working);

        ok $person->{ok}, "$v: a message with the task's id" or diag json()->encode($person);
        is $person->{result}{id}, $nap->{result}{id}, "$v: goes to that task";
        is $person->{result}{status}{state}, 'TASK_STATE_WORKING', "$v: which is working";
        my $inbox = redis_cmd('XRANGE', "ioa:{goal:$nap->{result}{id}}:inbox", '-', '+');
        ok((grep { join(' ', @{ $_->[1] }) =~ /please hurry/ } @$inbox),
           "$v: the goal's inbox has the person's message") or diag explain $inbox;

        ok $cancel->{ok}, "$v: cancel" or diag json()->encode($cancel);
        is $cancel->{result}{status}{state}, 'TASK_STATE_CANCELED', "$v: the answer waits for canceled";
        is $got->{result}{status}{state}, 'TASK_STATE_CANCELED', "$v: get: canceled";
        ok !$again->{ok}, "$v: cancel again is refused";
        is $again->{error}{name}, 'TaskNotCancelableError', "$v: TaskNotCancelable (-32002)"
            or diag json()->encode($again);
        is $resub2->{result}[0]{task}{status}{state}, 'TASK_STATE_CANCELED',
            "$v: resubscribe to a canceled task";
    }

    # the 0.3 wire, by hand: kinds, lower-case states, final, ids
    my ($code, undef, $res) = rpc($ctx, 'message/stream',
        { message => { kind => 'message', messageId => 'w1', role => 'user',
                       parts => [{ kind => 'text', text => 'Shout the words on the wire' }] } },
        Authorization => "Bearer $ann", Accept => 'text/event-stream');
    is $code, 200, '0.3 stream by hand';
    like $res->header('Content-Type'), qr{^text/event-stream}, 'an event stream';
    my @ev = sse_events($res);
    is $ev[0]{data}{jsonrpc}, '2.0', 'JSON-RPC responses';
    is $ev[0]{data}{id}, 7, 'with the request\'s id';
    is $ev[0]{data}{result}{kind}, 'task', 'first the task';
    is $ev[0]{data}{result}{status}{state}, 'submitted', 'submitted';
    my $task = $ev[0]{data}{result}{id};
    my @kinds = map { $_->{data}{result}{kind} } @ev;
    ok((grep { $_ eq 'status-update' } @kinds), 'status-update events');
    ok((grep { $_ eq 'artifact-update' } @kinds), 'an artifact-update');
    my @fin = grep { $_->{data}{result}{final} } @ev;
    is scalar(@fin), 1, 'one final event';
    is $fin[0]{data}{result}{status}{state}, 'completed', 'completed';
    is $ev[-1]{data}{result}{final}, JSON::PP::true, 'and it is the last';
    my ($art) = grep { ($_->{data}{result}{kind} // '') eq 'artifact-update' } @ev;
    is $art->{data}{result}{artifact}{parts}[0]{kind}, 'text', 'a text part';
    like $art->{data}{result}{artifact}{parts}[0]{text}, qr/ON THE WIRE/, 'the conclusion';
    ok !(grep { $_->{data}{result}{kind} ne 'task' && !$_->{id} } @ev), 'every update has an id';

    # resume with Last-Event-ID: exactly the events after it
    my $k = int(@ev / 2);
    ($code, undef, $res) = rpc($ctx, 'tasks/resubscribe', { id => $task },
        Authorization => "Bearer $ann", 'Last-Event-ID' => $ev[$k]{id});
    is $code, 200, 'resubscribe with Last-Event-ID';
    my @tail = sse_events($res);
    is_deeply [map { $_->{text} } @tail], [map { $_->{text} } @ev[$k + 1 .. $#ev]],
        'the events after it, the same, and no other';
    ($code, my $doc) = rpc($ctx, 'tasks/resubscribe', { id => $task },
        Authorization => "Bearer $ann", 'Last-Event-ID' => 'yesterday');
    is $doc->{error}{code}, -32602, 'a Last-Event-ID that is none: -32602';

    # someone else's task is not found
    my $bob = token('Bob', 'agent launch');
    ($code, $doc) = rpc($ctx, 'GetTask', { id => $task }, Authorization => "Bearer $bob");
    is $doc->{error}{code}, -32001, 'another launcher\'s task: TaskNotFound';
--- no_error_log
[alert]
[crit]



=== TEST 4: input-required: the user's answer to the team's question goes to the task
input-required: the team asks the task's user how to go on; the answer is a
message to the task, streamed or blocking; a stop; no answer in time.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_A2A_KEY;
                 subrequest_output_buffer_size 1m; }
    location = /.well-known/agent-card.json { ioa_a2a url=/a2a; ioa_auth jwt;
                                              ioa_auth_jwt_key $TEST_NGINX_A2A_KEY; }
    location = /a2a { ioa_a2a; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_A2A_KEY; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1');
    agent_proc($ctx, 'Shouter', 'uppercases text, shouts words', token('Shouter', 'agent'),
               'tr', 'a-z', 'A-Z');
    agent_proc($ctx, 'Klingon', 'translates poems into klingon', token('Klingon', 'agent'),
               'false');
    my $ann = token('Ann', 'agent launch');
    ok online($ctx, $ann, 'Shouter', 'Klingon'), 'the agents are online';

    for my $v ('1.0', '0.3') {
        my @o = a2a($ctx, $ann,
            { op => 'connect', version => $v },
            { op => 'stream', text => 'Translate the poem into klingon', save => 't' },
            { op => 'get', id => '$t' },
            { op => 'stream', text => 'Shout the words try again', taskId => '$t' },
            { op => 'send', text => 'Translate the song into klingon', save => 'u' },
        );
        my ($conn, $first, $got, $answer, $blocked) = @o;
        ok $conn->{ok}, "$v: connect" or diag json()->encode($conn);

        ok $first->{ok}, "$v: a stream" or diag json()->encode($first);
        my @ev = @{ $first->{result} // [] };
        my @st = states_of(@ev);
        is $st[-1], 'TASK_STATE_INPUT_REQUIRED', "$v: the stream ends input-required"
            or diag json()->encode(\@ev);
        my $q = $ev[-1]{statusUpdate}{status}{message}{parts}[0]{text} // '';
        like $q, qr/0 of 1 part done/, "$v: the question says what is undone";
        like $q, qr/part 1 \(.*klingon.*\): failed with Klingon/, "$v: which part and why";
        like $q, qr/How should we go on/, "$v: and asks";

        is $got->{result}{status}{state}, 'TASK_STATE_INPUT_REQUIRED', "$v: get: input-required";
        is $got->{result}{status}{message}{parts}[0]{text}, $q, "$v: get: the same question";

        ok $answer->{ok}, "$v: the answer, streamed" or diag json()->encode($answer);
        @ev = @{ $answer->{result} // [] };
        is $ev[0]{task}{status}{state}, 'TASK_STATE_WORKING', "$v: the task works again";
        @st = states_of(@ev);
        is $st[-1], 'TASK_STATE_COMPLETED', "$v: and completes" or diag json()->encode(\@ev);
        my ($art) = grep { $_->{artifactUpdate} } @ev;
        like $art->{artifactUpdate}{artifact}{parts}[0]{text}, qr/TRY AGAIN/,
            "$v: the conclusion has the work the answer asked for";
        ok !(grep { ($_->{statusUpdate}{status}{state} // '') eq 'TASK_STATE_INPUT_REQUIRED' } @ev),
            "$v: the old question is not told again";

        ok $blocked->{ok}, "$v: a blocking send" or diag json()->encode($blocked);
        is $blocked->{result}{status}{state}, 'TASK_STATE_INPUT_REQUIRED',
            "$v: returns when the task waits for its user";
        my $meta = redis_cmd('HGET', "ioa:{goal:$blocked->{result}{id}}:meta", 'awaiting_input');
        like $meta, qr/How should we go on/, "$v: the goal's record has the question (awaiting_input)";

        my (undef, $stopped) = a2a($ctx, $ann, { op => 'connect', version => $v },
            { op => 'send', text => 'stop', taskId => $blocked->{result}{id} });

        ok $stopped->{ok}, "$v: \"stop\" as the answer" or diag json()->encode($stopped);
        is $stopped->{result}{status}{state}, 'TASK_STATE_COMPLETED', "$v: the task completes";
        like $stopped->{result}{artifacts}[0]{parts}[0]{text}, qr/0 of 1 part done/,
            "$v: with what was done";
        is redis_cmd('HGET', "ioa:{goal:$blocked->{result}{id}}:meta", 'awaiting_input'), undef,
            "$v: the record waits for nobody any more";
    }

    # nobody answers: the review decides without the answer when the time is up
    my @o = a2a($ctx, $ann,
        { op => 'connect' },
        { op => 'send', text => 'Translate the letter into klingon', save => 'w',
          metadata => { ioa => { input_timeout_s => 2 } } },
        { op => 'until', id => '$w', states => ['TASK_STATE_COMPLETED'], seconds => 30 },
        { op => 'send', text => 'Translate the menu into klingon', returnImmediately => 1,
          save => 'x', metadata => { ioa => { input_timeout_s => 0 } } },
        { op => 'until', id => '$x', states => ['TASK_STATE_COMPLETED', 'TASK_STATE_INPUT_REQUIRED'],
          seconds => 30 },
    );
    is $o[1]{result}{status}{state}, 'TASK_STATE_INPUT_REQUIRED', 'input_timeout_s 2: asked';
    ok $o[2]{ok}, 'no answer: the task completes when the time is up' or diag json()->encode($o[2]);
    my @feed = IoaTest::Goals::feed($o[1]{result}{id});
    my @input = grep { ($_->{event} // '') eq 'input' } @feed;
    is_deeply [map { $_->{awaiting} ? 1 : 0 } @input], [1, 0],
        'the feed: the question opened, then closed, once each';
    is $o[4]{result}{status}{state}, 'TASK_STATE_COMPLETED', 'input_timeout_s 0: nobody is asked';
--- no_error_log
[alert]
[crit]



=== TEST 5: A2A tasks waiting for their user hold no worker: a new task completes at once
one worker, ten A2A tasks waiting for their user's input: a new task completes
at once beside them (a goal that waits holds no worker).
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_A2A_KEY;
                 subrequest_output_buffer_size 1m; }
    location = /.well-known/agent-card.json { ioa_a2a url=/a2a; ioa_auth jwt;
                                              ioa_auth_jwt_key $TEST_NGINX_A2A_KEY; }
    location = /a2a { ioa_a2a; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_A2A_KEY; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    worker($ctx, 'w1');
    agent_proc($ctx, 'Shouter', 'uppercases text, shouts words', token('Shouter', 'agent'),
               'tr', 'a-z', 'A-Z');
    agent_proc($ctx, 'Klingon', 'translates poems into klingon', token('Klingon', 'agent'),
               'false');
    my $ann = token('Ann', 'agent launch');
    ok online($ctx, $ann, 'Shouter', 'Klingon'), 'the agents are online';

    # ten tasks whose part nobody can do: each asks its user, and waits
    # (input_timeout_s 300, the facade's default)
    my @o = a2a($ctx, $ann, { op => 'connect' },
                map { { op => 'send', text => "Translate poem $_ into klingon" } } 1 .. 10);
    my @waiting = map { $_->{result}{id} } grep { $_->{result} } @o[1 .. 10];
    is scalar(grep { ($_->{result}{status}{state} // '') eq 'TASK_STATE_INPUT_REQUIRED' }
              @o[1 .. 10]), 10, 'ten tasks wait for their user' or diag json()->encode(\@o);

    my $t0 = time;
    my (undef, $new) = a2a($ctx, $ann, { op => 'connect' },
                           { op => 'send', text => 'Shout the words right now' });
    my $took = time - $t0;
    is $new->{result}{status}{state}, 'TASK_STATE_COMPLETED', 'a new task completes'
        or diag json()->encode($new);
    like $new->{result}{artifacts}[0]{parts}[0]{text}, qr/RIGHT NOW/, 'with its answer';
    cmp_ok $took, '<', 10, 'at once, not after the waiting ones (300 s each)'
        or diag "it took $took s";
    is scalar(grep { (redis_cmd('HGET', "ioa:{goal:$_}:meta", 'state') // '') eq 'running' }
              @waiting), 10, 'the ten still wait, on the same worker';
    my %st = %{ stop_workers() };
    is $st{w1}, 0, 'w1 exits 0 (and gives the waiting goals back)';
--- no_error_log
[alert]
[crit]



=== TEST 6: an A2A stream ends at its token's exp plus leeway with a JSON-RPC error
an A2A stream ends at its token's exp plus leeway, after a warning comment,
with a JSON-RPC error: resubscribe and streaming sends, both versions.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_A2A_KEY;
                 subrequest_output_buffer_size 1m; }
    location = /a2a { ioa_a2a; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_A2A_KEY;
                      ioa_auth_leeway 1s; ioa_auth_expiry_warning 1s; }
--- ioa_scenario
    # no worker: every task stays submitted, and a stream of it would
    # follow it for ever
    IoaTest::Goals::fresh($ctx);
    my ($code, $doc) = rpc($ctx, 'SendMessage',
        { message => { messageId => 'm', role => 'ROLE_USER', parts => [{ text => 'Wait' }] },
          configuration => { returnImmediately => JSON::PP::true } },
        Authorization => 'Bearer ' . token('Ann', 'launch'));
    my $task = $doc->{result}{task}{id};
    ok $task, 'a task that does not end' or diag json()->encode($doc);

    my $m10 = { messageId => 'm', role => 'ROLE_USER', parts => [{ text => 'Wait more' }] };
    my $m03 = { kind => 'message', messageId => 'm', role => 'user',
                parts => [{ kind => 'text', text => 'Wait more' }] };
    for my $c (['SubscribeToTask', { id => $task }], ['tasks/resubscribe', { id => $task }],
               ['SendStreamingMessage', { message => $m10 }],
               ['message/stream', { message => $m03 }])
    {
        my ($method, $params) = @$c;
        my $short = token('Ann', 'launch', 3);
        my $end = exp_of($short) + 1;                  # exp + ioa_auth_leeway
        my $s = IoaTest::SSE->connect($ctx->host, $ctx->port, '/a2a', method => 'POST',
            headers => [Authorization => "Bearer $short"],
            body => json()->encode({ jsonrpc => '2.0', id => 9, method => $method,
                                     params => $params }));
        ok $s->ok, "$method: the stream opens with a token of 3 s" or diag $s->error;
        my ($ev, @ev);
        while (!$s->eof && !$s->done && time < $end + 4) {
            $ev = $s->next_event(0.05) and defined $ev->{data} and push @ev, jdec($ev->{data});
        }
        my $at = time;
        while ($ev = $s->next_event(0)) {              # what came with the end
            push @ev, jdec($ev->{data}) if defined $ev->{data};
        }
        ok $s->eof || $s->done, "$method: the stream ends";
        cmp_ok $at, '>', $end - 0.5, "$method: ... not before exp + leeway";
        cmp_ok $at, '<', $end + 1.5, "$method: ... at exp + leeway"
            or diag "ended at $at, exp + leeway $end";
        my $task_of = $ev[0]{result}{task} // $ev[0]{result};
        ok $task_of->{id}, "$method: first the task";
        like $s->raw, qr/^: \{"op":"error","code":"token_expiring",.*"closes_at":$end\}$/m,
            "$method: a comment warns first, naming the end";
        my $last = $ev[-1];
        is $last->{id}, 9, "$method: the last event answers the request";
        is $last->{error}{code}, -32603, "$method: ... with an error";
        is $last->{error}{data}{ioa_code}, 'token_expired', "$method: ... token_expired"
            or diag json()->encode($last);
        like $last->{error}{message}, qr/resubscribe with a fresh token/, "$method: ... saying how to go on";
        is $last->{error}{data}{closes_at}, $end, "$method: ... and when it ended";
        $s->close;
    }
--- no_error_log
[alert]
[crit]



=== TEST 7: another launcher's task is answered exactly as one that does not exist
another launcher's task is answered exactly as one that does not exist, over
A2A (both versions) and REST; an administrator sees it.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_A2A_KEY;
                 subrequest_output_buffer_size 1m; }
    location = /a2a { ioa_a2a; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_A2A_KEY; }
--- ioa_scenario
    IoaTest::Goals::fresh($ctx);
    my $ann = token('Ann', 'launch');
    my $bob = token('Bob', 'launch');
    my ($code, $doc) = rpc($ctx, 'SendMessage',
        { message => { messageId => 'm', role => 'ROLE_USER', parts => [{ text => 'Ann\'s' }] },
          configuration => { returnImmediately => JSON::PP::true } },
        Authorization => "Bearer $ann");
    my $task = $doc->{result}{task}{id};
    ok $task, 'Ann\'s task' or diag json()->encode($doc);
    my $none = join '', map { sprintf '%x', int rand 16 } 1 .. 32;

    # the answer to Bob about $id ($id for <id> in the request), with
    # <id> for $id in it
    my $ask = sub {
        my ($id, $method, $path, $body) = @_;
        $path =~ s/<id>/$id/g;
        $body = json()->encode($body) =~ s/<id>/$id/gr if defined $body;
        my (undef, undef, $res) = raw($ctx, $method, $path, $body, Authorization => "Bearer $bob");
        (my $text = $res->content) =~ s/\Q$id\E/<id>/g;
        return join "\n", $res->code, $res->header('Content-Type') // '', $text;
    };
    my $msg = sub {
        my ($v10) = @_;
        return { message => { messageId => 'm', taskId => '<id>',
                              $v10 ? (role => 'ROLE_USER') : (kind => 'message', role => 'user'),
                              parts => [{ $v10 ? () : (kind => 'text'), text => 'stop' }] } };
    };
    my $call = sub { (POST => '/a2a', { jsonrpc => '2.0', id => 7, method => $_[0], params => $_[1] }) };
    my @cases = (
        (map { [ $_, $call->($_, { id => '<id>' }) ] }
             qw(GetTask tasks/get CancelTask tasks/cancel SubscribeToTask tasks/resubscribe)),
        (map { [ $_, $call->($_, $msg->(/^[A-Z]/)) ] }
             qw(SendMessage message/send SendStreamingMessage message/stream)),
        [ 'GET /goals/{id}', GET => '/goals/<id>' ],
        [ 'GET /goals/{id}/events', GET => '/goals/<id>/events' ],
        [ 'POST /goals/{id}/cancel', POST => '/goals/<id>/cancel' ],
        [ 'POST /goals/{id}/messages', POST => '/goals/<id>/messages', { content => 'stop' } ],
    );
    for my $c (@cases) {
        my ($name, @req) = @$c;
        my $theirs = $ask->($task, @req);
        my $unknown = $ask->($none, @req);
        is $theirs, $unknown, "$name: Ann's task, to Bob, as an unknown one";
        like $unknown, $name =~ m{^(?:GET|POST) /}
                       ? qr/^404\napplication\/json\n\{"op":"error","code":"unknown_goal",/
                       : qr/^200\napplication\/json\n.*"code":-32001,/s,
            "$name: which is not found" or diag $unknown;
    }
    is redis_cmd('HGET', "ioa:{goal:$task}:meta", 'state'), 'queued', 'Bob cancelled nothing';
    is redis_cmd('XLEN', "ioa:{goal:$task}:inbox"), 0, '... and posted nothing';

    ($code, $doc) = rpc($ctx, 'GetTask', { id => $task },
                        Authorization => 'Bearer ' . token('root', 'admin'));
    is $doc->{result}{id}, $task, 'an administrator gets the task' or diag json()->encode($doc);
    ($code, $doc) = raw($ctx, GET => "/goals/$task", undef,
                        Authorization => 'Bearer ' . token('root', 'admin'));
    is "$code $doc->{launched_by}", '200 Ann', '... and the goal';
    ($code, $doc) = rpc($ctx, 'tasks/get', { id => $task }, Authorization => "Bearer $ann");
    is $doc->{result}{status}{state}, 'submitted', 'and Ann hers';
--- no_error_log
[alert]
[crit]
