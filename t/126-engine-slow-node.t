# t/126-engine-slow-node.t -- one goal's slow Redis command holds up that
# goal alone (workers/worker/fiber.c): a goal's step runs on a fiber, so
# while its command waits for a reply the worker's other goals go on.
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/126-engine-slow-node.t
#
# Only a Redis Cluster can be slow for some goals and not for others, so
# the file always runs on one of its own (3 masters; a node timeout long
# enough that a frozen master is not failed).  The master that owns the
# slots from 10923 up holds none of the keys every goal shares ({jobs},
# {goals}, {reg}, {workers}), only some goals' own keys ({goal:<id>},
# {room:<comm_id>}, {room:goal-<id>}).  The test freezes that master with
# SIGSTOP, a Redis that has stopped answering (a long script, a swapping
# host, a node on its way out), for less than the worker's command timeout.
# The goals whose keys are all elsewhere must go on meanwhile (here: hear
# their cancels and end); before the fibers a single step sent to the
# frozen node held every goal until SIGCONT.
#
# IOA_WORKER_BIN and IOA_AGENT_BIN run other builds (ASan ones, say).

use strict;
use warnings;

BEGIN { $IoaTest::ClusterNodeTimeout = 30000; }

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest 'cluster';
use IoaTest::Api;
use IoaTest::Goals;
use IoaTest::Runtime;   # agent, wait_online
use Time::HiRes qw(sleep time);

no_root_location();
repeat_each(1);
run_tests();

# SIGCONT when the guard goes, however the scenario ends
package Thaw { sub DESTROY { kill 'CONT', $_[0][0] } }

__DATA__

=== TEST 1: a master that stops answering for 4 s leaves each goal decided exactly once
A master stops answering for 4 s: the goals whose keys are elsewhere are
cancelled meanwhile, the others conclude when it answers again, each decided
once.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- timeout: 120
--- ioa_scenario
    my $cl = redis_cluster();
    fresh($ctx);
    $cl->refresh;
    my $frozen = $cl->{slots}[16383];
    my ($node) = grep { $_->{port} == $frozen } @{ $cl->{nodes} };
    for my $shared (qw(ioa:{jobs}:goals ioa:{goals}:x ioa:{reg}:x ioa:{workers}:x)) {
        isnt $cl->node_for($shared), $frozen, "$shared is not on the frozen master";
    }
    my $slow = agent($ctx, name => 'Sleeper', desc => 'sleeps, then echoes the text',
                     exec => ['/bin/sh', '-c', 'sleep 3; cat']);
    ok wait_online($ctx, 'Sleeper', 1, 10), 'Sleeper is online' or diag $slow->log;
    # --claim-idle 3: each goal's own timer runs a step every second (its
    # lease), so a goal on the frozen master sends a command there at once
    worker($ctx, 'w1', claim_idle => 3);
    my @g = map { launch(goal => "Sleep on line $_.", team_member_names => ['Sleeper']) } 1 .. 45;
    ok wait_until(sub { !grep { (fsm($_)->{step} // 0) < 11 } @g }, 30),
       'w1 holds all 45 goals, each waiting for its task'
        or diag worker_log($ctx, 'w1');
    my (@free, @held);
    for my $gid (@g) {
        my $cid = meta($gid)->{comm_id};
        my $on = grep { $cl->node_for($_) == $frozen }
                 ("ioa:{goal:$gid}:meta", "ioa:{room:$cid}:log",
                  "ioa:{room:goal-$gid}:log");
        push @{ $on ? \@held : \@free }, $gid;
    }
    my @open = grep { state_of($_) ne 'concluded' } @free;
    diag sprintf '%d goals with a key on the frozen master, %d without (%d not yet concluded)',
                 scalar @held, scalar @free, scalar @open;
    cmp_ok scalar @held, '>=', 1, 'some goals have a key on the frozen master';
    cmp_ok scalar @open, '>=', 3, 'some goals without one still wait for their task';

    my $t0 = time;
    kill 'STOP', $node->{pid};
    my $thaw = bless [$node->{pid}], 'Thaw';
    # a cancel is the hub's and the worker's alone (an agent's results go
    # over one WebSocket in order, so one for a frozen room holds up the
    # rest); only the free goals' keys are touched while the master is
    # frozen
    # every goal's lease step comes round within a second: by now each
    # goal on the frozen master has a command out there
    sleep 1.5;
    my @codes = map { $ctx->http(POST => "/goals/$_/cancel")->code } @open;
    is_deeply [sort { $a <=> $b } keys %{{ map { $_ => 1 } @codes }}], [202],
              'the free goals\' cancels: 202';
    my $went_on = wait_until(sub { !grep { state_of($_) ne 'cancelled' } @open }, 2.5);
    my $took = time - $t0;
    undef $thaw;
    ok $went_on, 'every goal off the frozen master was cancelled while it was frozen'
        or diag join(' ', map { state_of($_) } @open) . "\n" . worker_log($ctx, 'w1');
    diag sprintf 'the free goals ended %.1f s into the freeze', $took;

    my %cancelled = map { $_ => 1 } @open;
    ok wait_until(sub { !grep { state_of($_) !~ /^(?:concluded|cancelled)$/ } @g }, 30),
       'the goals on the frozen master conclude once it answers'
        or diag join(' ', map { state_of($_) } @g) . "\n" . worker_log($ctx, 'w1');
    my ($twice, $decided, $concl, $done) = (0, 0, 0, 0);
    for my $gid (@g) {
        my @env = room(meta($gid)->{comm_id});
        my %seen;
        $twice += grep { $_->{sender} eq $COORD && $seen{$_->{ioa_step}}++ } @env;
        $concl += grep { $_->{sender} eq $COORD && $_->{type} == 11 } @env;
        next if $cancelled{$gid};
        $decided += grep { $_->{sender} eq $COORD && $_->{type} == 10 } @env;
        $done += (meta($gid)->{conclusion} // '') =~ /1 of 1 part done/;
    }
    my $ran = @g - keys %cancelled;
    is $twice, 0, 'no coordinator step is in any room twice';
    is $concl, 45, 'one CONCLUSION per goal';
    is $decided, $ran, 'one decision per goal that ran to its end';
    is $done, $ran, 'and each task\'s result reached its goal';
    unlike worker_log($ctx, 'w1'), qr/timeout: no reply in time/,
           'no command timed out (the freeze was shorter than the timeout)';
    my $st = stop_workers();
    is $st->{w1}, 0, 'w1 exits 0';
    is $slow->stop, 0, 'Sleeper exits 0';
--- no_error_log
[alert]
[crit]
