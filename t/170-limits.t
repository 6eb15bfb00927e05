# t/170-limits.t -- limits: ioa_limit_rate (per agent), ioa_limit_room_rate
# (per room), ioa_limit_conn (connections per agent), ioa_max_room_members,
# ioa_max_agents.  Each refusal is a precise error (429 rate_limited with
# Retry-After, an error frame on a WebSocket that stays open, 429
# too_many_connections at the handshake, 400 room_too_large, 507
# registry_full), nothing refused is stored, everything accepted is, and
# other agents go on unaffected.
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/170-limits.t

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(register teamup);
use IoaTest::Api;
use IoaTest::SSE;
use IoaTest::WS;

use Time::HiRes qw(sleep time);

no_root_location();
log_level('info');

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value(init => 'main::hub_ready()')
        unless defined $block->init || defined $block->must_die;
});

sub room {
    my ($ctx, $sender, @others) = @_;
    register($ctx, $sender, @others);
    return teamup($ctx, $sender, \@others);
}

sub log_len { redis_cmd('XLEN', "ioa:{room:$_[0]}:log") }

run_tests();

__DATA__

=== TEST 1: ioa_limit_rate over HTTP: the burst passes, then 429 with Retry-After
ioa_limit_rate over HTTP: the burst passes, then 429 with Retry-After; nothing
refused is stored; the bucket refills.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_rate 2r/s burst=5;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, 'Alice', 'Bob');
    my ($ok, $limited, $last) = (0, 0);
    for my $i (1 .. 12) {
        my ($code, $d, $res) = api($ctx, POST => '/agents/Alice/messages',
                                   { comm_id => $cid, content => "m$i" });
        if ($code == 200) { $ok++ } elsif ($code == 429) { $limited++; $last = [$d, $res] }
    }
    ok $ok >= 5 && $ok <= 6, "the burst of 5 passed ($ok)";
    is $ok + $limited, 12, 'the rest got 429';
    is $last->[0]{code}, 'rate_limited', '... rate_limited';
    like $last->[0]{message}, qr/"Alice" posts faster than ioa_limit_rate allows; the envelope was not stored/,
        '... saying who and that nothing was stored';
    like $last->[1]->header('Retry-After'), qr/^[1-9]\d*$/, '... with Retry-After in seconds';
    is log_len($cid), $ok, 'exactly the accepted envelopes are stored';

    # Bob is not Alice: his own bucket is full
    my ($code) = api($ctx, POST => '/agents/Bob/messages', { comm_id => $cid, content => 'bob' });
    is $code, 200, 'another agent is unaffected';

    sleep 1.1;
    ($code) = api($ctx, POST => '/agents/Alice/messages', { comm_id => $cid, content => 'later' });
    is $code, 200, 'after a second Alice posts again';



=== TEST 2: ioa_limit_rate over WebSocket: an error frame per refused envelope
ioa_limit_rate over WebSocket: an error frame per refused envelope, the
connection stays, echoes match the log.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_rate 1r/s burst=4;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, 'Alice', 'Bob');
    my $ws = $ctx->ws('/ws/Alice');
    my $bob = $ctx->ws('/ws/Bob');
    ok $ws->ok && $bob->ok, 'connected';
    sleep 0.3;
    $ws->send_text(jenc({ comm_id => $cid, content => "w$_" })) for 1 .. 10;
    my ($echo, $err) = (0, 0);
    while (defined(my $t = $ws->recv_text(1))) {
        my $m = jdec($t) // next;
        if (($m->{op} // '') eq 'error') {
            $err++;
            is $m->{code}, 'rate_limited', 'error frame: rate_limited' if $err == 1;
            is $m->{comm_id}, $cid, '... naming the room' if $err == 1;
        } elsif (($m->{content} // '') =~ /^w\d+$/) {
            $echo++;
        }
        last if $echo + $err == 10;
    }
    is $echo + $err, 10, 'every envelope got an echo or an error';
    ok $echo >= 4 && $echo <= 5, "the burst passed ($echo)";
    is log_len($cid), $echo, 'the log holds exactly the echoed ones';
    $ws->send_text(jenc({ comm_id => $cid, content => 'still here?' }));
    sleep 1.2;
    $ws->send_text(jenc({ comm_id => $cid, content => 'after a pause' }));
    my $seen;
    while (defined(my $t = $ws->recv_text(2))) {
        my $m = jdec($t) // next;
        if (($m->{content} // '') eq 'after a pause') { $seen = 1; last }
    }
    ok $seen, 'the connection stayed open and takes envelopes again';
    my $got = 0;
    while (defined(my $t = $bob->recv_text(0.5))) { $got++ }
    is $got, log_len($cid), 'Bob received exactly what was stored';



=== TEST 3: ioa_limit_room_rate: a room's writers share its bucket; others are not slowed
ioa_limit_room_rate: one room's writers share its bucket; another room is not
slowed.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_rate off;
    ioa_limit_room_rate 1r/s burst=3;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $cid = room($ctx, 'Alice', 'Bob');
    my ($code, $d) = api($ctx, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'] });
    my $other = $d->{comm_id};
    my ($ok, $field) = (0);
    for my $i (1 .. 8) {
        my $who = $i % 2 ? 'Alice' : 'Bob';
        my ($c, $r) = api($ctx, POST => "/agents/$who/messages", { comm_id => $cid, content => "r$i" });
        $ok++ if $c == 200;
        $field = $r->{field} if $c == 429;
    }
    ok $ok >= 3 && $ok <= 4, "the room took its burst of 3 from both writers ($ok)";
    is $field, 'comm_id', 'the refusal names comm_id';
    is log_len($cid), $ok, 'only those are stored';
    ($code) = api($ctx, POST => '/agents/Alice/messages', { comm_id => $other, content => 'elsewhere' });
    is $code, 200, 'another room is not slowed';



=== TEST 3b: ioa_limit_teamup_rate: rooms made too fast get 429 with Retry-After
ioa_limit_teamup_rate: an agent making rooms fast gets 429 with Retry-After
once its burst is spent, nothing is made, others are not slowed; the default
(2r/s burst=20) holds without the directive.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $n (qw(Alice Bob Carol)) {
        api($ctx, POST => '/register', { name => $n, type => 'Human Assistant', desc => $n });
    }
    my ($ok, $limited, $last) = (0, 0);
    for my $i (1 .. 40) {
        my ($code, $d, $res) = api($ctx, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'] });
        if ($code == 200) { $ok++ } elsif ($code == 429) { $limited++; $last = [$d, $res] }
    }
    ok $ok >= 20 && $ok <= 23, "the burst of 20 passed ($ok)";
    is $ok + $limited, 40, 'the rest got 429';
    is $last->[0]{code}, 'rate_limited', '... rate_limited';
    like $last->[0]{message}, qr/"Alice" makes rooms faster than ioa_limit_teamup_rate allows; no room was made/,
        '... saying who and that nothing was made';
    like $last->[1]->header('Retry-After'), qr/^[1-9]\d*$/, '... with Retry-After';
    is redis_cmd('SCARD', 'ioa:{reg}:rooms:Alice'), $ok, 'exactly the accepted rooms exist';
    my ($code) = api($ctx, POST => '/teamup', { sender => 'Carol', agent_names => ['Bob'] });
    is $code, 200, 'another agent makes its room';
    sleep 1.1;
    ($code) = api($ctx, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'] });
    is $code, 200, 'after a second Alice makes one again';
--- no_error_log
[alert]
[crit]



=== TEST 4: ioa_limit_conn: an agent's third connection gets 429 at the handshake
ioa_limit_conn: a third connection of one agent gets 429 at the handshake;
closing one frees its place; inboxes count too.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_conn 2;
--- config
    location / { ioa_api; }
--- ioa_scenario
    room($ctx, 'Alice', 'Bob');
    my $a1 = $ctx->ws('/ws/Alice');
    my $a2 = $ctx->ws('/ws/Alice');
    ok $a1->ok && $a2->ok, 'two connections';
    my $a3 = $ctx->ws('/ws/Alice');
    is $a3->status, 429, 'the third: 429';
    like $a3->body, qr/"too_many_connections"/, '... too_many_connections';
    like $a3->body, qr/already holds 2 connections/, '... saying how many';
    my $inbox = IoaTest::SSE->connect($ctx->host, $ctx->port, '/agents/Alice/inbox');
    is $inbox->status, 429, 'an inbox counts as a connection';
    my $b = $ctx->ws('/ws/Bob');
    ok $b->ok, 'another agent connects';
    $a1->close;
    $a1->disconnect if $a1->can('disconnect');
    my $a4;
    ok wait_until(sub { $a4 = $ctx->ws('/ws/Alice'); $a4->ok }, 3),
        'after one closed, Alice connects again';



=== TEST 5: ioa_max_room_members and ioa_max_agents
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_max_room_members 3;
    ioa_max_agents 4;
--- config
    location / { ioa_api; }
--- ioa_scenario
    for my $n (qw(A B C D)) {
        my ($code) = api($ctx, POST => '/register', { name => $n, type => 'Human Assistant', desc => 'x' });
        is $code, 200, "register $n";
    }
    my ($code, $d) = api($ctx, POST => '/register', { name => 'E', type => 'Human Assistant', desc => 'x' });
    is "$code $d->{code}", '507 registry_full', 'the fifth agent: 507 registry_full';
    like $d->{message}, qr/holds 4 agents/, '... saying how many';
    is redis_cmd('EXISTS', 'ioa:{reg}:agent:E'), 0, '... nothing stored';
    ($code) = api($ctx, POST => '/register', { name => 'A', type => 'Human Assistant', desc => 'updated' });
    is $code, 200, 'a registered agent still updates';

    ($code, $d) = api($ctx, POST => '/teamup', { sender => 'A', agent_names => [qw(B C D)] });
    is "$code $d->{code}", '400 room_too_large', 'a team of 4: 400 room_too_large';
    like $d->{message}, qr/4 members.*allows 3/, '... with both numbers';
    is scalar @{ redis_cmd('KEYS', 'ioa:{room:*}:members') }, 0, '... no room created';
    ($code) = api($ctx, POST => '/teamup', { sender => 'A', agent_names => [qw(B C)] });
    is $code, 200, 'a team of 3 forms';



=== TEST 6: a rate of 0 is refused at start
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_rate 0r/s;
--- config
    location / { ioa_api; }
--- must_die
--- suppress_stderr
--- error_log
needs a rate above 0
