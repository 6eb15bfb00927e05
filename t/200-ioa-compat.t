# t/200-ioa-compat.t -- IoA drop-in (issue 19): what IoA's own frontend,
# clients and scripts need from the hub, over the wire, written from IoA's
# published behaviour.  Real nginx + module + Redis.
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/200-ioa-compat.t

use strict;
use warnings;

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(fresh_hub json);
use IoaTest::Api;

no_root_location();
no_shuffle();
log_level('info');

# a raw HTTP request: (HTTP::Response)
sub req {
    my ($ctx, $method, $path, $body, @h) = @_;
    return $ctx->http($method => $path, body => $body // '', headers => [@h]);
}

run_tests();

__DATA__

=== TEST 1: ioa_cors_origins answers a listed origin's preflight and CORS, no other's
ioa_cors_origins: IoA's frontend on another origin gets its preflight answered
(204, the method and headers it asked for, a max-age) and
Access-Control-Allow-Origin echoed with credentials and Vary: Origin on every
answer, errors included; an origin not listed gets no CORS header at all.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_cors_origins http://localhost:3000 https://ioa.example; }
--- ioa_scenario
    fresh_hub($ctx);
    my @fe = (Origin => 'http://localhost:3000');
    my $res = req($ctx, OPTIONS => '/fetch_chat_record', undef, @fe,
                  'Access-Control-Request-Method' => 'POST',
                  'Access-Control-Request-Headers' => 'authorization,content-type');
    is $res->code, 204, 'preflight: 204';
    is $res->header('Access-Control-Allow-Origin'), 'http://localhost:3000', '... the origin echoed';
    is $res->header('Access-Control-Allow-Credentials'), 'true', '... credentials allowed';
    like $res->header('Access-Control-Allow-Methods') // '', qr/\bPOST\b/, '... POST allowed';
    is $res->header('Access-Control-Allow-Headers'), 'authorization,content-type', '... the headers asked for';
    is $res->header('Access-Control-Max-Age'), 600, '... cached ten minutes';
    like $res->header('Vary') // '', qr/\bOrigin\b/, '... Vary: Origin';

    $res = req($ctx, POST => '/register', '{"name":"Alice","type":"Human Assistant","desc":"a"}', @fe,
               'Content-Type' => 'application/json', Authorization => 'Bearer x');
    is $res->code, 200, 'a credentialed request: 200';
    is $res->header('Access-Control-Allow-Origin'), 'http://localhost:3000', '... with the origin, never "*"';
    like $res->header('Vary') // '', qr/\bOrigin\b/, '... and Vary: Origin';

    $res = req($ctx, POST => '/fetch_chat_record', '{"comm_id":42}', @fe);
    is $res->code, 400, 'an error answer: 400';
    is $res->header('Access-Control-Allow-Origin'), 'http://localhost:3000', '... carries the CORS headers too';
    $res = req($ctx, GET => '/no_such_endpoint', undef, Origin => 'https://ioa.example');
    is $res->code, 404, 'an unknown endpoint: 404';
    is $res->header('Access-Control-Allow-Origin'), 'https://ioa.example', '... from the second origin listed';

    my @evil = (Origin => 'http://evil.example');
    $res = req($ctx, OPTIONS => '/fetch_chat_record', undef, @evil, 'Access-Control-Request-Method' => 'POST');
    is $res->code, 405, 'an origin not listed: its preflight is an ordinary OPTIONS (405)';
    ok !defined $res->header('Access-Control-Allow-Origin'), '... with no CORS header';
    $res = req($ctx, GET => '/health_check', undef, @evil);
    ok !defined $res->header('Access-Control-Allow-Origin'), '... nor on its requests';
    $res = req($ctx, GET => '/health_check');
    ok !defined $res->header('Access-Control-Allow-Origin'), 'a request without Origin: untouched';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: ioa_cors_origins * echoes any origin; without the directive there is no CORS
ioa_cors_origins * echoes any origin; without the directive there is no CORS
at all (preflight 405).
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location /any/ { ioa_api; ioa_cors_origins *; }
    location / { ioa_api; }
--- ioa_scenario
    my $res = req($ctx, GET => '/any/health_check', undef, Origin => 'http://anything.example:8080');
    is $res->header('Access-Control-Allow-Origin'), 'http://anything.example:8080', '"*": any origin, echoed';
    $res = req($ctx, OPTIONS => '/health_check', undef, Origin => 'http://localhost:3000',
               'Access-Control-Request-Method' => 'GET');
    is $res->code, 405, 'no ioa_cors_origins: a preflight is 405';
    ok !defined $res->header('Access-Control-Allow-Origin'), '... without CORS headers';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3: IoA users' agent names work everywhere; refused names get a 400 naming it
the names IoA's users write: "Weize Chen's Assistant", 王小明的助手 and
"Open Interpreter (v2)" register, connect over WebSocket and SSE
(percent-encoded paths), team up and exchange envelopes; each class the rule
refuses is refused at each entry point with a 400 naming the field.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    require IoaTest::SSE;
    fresh_hub($ctx);
    my @names = ("Weize Chen's Assistant", "\x{738b}\x{5c0f}\x{660e}\x{7684}\x{52a9}\x{624b}", 'Open Interpreter (v2)');
    IoaTest::Agent::register($ctx, @names);
    my %a = map { ($_ => IoaTest::Agent->connect($ctx, $_)) } @names[0, 1];
    ok $a{$_}->ok, "WebSocket /ws/<$_>" or diag $a{$_}->error for @names[0, 1];
    (my $path = $names[2]) =~ s/([^A-Za-z0-9])/sprintf '%%%02X', ord $1/ge;
    my $sse = IoaTest::SSE->connect($ctx->host, $ctx->port, "/agents/$path/inbox");
    ok $sse->ok, "SSE /agents/<$names[2]>/inbox" or diag $sse->error;
    my $cid = IoaTest::Agent::teamup($ctx, $names[0], [ @names[1, 2] ], 'Paper writing');
    ok $cid, 'they team up';
    sleep 0.3;
    $a{ $names[0] }->post(IoaTest::Agent::envelope(comm_id => $cid, content => 'draft ready', next_speaker => [ $names[1] ]));
    my ($m) = $a{ $names[1] }->recv_until(sub { ($_->{content} // '') eq 'draft ready' }, 5);
    is $m && $m->{sender}, $names[0], "$names[1] receives it from $names[0]";
    is_deeply $m && $m->{next_speaker}, [ $names[1] ], '... addressed to it';
    my @ev;
    while (my $e = $sse->next_event(3)) {
        push @ev, json()->decode($e->{data}) if defined $e->{data};
        last if @ev;
    }
    is $ev[0] && $ev[0]{sender}, $names[0], "$names[2] receives it over SSE";
    my ($code, $d) = api($ctx, POST => '/query_assistant', { name => $names[1] });
    is "$code $d->{name}", "200 $names[1]", '/query_assistant finds it by its name';
    $sse->close;

    # refused, at each entry point
    (my $p0 = $names[0]) =~ s/([^A-Za-z0-9])/sprintf '%%%02X', ord $1/ge;
    my @refused = ('Alice ', ' Alice', "Al\nice", "Alice\n", 'a/b', 'a{b}c', 'x' x 65);
    for my $n (@refused) {
        my $what = json()->encode($n);
        ($code, $d) = api($ctx, POST => '/register', { name => $n, type => 'Human Assistant', desc => 'x' });
        is "$code $d->{field}", '400 name', "/register $what: 400 naming name";
        ($code, $d) = api($ctx, POST => '/teamup', { sender => $names[0], agent_names => [$n] });
        is $code, 400, "/teamup with $what: 400";
        # a "/" in a path is a separator once nginx has decoded it: there
        # is no such endpoint
        my $want = $n =~ m{/} ? 404 : 400;
        my $e = IoaTest::Agent::_uri_escape($n);
        my $ws = $ctx->ws("/ws/$e");
        is $ws->status, $want, "/ws/$e: $want";
        my $res = $ctx->http(GET => "/agents/$e/inbox");
        is $res->code, $want, "/agents/$e/inbox: $want";
        # envelope fields: sender, and each name in next_speaker
        for my $f ([sender => $n], [next_speaker => $n], [next_speaker => [ $names[1], $n ]]) {
            my $env = IoaTest::Agent::envelope(comm_id => $cid, content => 'refused', @$f);
            $a{ $names[0] }->post($env);
            my ($err) = $a{ $names[0] }->recv_until(sub { ($_->{op} // '') eq 'error' }, 5);
            is $err && "$err->{code} $err->{field}", "invalid_name $f->[0]", "WebSocket envelope, $f->[0] $what: invalid_name naming $f->[0]";
            ($code, $d) = api($ctx, POST => "/agents/$p0/messages", $env);
            is "$code $d->{code} $d->{field}", "400 invalid_name $f->[0]", "HTTP envelope, $f->[0] $what: 400 naming $f->[0]";
        }
    }
    is redis_cmd('XLEN', "ioa:{room:$cid}:log"), 1, 'no refused envelope was stored';
    ok $a{ $names[1] }->quiet(0.3), "$names[1] received none of them";
    my $res = $ctx->http(GET => '/agents/%FF%FE/inbox');
    is $res->code, 400, 'a path that is not UTF-8: 400';
    like $res->content, qr/"code":"invalid_name"/, '... invalid_name';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 4: a percent-encoded member leaves without disturbing the room and resumes
a member whose name needs percent-encoding leaves: sends into the room keep
working for everyone else, and it gets what it missed when it comes back
(resume).
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    my @n = ("Weize Chen's Assistant", "\x{738b}\x{5c0f}\x{660e}\x{7684}\x{52a9}\x{624b}", 'Open Interpreter (v2)');
    IoaTest::Agent::register($ctx, @n);
    my %a = map { ($_ => IoaTest::Agent->connect($ctx, $_)) } @n;
    my $cid = IoaTest::Agent::teamup($ctx, $n[0], [ @n[1, 2] ]);
    sleep 0.3;
    $a{ $n[0] }->post(IoaTest::Agent::envelope(comm_id => $cid, content => 'before'));
    my ($m) = $a{ $n[1] }->recv_until(sub { ($_->{content} // '') eq 'before' }, 5);
    my $last = $m && $m->{id};
    ok $last, "$n[1] got the first envelope";
    $a{ $n[1] }->disconnect;                 # gone without a close frame
    sleep 0.2;
    for my $i (1 .. 3) {
        $a{ $n[0] }->post(IoaTest::Agent::envelope(comm_id => $cid, content => "while away $i"));
        my ($got) = $a{ $n[2] }->recv_until(sub { ($_->{content} // '') eq "while away $i" }, 5);
        ok $got, "envelope $i still reaches $n[2]";
        my ($echo) = $a{ $n[0] }->recv_until(sub { ($_->{content} // '') eq "while away $i" }, 5);
        ok $echo, "... and its sender, whose connection is fine";
    }
    my $back = IoaTest::Agent->connect($ctx, $n[1], "?resume=$cid:$last");
    ok $back->ok, "$n[1] comes back" or diag $back->error;
    my @missed = map { $_->{content} } $back->recv_n(3, 5);
    is_deeply \@missed, [ map { "while away $_" } 1 .. 3 ], '... and gets exactly what it missed';
--- no_error_log
[alert]
[crit]
[emerg]
