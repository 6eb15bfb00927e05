# t/150-auth.t -- who may do what: ioa_auth jwt (HS256, RS256, ES256 keys
# from files; sub, exp, nbf, scopes), ioa_auth request (nginx's
# auth_request in front), ioa_auth off (open mode, with its warning), and a
# configuration without ioa_auth refused at start.
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/150-auth.t
#
# Tokens are signed here (t/lib/IoaTest/JWT.pm: Digest::SHA and the openssl
# command), never by the module.  Every refusal is checked to store nothing
# where it could have.

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Api;
use IoaTest::JWT;
use IoaTest::Agent qw(envelope);
use IoaTest::SSE;

use File::Temp ();

no_root_location();
log_level('info');

our $KEYDIR = File::Temp::tempdir('ioa-auth-XXXXXX', TMPDIR => 1, CLEANUP => 1);
our $K = jwt_keys($KEYDIR);
$ENV{TEST_NGINX_KEYS} = $KEYDIR;

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value(init => 'main::hub_ready()')
        unless defined $block->init || defined $block->must_die;
});

sub tok {
    my ($sub, $scope, %opt) = @_;
    my $alg = delete $opt{alg} // 'HS256';
    my %claims = (sub => $sub, scope => $scope, exp => time + 300, %opt);
    delete $claims{$_} for grep { !defined $claims{$_} } keys %claims;
    return jwt($K, $alg, \%claims);
}

sub bearer { [ Authorization => "Bearer $_[0]" ] }

sub as {
    my ($ctx, $token, $method, $path, $body) = @_;
    return api($ctx, $method, $path, $body, headers => bearer($token));
}

sub register {
    my ($ctx, $token, $name) = @_;
    return as($ctx, $token, POST => '/register',
              { name => $name, type => 'Human Assistant', desc => "agent $name" });
}

sub agents_in_redis {
    return [ sort grep { !/^ioa:\{reg\}:agent:$/ }
             map { s/^ioa:\{reg\}:agent://r } @{ redis_cmd('KEYS', 'ioa:{reg}:agent:*') } ];
}

run_tests();

__DATA__

=== TEST 1: ioa_api without ioa_auth does not start, and says what to choose
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    # ioa_auth deliberately left out
    location / { ioa_api; }
--- must_die
--- suppress_stderr
--- error_log
"ioa_api" needs "ioa_auth"



=== TEST 2: ioa_auth jwt without a key, or request without an identity, does not start
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; }
--- must_die
--- suppress_stderr
--- error_log
"ioa_auth jwt" needs at least one "ioa_auth_jwt_key"



=== TEST 3: a short HS256 secret and a private key are refused at start
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; ioa_auth jwt; ioa_auth_jwt_key $TEST_NGINX_KEYS/ec.pem; }
--- must_die
--- suppress_stderr
--- error_log
holds no PEM public key



=== TEST 4: ioa_auth off is IoA's open mode and warns at start
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth off;
--- config
    location / { ioa_api; }
--- error_log
"ioa_auth off": open mode, any client may act as any agent
--- ioa_scenario
    my ($code) = api($ctx, POST => '/register',
                     { name => 'Anyone', type => 'Human Assistant', desc => 'x' });
    is $code, 200, 'no token needed';
    is_deeply agents_in_redis(), ['Anyone'], 'registered';



=== TEST 5: a missing, malformed, badly signed or forged token is 401, stores nothing
no token, a malformed one, a bad signature, a forged header: 401 with a
challenge, nothing stored.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/rsa.pub;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/ec.pub;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $body = { name => 'Alice', type => 'Human Assistant', desc => 'x' };
    my ($code, $d, $res) = api($ctx, POST => '/register', $body);
    is $code, 401, 'no token: 401';
    is $res->header('WWW-Authenticate'), 'Bearer realm="ioa"', '... challenge without an error code';
    is "$d->{op} $d->{code}", 'error unauthorized', '... JSON error';
    like $d->{message}, qr/token is required/, '... saying what to send';

    my $good = tok('Alice', 'agent');
    my ($h, $p, $s) = split /\./, $good;
    my %bad = (
        'not a JWT'          => 'abc',
        'two parts'          => "$h.$p",
        'wrong secret'       => jwt($main::K, 'HS256', { sub => 'Alice', scope => 'agent', exp => time + 60 },
                                    secret => 'x' x 40),
        'payload changed'    => join('.', $h, tok('Mallory', 'agent admin') =~ /^[^.]+\.([^.]+)/, $s),
        'alg none'           => jwt($main::K, 'HS256', { sub => 'Alice', exp => time + 60 },
                                    header => { alg => 'none' }) =~ s/[^.]+$//r,
        'RS256, unknown key' => tok('Alice', 'agent', alg => 'RS256'),
        'expired'            => tok('Alice', 'agent', exp => time - 120),
        'no exp'             => tok('Alice', 'agent', exp => undef),
        'not yet valid'      => tok('Alice', 'agent', nbf => time + 600),
        'no sub'             => tok(undef, 'agent'),
        'HS256 header, RSA key confusion' => jwt($main::K, 'HS256', { sub => 'Alice', scope => 'agent', exp => time + 60 },
                                    secret => do { local (@ARGV, $/) = "$main::KEYDIR/rsa.pub"; <> }),
    );
    $bad{'RS256, unknown key'} = jwt($main::K, 'RS256', { sub => 'Alice', scope => 'agent', exp => time + 60 },
                                     key => "$main::KEYDIR/rsa-other.pem");
    # one token, one string: what nginx's base64 decoder would overlook
    my $exp = time + 60;
    $bad{'signature padded with ='} = "$good=";
    $bad{'junk after = in the signature'} = "$good=junk";
    # 32 bytes in 43 characters: the last one carries 2 spare bits
    my $abc = join '', 'A' .. 'Z', 'a' .. 'z', 0 .. 9, '-', '_';
    my $alt = substr $abc, index($abc, substr($s, -1)) ^ 1, 1;
    $bad{'spare bits of the signature changed'} = "$h.$p." . substr($s, 0, -1) . $alt;
    $bad{'duplicate claim'} = jwt($main::K, 'HS256',
        qq({"sub":"Alice","scope":"agent","exp":$exp,"sub":"Mallory"}));
    $bad{'duplicate header field'} = jwt($main::K, 'HS256', { sub => 'Alice', scope => 'agent', exp => $exp },
        header => '{"alg":"HS256","typ":"JWT","typ":"JOSE"}');
    $bad{'unknown crit'} = jwt($main::K, 'HS256', { sub => 'Alice', scope => 'agent', exp => $exp },
        header => { alg => 'HS256', crit => ['exp-ext'], 'exp-ext' => 1 });
    my %why = ('expired' => qr/expired/, 'no exp' => qr/"exp"/, 'not yet valid' => qr/not valid before/,
               'alg none' => qr/algorithm "none"/, 'no sub' => qr/"sub"/,
               'wrong secret' => qr/does not verify/, 'not a JWT' => qr/not a JWT/,
               'signature padded with =' => qr/not canonical base64url/,
               'junk after = in the signature' => qr/not canonical base64url/,
               'spare bits of the signature changed' => qr/not canonical base64url/,
               'duplicate claim' => qr/claims name a field twice/,
               'duplicate header field' => qr/header names a field twice/,
               'unknown crit' => qr/"crit"/);
    for my $case (sort keys %bad) {
        my ($code, $d, $res) = as($ctx, $bad{$case}, POST => '/register', $body);
        is $code, 401, "$case: 401";
        like $res->header('WWW-Authenticate') // '', qr/^Bearer realm="ioa", error="invalid_token", error_description="[^"]+"$/,
            "$case: invalid_token challenge";
        like $d->{message}, $why{$case}, "$case: says why" if $why{$case};
    }
    is_deeply agents_in_redis(), [], 'nothing was registered';

    # a header the client controls must not reach the response headers raw
    my $evil = jwt($main::K, 'HS256', { sub => 'Alice', exp => time + 60 },
                   header => { alg => "HS512\r\nX-Injected: 1" });
    ($code, $d, $res) = as($ctx, $evil, POST => '/register', $body);
    is $code, 401, 'CR LF in alg: 401';
    ok !defined $res->header('X-Injected'), '... and no header injected';



=== TEST 6: HS256, RS256 and ES256 tokens act as their subject only
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/rsa.pub;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/ec.pub;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my %t = (Alice => tok('Alice', 'agent'),
             Bob   => tok('Bob', 'agent', alg => 'RS256'),
             Carol => tok('Carol', 'agent other:scope', alg => 'ES256'));
    for my $n (sort keys %t) {
        my ($code, $d) = register($ctx, $t{$n}, $n);
        is $code, 200, "$n registers with its own token" or diag jenc($d);
    }
    my ($code, $d) = register($ctx, $t{Alice}, 'Mallory');
    is $code, 403, 'Alice cannot register another name';
    is "$d->{code}", 'forbidden', '... forbidden';
    like $d->{message}, qr/"Alice"'s; it cannot act as "Mallory"/, '... naming both';
    is_deeply agents_in_redis(), [qw(Alice Bob Carol)], 'Mallory was not stored';


    # ECDSA: (r, n - s) verifies as (r, s) does.  Accepted and documented
    # (SECURITY.md): nothing here is keyed by a token's bytes, and many
    # signers do not normalise s, so requiring low s would refuse about
    # half of their tokens
    {
        require Math::BigInt;
        require MIME::Base64;
        my ($th, $tp, $ts) = split /\./, $t{Carol};
        my $raw = MIME::Base64::decode_base64url($ts);
        my $n = Math::BigInt->from_hex('FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551');
        my $s = Math::BigInt->from_bytes(substr $raw, 32);
        my $flipped = ($n - $s)->to_bytes;
        $flipped = ("\0" x (32 - length $flipped)) . $flipped;
        my $other = "$th.$tp." . MIME::Base64::encode_base64url(substr($raw, 0, 32) . $flipped);
        isnt $other, $t{Carol}, 'the other form of an ES256 signature is another string';
        ($code, $d) = as($ctx, $other, POST => '/query_assistant', { name => 'Carol' });
        is $code, 200, '... and verifies too (documented, not refused)';
    }

    # a token without the agent scope cannot register even its own name
    ($code, $d) = register($ctx, tok('Dave', 'observer'), 'Dave');
    is "$code $d->{code}", '403 forbidden', 'no agent scope: 403';
    like $d->{message}, qr/lacks the "agent" scope/, '... naming the scope';

    # the same token in the query string (browsers' WebSocket handshakes)
    my $res = $ctx->http(POST => "/register?access_token=$t{Alice}",
                         body => jenc({ name => 'Alice', type => 'Human Assistant', desc => 'again' }));
    is $res->code, 200, 'access_token query argument works';

    # WebSocket: the handshake is refused before the upgrade
    my $ws = $ctx->ws('/ws/Alice', headers => bearer($t{Alice}));
    ok $ws->ok, 'Alice connects as Alice';
    $ws->close;
    $ws = $ctx->ws('/ws/Alice', headers => bearer($t{Bob}));
    is $ws->status, 403, 'Bob cannot connect as Alice';
    like $ws->body, qr/"forbidden"/, '... with a JSON reason';
    $ws = $ctx->ws('/ws/Alice');
    is $ws->status, 401, 'no token: the handshake gets 401';
    $ws = $ctx->ws("/ws/Carol?access_token=$t{Carol}");
    ok $ws->ok, 'Carol connects with ?access_token=';

    # teamup and retrieve act as their sender
    ($code, $d) = as($ctx, $t{Alice}, POST => '/teamup', { sender => 'Bob', agent_names => ['Carol'] });
    is "$code $d->{code}", '403 forbidden', 'teamup as someone else: 403';
    is scalar @{ redis_cmd('KEYS', 'ioa:{room:*}:members') }, 0, '... no room created';
    ($code, $d) = as($ctx, $t{Alice}, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'] });
    is $code, 200, 'teamup as oneself';
    my $cid = $d->{comm_id};
    ($code, $d) = as($ctx, $t{Alice}, POST => '/retrieve_assistant', { sender => 'Bob', capabilities => ['agent'] });
    is "$code $d->{code}", '403 forbidden', 'retrieve as someone else: 403';
    ($code, $d) = as($ctx, $t{Alice}, POST => '/retrieve_assistant', { sender => 'Alice', capabilities => ['agent'] });
    is $code, 200, 'retrieve as oneself';

    # posting and reading over HTTP: the path names the agent
    ($code, $d) = as($ctx, $t{Alice}, POST => '/agents/Bob/messages', { comm_id => $cid, content => 'forged' });
    is "$code $d->{code}", '403 forbidden', 'posting as Bob with Alice\'s token: 403';
    ($code, $d) = as($ctx, $t{Alice}, POST => '/agents/Alice/messages', { comm_id => $cid, content => 'mine' });
    is $code, 200, 'posting as Alice';
    my $log = redis_cmd('XRANGE', "ioa:{room:$cid}:log", '-', '+');
    is scalar @$log, 1, 'one envelope stored, the forged one is not';

    # an envelope's sender is the token's subject (open mode takes any:
    # t/020-rooms.t TEST 2)
    my (undef, $tm) = as($ctx, $t{Alice}, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'] });
    my $ws = IoaTest::Agent->connect($ctx, 'Alice', "?access_token=$t{Alice}");
    ok $ws->ok, 'Alice connects with her token' or diag $ws->error;
    $ws->post(envelope(comm_id => $tm->{comm_id}, content => 'I am Bob', sender => 'Bob'));
    my ($e) = $ws->recv_until(sub { ($_->{op} // '') eq 'error' }, 5);
    is $e && "$e->{code} $e->{field}", 'sender_mismatch sender', 'an envelope claiming Bob over her WebSocket: sender_mismatch';
    my ($sc, $sd) = as($ctx, $t{Alice}, POST => '/agents/Alice/messages',
                       { comm_id => $tm->{comm_id}, content => 'I am Bob', sender => 'Bob' });
    is "$sc $sd->{code}", '400 sender_mismatch', '... over HTTP: 400 sender_mismatch';
    is redis_cmd('EXISTS', "ioa:{room:$tm->{comm_id}}:log"), 0, '... and nothing stored';
    $ws->close;
    like $log->[0][1][1], qr/"sender":"Alice"/, '... sent by Alice';
    my $sse = IoaTest::SSE->connect($ctx->host, $ctx->port, '/agents/Bob/inbox',
                                    headers => bearer($t{Alice}));
    is $sse->status, 403, 'reading Bob\'s inbox with Alice\'s token: 403';



=== TEST 7: observer, launch and admin scopes
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $alice = tok('Alice', 'agent');
    register($ctx, $alice, 'Alice');
    register($ctx, tok('Bob', 'agent'), 'Bob');
    my ($code, $d) = as($ctx, $alice, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'] });
    my $cid = $d->{comm_id};
    ($code, $d) = as($ctx, $alice, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'] });
    my $other = $d->{comm_id};

    # listing every agent, or every room, is an administrator's
    ($code, $d) = as($ctx, $alice, GET => '/list_all_agents');
    is "$code $d->{code}", '403 forbidden', 'list_all_agents with an agent token: 403';
    like $d->{message}, qr/lacks the "admin" scope/, '... naming admin';
    ($code, $d) = as($ctx, tok('root', 'admin'), GET => '/list_all_agents');
    is $code, 200, 'with admin: 200';
    is scalar @$d, 2, '... both agents';
    ($code, $d) = as($ctx, tok('watcher', 'observer'), POST => '/fetch_chat_record', { comm_id => undef });
    is "$code $d->{code}", '403 forbidden', 'every room with observer: 403';
    ($code, $d) = as($ctx, tok('root', 'admin'), POST => '/fetch_chat_record', { comm_id => undef });
    is $code, 200, 'every room with admin: 200';
    is scalar keys %$d, 2, '... both rooms';

    # transcripts: observer reads any room by id, observer:<id> that one only
    ($code, $d) = as($ctx, tok('watcher', 'observer'), POST => '/fetch_chat_record', { comm_id => $cid });
    is $code, 200, 'observer reads a room';
    ($code, $d) = as($ctx, tok('one', "observer:$cid"), POST => '/fetch_chat_record', { comm_id => $cid });
    is $code, 200, "observer:<id> reads that room";
    ($code, $d) = as($ctx, tok('one', "observer:$cid"), POST => '/fetch_chat_record', { comm_id => [$cid, $other] });
    is "$code $d->{code}", '403 forbidden', '... not another one, even alongside';
    like $d->{message}, qr/\Q$other\E/, '... naming the room';
    ($code, $d) = as($ctx, $alice, POST => '/fetch_chat_record', { comm_id => $cid });
    is $code, 200, 'a member reads its own room';
    ($code, $d) = as($ctx, tok('Carol', 'agent'), POST => '/fetch_chat_record', { comm_id => $cid });
    is "$code $d->{code}", '403 forbidden', 'a non-member agent does not';
    ($code, $d) = as($ctx, tok('Carol', 'agent'), POST => '/fetch_chat_record', { comm_id => 'no-such-room' });
    is $code, 403, '... nor learns whether a room exists';
    ($code, $d) = as($ctx, tok('Carol', 'launch'), POST => '/fetch_chat_record', { comm_id => $cid });
    is $code, 403, 'a token without agent or observer scope reads nothing';

    # the observer feed
    my $ws = $ctx->ws('/chatlist_ws', headers => bearer($alice));
    is $ws->status, 403, 'chatlist_ws with an agent token: 403';
    $ws = $ctx->ws('/chatlist_ws', headers => bearer(tok('watcher', 'observer')));
    ok $ws->ok, 'chatlist_ws with observer';
    my $sse = IoaTest::SSE->connect($ctx->host, $ctx->port, '/chatlist', headers => bearer($alice));
    is $sse->status, 403, 'chatlist (SSE) with an agent token: 403';

    # goals
    my $goal = { goal => 'say hello', team_member_names => ['Alice', 'Bob'] };
    ($code, $d) = as($ctx, $alice, POST => '/launch_goal', $goal);
    is "$code $d->{code}", '403 forbidden', 'launch_goal without launch: 403';
    is redis_cmd('XLEN', 'ioa:{jobs}:goals'), 0, '... nothing queued';
    ($code, $d) = as($ctx, tok('ops', 'launch'), POST => '/launch_goal', $goal);
    is $code, 202, 'launch_goal with launch: 202';
    ($code) = as($ctx, $alice, GET => "/goals/$d->{goal_id}");
    is $code, 403, 'reading a goal without launch: 403';
    my $gid = $d->{goal_id};
    ($code) = as($ctx, tok('ops', 'launch'), GET => "/goals/$gid");
    is $code, 200, '... with launch: 200';
    ($code, $d) = as($ctx, $alice, POST => "/goals/$gid/messages", { content => 'hi' });
    is "$code $d->{code}", '403 forbidden', 'a message to a goal without launch: 403';
    ($code, $d) = as($ctx, tok('ops', 'launch'), POST => "/goals/$gid/messages",
                     { content => 'also say bye', sender => 'Mallory' });
    is "$code $d->{sender}", '202 ops', '... with launch: 202, sent as the token\'s subject, not the body\'s';
    is redis_cmd('XRANGE', "ioa:{goal:$gid}:inbox", '-', '+')->[0][1][1], 'ops',
       '... and stored so';

    # the launcher is the goal's person: a member of its room, connected
    # as itself with the launch token alone
    is redis_cmd('HGET', "ioa:{goal:$gid}:meta", 'launched_by'), 'ops', 'the launcher is kept as the goal\'s person';
    ($code, $d) = as($ctx, tok('ops', 'launch'), GET => "/goals/$gid");
    is $d->{launched_by}, 'ops', '... and shown by GET /goals/{id}';
    ($code, $d) = as($ctx, tok('ops', 'launch'), POST => '/launch_goal', { %$goal, person => 'ops' });
    is $code, 202, '"person" naming the launcher: 202';
    ($code, $d) = as($ctx, tok('ops', 'launch'), POST => '/launch_goal', { %$goal, person => 'Alice' });
    is "$code $d->{code} $d->{field}", '403 forbidden person', '"person" naming someone else: 403, naming the field';
    like $d->{message}, qr/cannot act as "Alice"/, '... saying why';
    $ws = $ctx->ws('/ws/ops', headers => bearer(tok('ops', 'launch')));
    ok $ws->ok, 'a launch token opens a WebSocket as its subject';
    $ws = $ctx->ws('/ws/Alice', headers => bearer(tok('ops', 'launch')));
    is $ws->status, 403, '... and as nobody else';
    $sse = IoaTest::SSE->connect($ctx->host, $ctx->port, '/agents/ops/inbox', headers => bearer(tok('ops', 'launch')));
    ok $sse->ok, '... and reads its rooms over the HTTP transport';
    $sse->close;
    ($code, $d) = as($ctx, tok('watcher', 'observer'), GET => '/agents/watcher/inbox');
    is "$code $d->{code}", '403 forbidden', 'an observer token is no member';
    like $d->{message}, qr/lacks the "agent" or "launch" scope/, '... and is told which scopes are';
    ($code, $d) = as($ctx, tok('ops', 'launch'), POST => '/agents/ops/messages',
                     { sender => 'ops', comm_id => $cid, content => 'let me in' });
    is "$code $d->{code}", '403 not_member', 'a launch token posts only where it is a member';

    # a goal is its launcher's (and an administrator's); to anyone else it
    # is not there (t/280-a2a-server.t TEST 7: byte for byte)
    my $eve = tok('eve', 'launch');
    ($code, $d) = as($ctx, $eve, GET => "/goals/$gid");
    is "$code $d->{code} $d->{field}", '404 unknown_goal goal_id', 'another launcher does not read it';
    is $d->{message}, 'no such goal', '... and is told no more than of an unknown goal';
    ($code, $d) = as($ctx, $eve, POST => "/goals/$gid/messages", { content => 'stop' });
    is "$code $d->{code}", '404 unknown_goal', '... nor posts into it';
    ($code, $d) = as($ctx, $eve, POST => "/goals/$gid/cancel");
    is "$code $d->{code}", '404 unknown_goal', '... nor cancels it';
    is redis_cmd('HGET', "ioa:{goal:$gid}:meta", 'state'), 'queued', '... which stays queued';
    $sse = IoaTest::SSE->connect($ctx->host, $ctx->port, "/goals/$gid/events", headers => bearer($eve));
    is $sse->status, 404, '... nor follows it';
    $sse = IoaTest::SSE->connect($ctx->host, $ctx->port, "/goals/$gid/events", headers => bearer(tok('ops', 'launch')));
    ok $sse->ok, 'its launcher follows it' or diag $sse->error;
    my $ev = $sse->next_event(3);
    is $ev && $ev->{retry}, 1000, '... the stream is open (nothing has happened yet: it is queued)';
    $sse->close;
    $sse = IoaTest::SSE->connect($ctx->host, $ctx->port, '/goals/' . ('0' x 32) . '/events', headers => bearer($eve));
    is $sse->status, 404, 'an unknown goal: 404';
    ($code, $d) = as($ctx, tok('root', 'admin'), GET => "/goals/$gid");
    is $code, 200, 'an administrator reads anyone\'s';
    is redis_cmd('HGET', "ioa:{goal:$gid}:meta", 'launcher_admin'), '0', 'a launcher is no administrator';
    ($code, $d) = as($ctx, tok('root', 'admin'), POST => '/launch_goal', $goal);
    is redis_cmd('HGET', "ioa:{goal:$d->{goal_id}}:meta", 'launcher_admin'), '1', '... an administrator is, for the worker';
    ($code, $d) = as($ctx, tok('ops', 'launch'), POST => "/goals/$gid/cancel");
    is $code, 202, 'its launcher cancels it';

    # discovery needs some scope
    ($code, $d) = as($ctx, tok('nobody', ''), POST => '/query_assistant', { name => 'Alice' });
    is "$code $d->{code}", '403 forbidden', '/query_assistant with a token of no scope: 403';
    like $d->{message}, qr/lacks the "agent", "observer" or "launch" scope/, '... naming the scopes that do';
    for my $s (qw(agent observer launch)) {
        ($code) = as($ctx, tok('any', $s), POST => '/query_assistant', { name => 'Alice' });
        is $code, 200, "... with $s: 200";
    }

    # the health check stays open for load balancers
    ($code) = api($ctx, GET => '/health_check');
    is $code, 200, 'health_check needs no token';



=== TEST 8: ioa_auth request: the identity comes from nginx's auth_request
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location = /_auth {
        internal;
        proxy_pass http://127.0.0.1:$TEST_NGINX_SERVER_PORT/auth-service;
        proxy_pass_request_body off;
        proxy_set_header Content-Length "";
    }
    # the operator's service: here a table of two opaque tokens
    location = /auth-service {
        if ($http_authorization = "Bearer opaque-alice") {
            add_header X-Ioa-Sub Alice;
            add_header X-Ioa-Scopes "agent";
            return 204;
        }
        if ($http_authorization = "Bearer opaque-root") {
            add_header X-Ioa-Sub root;
            add_header X-Ioa-Scopes "admin";
            return 204;
        }
        return 401;
    }
    # load balancers' health check: no auth_request, a fixed identity
    location = /health_check {
        ioa_api;
        ioa_auth request;
        ioa_auth_identity lb;
    }
    location / {
        auth_request /_auth;
        auth_request_set $ioa_sub $upstream_http_x_ioa_sub;
        auth_request_set $ioa_scopes $upstream_http_x_ioa_scopes;
        ioa_api;
        ioa_auth request;
        ioa_auth_identity $ioa_sub;
        ioa_auth_scopes $ioa_scopes;
    }
--- ioa_scenario
    my ($code) = register($ctx, 'nobody-knows', 'Alice');
    is $code, 401, 'an unknown token: auth_request answers 401';
    ($code, my $d) = register($ctx, 'opaque-alice', 'Alice');
    is $code, 200, 'Alice registers as Alice' or diag jenc($d);
    ($code, $d) = register($ctx, 'opaque-alice', 'Bob');
    is "$code $d->{code}", '403 forbidden', 'not as Bob';
    ($code, $d) = as($ctx, 'opaque-alice', GET => '/list_all_agents');
    is $code, 403, 'no admin scope from the service: 403';
    ($code, $d) = as($ctx, 'opaque-root', GET => '/list_all_agents');
    is $code, 200, 'admin from the service: 200';
    is_deeply [ map { $_->{name} } @$d ], ['Alice'], '... only Alice was stored';
