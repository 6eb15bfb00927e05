# t/032-names.t -- agent names compare as people read them: a name that is
# not in Unicode NFC, or that holds an invisible or bidirectional-control
# character (the Unicode properties Default_Ignorable_Code_Point and
# Bidi_Control), is refused wherever a name enters, so that no agent can
# pass for another in the console, in discovery answers or in transcripts
# (ngx_ioa_name_check() in ngx_ioa_module/registry/ngx_ioa_name.c).
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/032-names.t
#
# Every block starts from an empty Redis and a hub that has connected to it
# (hub_ready in IoaTest::Api).

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Api;
use IoaTest::JWT;

use File::Temp ();
use URI::Escape qw(uri_escape_utf8);

no_root_location();
log_level('info');

our $KEYDIR = File::Temp::tempdir('ioa-names-XXXXXX', TMPDIR => 1, CLEANUP => 1);
our $K = jwt_keys($KEYDIR);
$ENV{TEST_NGINX_KEYS} = $KEYDIR;

# Each block: an empty Redis, a hub connected to it, and (as in
# t/010-websocket.t) a first request of GET /, which ioa_api answers with
# 404 unknown_endpoint: it proves the location serves ioa_api.
add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value(init => 'main::hub_ready()')
        unless defined $block->init || defined $block->must_die;
    return if defined $block->request;
    $block->set_value(request => "GET /\n");
    $block->set_value(error_code => 404);
    $block->set_value(response_body_like => '"code":"unknown_endpoint"');
});

# The findings of the review: each renders as "Lk-x" or nearly, with the
# code point the refusal must name.
our @LookAlikes = (
    ["Lk-x\x{200B}",      'U+200B', 'a zero width space after it'],
    ["\x{FEFF}Lk-x",      'U+FEFF', 'a byte order mark before it'],
    ["Lk\x{202E}-x",      'U+202E', 'a right-to-left override inside'],
    ["Lk\x{AD}-x",        'U+00AD', 'a soft hyphen inside'],
    ["Lk-x\x{2060}",      'U+2060', 'a word joiner after it'],
    ["Lk\x{200E}-x",      'U+200E', 'a left-to-right mark inside'],
    ["Lk-x\x{2066}",      'U+2066', 'a left-to-right isolate after it'],
    ["Lk-x\x{FE0F}",      'U+FE0F', 'a variation selector after it'],
    ["L\x{034F}k-x",      'U+034F', 'a combining grapheme joiner inside'],
);

our $NFC = "Pl\x{e4}";          # U+00E4
our $NFD = "Pla\x{308}";        # "a" + U+0308, renders the same

sub reg {
    my ($ctx, $name, %opt) = @_;
    return api($ctx, POST => '/register',
               { name => $name, type => 'Human Assistant', desc => 'an agent' },
               %opt);
}

sub agent_count { redis_cmd('ZCARD', 'ioa:{reg}:agents') }

run_tests();

__DATA__

=== TEST 1: look-alikes of a registered name are refused, naming the code point
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my ($code, $d) = main::reg($ctx, 'Lk-x');
    is $code, 200, '"Lk-x" registers' or diag jenc($d);
    for my $case (@main::LookAlikes) {
        my ($name, $cp, $what) = @$case;
        ($code, $d) = main::reg($ctx, $name);
        is $code, 400, "refused: \"Lk-x\" with $what";
        is_deeply [ @$d{qw(op code field)} ], ['error', 'invalid_request', 'name'],
            '... as invalid_request, field name';
        like $d->{message} // '', qr/^"name" is not a name: it contains \Q$cp\E, an invisible or bidirectional-control character/,
            "... naming $cp";
    }
    ($code, $d) = main::reg($ctx, 'Lk-x');
    is $code, 200, '"Lk-x" itself still registers (again)';
    is main::agent_count(), 1, 'one agent in the registry: "Lk-x"';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: NFC registers, its NFD spelling is refused, ordinary non-ASCII names register
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my ($code, $d) = main::reg($ctx, $main::NFC);
    is $code, 200, '"Pl" + U+00E4 (NFC) registers' or diag jenc($d);
    for my $nfd ($main::NFD, "Zoe\x{308}", "\x{3a9}mega\x{301}", "\x{212b}ngstr\x{f6}m") {
        ($code, $d) = main::reg($ctx, $nfd);
        is $code, 400, 'refused: ' . jenc($nfd) . ', not NFC';
        is_deeply [ @$d{qw(code field)} ], ['invalid_request', 'name'],
            '... as invalid_request, field name';
        is $d->{message}, '"name" is not a name: it is not in Unicode NFC (normalize it)',
            '... saying to normalize it';
    }
    for my $ok ("Zo\x{eb}", "\x{6570}\x{636e}\x{5206}\x{6790}\x{5e08}", "\x{3a9}mega",
                "\x{c5}ngstr\x{f6}m", "\x{645}\x{633}\x{627}\x{639}\x{62f}",
                "\x{915}\x{93f}\x{924}\x{93e}\x{92c}", "\x{d55c}\x{ad6d}\x{c5b4}",
                "caf\x{e9} \x{1f916}") {
        ($code, $d) = main::reg($ctx, $ok);
        is $code, 200, 'registers: ' . jenc($ok) or diag jenc($d);
    }
    is main::agent_count(), 9, 'nine agents: the NFD spellings are not among them';
    ($code, $d) = api($ctx, POST => '/query_assistant', { name => $main::NFC });
    is $code, 200, 'the NFC agent is found by its name';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3: /ws/{name}, /teamup, /query_assistant and /launch_goal refuse them too
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    main::reg($ctx, $_) for 'Lk-x', $main::NFC;

    for my $case ([$main::NFD, qr/not in Unicode NFC \(normalize it\)/],
                  ["Lk-x\x{200B}", qr/U\+200B/], ["Lk\x{202E}-x", qr/U\+202E/]) {
        my ($name, $why) = @$case;
        my $path = '/ws/' . uri_escape_utf8($name);
        my $ws = $ctx->ws($path);
        ok !$ws->ok, "$path: no upgrade";
        is $ws->status, 400, "$path: 400";
        my $j = jdec($ws->body) // {};
        is_deeply [ @$j{qw(code field)} ], ['invalid_name', 'agent_name'],
            "$path: invalid_name, field agent_name";
        like $j->{message} // '', $why, "$path: says why";
    }
    my $ws = $ctx->ws('/ws/' . uri_escape_utf8($main::NFC));
    is $ws->status, 101, 'the NFC spelling connects';

    my ($code, $d) = api($ctx, POST => '/teamup',
                         { sender => 'Lk-x', agent_names => [$main::NFD], team_name => 't' });
    is "$code $d->{code} $d->{field}", '400 invalid_request agent_names',
        '/teamup: an NFD member is refused, field agent_names';
    like $d->{message}, qr/^"agent_names"\[0\] is not a name: it is not in Unicode NFC/,
        '... naming the entry';
    ($code, $d) = api($ctx, POST => '/teamup',
                      { sender => "Lk-x\x{200B}", agent_names => [$main::NFC], team_name => 't' });
    is "$code $d->{code} $d->{field}", '400 invalid_request sender',
        '/teamup: a look-alike sender is refused, field sender';
    like $d->{message}, qr/U\+200B/, '... naming U+200B';
    ($code, $d) = api($ctx, POST => '/teamup',
                      { sender => 'Lk-x', agent_names => [$main::NFC], team_name => 't' });
    is $code, 200, '/teamup of the NFC spelling forms the team' or diag jenc($d);

    ($code, $d) = api($ctx, POST => '/query_assistant', { name => ['Lk-x', "\x{FEFF}Lk-x"] });
    is "$code $d->{code} $d->{field}", '400 invalid_request name',
        '/query_assistant: a look-alike is refused';
    like $d->{message}, qr/U\+FEFF/, '... naming U+FEFF';

    ($code, $d) = api($ctx, POST => '/launch_goal',
                      { goal => 'x', team_member_names => ['Lk-x', "Lk\x{AD}-x"] });
    is "$code $d->{code} $d->{field}", '400 invalid_request team_member_names',
        '/launch_goal: a look-alike member is refused';
    like $d->{message}, qr/^"team_member_names"\[1\] is not a name: .*U\+00AD/,
        '... naming the entry and U+00AD';
    is main::agent_count(), 2, 'nothing registered on the way';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 4: a token whose sub is a look-alike or not NFC is refused (401), naming why
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $tok = sub { jwt($main::K, 'HS256', { sub => $_[0], scope => 'agent', exp => time + 300 }) };
    my ($code, $d) = main::reg($ctx, 'Lk-x', headers => [Authorization => 'Bearer ' . $tok->('Lk-x')]);
    is $code, 200, '"Lk-x" registers with its own token' or diag jenc($d);
    for my $case (["Lk\x{202E}-x", qr/U\+202E/], [$main::NFD, qr/not in Unicode NFC/]) {
        my ($sub, $why) = @$case;
        ($code, $d) = main::reg($ctx, $sub, headers => [Authorization => 'Bearer ' . $tok->($sub)]);
        is "$code $d->{code}", '401 unauthorized', 'a token for ' . jenc($sub) . ' is refused';
        like $d->{message}, qr/^the token's "sub" is not a name: .*$why/, '... saying why';
    }
    is main::agent_count(), 1, 'only "Lk-x" registered';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 5: DELETE /agents/{name} still takes a look-alike name: 404 when there is none
The look-alike name is one registered before the rule.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my ($code, $d) = api($ctx, DELETE => '/agents/' . uri_escape_utf8("Lk-x\x{200B}"));
    is "$code $d->{code}", '404 unknown_agent', 'a look-alike is looked up, not refused';
    ($code, $d) = api($ctx, DELETE => '/agents/a%7Bb');
    is "$code $d->{code}", '400 invalid_name', 'what the rule always refused still is';
--- no_error_log
[alert]
[crit]
[emerg]
