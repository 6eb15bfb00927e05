# t/020-rooms.t -- rooms and routing over the WebSocket API (/ws/{name}):
# what an IoA client sees (every member, sender included, gets every
# envelope, stamped with the server's sender, id and timestamp), what the
# hub refuses, and the exactness the Redis Stream gives (one order for all,
# resume without gap or duplicate, catch-up in batches, Redis restarts).
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/020-rooms.t
#
# Every block starts from an empty Redis (fresh()), registers its agents and
# teams them up over REST, then drives WebSocket agents (IoaTest::Agent).
# Waiting is done on messages, not sleeps: a test that proves nothing
# arrives waits a bounded time (->quiet), and the only sleeps are the ones
# that shape a race on purpose (TEST 10) or play a slow client.
#
# Blocks ask for GET /health_check first only to bring nginx up: it may still
# be connecting to Redis (503), so fresh() then waits for 200.
#
# Log level: info, not the runner's default debug.  At debug level every
# envelope costs dozens of log lines, and (see the last block) the hub
# itself must survive debug logging: that block runs its own nginx at debug
# level so that a crash there fails one block instead of bailing out the file.

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use File::Temp ();
use IoaTest::Agent qw(register teamup envelope wait_health json fresh_hub);
use POSIX ();
use Time::HiRes qw(sleep time);

no_root_location();   # "location / { ioa_api; }" is the whole server
log_level('info');

# ------------------------------------------------------------------ helpers
# (scenarios are compiled in package main, so they call these directly)

# Empty Redis, and the hub connected to it.
sub fresh { fresh_hub(shift) }

sub log_key { "ioa:{room:$_[0]}:log" }

# [[id, envelope json], ...] in Stream order.
sub xrange {
    my ($cid, $from) = @_;
    my $r = redis_cmd('XRANGE', log_key($cid), $from // '-', '+');
    return map { [ $_->[0], { @{ $_->[1] } }->{e} ] } @$r;
}

sub stream_ids { map { $_->[0] } xrange(@_) }

sub xlen { redis_cmd('XLEN', log_key($_[0])) }

sub ids      { [ map { $_->{id} // '(none)' } @_ ] }
sub contents { [ map { $_->{content} // '(none)' } @_ ] }

# Posts $n envelopes "$tag 1" .. "$tag $n" into $cid.
sub post_n {
    my ($agent, $cid, $tag, $n, $from) = @_;
    $from //= 1;
    $agent->post(envelope(comm_id => $cid, content => "$tag $_",
                          next_speaker => ''))
        for $from .. $from + $n - 1;
}

# Reads $n frames: one test that all came, and one more (failing) only if
# some are not envelopes (error or ack frames).
sub recv_envs {
    my ($agent, $n, $timeout, $what) = @_;
    $what //= $agent->name;
    my @m = $agent->recv_n($n, $timeout // 10);
    Test::More::is(scalar @m, $n, "$what: $n envelopes arrived")
        or Test::More::diag('got: ' . join "\n", map { $_->{_raw} } @m);
    my @bad = grep { ($_->{op} // '') ne '' || !defined $_->{id} } @m;
    Test::More::fail("$what: only envelopes")
        or Test::More::diag(join "\n", map { $_->{_raw} } @bad) if @bad;
    return @m;
}

# Waits for an error frame; returns it (undef on timeout).
sub recv_error {
    my ($agent, $timeout) = @_;
    my ($m) = $agent->recv_until(sub { ($_->{op} // '') eq 'error' },
                                 $timeout // 5);
    return $m;
}

# The ways an agent asks to resume a room after $last: the resume= and since=
# query arguments, or {"op":"resume"} as its first frame: in the handshake's
# own write, or announced with wait_resume=1 and sent right after the
# handshake or 50 ms later (a client that first reads its last ids from
# disk).  Without wait_resume a late resume frame is refused once live
# envelopes went out (TEST 16).
our @ResumeForms = ('resume=', 'since=', 'first frame', 'first frame, pipelined',
                    'first frame, 50 ms later');

sub connect_resumed {
    my ($ctx, $name, $form, $cid, $last) = @_;
    my $frame = qq({"op":"resume","rooms":{"$cid":"$last"}});
    return IoaTest::Agent->connect($ctx, $name, "?resume=$cid:$last")
        if $form eq 'resume=';
    return IoaTest::Agent->connect($ctx, $name, "?since=$last")
        if $form eq 'since=';
    return IoaTest::Agent->connect($ctx, $name, '', pipeline => [$frame])
        if $form eq 'first frame, pipelined';
    my $agent = IoaTest::Agent->connect($ctx, $name, '?wait_resume=1');
    sleep 0.05 if $form eq 'first frame, 50 ms later';
    $agent->post($frame);
    return $agent;
}

# A Redis connection subscribed to every ioa channel, and on a Cluster to
# the room's shard channel: proves what is (not) published.
sub spy { redis_spy("ioa:{room:$_[0]}:ch") }

run_tests();

__DATA__

=== TEST 1: an envelope reaches every member stamped, all its fields kept, stored in Redis
Every member gets the envelope, the sender included, stamped with id, sender
and timestamp; every IoA field and unknown nested fields are kept; Redis holds
the same envelope under {room:<comm_id>} keys.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob Carol));
    my %ag = map { $_ => IoaTest::Agent->connect($ctx, $_) } qw(Alice Bob Carol);
    ok $ag{$_}->ok, "$_ connected" or diag $ag{$_}->error for sort keys %ag;
    my $cid = teamup($ctx, 'Alice', ['Bob', 'Carol'], 'team one');

    # Every IoA field with non-default values, a client "id" and "timestamp"
    # (the server's replace them), and unknown fields whose numbers must keep
    # their text.
    my $ext = '{"nested":{"deep":[1,2.50,-0.0,1e3,{"k":null}]},"flag":true}';
    my $members = [ { name => 'Bob', type => 'Human Assistant', desc => 'b' },
                    { name => 'Carol', type => 'Thing Assistant', desc => 'c' } ];
    my $e1 = envelope(
        content => "caf\x{e9} \"quoted\"\nline 2 \x{1F600}", sender => 'Alice',
        comm_id => $cid, next_speaker => 'Bob', state => 1, type => 5,
        proposal_id => 'p1', goal => 'write the report',
        team_members => $members, team_up_depth => 2, task_id => 't-1',
        task_desc => 'draft', task_conclusion => 'none yet',
        task_abstract => 'Draft', triggers => ['t-0', 't-9'],
        updated_plan => 'plan v2', is_collaborative_planning_enabled => JSON::PP::true,
        max_turns => 20, id => '1-1', timestamp => 5);
    $e1 =~ s/\}$/,"x_ext":$ext}/;
    my $e2 = envelope(content => 'to two', comm_id => $cid,
                      next_speaker => ['Alice', 'Carol'], type => 4);

    my $t0 = int(time * 1000);
    $ag{Alice}->post($e1);
    my @first = map { $ag{$_}->recv(5) } qw(Alice Bob Carol);
    $ag{Bob}->post($e2);
    my $t1 = int(time * 1000);

    my %got;
    for my $n (qw(Alice Bob Carol)) {
        my $m1 = shift @first;
        my ($m2) = $ag{$n}->recv(5);
        ok $m1 && $m2, "$n received both envelopes" or next;
        $got{$n} = [ $m1, $m2 ];
    }
    is $got{$_}[0]{_raw}, $got{Alice}[0]{_raw}, "$_ got the same bytes as the sender"
        for qw(Bob Carol);
    is $got{$_}[1]{_raw}, $got{Alice}[1]{_raw}, "$_ got the same bytes for envelope 2"
        for qw(Bob Carol);

    my ($m1, $m2) = @{ $got{Carol} };
    like $m1->{id}, qr/^\d+-\d+$/, 'id is a Stream id';
    like $m2->{id}, qr/^\d+-\d+$/, 'second id is a Stream id';
    isnt $m1->{id}, '1-1', "the client's id was replaced";
    is $m1->{sender}, 'Alice', 'sender is the connection name';
    is $m2->{sender}, 'Bob', 'sender of envelope 2 is Bob';
    ok $m1->{timestamp} >= $t0 - 5000 && $m1->{timestamp} <= $t1 + 5000,
        "timestamp is the server's time in ms ($m1->{timestamp})";
    like $m1->{_raw}, qr/^\{"id":"\d+-\d+","sender":"Alice","timestamp":\d+,/,
        'id, sender and timestamp lead the envelope';

    # All IoA fields kept with their values (sender and timestamp aside).
    my $sent = json->decode($e1);
    my %want = %$sent;
    delete @want{qw(id timestamp sender)};
    my %have = %$m1;
    delete @have{qw(id timestamp sender _raw)};
    is_deeply \%have, \%want, 'every field arrives with its value';
    is scalar(grep { !exists $m1->{$_} } qw(content sender comm_id next_speaker
        state type proposal_id goal team_members team_up_depth task_id task_desc
        task_conclusion task_abstract triggers updated_plan
        is_collaborative_planning_enabled max_turns)), 0, 'all 18 IoA fields present';
    like $m1->{_raw}, qr/"state":1,"type":5,/, 'enums stay integers';
    like $m1->{_raw}, qr/"is_collaborative_planning_enabled":true,"max_turns":20/,
        'bool and int kept as JSON types';
    is $m1->{next_speaker}, 'Bob', 'next_speaker as a string';
    is_deeply $m2->{next_speaker}, ['Alice', 'Carol'], 'next_speaker as a list';
    is $m2->{goal}, undef, 'null goal stays null';
    ok index($m1->{_raw}, qq{"x_ext":$ext}) >= 0,
        'unknown nested field forwarded byte for byte' or diag $m1->{_raw};
    is $m1->{content}, "caf\x{e9} \"quoted\"\nline 2 \x{1F600}",
        'content with escapes and non-ASCII survives';

    # The Stream holds exactly these two, each as delivered minus "id".
    my @x = xrange($cid);
    is scalar @x, 2, 'two entries in the room log';
    is_deeply [ map { $_->[0] } @x ], [ $m1->{id}, $m2->{id} ],
        'delivered ids are the Stream ids, in order';
    is '{"id":"' . $x[0][0] . '",' . substr($x[0][1], 1), $m1->{_raw},
        'stored entry 1 = delivered envelope without its id';
    is '{"id":"' . $x[1][0] . '",' . substr($x[1][1], 1), $m2->{_raw},
        'stored entry 2 = delivered envelope without its id';

    # Key layout: every room key carries the {room:<comm_id>} hash tag.
    my @keys = sort @{ redis_cmd('KEYS', "ioa:{room:$cid}:*") };
    # (floor: envelope 1 is a task assignment to Bob, see t/025-floor.t)
    is_deeply \@keys, [ map { "ioa:{room:$cid}:$_" } qw(chain floor log members meta) ],
        'room keys: chain, floor, log, members, meta under {room:<comm_id>}';
    # ioa:{jobs}:goals is the goal queue, with its consumer group: the hub
    # makes it whenever its command connection comes up, which may be just
    # after fresh()'s FLUSHALL
    is_deeply [ grep { !/^ioa:\{(?:room:[0-9a-f]{32}|reg|jobs)\}:/ }
                @{ redis_cmd('KEYS', '*') } ], [],
        'every key is under ioa:{room:..}, ioa:{reg} or ioa:{jobs}';
    is redis_cmd('TYPE', log_key($cid)), 'stream', 'the log is a Stream';
    is_deeply [ sort @{ redis_cmd('SMEMBERS', "ioa:{room:$cid}:members") } ],
        [qw(Alice Bob Carol)], 'members set';
    is redis_cmd('SISMEMBER', "ioa:{reg}:rooms:$_", $cid), 1,
        "the room is in ${_}'s room set" for qw(Alice Bob Carol);
    ok $ag{$_}->quiet(0.3), "$_: nothing more" for qw(Alice Bob Carol);
--- no_error_log
[error]
[alert]
[crit]



=== TEST 2: open mode delivers an envelope naming another sender if the poster is a member
Open mode is IoA's: an envelope whose sender is another name (IoA's cont_input
from "user") is stored and delivered with that sender, the poster's membership
deciding; a sender that is no name is refused and nothing is stored; the
connection stays usable (with a token the mismatch is refused: t/150-auth.t).
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob Mallory));
    my $a = IoaTest::Agent->connect($ctx, 'Alice');
    my $b = IoaTest::Agent->connect($ctx, 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob', 'Mallory']);
    $a->post(envelope(comm_id => $cid, content => 'warm-up'));
    recv_envs($_, 1, 5) for $a, $b;
    my $len = xlen($cid);
    my $spy = spy($cid);

    $a->post(envelope(comm_id => $cid, content => 'continue', sender => 'user'));
    for my $x ($a, $b) {
        my ($m) = recv_envs($x, 1, 5);
        is "$m->{sender} $m->{content}", 'user continue', $x->name . ' got it from "user", as sent';
    }
    is xlen($cid), $len + 1, 'stored';
    $len = xlen($cid);

    $a->post(envelope(comm_id => $cid, content => 'bad', sender => "Mall\nory"));
    my $err = $a->recv(5);
    is $err->{op}, 'error', 'a sender that is no name: an error frame' or diag $err && $err->{_raw};
    is "$err->{code} $err->{field}", 'invalid_name sender', '... invalid_name, naming sender';
    is xlen($cid), $len, 'nothing stored';
    ok $b->quiet(0.5), 'Bob got nothing' or diag $b->noise->{_raw};
    $spy->try_read_reply(0.1);      # the "continue" above
    ok !$spy->try_read_reply(0.1), 'nothing published';

    # Same connection, still usable: "" and its own name are fine.
    $a->post(envelope(comm_id => $cid, content => 'own name', sender => 'Alice'));
    $a->post(envelope(comm_id => $cid, content => 'empty sender', sender => ''));
    for my $x ($a, $b) {
        my @m = recv_envs($x, 2, 5);
        is_deeply contents(@m), ['own name', 'empty sender'],
            $x->name . ' got the two valid envelopes';
        is_deeply [ map { $_->{sender} } @m ], ['Alice', 'Alice'],
            $x->name . ': stamped Alice';
    }
    is xlen($cid), $len + 2, 'two stored';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 3: invalid envelopes get error frames naming the field and nothing is stored
Invalid envelopes: type 12, state "x", no comm_id, JSON deeper than
ioa_max_json_depth 4, numbers outside I-JSON's range. Server-owned fields of a
client are dropped.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / {
        ioa_api;
        ioa_max_json_depth 4;
    }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob));
    my $a = IoaTest::Agent->connect($ctx, 'Alice');
    my $b = IoaTest::Agent->connect($ctx, 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    $a->post(envelope(comm_id => $cid, content => 'warm-up'));
    recv_envs($_, 1, 5) for $a, $b;
    my $len = xlen($cid);

    my @cases = (
        [ 'type 12', qq({"comm_id":"$cid","content":"x","type":12}),
          'invalid_envelope', 'type' ],
        [ 'type as a string', qq({"comm_id":"$cid","type":"5"}),
          'invalid_envelope', 'type' ],
        [ 'state "x"', qq({"comm_id":"$cid","state":"x"}),
          'invalid_envelope', 'state' ],
        [ 'state 4', qq({"comm_id":"$cid","state":4}),
          'invalid_envelope', 'state' ],
        [ 'no comm_id', q({"content":"lost","state":1,"type":4}),
          'missing_comm_id', 'comm_id' ],
        [ 'next_speaker a number', qq({"comm_id":"$cid","next_speaker":7}),
          'invalid_envelope', 'next_speaker' ],
        [ 'depth 5', qq({"comm_id":"$cid","x":{"a":{"b":{"c":{"d":1}}}}}),
          'too_deep', undef ],
        [ 'depth 5 in arrays', qq({"comm_id":"$cid","x":[[[[1]]]]}),
          'too_deep', undef ],
        [ 'not JSON', qq({"comm_id":"$cid",), 'invalid_json', undef ],
        # numbers every JSON reader takes the same way (I-JSON, RFC 7493)
        [ 'a 5,000-digit integer', qq({"comm_id":"$cid","x":) . ('7' x 5000) . '}',
          'invalid_envelope', undef ],
        [ '2^53', qq({"comm_id":"$cid","x":9007199254740992}), 'invalid_envelope', undef ],
        [ '-2^53 nested', qq({"comm_id":"$cid","x":{"y":[-9007199254740992]}}),
          'invalid_envelope', undef ],
        [ '1e400 (infinite as a double)', qq({"comm_id":"$cid","x":1e400}),
          'invalid_envelope', undef ],
        [ 'a 70-character decimal', qq({"comm_id":"$cid","x":0.) . ('1' x 68) . '}',
          'invalid_envelope', undef ],
        [ 'a huge max_turns', qq({"comm_id":"$cid","max_turns":99999999999999999999}),
          'invalid_envelope', undef ],
    );
    for my $c (@cases) {
        my ($what, $text, $code, $field) = @$c;
        $a->post($text);
        my $err = $a->recv(5);
        is $err && $err->{op}, 'error', "$what: error frame"
            or diag $err && $err->{_raw};
        is $err && $err->{code}, $code, "$what: code $code";
        is $err && $err->{field}, $field, "$what: field " . ($field // 'none');
    }
    is xlen($cid), $len, 'nothing stored';
    ok $b->quiet(0.5), 'Bob got nothing' or diag $b->noise->{_raw};

    # The limit is exact: four levels pass, and the connection still works.
    $a->post(qq({"comm_id":"$cid","content":"deep ok","x":{"a":{"b":{"c":1}}}}));
    my ($m) = recv_envs($b, 1, 5, 'Bob (depth 4)');
    is $m->{content}, 'deep ok', 'depth 4 accepted and delivered';
    is_deeply $m->{x}, { a => { b => { c => 1 } } }, 'nested value kept';
    is xlen($cid), $len + 1, 'one stored';
    like $a->recv(5)->{_raw} // '', qr/deep ok/, 'Alice got her echo';

    # the bounds are exact
    $a->post(qq({"comm_id":"$cid","content":"numbers","x":[9007199254740991,-9007199254740991,1.5e300,-0.25]}));
    ($m) = recv_envs($b, 1, 5, 'Bob (numbers)');
    like $m->{_raw}, qr/"x":\[9007199254740991,-9007199254740991,1.5e300,-0.25\]/,
        '+-(2^53 - 1) and finite doubles pass, as written';
    like $a->recv(5)->{_raw} // '', qr/numbers/, 'Alice got her echo';

    # fields the server owns: a client's are dropped, so no frame carries
    # one twice and no member forges a coordinator's decision
    my $wso = $ctx->ws('/chatlist_ws');
    ok $wso->ok, 'an observer' or diag $wso->error;
    my $until = time + 3;
    sleep 0.05 while time < $until && redis_numpat() < 1;
    ok redis_numpat() >= 1, 'hub subscribed to the feed';
    $a->post(qq({"comm_id":"$cid","content":"spoof","frontend_type":"teamup","ioa_decision":{"decision":"conclude"},"ioa_step":41,"ioa_goal":"x","ioa":"kept"}));
    ($m) = recv_envs($b, 1, 5, 'Bob (spoof)');
    is $m->{content}, 'spoof', 'delivered';
    ok !exists $m->{frontend_type} && !exists $m->{ioa_decision} && !exists $m->{ioa_step}
       && !exists $m->{ioa_goal}, 'without frontend_type and the ioa_ markers';
    is $m->{ioa}, 'kept', 'a field merely starting with "ioa" is the client\'s';
    my $raw = $wso->recv_text(3) // '';
    my $n = () = $raw =~ /"frontend_type"/g;
    is $n, 1, 'the observer frame has one frontend_type' or diag $raw;
    like $raw, qr/"frontend_type":"message"/, '... the server\'s';
    my $stored = redis_cmd('XREVRANGE', "ioa:{room:$cid}:log", '+', '-', 'COUNT', 1)->[0][1][1];
    unlike $stored, qr/frontend_type|ioa_/, 'and the stored envelope has neither';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 4: a non-member's envelope is refused with not_member, stored and published nowhere
An unknown room is unknown_room.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob Eve));
    my $a = IoaTest::Agent->connect($ctx, 'Alice');
    my $b = IoaTest::Agent->connect($ctx, 'Bob');
    my $e = IoaTest::Agent->connect($ctx, 'Eve');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    my $other = teamup($ctx, 'Eve', []);          # Eve's own room
    $a->post(envelope(comm_id => $cid, content => 'warm-up'));
    recv_envs($_, 1, 5) for $a, $b;
    my $len = xlen($cid);
    my $spy = spy($cid);

    $e->post(envelope(comm_id => $cid, content => 'let me in'));
    my $err = $e->recv(5);
    is $err && $err->{code}, 'not_member', 'not_member' or diag $err && $err->{_raw};
    is $err && $err->{comm_id}, $cid, 'the error names the room';
    is $err && $err->{field}, 'comm_id', 'field comm_id';
    is xlen($cid), $len, 'not stored in the room';
    ok !redis_cmd('EXISTS', log_key($other)), "nor in Eve's own room";
    ok $a->quiet(0.5), 'Alice got nothing' or diag $a->noise->{_raw};
    ok $b->quiet(0.1), 'Bob got nothing' or diag $b->noise->{_raw};
    my @pub = $spy->try_read_reply(0.1);
    ok !@pub, 'nothing published' or diag json->encode(\@pub);

    my $nowhere = 'f' x 32;
    $e->post(envelope(comm_id => $nowhere, content => 'hello?'));
    $err = $e->recv(5);
    is $err && $err->{code}, 'unknown_room', 'unknown_room' or diag $err && $err->{_raw};
    is $err && $err->{comm_id}, $nowhere, 'the error names the room';
    is_deeply redis_cmd('KEYS', "ioa:{room:$nowhere}*"), [], 'no key created';
    ok !$spy->try_read_reply(0.1), 'nothing published';

    # Eve's connection still works in her own room.
    $e->post(envelope(comm_id => $other, content => 'mine'));
    my ($m) = recv_envs($e, 1, 5);
    is $m->{comm_id}, $other, "Eve's own room works";
--- no_error_log
[error]
[alert]
[crit]



=== TEST 5: 100 envelopes interleaved by two senders reach every member once in Stream order
Two agents each send 50 envelopes interleaved; every member receives all 100
once, in the same order, the Stream's.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob Carol));
    my %ag = map { $_ => IoaTest::Agent->connect($ctx, $_) } qw(Alice Bob Carol);
    my $cid = teamup($ctx, 'Alice', ['Bob', 'Carol']);
    for my $i (1 .. 50) {
        $ag{Alice}->post(envelope(comm_id => $cid, content => "A $i"));
        $ag{Bob}->post(envelope(comm_id => $cid, content => "B $i"));
    }
    my %seq;
    for my $n (qw(Alice Bob Carol)) {
        my @m = recv_envs($ag{$n}, 100, 20);
        $seq{$n} = \@m;
        my %seen;
        is scalar(grep { $seen{$_->{id}}++ } @m), 0, "$n: no duplicate";
        is_deeply [ map { $_->{content} } grep { $_->{sender} eq 'Alice' } @m ],
            [ map { "A $_" } 1 .. 50 ], "$n: Alice's 50 in her order";
        is_deeply [ map { $_->{content} } grep { $_->{sender} eq 'Bob' } @m ],
            [ map { "B $_" } 1 .. 50 ], "$n: Bob's 50 in his order";
    }
    my @stream = stream_ids($cid);
    is scalar @stream, 100, '100 in the Stream';
    is_deeply ids(@{ $seq{$_} }), \@stream, "$_: exactly the Stream order"
        for qw(Alice Bob Carol);
    my @sorted = sort { my @x = split /-/, $a; my @y = split /-/, $b;
                        $x[0] <=> $y[0] || $x[1] <=> $y[1] } @stream;
    is_deeply \@sorted, \@stream, 'ids increase';
    ok $ag{$_}->quiet(0.3), "$_: nothing more" for qw(Alice Bob Carol);
--- no_error_log
[error]
[alert]
[crit]



=== TEST 6: with echo=0 the sender gets an ack with the id, the others get the envelope
The ack comes instead of the sender's own envelope.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob));
    my $a = IoaTest::Agent->connect($ctx, 'Alice', '?echo=0');
    my $b = IoaTest::Agent->connect($ctx, 'Bob');
    ok $a->ok, 'echo=0 accepted' or diag $a->error;
    my $cid = teamup($ctx, 'Alice', ['Bob']);

    $a->post(envelope(comm_id => $cid, content => 'quiet one'));
    my $ack = $a->recv(5);
    is $ack && $ack->{op}, 'ack', 'an ack' or diag $ack && $ack->{_raw};
    is $ack && $ack->{comm_id}, $cid, 'ack names the room';
    like $ack && $ack->{id}, qr/^\d+-\d+$/, 'ack carries the id';
    is_deeply [ sort keys %$ack ], [qw(_raw comm_id id op)], 'ack has op, comm_id, id';
    my ($m) = recv_envs($b, 1, 5);
    is $m->{id}, $ack->{id}, "Bob's copy has the acked id";
    is $m->{content}, 'quiet one', 'Bob got the envelope';
    is_deeply [ stream_ids($cid) ], [ $ack->{id} ], 'the acked id is in the Stream';

    # Others' envelopes still reach the echo=0 agent; Bob still gets his echo.
    $b->post(envelope(comm_id => $cid, content => 'from Bob'));
    my ($ma) = recv_envs($a, 1, 5, 'Alice (echo=0)');
    my ($mb) = recv_envs($b, 1, 5, 'Bob (echo)');
    is $ma->{content}, 'from Bob', 'echo=0 agent receives others';
    is $mb->{content}, 'from Bob', 'echo agent receives its own';
    ok $a->quiet(0.5), 'Alice never got her own envelope' or diag $a->noise->{_raw};

    my $bad = IoaTest::Agent->connect($ctx, 'Alice', '?echo=2');
    is $bad->ws->status, 400, 'echo=2 is refused';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 7: the first envelope posted right after /teamup reaches every connected member
The room is created by /teamup while the members are connected.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob Carol));
    my %ag = map { $_ => IoaTest::Agent->connect($ctx, $_) } qw(Alice Bob Carol);
    for my $round (1 .. 10) {
        # the poster alternates: the creator, then another member
        my $poster = $round % 2 ? 'Alice' : 'Carol';
        my $cid = teamup($ctx, 'Alice', ['Bob', 'Carol']);
        $ag{$poster}->post(envelope(comm_id => $cid, content => "first $round"));
        for my $n (qw(Alice Bob Carol)) {
            my $m = $ag{$n}->recv(5);
            is $m && "$m->{comm_id} $m->{content}", "$cid first $round",
                "round $round: $n got the first envelope"
                or diag $m ? $m->{_raw} : 'nothing';
        }
    }
    ok $ag{$_}->quiet(0.3), "$_: nothing more" for qw(Alice Bob Carol);
--- no_error_log
[error]
[alert]
[crit]



=== TEST 8: an offline member does not break delivery and later gets the whole history
The others keep receiving; the offline member later gets the whole history
with since=0-0 or resume=<comm_id>:0-0.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob Carol));
    my $a = IoaTest::Agent->connect($ctx, 'Alice');
    my $b = IoaTest::Agent->connect($ctx, 'Bob');
    # Carol is a member but never connected so far
    my $cid = teamup($ctx, 'Alice', ['Carol', 'Bob']);
    post_n($a, $cid, 'A', 3);
    post_n($b, $cid, 'B', 2);
    for my $x ($a, $b) {
        my @m = recv_envs($x, 5, 5);
        is_deeply [ sort @{ contents(@m) } ], ['A 1', 'A 2', 'A 3', 'B 1', 'B 2'],
            $x->name . ' got all five although Carol is offline';
    }
    my @stream = stream_ids($cid);

    for my $label ('since=0-0', 'resume=<comm_id>:0-0', 'resume=<comm_id>:0') {
        (my $q = "?$label") =~ s/<comm_id>/$cid/;
        my $c = IoaTest::Agent->connect($ctx, 'Carol', $q);
        ok $c->ok, "Carol connects with $label" or diag $c->error;
        my @m = recv_envs($c, 5, 5, "Carol $label");
        is_deeply ids(@m), \@stream, "$label: the whole history in Stream order";
        ok $c->quiet(0.2), "$label: nothing more";
        $c->close;
    }

    # and from then on she is live
    my $c = IoaTest::Agent->connect($ctx, 'Carol', '?since=0-0');
    recv_envs($c, 5, 5, 'Carol again');
    $b->post(envelope(comm_id => $cid, content => 'live'));
    my $m = $c->recv(5);
    is $m && $m->{content}, 'live', 'Carol gets live traffic after the history';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 9: a resume after envelope k delivers exactly k+1..n, then live traffic
Resume exactness: after reading 1..k and reconnecting with
resume=<comm_id>:<id_k>, since=<id_k> or a first frame {"op":"resume"}, Alice
gets exactly k+1..n, then live traffic.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob));
    my $b = IoaTest::Agent->connect($ctx, 'Bob', '?echo=0');

    for my $form (@::ResumeForms) {
        # a room of its own per form, so one failure does not cascade
        my $a = IoaTest::Agent->connect($ctx, 'Alice');
        my $cid = teamup($ctx, 'Bob', ['Alice']);

        # Bob posts 1..k; Alice reads them and drops the connection.
        my $k = 4;
        post_n($b, $cid, $form, $k);
        $b->recv_n($k, 5);
        my @seen = recv_envs($a, $k, 5, "$form: Alice, before");
        my $last = $seen[-1]{id};
        $a->disconnect;

        # Bob posts k+1..n while she is away.
        post_n($b, $cid, $form, 6, $k + 1);
        is scalar($b->recv_n(6, 5)), 6, "$form: Bob's 6 stored (acks)";
        my @missed = stream_ids($cid, "($last");
        is scalar @missed, 6, "$form: 6 missed";

        $a = connect_resumed($ctx, 'Alice', $form, $cid, $last);
        ok $a->ok, "$form: reconnected" or diag $a->error;
        my @got = recv_envs($a, 6, 5, "$form: Alice, after");
        is_deeply ids(@got), \@missed, "$form: exactly k+1..n";

        $b->post(envelope(comm_id => $cid, content => "$form live"));
        my $m = $a->recv(5);
        is $m && $m->{content}, "$form live", "$form: then live traffic"
            or diag $m ? $m->{_raw} : 'nothing';
        $b->recv(5);
        ok $a->quiet(0.3), "$form: no duplicate" or diag $a->noise->{_raw};
        $a->disconnect;
    }
--- no_error_log
[error]
[alert]
[crit]



=== TEST 10: a resume during concurrent posts yields a gapless, duplicate-free Stream order
Resume while Bob keeps posting (posts in flight during the catch-up): Alice
sees a gapless, duplicate-free sequence equal to the Stream, with every resume
form.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    # Bob posts about 400 envelopes in a few seconds on purpose, far above
    # the default ioa_limit_rate (t/170-limits.t tests the limits)
    ioa_limit_rate off;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob));
    my $b = IoaTest::Agent->connect($ctx, 'Bob', '?echo=0');

    for my $round (1 .. 3) {
      for my $form (@::ResumeForms) {
        my $what = "round $round, $form";
        my $a = IoaTest::Agent->connect($ctx, 'Alice');
        my $cid = teamup($ctx, 'Bob', ['Alice']);
        post_n($b, $cid, 'pre', 3);
        $b->recv_n(3, 5);
        my @seen = recv_envs($a, 3, 5, "$what: Alice, before");
        my $last = $seen[-1]{id};
        $a->disconnect;

        # A child process posts 40 envelopes as Bob, one every ~2 ms, while
        # Alice reconnects and catches up.
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            for my $i (1 .. 40) {
                $b->ws->send_text(envelope(comm_id => $cid,
                                           content => "race $i"));
                Time::HiRes::sleep(0.002);
            }
            POSIX::_exit(0);
        }
        sleep 0.01 * $round;     # Alice comes back 10, 20, 30 ms into it
        $a = connect_resumed($ctx, 'Alice', $form, $cid, $last);
        waitpid $pid, 0;
        # Bob's acks tell when all 40 are stored.
        my @acks = $b->recv_n(40, 10);
        is scalar(grep { ($_->{op} // '') eq 'ack' } @acks), 40,
            "$what: 40 stored";
        my @want = stream_ids($cid, "($last");
        my @got = $a->recv_n(40, 10);
        is_deeply ids(@got), \@want,
            "$what: gapless, no duplicate, Stream order"
            or diag "got " . scalar(@got) . ": " . join ' ', map {
                ($_->{content} // $_->{_raw}) =~ s/^race //r } @got;
        ok $a->quiet(0.2), "$what: nothing more"
            or diag $a->noise->{_raw};
        $a->disconnect;
      }
    }
--- no_error_log
[error]
[alert]
[crit]



=== TEST 11: a connection without resume gets no history, only envelopes appended after it
Only envelopes appended after it connected arrive, its own first envelope
included.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob Carol));
    my $a = IoaTest::Agent->connect($ctx, 'Alice');
    my $b = IoaTest::Agent->connect($ctx, 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob', 'Carol']);
    post_n($a, $cid, 'history', 5);
    recv_envs($_, 5, 5) for $a, $b;

    # Carol connects (no since/resume): the history is not replayed; what
    # Bob posts once her handshake is done reaches her.  Ten times, since
    # how soon after the handshake the post lands varies.
    my @missed;
    for my $i (1 .. 10) {
        my $c = IoaTest::Agent->connect($ctx, 'Carol');
        ok $c->ok, "$i: Carol connected" or diag $c->error;
        $b->post(envelope(comm_id => $cid, content => "after Carol connected $i"));
        my $m = $c->recv(1);
        push @missed, $i unless $m && $m->{content} eq "after Carol connected $i";
        like $m ? $m->{content} : '', qr/^(?:after Carol connected $i)?$/,
            "$i: no history replayed" or diag $m->{_raw};
        recv_envs($_, 1, 5) for $a, $b;
        ok $c->quiet(0.05), "$i: nothing else" or diag $c->noise->{_raw};
        $c->close;
    }
    is "@missed", '', 'Carol got every envelope posted after her handshake'
        or diag scalar(@missed) . ' of 10 missed';

    # An IoA client connects and speaks at once: its envelope, sent right
    # behind the handshake, is appended after it connected, so its echo must
    # reach it like every other member's copy.
    my $own = envelope(comm_id => $cid, content => 'Carol speaks at once');
    my $c = IoaTest::Agent->connect($ctx, 'Carol', '', pipeline => [$own]);
    ok $c->ok, 'Carol connected again' or diag $c->error;
    my ($ma) = recv_envs($a, 1, 5, 'Alice');
    is $ma->{content}, 'Carol speaks at once', 'Alice got it';
    my $m = $c->recv(3);
    is $m && $m->{id}, $ma->{id}, 'Carol got the echo of her first envelope'
        or diag $m ? $m->{_raw} : 'nothing';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 12: catch-up in batches delivers every missed envelope, complete and in order
With ioa_catchup_batch 3, 20 and 21 missed envelopes arrive complete and in
order, also with live posts during the catch-up.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / {
        ioa_api;
        ioa_catchup_batch 3;
    }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob));
    my $b = IoaTest::Agent->connect($ctx, 'Bob', '?echo=0');
    my $cid = teamup($ctx, 'Bob', ['Alice']);
    $b->post(envelope(comm_id => $cid, content => 'start'));
    my $start = $b->recv(5)->{id};
    my $last = $start;

    # 20 = 6 full batches and 2; 21 = 7 full batches and an empty read.
    for my $missed (20, 21) {
        post_n($b, $cid, "m$missed", $missed);
        my @acks = $b->recv_n($missed, 10);
        is scalar(@acks), $missed, "$missed acks";
        my @want = stream_ids($cid, "($last");
        my $mon = redis_connect(key => log_key($cid));   # the room's node
        is $mon->cmd('MONITOR'), 'OK', 'MONITOR';
        my $a = IoaTest::Agent->connect($ctx, 'Alice', "?resume=$cid:$last");
        my @got = recv_envs($a, $missed, 10, "Alice ($missed missed)");
        my @reads;
        while (my ($line) = $mon->try_read_reply(0.2)) {
            push @reads, $line if $line =~ /"XRANGE" "\Q${\ log_key($cid)}\E"/;
        }
        $mon->close;
        is scalar(@reads), int($missed / 3) + 1,
            "$missed missed: read in batches of 3 (" . scalar(@reads) . ' XRANGE)'
            or diag join "\n", @reads;
        is scalar(grep { /"COUNT" "3"$/ } @reads), scalar(@reads),
            "$missed missed: every read says COUNT 3";
        is_deeply ids(@got), \@want, "$missed missed: all, in Stream order";
        is_deeply contents(@got), [ map { "m$missed $_" } 1 .. $missed ],
            "$missed missed: contents in order";
        ok $a->quiet(0.2), "$missed missed: no duplicate" or diag $a->noise->{_raw};
        $last = $want[-1];
        $a->disconnect;
    }

    # Live posts while Alice reads 60 missed ones three at a time.
    post_n($b, $cid, 'old', 60);
    $b->recv_n(60, 10);
    my $a = IoaTest::Agent->connect($ctx, 'Alice', "?resume=$cid:$last");
    post_n($b, $cid, 'new', 20);
    $b->recv_n(20, 10);
    my @want = stream_ids($cid, "($last");
    my @got = recv_envs($a, 80, 10, 'Alice (60 missed + 20 live)');
    is_deeply ids(@got), \@want, '80 in Stream order, none twice';
    ok $a->quiet(0.2), 'nothing more' or diag $a->noise->{_raw};
--- no_error_log
[error]
[alert]
[crit]



=== TEST 13: after a Redis restart open WebSockets receive again, new envelopes exactly once
Redis restart: posts get redis_unavailable and /health_check 503 with
Retry-After; after Redis is back the open WebSockets receive again and new
envelopes arrive exactly once.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_redis_backoff_max 400ms;
    ioa_redis_connect_timeout 500ms;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob Carol));
    my $a = IoaTest::Agent->connect($ctx, 'Alice');
    my $b = IoaTest::Agent->connect($ctx, 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob', 'Carol']);
    $a->post(envelope(comm_id => $cid, content => 'before'));
    my ($m0) = recv_envs($a, 1, 5);
    recv_envs($b, 1, 5);

    # IoaTest's Redis runs without persistence ("--save ''") but in its own
    # --dir: SAVE writes dump.rdb there and redis_start(), same dir, loads
    # it.  So registry and room survive the restart as with a persistent
    # Redis; the dump is removed afterwards so that no later restart
    # resurrects this block's data.
    is redis_cmd('SAVE'), 'OK', 'SAVE';
    redis_stop();

    $a->post(envelope(comm_id => $cid, content => 'while down'));
    my $err = recv_error($a, 5);
    is $err && $err->{code}, 'redis_unavailable', 'post while Redis is down: redis_unavailable'
        or diag $err ? $err->{_raw} : 'no error frame';
    is $err && $err->{comm_id}, $cid, 'the error names the room';
    my $res = wait_health($ctx, 503, 5);
    is $res->code, 503, '/health_check 503 while Redis is down';
    ok defined $res->header('Retry-After'), 'with Retry-After';
    like $res->header('Content-Type') // '', qr{^application/json}, 'JSON';
    my $doc = eval { json->decode($res->content) } // {};
    is $doc->{code}, 'redis_unavailable', 'body code redis_unavailable';
    ok $b->quiet(0.3), 'Bob got nothing' or diag $b->noise->{_raw};

    # Carol connects during the outage (as reconnecting clients do); her
    # room list is loaded once Redis is back.
    my $c = IoaTest::Agent->connect($ctx, 'Carol');
    ok $c->ok, 'Carol can connect while Redis is down' or diag $c->error;

    redis_start();
    redis_forget_dump();
    is redis_cmd('SISMEMBER', "ioa:{room:$cid}:members", 'Bob'), 1,
        'the room came back with the dump';
    is wait_health($ctx, 200, 10)->code, 200, 'the hub reconnected (health 200)';

    # Right after the reconnect, from both sides.
    $a->post(envelope(comm_id => $cid, content => 'after 1'));
    $b->post(envelope(comm_id => $cid, content => 'after 2'));
    my @stream;
    for my $x ($a, $b) {
        my @m = recv_envs($x, 2, 10, $x->name . ' after the restart');
        is_deeply [ sort @{ contents(@m) } ], ['after 1', 'after 2'],
            $x->name . ': both envelopes';
        @stream = grep { $_ ne $m0->{id} } stream_ids($cid);
        is_deeply ids(@m), \@stream, $x->name . ': in Stream order';
    }
    is scalar @stream, 2, "'while down' was not stored";
    my @mc = $c->recv_n(2, 5);
    is_deeply ids(@mc), \@stream,
        'Carol, connected during the outage, gets both as well'
        or diag 'Carol got: ' . join ' ', map { $_->{content} } @mc;
    ok !$a->ws->eof && !$b->ws->eof, 'the WebSockets stayed open';
    ok $c->quiet(0.01), 'Carol: exactly once' or diag $c->noise->{_raw};
    ok $a->quiet(0.5), 'Alice: exactly once' or diag $a->noise->{_raw};
    ok $b->quiet(0.1), 'Bob: exactly once' or diag $b->noise->{_raw};

    # and live delivery goes on
    $b->post(envelope(comm_id => $cid, content => 'later'));
    is $_->recv(5)->{content}, 'later', $_->name . ' gets later traffic' for $a, $b, $c;
--- error_log
ioa redis command: connection lost
ioa redis pub/sub: connection lost
--- no_error_log
[alert]
[crit]



=== TEST 14: two connections under one agent name both receive everything, independently
One agent name, two WebSocket connections: both receive everything, and one
closing does not affect the other.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob));
    my $a1 = IoaTest::Agent->connect($ctx, 'Alice');
    my $a2 = IoaTest::Agent->connect($ctx, 'Alice');
    my $b = IoaTest::Agent->connect($ctx, 'Bob');
    ok $a1->ok && $a2->ok, 'two connections as Alice';
    my $cid = teamup($ctx, 'Bob', ['Alice']);

    $b->post(envelope(comm_id => $cid, content => 'to both'));
    $a1->post(envelope(comm_id => $cid, content => 'from A1'));
    $a2->post(envelope(comm_id => $cid, content => 'from A2'));
    my @stream = stream_ids($cid);
    for my $x ([A1 => $a1], [A2 => $a2], [Bob => $b]) {
        my @m = recv_envs($x->[1], 3, 5, $x->[0]);
        is_deeply [ sort @{ contents(@m) } ], ['from A1', 'from A2', 'to both'],
            "$x->[0] got all three";
    }

    $a1->close;
    $b->post(envelope(comm_id => $cid, content => 'after A1 left'));
    my $m = $a2->recv(5);
    is $m && $m->{content}, 'after A1 left', 'A2 still receives';
    recv_envs($b, 1, 5);
    $a2->post(envelope(comm_id => $cid, content => 'A2 speaks'));
    is $b->recv(5)->{content}, 'A2 speaks', 'and can still post';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 15: the hub survives error_log at debug level
The block runs its own nginx, so a crash fails this block only.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    # outside the servroot, which upstream Test::Nginx wipes between blocks
    my $dir = File::Temp::tempdir('ioa-debug-hub-XXXXXX', TMPDIR => 1,
                                  CLEANUP => 1);
    mkdir $dir; mkdir "$dir/logs"; mkdir "$dir/conf";
    my $port = IoaTest::_free_port();
    my $redis = redis_port();
    my $loads = join '', map { "load_module $_;\n" }
                split ' ', $ENV{TEST_NGINX_LOAD_MODULES} // '';
    open my $fh, '>', "$dir/conf/nginx.conf" or die "$dir: $!";
    print $fh <<"_EOC_";
    ${loads}worker_processes 1;
    daemon off;
    master_process off;
    error_log $dir/logs/error.log debug;
    pid $dir/logs/nginx.pid;
    events { worker_connections 64; }
    http {
        access_log off;
        ioa_redis 127.0.0.1:$redis;
        ioa_auth off;
        server {
            listen 127.0.0.1:$port;
            location / { ioa_api; }
        }
    }
_EOC_
    close $fh;
    my $nginx = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', '/dev/null';
        open STDERR, '>', "$dir/logs/stderr";
        exec $nginx, '-p', "$dir/", '-c', "$dir/conf/nginx.conf"
            or POSIX::_exit(127);
    }
    my $ok;
    my $deadline = time + 30;     # debug logging under ASan starts slowly
    while (time < $deadline) {
        last if waitpid($pid, POSIX::WNOHANG()) == $pid;
        my $res = eval { $ctx->http(GET => '/health_check', port => $port,
                                    timeout => 1) };
        if ($res && $res->code == 200) { $ok = 1; last }
        sleep 0.05;
    }
    my $status = $?;
    ok $ok, 'the debug-level hub answers /health_check'
        or diag "nginx exited with status $status (signal " . ($status & 127)
              . ")";
    if ($ok) {
        # exercise the hot paths with debug logging on
        my $res = $ctx->http(POST => '/register', port => $port,
            body => '{"name":"Dbg","type":"Human Assistant","desc":"d"}');
        is $res->code, 200, 'register';
        my $ws = IoaTest::WS->connect('127.0.0.1', $port, '/ws/Dbg');
        ok $ws->ok, 'WebSocket';
        $res = $ctx->http(POST => '/teamup', port => $port,
            body => '{"sender":"Dbg","agent_names":[]}');
        my $cid = eval { json->decode($res->content)->{comm_id} } // '';
        $ws->send_text(envelope(comm_id => $cid, content => 'dbg'));
        like $ws->recv_text(5) // '', qr/"content":"dbg"/, 'echo with debug logging';
    }
    kill 'TERM', $pid;
    waitpid $pid, 0;
--- no_error_log
[error]
[alert]
[crit]



=== TEST 16: a resume frame after live envelopes went out is refused with resume_too_late
Nothing is delivered twice.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob));
    my $a = IoaTest::Agent->connect($ctx, 'Alice');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    post_n($a, $cid, 'old', 3);
    my @old = recv_envs($a, 3, 5, 'Alice');

    # Bob connects without resume and receives a live envelope first
    my $b = IoaTest::Agent->connect($ctx, 'Bob');
    ok $b->ok, 'Bob connected' or diag $b->error;
    sleep 0.2;
    post_n($a, $cid, 'live', 1);
    recv_envs($a, 1, 5, 'Alice');
    my ($live) = recv_envs($b, 1, 5, 'Bob');
    is $live->{content}, 'live 1', 'Bob got the live envelope';

    # now asks to go back: that would deliver old envelopes after a newer
    # one, so the room refuses, and Bob's position is unchanged
    $b->post(qq({"op":"resume","rooms":{"$cid":"$old[0]{id}"}}));
    my $err = recv_error($b, 5);
    is $err && $err->{code}, 'resume_too_late', 'resume_too_late';
    is $err && $err->{comm_id}, $cid, 'for that room';
    ok $b->quiet(0.3), 'no old envelope replayed' or diag $b->noise->{_raw};

    post_n($a, $cid, 'after', 1);
    my ($after) = recv_envs($b, 1, 5, 'Bob');
    is $after->{content}, 'after 1', 'live delivery goes on';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 17: a resume past the trimmed log gets log_trimmed, then every entry still held
A resume after envelopes the room's log no longer holds (ioa_room_log_maxlen)
is told so with log_trimmed, naming the gap, and then gets every entry the log
still holds, in order and once; a resume inside the log gets no such error;
every entry stores the id before it ("p"), the chain's own.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_room_log_maxlen 100;
    ioa_limit_rate off;
    ioa_limit_room_rate off;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob));
    my $a = IoaTest::Agent->connect($ctx, 'Alice', '?echo=0');
    my $cid = teamup($ctx, 'Alice', ['Bob']);

    # the first envelope, which Bob saw before he went away
    post_n($a, $cid, 'early', 1);
    my $until = time + 10;
    sleep 0.05 while time < $until && !xlen($cid);
    my ($first) = stream_ids($cid);
    ok $first, 'the first envelope is stored';

    # 400 more: "MAXLEN ~ 100" drops whole Stream nodes, so the oldest go
    post_n($a, $cid, 'later', 400);
    my $deadline = time + 20;
    sleep 0.1 while time < $deadline
                    && !grep { $_->[1] =~ /"later 400"/ } xrange($cid);
    my @kept = xrange($cid);
    ok @kept < 401 && $kept[0][0] ne $first,
        'the log dropped its oldest entries (' . scalar(@kept) . ' kept)';

    # every entry names the one before it
    my $r = redis_cmd('XRANGE', log_key($cid), '-', '+');
    my $chained = 0;
    for my $i (1 .. $#$r) {
        my %f = @{ $r->[$i][1] };
        $chained++ if ($f{p} // '') eq $r->[$i - 1][0];
    }
    is $chained, $#$r, 'each entry\'s "p" is the id of the entry before it';

    # Bob resumes after the first envelope: what followed it up to the log's
    # oldest entry is gone
    my $b = IoaTest::Agent->connect($ctx, 'Bob', "?resume=$cid:$first");
    ok $b->ok, 'Bob connected' or diag $b->error;
    my $err = $b->recv(10);
    is $err && $err->{op}, 'error', 'Bob first hears of the gap'
        or diag $err && $err->{_raw};
    is $err && $err->{code}, 'log_trimmed', 'log_trimmed';
    is $err && $err->{comm_id}, $cid, 'for the room';
    my %oldest = @{ $r->[0][1] };
    like $err && $err->{message},
        qr/no longer holds the envelopes after \Q$first\E up to \Q$oldest{p}\E: .*ioa_room_log_maxlen.*delivery goes on from \Q$r->[0][0]\E$/,
        'the message names the gap and where delivery goes on'
        or diag $err && $err->{message};

    my @got = recv_envs($b, scalar(@kept), 20, 'Bob');
    is_deeply ids(@got), [ map { $_->[0] } @kept ],
        'then every entry the log holds, in order, once';
    ok $b->quiet(0.5), 'and nothing else';

    my $m = $ctx->http(GET => '/metrics')->content;
    like $m, qr/^ioa_catchup_gaps_total 1$/m, 'ioa_catchup_gaps_total counts it';

    # Bob again, resuming inside the log: no error
    $b->close;
    my $mid = $kept[10][0];
    my $b2 = IoaTest::Agent->connect($ctx, 'Bob', "?resume=$cid:$mid");
    my @rest = recv_envs($b2, scalar(@kept) - 11, 20, 'Bob again');
    is_deeply ids(@rest), [ map { $_->[0] } @kept[11 .. $#kept] ],
        'a resume inside the log: exactly the rest, no error';
    like $ctx->http(GET => '/metrics')->content,
        qr/^ioa_catchup_gaps_total 1$/m, 'no new gap counted';
--- no_error_log
[alert]
[crit]
[emerg]
