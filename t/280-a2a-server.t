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
use Cwd qw(abs_path);
use FindBin;
use LWP::UserAgent ();

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

sub states_of { map { $_->{statusUpdate} ? $_->{statusUpdate}{status}{state} : () } @_ }

run_tests();

__DATA__

=== TEST 1: open mode: the card, a blocking send, a stream to the end, get, both protocol versions through the SDK
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth off; subrequest_output_buffer_size 1m; }
    location = /.well-known/agent-card.json { ioa_a2a url=/a2a name=test-hub; ioa_auth off; }
    location = /a2a { ioa_a2a; ioa_auth off; }
--- request
GET /health_check
--- error_code_like: ^(?:200|503)$
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
--- no_error_log
[alert]
[crit]
