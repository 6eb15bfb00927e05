# t/210-store-full.t -- a full Redis is a state, not an error (issue 20):
# with Redis at maxmemory (noeviction) writes are refused with a documented
# code and a Retry-After, never Redis' own text; reads go on; the error log
# says it once per interval; once memory is freed everything works again
# and nothing that was accepted is lost.  Real nginx + module + Redis.
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/210-store-full.t

use strict;
use warnings;

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use JSON::PP ();
use IoaTest::Agent qw(register teamup envelope fresh_hub json);
use IoaTest::Api;
use IoaTest::Metrics;
use Time::HiRes qw(sleep time);

no_root_location();
no_shuffle();
log_level('info');

sub used_memory {
    my ($info) = redis_cmd('INFO', 'memory') =~ /^used_memory:(\d+)/m;
    return $info;
}

# What a client must never see of Redis: its words, a script hash, our Lua.
sub leaks {
    my ($text) = @_;
    return $text =~ /OOM|maxmemory|script:|user_script|[0-9a-f]{40}|Redis:/;
}

run_tests();

__DATA__

=== TEST 1: a full Redis refuses writes with store_full, keeps reads, then recovers
Redis fills up under traffic: WebSocket posts get store_full error frames,
REST writes 503 store_full with Retry-After (no Redis text anywhere), reads
keep working, the error log says it once; after memory is freed posts go
through again and every accepted envelope is there exactly once, in order.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_limit_rate off;
    ioa_limit_room_rate off;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh_hub($ctx);
    register($ctx, 'Alice', 'Bob');
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    my $alice = IoaTest::Agent->connect($ctx, 'Alice');
    my $bob = IoaTest::Agent->connect($ctx, 'Bob');
    sleep 0.3;

    # 2 MB of room, then 64 KiB envelopes until Redis is full
    redis_cmd('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
    redis_cmd('CONFIG', 'SET', 'maxmemory', used_memory() + 2 * 1024 * 1024);
    my $pad = 'f' x (64 * 1024);
    my (@accepted, @full, @other);
    for my $i (1 .. 80) {
        $alice->post(envelope(comm_id => $cid, content => "e$i $pad"));
        my ($m) = $alice->recv_until(sub { ($_->{op} // '') eq 'error' || ($_->{content} // '') =~ /^e$i / }, 5);
        if (!$m) { push @other, "e$i: nothing"; next }
        if (($m->{op} // '') eq 'error') {
            push @{ $m->{code} eq 'store_full' ? \@full : \@other }, $m;
        } else {
            push @accepted, "e$i";
        }
    }
    ok @accepted >= 10, scalar(@accepted) . ' envelopes accepted before Redis was full';
    ok @full >= 10, scalar(@full) . ' refused with store_full once it was';
    is scalar(@other), 0, 'no other answer' or diag join " | ", map { ref $_ ? $_->{_raw} : $_ } @other;
    ok !(grep { leaks($_->{_raw}) } @full), 'the error frames carry no Redis text'
        or diag $full[0]{_raw};
    like $full[0]{message} // '', qr/nothing was stored/, '... and say nothing was stored';

    # Near the limit, Redis' usage moves with its client buffers, so the
    # next write may fit again: from here on it stays full
    redis_cmd('CONFIG', 'SET', 'maxmemory', 1);

    # REST writes: 503 store_full with Retry-After
    my $res = $ctx->http(POST => '/agents/Alice/messages',
                         body => json()->encode({ comm_id => $cid, content => 'over REST' }));
    is $res->code, 503, 'REST post: 503';
    like $res->header('Retry-After') // '', qr/^\d+$/, '... with Retry-After';
    is eval { json()->decode($res->content)->{code} }, 'store_full', '... code store_full';
    ok !leaks($res->content), '... and no Redis text' or diag $res->content;
    my ($code, $d) = api($ctx, POST => '/register', { name => 'Carol', type => 'Thing Assistant', desc => 'late' });
    is "$code $d->{code}", '503 store_full', '/register: 503 store_full';
    ($code, $d) = api($ctx, POST => '/teamup', { sender => 'Alice', agent_names => ['Bob'] });
    is "$code $d->{code}", '503 store_full', '/teamup: 503 store_full';

    # reads go on
    ($code, $d) = api($ctx, POST => '/fetch_chat_record', { comm_id => $cid });
    is $code, 200, '/fetch_chat_record still answers';
    is scalar @{ $d->{$cid}{chat_record} || [] }, scalar @accepted, '... with every accepted envelope';
    ($code, $d) = api($ctx, POST => '/query_assistant', { name => 'Bob' });
    is $code, 200, '/query_assistant still answers';
    is $ctx->http(GET => '/health_check')->code, 200, '/health_check: Redis answers, the hub is up';

    my $log = IoaTest::nginx_error_log();
    my @lines = $log =~ /(ioa: Redis refused [^\n]*)/g;
    ok @lines >= 1 && @lines <= 2, scalar(@lines) . " error log line(s) for " . scalar(@full) . '+3 refusals'
        or diag join "\n", @lines;

    # memory freed: posts go through again, nothing accepted was lost
    redis_cmd('CONFIG', 'SET', 'maxmemory', 0);
    $alice->post(envelope(comm_id => $cid, content => 'after'));
    my ($after) = $alice->recv_until(sub { ($_->{content} // '') eq 'after' || ($_->{op} // '') eq 'error' }, 5);
    is $after && $after->{content}, 'after', 'once memory is freed, a post goes through';
    my $entries = redis_cmd('XRANGE', "ioa:{room:$cid}:log", '-', '+');
    my @stored = map { (json()->decode($_->[1][1])->{content} =~ /^(\S+)/)[0] } @$entries;
    is_deeply \@stored, [ @accepted, 'after' ], 'the log holds exactly what was accepted, in order';
    my @got = map { ($_->{content} =~ /^(\S+)/)[0] } $bob->recv_n(@accepted + 1, 10);
    is_deeply \@got, [ @accepted, 'after' ], 'and Bob received exactly that';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: GET /metrics gives each Redis node's used_memory, maxmemory and health
ioa_metrics: GET /metrics in Prometheus' text format gives each Redis node's
used_memory and maxmemory (so an operator sees it filling before store_full)
and whether it answered; only GET and HEAD.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; allow 127.0.0.1; deny all; }
--- ioa_scenario
    fresh_hub($ctx);
    redis_cmd('CONFIG', 'SET', 'maxmemory', 64 * 1024 * 1024);
    my $res = $ctx->http(GET => '/metrics');
    is $res->code, 200, 'GET /metrics: 200';
    like $res->header('Content-Type') // '', qr{^text/plain; version=0\.0\.4}, '... in the text format 0.0.4';
    # Prometheus' own parser (t/lib/prom-parse.py) reads the whole scrape
    my ($v) = scrape($ctx);
    my %m;
    for my $name (keys %$v) {
        $m{$name}{ ($_ =~ /^node=(.*)$/)[0] // '' } = $v->{$name}{$_} for keys %{ $v->{$name} };
    }
    my $node = "127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}";
    is scalar(keys %{ $m{ioa_redis_up} || {} }), redis_mode() eq 'cluster' ? 3 : 1,
        'every node that holds data (a Cluster: every master)';
    ok exists $m{ioa_redis_up}{$node}, '... named by its address';
    is $m{ioa_redis_up}{$node}, 1, 'it answered';
    is $m{ioa_redis_maxmemory_bytes}{$node}, 64 * 1024 * 1024, 'maxmemory as Redis has it';
    my ($used) = redis_cmd('INFO', 'memory') =~ /^used_memory:(\d+)/m;
    ok abs($m{ioa_redis_used_memory_bytes}{$node} - $used) < $used * 0.2,
        "used_memory as Redis reports it ($m{ioa_redis_used_memory_bytes}{$node} against $used)";
    redis_cmd('CONFIG', 'SET', 'maxmemory', 0);
    $res = $ctx->http(POST => '/metrics', body => '{}');
    is $res->code, 405, 'POST /metrics: 405';
    $res = $ctx->http(GET => '/metrics');
    like $res->content, qr/^ioa_redis_maxmemory_bytes\{node="[^"]+"\} 0$/m, 'no limit: 0';
--- no_error_log
[alert]
[crit]
[emerg]
