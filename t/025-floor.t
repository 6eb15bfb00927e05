# t/025-floor.t -- floor control: the hub enforces whose turn it is.
#
# IoA clients each decide whether an envelope addresses them (next_speaker);
# the hub enforces it in post.lua.  A room's floor is the Redis set
# ioa:{room:<comm_id>}:floor.  Turn types (DISCUSSION 4, task assignments 5
# and 6, PAUSE 9, CONCLUDE_GROUP_DISCUSSION 10, CONCLUSION 11) from a member
# outside the floor are refused with not_your_turn, stored and delivered
# nowhere; the room's creator may always speak; progress (8), results (7)
# and untyped envelopes are never refused.  t/redis-scripts.t checks every
# rule of post.lua; this file checks what agents see over WebSocket and
# over the HTTP transport.
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/025-floor.t

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(register teamup envelope wait_health json fresh_hub);

no_root_location();   # "location / { ioa_api; }" is the whole server
log_level('info');

# ------------------------------------------------------------------ helpers

sub fresh { fresh_hub(shift) }

sub xlen { redis_cmd('XLEN', "ioa:{room:$_[0]}:log") }

# The floor as a sorted list, or 'open' when the room has no floor key.
sub floor {
    my $cid = shift;
    my $key = "ioa:{room:$cid}:floor";
    return 'open' unless redis_cmd('EXISTS', $key);
    return [ sort @{ redis_cmd('SMEMBERS', $key) } ];
}

# Posts $env as $from and checks every agent in @all receives it (the
# sender included); returns the envelope as delivered.
sub turn_ok {
    my ($from, $env, $what, @all) = @_;
    $from->post($env);
    my $got;
    for my $ag (@all) {
        my $m = $ag->recv(5);
        Test::More::ok($m && defined $m->{id} && ($m->{sender} // '') eq $from->name,
                       "$what: delivered to " . $ag->name)
            or Test::More::diag($m ? $m->{_raw} : 'nothing arrived');
        $got //= $m;
    }
    return $got;
}

sub spy { redis_spy("ioa:{room:$_[0]}:ch") }

run_tests();

__DATA__

=== TEST 1: a directed conversation over WebSocket: a member out of turn is refused
A member out of turn is refused with not_your_turn and nobody receives it; the
addressed member speaks; progress and results need no turn; the creator may
always speak; CONCLUSION opens the floor.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob Carol));
    my %ag = map { $_ => IoaTest::Agent->connect($ctx, $_) } qw(Alice Bob Carol);
    ok $ag{$_}->ok, "$_ connected" or diag $ag{$_}->error for sort keys %ag;
    my ($a, $b, $c) = @ag{qw(Alice Bob Carol)};
    my @all = ($a, $b, $c);
    my $cid = teamup($ctx, 'Alice', ['Bob', 'Carol']);     # Alice is the creator
    is floor($cid), 'open', 'a new room has an open floor';

    # Open floor: a plain DISCUSSION that names nobody leaves it open.
    turn_ok($c, envelope(comm_id => $cid, content => 'hello all'), 'open floor', @all);
    is floor($cid), 'open', 'still open';

    # The creator addresses Bob: only Bob has the floor now.
    turn_ok($a, envelope(comm_id => $cid, content => 'Bob, your view?',
                         next_speaker => ['Bob'], type => 4), 'Alice to Bob', @all);
    is_deeply floor($cid), ['Bob'], 'the floor is {Bob}, in the room\'s hash slot';

    # Carol speaks out of turn.
    my $len = xlen($cid);
    my $spy = spy($cid);
    $c->post(envelope(comm_id => $cid, content => 'me first!', next_speaker => ['Alice'],
                      type => 4));
    my $err = $c->recv(5);
    is $err && $err->{op}, 'error', 'Carol gets an error frame' or diag $err && $err->{_raw};
    is $err && $err->{code}, 'not_your_turn', 'code not_your_turn';
    is $err && $err->{comm_id}, $cid, 'the error names the room';
    is $err && $err->{field}, 'sender', 'field sender';
    like $err && $err->{message}, qr/^"Carol" does not have the floor in room "\Q$cid\E"; the envelope was not stored: send it again once an envelope names you in next_speaker \(next: Bob\)$/,
        'the message names the sender, says nothing was stored and who is next'
        or diag $err && $err->{message};
    is xlen($cid), $len, 'not stored';
    ok $a->quiet(0.5), 'Alice received nothing' or diag $a->noise->{_raw};
    ok $b->quiet(0.1), 'Bob received nothing' or diag $b->noise->{_raw};
    ok $c->quiet(0.1), 'Carol received nothing but the error' or diag $c->noise->{_raw};
    my @pub = $spy->try_read_reply(0.1);
    ok !@pub, 'nothing published' or diag json->encode(\@pub);
    is_deeply floor($cid), ['Bob'], 'the floor is unchanged';

    # The assignment types are turns too.
    for my $type (5, 6, 9, 10, 11) {
        $c->post(envelope(comm_id => $cid, content => "type $type", type => $type));
        my $e = $c->recv(5);
        is $e && $e->{code}, "not_your_turn", "type $type out of turn: not_your_turn";
    }

    # Bob has the floor and hands it to Carol.
    turn_ok($b, envelope(comm_id => $cid, content => 'Carol, go on', next_speaker => ['Carol'],
                         type => 4), 'Bob in turn', @all);
    is_deeply floor($cid), ['Carol'], 'the floor moved to Carol';
    $b->post(envelope(comm_id => $cid, content => 'one more thing', type => 4));
    $err = $b->recv(5);
    is $err && $err->{code}, 'not_your_turn', 'Bob used his turn: not_your_turn'
        or diag $err && $err->{_raw};

    # Progress, results and untyped envelopes answer at any time.
    turn_ok($b, envelope(comm_id => $cid, content => 'working on it', next_speaker => ['Alice'],
                         type => 8, task_id => 't1'), 'progress (8) from Bob', @all);
    turn_ok($b, envelope(comm_id => $cid, content => 'done', next_speaker => ['Alice'],
                         type => 7, task_id => 't1'), 'result (7) from Bob', @all);
    turn_ok($b, envelope(comm_id => $cid, content => 'plain chat', drop => ['type']),
            'an untyped envelope from Bob', @all);
    is_deeply floor($cid), ['Carol'], '7, 8 and untyped envelopes leave the floor alone';

    # The creator chairs the room.
    turn_ok($a, envelope(comm_id => $cid, content => 'Bob, assign it', next_speaker => ['Bob'],
                         type => 4), 'the creator speaks without the floor', @all);
    is_deeply floor($cid), ['Bob'], 'a creator turn re-addresses the floor';

    # An assigner keeps the floor; CONCLUSION opens it again.
    turn_ok($b, envelope(comm_id => $cid, content => 'Carol: task', next_speaker => ['Carol'],
                         type => 6, task_id => 't2'), 'Bob assigns to Carol', @all);
    is_deeply floor($cid), ['Bob', 'Carol'], 'assignee and assigner hold the floor';
    turn_ok($a, envelope(comm_id => $cid, content => 'the answer', type => 11),
            'the creator concludes', @all);
    is floor($cid), 'open', 'CONCLUSION deletes the floor';
    turn_ok($c, envelope(comm_id => $cid, content => 'continuing', type => 4),
            'anyone may speak after the conclusion', @all);
--- no_error_log
[error]
[alert]
[crit]



=== TEST 2: over the HTTP transport a turn out of turn is 409 not_your_turn, nothing stored
The addressed agent's POST is 200.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob Carol));
    my $cid = teamup($ctx, 'Alice', ['Bob', 'Carol']);
    my $post = sub {
        my ($who, %f) = @_;
        my $res = $ctx->http(POST => "/agents/$who/messages",
                             body => envelope(comm_id => $cid, %f));
        return ($res->code, eval { json->decode($res->content) } // {}, $res);
    };

    my ($code, $d) = $post->('Alice', content => 'Bob?', next_speaker => 'Bob', type => 4);
    is $code, 200, 'the creator addresses Bob (next_speaker as a string): 200';
    is_deeply floor($cid), ['Bob'], 'the floor is {Bob}';
    ($code, $d) = $post->('Alice', content => 'Bob, again', type => 4,
                          next_speaker => [ (map { "ghost$_" } 1 .. 30), 'Bob' ]);
    is $code, 200, 'next_speaker with 31 names, 30 of them not members: 200';
    is_deeply floor($cid), ['Bob'], 'only the member among them gets the floor';
    my $len = xlen($cid);

    my $res;
    ($code, $d, $res) = $post->('Carol', content => 'me!', type => 4);
    is $code, 409, 'Carol out of turn: 409 Conflict';
    is $res->header('Content-Type'), 'application/json', 'a JSON error';
    is_deeply [ sort keys %$d ], [qw(code field message op)],
        '{"op","code","message","field"}, the shape of not_member';
    is "$d->{op} $d->{code} $d->{field}", 'error not_your_turn sender', 'error not_your_turn, field sender';
    like $d->{message}, qr/^"Carol" does not have the floor .*not stored.*\(next: Bob\)$/,
        'the message says nothing was stored and who is next';
    is xlen($cid), $len, 'nothing stored';

    ($code, $d) = $post->('Carol', content => 'progress', type => 8);
    is $code, 200, 'progress from Carol: 200';
    ($code, $d) = $post->('Bob', content => 'Carol, you', next_speaker => ['Carol'], type => 4);
    is $code, 200, 'Bob in turn: 200';
    like $d->{id}, qr/^\d+-\d+$/, 'with the Stream id';
    ($code, $d) = $post->('Carol', content => 'finally', type => 4);
    is $code, 200, 'now Carol\'s turn: 200';
    is_deeply floor($cid), ['Carol'], 'a turn naming nobody leaves the speaker the floor';
    ($code, $d) = $post->('Dave', content => 'hi', type => 4);
    is "$code $d->{code}", '403 not_member', 'a non-member is still 403 not_member';
--- no_error_log
[error]
[alert]
[crit]
