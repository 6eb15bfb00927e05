# t/155-token-expiry.t -- a connection does not outlive its token: with
# ioa_auth jwt a WebSocket or an SSE inbox is warned before its token's exp
# (token_expiring) and closed at exp (1008 "token expired" on a WebSocket,
# the close event on SSE), unless a WebSocket sends a fresh token of the
# same sub in-band ({"op":"token","token":"<JWT>"}); nothing the hub
# accepted before is lost.  ioa_auth off is untouched.
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/155-token-expiry.t
#
# Tokens live 3 to 6 s, with ioa_auth_leeway 0 and a warning 1 s ahead;
# "exp" has whole seconds, so bounds on when things happen are a second or
# more wide (the machine is shared).  About 25 s in all.

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Api;
use IoaTest::JWT;
use IoaTest::Agent qw(envelope);
use IoaTest::SSE;

use File::Temp ();
use Time::HiRes qw(time sleep);

no_root_location();
log_level('info');

our $KEYDIR = File::Temp::tempdir('ioa-exp-XXXXXX', TMPDIR => 1, CLEANUP => 1);
our $K = jwt_keys($KEYDIR);
$ENV{TEST_NGINX_KEYS} = $KEYDIR;

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value(init => 'main::hub_ready()') unless defined $block->init;
});

# a token of $sub living $ttl seconds from now (whole seconds, as JWTs are)
sub tok {
    my ($sub, $ttl, %opt) = @_;
    my $alg = delete $opt{alg} // 'HS256';
    my $scope = delete $opt{scope} // 'agent';
    return jwt($K, $alg, { sub => $sub, scope => $scope,
                           exp => int(time) + $ttl, %opt });
}

sub bearer { [ Authorization => "Bearer $_[0]" ] }

# Alice and Bob registered, in one room made by Alice; returns its comm_id
sub room_of_two {
    my $ctx = shift;
    for my $n (qw(Alice Bob)) {
        my ($code) = api($ctx, POST => '/register',
                         { name => $n, type => 'Human Assistant', desc => "agent $n" },
                         headers => bearer(tok($n, 300)));
        die "register $n: $code\n" unless $code == 200;
    }
    my ($code, $d) = api($ctx, POST => '/teamup',
                         { sender => 'Alice', agent_names => ['Bob'] },
                         headers => bearer(tok('Alice', 300)));
    die "teamup: $code\n" unless $code == 200;
    return $d->{comm_id};
}

sub frame_token { IoaTest::Agent::json()->encode({ op => 'token', token => $_[0] }) }

sub is_op { my ($op, $code) = @_; sub { ($_->{op} // '') eq $op && (!defined $code || ($_->{code} // '') eq $code) } }

run_tests();

__DATA__

=== TEST 1: a WebSocket is warned before its token's exp and closed with 1008 at exp
a WebSocket is warned before its token's exp and closed with 1008 at exp;
envelopes sent before are all stored and acknowledged.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
    ioa_auth_leeway 0s;
    ioa_auth_expiry_warning 1s;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    my $cid = room_of_two($ctx);
    my $bob = IoaTest::Agent->connect($ctx, 'Bob', '', headers => bearer(tok('Bob', 300)));
    ok $bob->ok, 'Bob connects with a long token' or diag $bob->error;

    my $exp = int(time) + 3;
    my $alice = IoaTest::Agent->connect($ctx, 'Alice', '?echo=0',
                                        headers => bearer(tok('Alice', $exp - int(time))));
    ok $alice->ok, 'Alice connects with a token of 3 s' or diag $alice->error;

    my ($w) = $alice->recv_until(is_op('error', 'token_expiring'), 5);
    ok $w, 'a token_expiring error frame comes';
    my $at = time;
    ok $at < $exp, '... before exp' or diag "at $at, exp $exp";
    ok $at > $exp - 2.5, '... about ioa_auth_expiry_warning before it' or diag "at $at, exp $exp";
    is "$w->{exp} $w->{closes_at} $w->{field}", "$exp $exp token", '... naming exp, the close (leeway 0) and the field';
    like $w->{message}, qr/\{"op":"token","token":"<JWT>"\}/, '... and saying how to refresh';

    # right before the end: five envelopes, each acknowledged before the close
    $alice->post(envelope(comm_id => $cid, content => "last $_")) for 1 .. 5;
    my @acks = grep { ($_->{op} // '') eq 'ack' } $alice->recv_n(5, 3);
    is scalar @acks, 5, 'five envelopes posted just before exp are acknowledged';

    my ($code, $reason) = $alice->ws->recv_close(5);
    my $closed = time;
    is $code, 1008, 'closed with 1008 (policy violation)';
    like $reason, qr/^token expired/, '... saying why';
    ok $closed >= $exp - 0.5 && $closed < $exp + 1.5, '... at exp' or diag "closed $closed, exp $exp";

    my $log = redis_cmd('XRANGE', "ioa:{room:$cid}:log", '-', '+');
    is scalar @$log, 5, 'all five are in the room log';
    my @got = grep { ($_->{content} // '') =~ /^last / } $bob->recv_n(5, 3);
    is join(',', map { $_->{content} } @got), join(',', map { "last $_" } 1 .. 5),
       'Bob got them all, in order';

    my $res = $ctx->http(GET => '/metrics');
    like $res->content, qr/^ioa_token_expiries_total\{transport="websocket"\} 1$/m,
         'ioa_token_expiries_total counts the close';
    $bob->close;
--- error_log
the token of "Alice" expired, closing



=== TEST 2: a fresh token of the same sub sent in-band moves the connection's end
a fresh token of the same sub, sent in-band, moves the end: the connection
works past the first exp and closes at the new one.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/ec.pub;
    ioa_auth_leeway 0s;
    ioa_auth_expiry_warning 1s;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    my $cid = room_of_two($ctx);
    my $exp1 = int(time) + 3;
    my $alice = IoaTest::Agent->connect($ctx, 'Alice', '?echo=0',
                                        headers => bearer(tok('Alice', $exp1 - int(time))));
    ok $alice->ok, 'Alice connects with a token of 3 s' or diag $alice->error;

    # another algorithm, same sub: any token the handshake would take
    my $exp2 = $exp1 + 3;
    $alice->ws->send_text(frame_token(tok('Alice', $exp2 - int(time), alg => 'ES256')));
    my ($a) = $alice->recv_until(is_op('token_accepted'), 3);
    ok $a, 'the refresh is acknowledged';
    is "$a->{exp} $a->{closes_at}", "$exp2 $exp2", '... with the new exp';

    sleep $exp1 + 1 - time if time < $exp1 + 1;
    $alice->post(envelope(comm_id => $cid, content => 'after the first exp'));
    my ($ack) = $alice->recv_until(is_op('ack'), 3);
    ok $ack, 'a second after the first exp, the connection still posts';

    my ($w, $skipped) = $alice->recv_until(is_op('error', 'token_expiring'), 4);
    ok $w, 'the warning comes again, for the new exp';
    is $w->{exp}, $exp2, '... naming it';
    my ($code, $reason) = $alice->ws->recv_close(4);
    my $closed = time;
    is $code, 1008, 'closed with 1008 at the new exp';
    ok $closed >= $exp2 - 0.5 && $closed < $exp2 + 1.5, '... not before' or diag "closed $closed, exp2 $exp2";
    is scalar @{ redis_cmd('XRANGE', "ioa:{room:$cid}:log", '-', '+') }, 1, 'the envelope is stored';

    # an observer's WebSocket takes a refresh too
    my $obs = $ctx->ws('/chatlist_ws', headers => bearer(tok('Olga', 3, scope => 'observer')));
    ok $obs->ok, 'an observer connects' or diag $obs->error;
    $obs->send_text(frame_token(tok('Olga', 60, scope => 'observer')));
    my $m = jdec($obs->recv_text(3));
    is $m && $m->{op}, 'token_accepted', 'an observer refreshes its token';
    $obs->close(1000);

    my $res = $ctx->http(GET => '/metrics');
    like $res->content, qr/^ioa_token_refreshes_total 2$/m, 'ioa_token_refreshes_total counts both';



=== TEST 3: an invalid in-band token refresh is refused precisely and does not extend
a refresh with another sub, a bad signature, an expired token, no scope or no
token is refused with a precise error and does not extend.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
    ioa_auth_leeway 0s;
    ioa_auth_expiry_warning 1s;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room_of_two($ctx);
    my $exp = int(time) + 3;
    my $alice = IoaTest::Agent->connect($ctx, 'Alice', '?echo=0',
                                        headers => bearer(tok('Alice', $exp - int(time))));
    ok $alice->ok, 'Alice connects with a token of 3 s' or diag $alice->error;

    my @bad = (
        [ 'another sub',     tok('Bob', 60),
          'token_sub_mismatch', qr/the token is "Bob"'s and this connection is "Alice"'s; nothing was changed/ ],
        [ 'a bad signature', jwt($main::K, 'HS256', { sub => 'Alice', scope => 'agent', exp => time + 60 },
                                 secret => 'x' x 40),
          'token_invalid', qr/signature does not verify/ ],
        [ 'an expired token', tok('Alice', -5),
          'token_invalid', qr/the token expired at/ ],
        [ 'no agent scope',  tok('Alice', 60, scope => 'observer'),
          'token_invalid', qr/lacks the "agent" or "launch" scope/ ],
        [ 'no token at all', undef,
          'token_invalid', qr/a refresh is \{"op":"token","token":"<JWT>"\}/ ],
    );
    for my $b (@bad) {
        my ($what, $t, $want, $re) = @$b;
        $alice->ws->send_text(defined $t ? frame_token($t) : '{"op":"token"}');
        my ($e) = $alice->recv_until(sub { ($_->{op} // '') eq 'error' && ($_->{code} // '') ne 'token_expiring' }, 3);
        is $e && "$e->{code} $e->{field}", "$want token", "$what: $want";
        like $e && $e->{message}, $re, '... saying why';
        is $e && $e->{closes_at}, $exp, '... and that the end is unchanged';
    }

    $alice->post(envelope(comm_id => $cid, content => 'still Alice'));
    ok +($alice->recv_until(is_op('ack'), 3))[0], 'the connection is still usable';

    my ($code, $reason) = $alice->ws->recv_close(5);
    my $closed = time;
    is $code, 1008, 'it closes with 1008 at the original exp';
    ok $closed < $exp + 1.5, '... not later' or diag "closed $closed, exp $exp";

    # a token valid for years: a timer far away, nothing happens now
    my $long = IoaTest::Agent->connect($ctx, 'Bob', '', headers => bearer(tok('Bob', 10 * 365 * 86400)));
    ok $long->ok, 'a token valid for ten years connects' or diag $long->error;
    ok $long->quiet(1.5), '... and hears nothing about expiry';
    $long->close;
--- no_error_log
[alert]



=== TEST 4: an SSE inbox ends at exp and a fresh-token resume gets each envelope once
an SSE inbox is warned, ends at exp, and a reconnect with a fresh token and
Last-Event-ID gets every envelope posted around the expiry exactly once.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
    ioa_auth_leeway 0s;
    ioa_auth_expiry_warning 1s;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room_of_two($ctx);
    my $alice = tok('Alice', 300);
    my $n = 0;
    my $post = sub {
        my ($code) = api($ctx, POST => '/agents/Alice/messages',
                         { comm_id => $cid, content => 'm' . ++$n }, headers => bearer($alice));
        return $code;
    };

    my $exp = int(time) + 3;
    my $s = IoaTest::SSE->connect($ctx->host, $ctx->port, '/agents/Bob/inbox',
                                  headers => bearer(tok('Bob', $exp - int(time))));
    ok $s->ok, 'Bob\'s inbox opens with a token of 3 s' or diag $s->error;

    # envelopes every 100 ms through the expiry; the stream is read as it goes
    my (@first, $warning, $close);
    while (!$s->eof && time < $exp + 3) {
        $post->() == 200 or last;
        while (my $ev = $s->next_event(0.1)) {
            next unless defined $ev->{data};
            my $d = jdec($ev->{data});
            if (($ev->{event} // '') eq 'ioa') {
                $warning //= [ $d, time ] if ($d->{code} // '') eq 'token_expiring';
                $close = [ $d, time ] if ($d->{op} // '') eq 'close';
            } elsif (!defined $ev->{event}) {
                push @first, $d->{content};
            }
        }
    }
    ok $warning, 'a token_expiring event comes';
    ok $warning && $warning->[1] < $exp, '... before exp';
    like $warning && $warning->[0]{message}, qr/Last-Event-ID/, '... saying how to go on';
    ok $close, 'then a close event';
    is $close && $close->[0]{code}, 1008, '... with 1008';
    like $close && $close->[0]{message}, qr/^token expired/, '... token expired';
    ok $close && $close->[1] < $exp + 1.5, '... at exp' or diag "close at $close->[1], exp $exp";
    ok $s->eof || $s->{done}, 'the stream ends';
    my $last_id = $s->last_id;
    ok $last_id, 'the stream gave a Last-Event-ID';

    # more while Bob is away, then the reconnect
    $post->() for 1 .. 3;
    my $again = IoaTest::SSE->connect($ctx->host, $ctx->port, '/agents/Bob/inbox',
                                      headers => [ @{ bearer(tok('Bob', 300)) }, 'Last-Event-ID' => $last_id ]);
    ok $again->ok, 'Bob reconnects with a fresh token and Last-Event-ID' or diag $again->error;
    $post->() for 1 .. 2;
    my @second = map { jdec($_->{data})->{content} } $again->messages($n - @first, 5);

    my @all = (@first, @second);
    is scalar @all, $n, "all $n envelopes posted around the expiry arrived";
    is join(',', @all), join(',', map { "m$_" } 1 .. $n), '... each exactly once, in order';
    ok scalar @first > 5 && scalar @second >= 5, '... some before the end, some after' or diag scalar(@first) . ' ' . scalar(@second);
    $again->close;



=== TEST 5: with ioa_auth off nothing expires and a token frame is refused
with ioa_auth off nothing expires, and a token frame is refused as there is
nothing to refresh.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth off;
    ioa_auth_expiry_warning 1s;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room_of_two($ctx);
    my $alice = IoaTest::Agent->connect($ctx, 'Alice', '?echo=0');
    ok $alice->ok, 'Alice connects without a token' or diag $alice->error;
    ok $alice->quiet(3), 'three seconds: no warning, no close';
    $alice->ws->send_text(frame_token(tok('Alice', 60)));
    my $e = $alice->recv(3);
    is $e && "$e->{op} $e->{code}", 'error token_invalid', 'a token frame is refused';
    like $e && $e->{message}, qr/nothing to refresh/, '... saying why';
    $alice->post(envelope(comm_id => $cid, content => 'open mode'));
    ok +($alice->recv_until(is_op('ack'), 3))[0], 'and the connection works as before';
    $alice->close;



=== TEST 6: posting through the expiry stores exactly the envelopes acknowledged
posting without pause through the expiry: every envelope stored was
acknowledged before the close, and nothing is stored that was not.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
    ioa_auth_leeway 0s;
    ioa_auth_expiry_warning 0s;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room_of_two($ctx);
    my $exp = int(time) + 3;
    my $alice = IoaTest::Agent->connect($ctx, 'Alice', '?echo=0',
                                        headers => bearer(tok('Alice', $exp - int(time))));
    ok $alice->ok, 'Alice connects with a token of 3 s' or diag $alice->error;

    # one envelope every 25 ms (within ioa_limit_rate) until the close
    my ($sent, %acked, @errors, $code) = (0);
    my $next = $exp - 1.5;
    while (time < $exp + 3) {
        if (time >= $next) {
            $alice->ws->send_text(IoaTest::Agent::json()->encode(
                { comm_id => $cid, content => 'p' . ++$sent }));
            $next += 0.025;
        }
        my $text = $alice->ws->recv_text(0.025);
        if (defined $text) {
            my $m = jdec($text);
            $acked{ $m->{id} } = 1 if ($m->{op} // '') eq 'ack';
            push @errors, $m->{code} if ($m->{op} // '') eq 'error';
        }
        last if defined($code = $alice->ws->close_code) || $alice->ws->eof;
    }
    is $code, 1008, 'the connection is closed with 1008';
    ok scalar(keys %acked) > 20, 'envelopes sent in the last second and a half were acknowledged'
        or diag scalar keys %acked;
    is_deeply [ grep { $_ ne 'token_expired' } @errors ], [], 'the only refusals say token_expired';
    my $log = redis_cmd('XRANGE', "ioa:{room:$cid}:log", '-', '+');
    is_deeply [ sort map { $_->[0] } @$log ], [ sort keys %acked ],
              'the room log holds exactly the acknowledged envelopes';
