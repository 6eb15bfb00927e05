# t/230-discovery-index.t -- the discovery index: /retrieve_assistant ranked
# inside nginx (ngx_ioa_index*.c) answers exactly what retrieve.lua in Redis
# answers, follows every change on every instance, and survives what Redis
# and nginx go through.
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/230-discovery-index.t
#
# "The same answers" is checked against the real thing, not a model: a second
# nginx on the same Redis with `ioa_discovery_zone off` answers from
# retrieve.lua, and both answers must be the same bytes (scores, ties, order,
# online flags, records).  The header X-Ioa-Discovery says which one ranked.

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest qw(replicas);   # a Cluster run: a replica per master (TEST 8)
use IoaTest::Instance;
use IoaTest::Api;
use IoaTest::Discovery;
use IoaTest::Metrics;

use JSON::PP ();
use Time::HiRes qw(sleep time);

master_on();
workers(2);
no_root_location();
no_shuffle();
log_level('info');

# a hub of its own with one worker and the metrics location
sub one_worker_hub {
    my ($ctx, $name) = @_;
    return IoaTest::Instance->start(dir => $ctx->servroot . "/$name",
        workers => 1, log_level => 'info',
        http_config => 'ioa_redis 127.0.0.1:' . $ctx->redis_port . ';',
        config => 'location / { ioa_api; } location = /metrics { ioa_metrics; }');
}

# gdb, in the background, stops worker $pid at $function and kills it
# there (SIGKILL: nothing of the worker runs after the stop); returns
# gdb's pid once the breakpoint is set
sub kill_inside {
    my ($ctx, $pid, $function, $tag) = @_;
    my $log = $ctx->servroot . "/gdb-$tag.log";
    my $gdb = fork // die "fork: $!\n";
    if ($gdb == 0) {
        open STDOUT, '>', $log or die "$log: $!\n";
        open STDERR, '>&', \*STDOUT;
        exec 'gdb', '-q', '-nx', '-batch', '-p', $pid,
             '-ex', 'set pagination off',
             '-ex', "break $function", '-ex', 'echo READY\n',
             '-ex', 'continue', '-ex', 'kill';
        exit 127;
    }
    wait_until(sub {
        open my $fh, '<', $log or return 0;
        local $/;
        my $text = <$fh> // '';
        $text =~ /^READY$/m }, 30) or die "gdb did not attach to $pid\n";
    return $gdb;
}

sub slurp_script {
    my $file = shift;
    open my $fh, '<', $file or die "$file: $!\n";
    local $/;
    return scalar <$fh>;
}

# presence.lua as another hub's worker runs it: holder "h" holds names
sub presence {
    my ($ctx, $holder, $expiry, @names) = @_;
    my $now = int(time * 1000);
    my $B = 'ioa:{reg}:';
    $ctx->redis('EVAL', slurp_script('redis-scripts/presence.lua'), 1,
                "${B}online", $B, $holder, $expiry, $now, @names);
}



# A corpus with everything that makes ranking hard: a Zipf vocabulary (a
# few terms in most documents), many documents of one length (tie blocks),
# repeated words (tf > 1), tags, plurals, stopwords, UTF-8 words.
our @VOCAB = (qw(data analysis web search python report chart summary
    translate code review test plan budget travel hotel flight weather news
    market stock finance legal contract email schedule meeting image audio
    video music recipe health fitness sql database api cloud deploy
    security audit), 'données', '分析', 'queries', 'apis', 'classes');
our @TAGS = qw(fast cheap expert beta gpu local multilingual);

sub zipf_word {
    my ($r, $n) = (rand, scalar @VOCAB);
    my $k = int($n ** $r) - 1;       # skewed towards the first words
    return $VOCAB[$k < 0 ? 0 : $k >= $n ? $n - 1 : $k];
}

sub corpus {
    my ($n, $seed) = @_;
    srand $seed;
    my @agents;
    for my $i (1 .. $n) {
        my $len = $i % 3 ? 6 : 1 + int rand 12;   # 2 of 3 of one length
        my @w = map { zipf_word() } 1 .. $len;
        push @w, $w[0] if rand() < 0.2;           # a repeated word
        push @w, 'the', 'of' if rand() < 0.1;     # stopwords
        my @tags = map { $TAGS[int rand @TAGS] } 1 .. int rand 3;
        push @agents, { name => sprintf("agent-%03d", $i),
                        type => 'Thing Assistant',
                        desc => join(' ', @w), tags => \@tags };
    }
    return @agents;
}

sub random_request {
    my @agents = @_;
    my @caps = map {
        my @q = map { rand() < 0.1 ? 'unknownword' : zipf_word() }
                1 .. 1 + int rand 3;
        push @q, 'the' if rand() < 0.1;
        join ' ', @q
    } 1 .. 1 + int rand 3;
    my %req = (capabilities => \@caps, limit => 1 + int rand 6);
    $req{online_only} = JSON::PP::true if rand() < 0.3;
    $req{sender} = $agents[int rand @agents]{name} if rand() < 0.3;
    return \%req;
}

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value(init => 'main::hub_ready()') unless defined $block->init;
});

run_tests();

__DATA__

=== TEST 1: the index answers what retrieve.lua answers, byte for byte
The index answers what retrieve.lua answers, byte for byte: 500 agents, 300
requests with limit, online_only, sender, several capabilities.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $port = $ctx->port;
    my $b = IoaTest::Instance->start(dir => $ctx->servroot . '/redis-path',
        http_config => "ioa_redis 127.0.0.1:" . $ctx->redis_port . ";\n"
                       . "ioa_discovery_zone off;",
        config => 'location / { ioa_api; }', log_level => 'info');
    ok index_ready($port), 'the index is built';

    my @agents = corpus(500, 230);
    for my $a (@agents) {
        my ($code, undef, $raw) = dpost($port, '/register', $a);
        die "register $a->{name}: $code $raw\n" unless $code == 200;
    }

    # a third of them online, as another hub's worker would hold them
    my @online = map { $_->{name} } grep { rand() < 0.33 } @agents;
    presence($ctx, 'hub-x-1', int(time * 1000) + 600000, @online);
    # and one that came and went
    presence($ctx, 'hub-x-1', 0, $online[0]);

    # the presence events reach the index at once; wait for the last one
    my $probe = { capabilities => [ $agents[0]{desc} ], limit => 50,
                  online_only => JSON::PP::true };
    ok wait_for('the index to see presence', 5, sub {
        my (undef, undef, $x) = dpost($port, '/retrieve_assistant', $probe);
        my (undef, undef, $y) = dpost($b->port, '/retrieve_assistant', $probe);
        $x eq $y }), 'presence reached the index';

    my ($same, $differ, $nonempty) = (0, 0, 0);
    for my $i (1 .. 300) {
        my $req = random_request(@agents);
        my ($c1, $d1, $x, $h1) = dpost($port, '/retrieve_assistant', $req);
        my ($c2, $d2, $y, $h2) = dpost($b->port, '/retrieve_assistant', $req);
        die "request $i: $c1/$c2\n" unless $c1 == 200 && $c2 == 200;
        die "request $i answered by '" . answered_by($h1) . "' and '" . answered_by($h2) . "'\n"
            unless answered_by($h1) eq 'index' && answered_by($h2) eq 'redis';
        $nonempty++ if @$d1;
        if ($x eq $y) { $same++ } else {
            $differ++;
            diag "differs for " . JSON::PP->new->canonical->encode($req) . "\n index: $x\n redis: $y"
                if $differ <= 3;
        }
    }
    is $differ, 0, "300 requests: index and retrieve.lua agree ($same same)";
    cmp_ok $nonempty, '>', 250, 'most requests find agents';
    $b->stop;
--- no_error_log
[error]
[alert]
[crit]



=== TEST 2: changes made through one instance show on every instance
Changes show on every instance: a registration through one is found by the
other, a new desc re-ranks, a forgotten agent and a record change follow.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $B = 'ioa:{reg}:';
    my $a = $ctx->port;
    my $c = IoaTest::Instance->start(dir => $ctx->servroot . '/instance-c',
        http_config => "ioa_redis 127.0.0.1:" . $ctx->redis_port . ";",
        config => 'location / { ioa_api; }', log_level => 'info');
    my $q = { capabilities => ['quantum chemistry'] };
    ok index_ready($a), 'A answers from its index';
    ok index_ready($c->port), 'instance C answers from its index';

    my ($code) = dpost($a, '/register', { name => 'qc', type => 'Thing Assistant',
                                          desc => 'quantum chemistry simulations' });
    is $code, 200, 'registered through A';
    my (undef, $d) = dpost($a, '/retrieve_assistant', $q);
    is_deeply [ map { $_->{name} } @$d ], ['qc'], 'A finds it at once (its own registration)';
    my $t0 = time;
    ok wait_for('C to see the registration', 2, sub {
        my (undef, $d) = dpost($c->port, '/retrieve_assistant', $q);
        @$d == 1 }), 'C finds it';
    diag sprintf 'C saw it after %.1f ms', (time - $t0) * 1000;

    dpost($c->port, '/register', { name => 'qc', type => 'Thing Assistant',
                                   desc => 'baking bread' });
    ok wait_for('A to see the new desc', 2, sub {
        my (undef, $d) = dpost($a, '/retrieve_assistant',
                              { capabilities => ['bread'] });
        @$d == 1 && $d->[0]{desc} eq 'baking bread' }), 'A ranks the new desc';
    my (undef, $gone) = dpost($a, '/retrieve_assistant', $q);
    is scalar(@$gone), 0, 'and no longer finds it by the old one';

    # the task record (the goal workers' rep_record.lua)
    $ctx->redis('EVAL', slurp_script('workers/worker/lua/rep_record.lua'), 2,
                "${B}rep:qc", "${B}repdone:t1", 'completed', 60, 1500, $B, 'qc');
    ok wait_for('the record to reach C', 2, sub {
        my (undef, $d) = dpost($c->port, '/retrieve_assistant',
                              { capabilities => ['bread'] });
        @$d && $d->[0]{record}{completed} == 1 && $d->[0]{record}{latency_ms} == 1500 }),
        'C shows the new record';

    # forgotten by the retention sweep (agent_forget.lua)
    my $r = $ctx->redis('EVAL', slurp_script('redis-scripts/agent_forget.lua'), 4,
                        "${B}agent:qc", "${B}agents", "${B}stats", "${B}seen",
                        $B, 'qc', int(time * 1000) + 10 ** 9, 1000);
    is $r->[0], 'forgotten', 'agent_forget.lua removed it';
    for my $port ($a, $c->port) {
        ok wait_for("the removal to reach $port", 2, sub {
            my (undef, $d) = dpost($port, '/retrieve_assistant',
                                  { capabilities => ['bread'] });
            @$d == 0 }), "gone from the index on $port";
    }
    $c->stop;
--- no_error_log
[error]
[alert]
[crit]



=== TEST 3: after a Redis restart the keeper refreshes and the index follows Redis
A Redis restart: the keeper refreshes, agents Redis lost leave the index,
later ones enter it.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $port = $ctx->port;
    ok index_ready($port), 'the index is built';
    my $reg = sub {
        my ($name, $desc) = @_;
        my ($code, undef, $raw) = dpost($port, '/register',
            { name => $name, type => 'Thing Assistant', desc => $desc });
        $code == 200 or die "register $name: $code $raw\n";
    };
    my $names = sub {
        my ($code, $d, $raw, $h) = dpost($port, '/retrieve_assistant',
                                         { capabilities => ['gardening'], limit => 10 });
        return "$code $raw" unless ref $d eq 'ARRAY';
        return join(',', sort map { $_->{name} } @$d) . '/' . answered_by($h);
    };
    $reg->('kept', 'gardening roses');
    $ctx->redis('SAVE');
    $reg->('lost', 'gardening tulips');
    is $names->(), 'kept,lost/index', 'both in the index before the restart';

    IoaTest::redis_stop();
    IoaTest::redis_start();        # from the saved dump: "lost" is gone
    ok wait_for('the index to follow the restarted Redis', 10, sub {
        $names->() eq 'kept/index' }), 'after the refresh: only what Redis has'
        or diag $names->();
    ok wait_for('a registration after the restart', 5, sub {
        eval { $reg->('new', 'gardening herbs'); 1 } }), 'registered again';
    is $names->(), 'kept,new/index', 'the new one is found';
    unlink $ctx->servroot . '/../dump.rdb';
    IoaTest::redis_forget_dump();
--- no_error_log
[alert]
[crit]



=== TEST 4: the index keeps answering and following changes across an nginx reload
nginx reload: the index keeps answering, a new worker keeps it, and changes
after the reload arrive.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $port = $ctx->port;
    ok index_ready($port), 'the index is built';
    dpost($port, '/register', { name => 'pilot', type => 'Thing Assistant',
                                desc => 'flight planning' });
    my $master = do { open my $f, '<', $ctx->servroot . '/logs/nginx.pid'; <$f> };
    chomp $master;
    kill 'HUP', $master;
    my @seen;
    ok wait_for('the reloaded nginx to answer from its index', 5, sub {
        my (undef, $d, undef, $h) = dpost($port, '/retrieve_assistant',
                                         { capabilities => ['flight'] });
        @seen = map { $_->{name} } @$d;
        answered_by($h) eq 'index' }), 'answered by the index after the reload';
    is_deeply \@seen, ['pilot'], 'with its agents';
    my $c = IoaTest::Instance->start(dir => $ctx->servroot . '/instance-c',
        http_config => "ioa_redis 127.0.0.1:" . $ctx->redis_port . ";",
        config => 'location / { ioa_api; }', log_level => 'info');
    ok index_ready($c->port), 'another instance is up';
    dpost($c->port, '/register', { name => 'copilot', type => 'Thing Assistant',
                                   desc => 'flight checklists' });
    ok wait_for('the reloaded instance to hear of it', 5, sub {
        my (undef, $d) = dpost($port, '/retrieve_assistant',
                              { capabilities => ['flight'] });
        @$d == 2 }), 'a registration elsewhere reaches the reloaded instance';
    $c->stop;
--- no_error_log
[alert]
[crit]



=== TEST 5: a zone too small for the registry is logged, and Redis answers exactly
A zone too small for the registry: the error log says so, and Redis answers,
still exactly.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_discovery_zone 256k;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $port = $ctx->port;
    ok index_ready($port), 'the index is built (empty)';
    my @agents = corpus(1500, 5);
    $_->{desc} .= ' ' . join(' ', map { "w$_" . int(rand 100000) } 1 .. 20) for @agents;
    for my $a (@agents) {
        my ($code) = dpost($port, '/register', $a);
        die "register: $code\n" unless $code == 200;
    }
    my (undef, $d, undef, $h) = dpost($port, '/retrieve_assistant',
                                     { capabilities => ['data analysis'] });
    is answered_by($h), 'redis', 'a full index leaves discovery to Redis';
    is scalar(@$d), 3, 'which answers';
--- error_log
ioa_discovery_zone is full at
--- no_error_log
[alert]
[crit]



=== TEST 6: "ioa_discovery_zone" takes a size or off, and refuses anything else
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_discovery_zone lots;
--- config
    location / { ioa_api; }
--- must_die
--- error_log
"ioa_discovery_zone" directive must be a size (e.g. 256m or 2g) or "off"



=== TEST 7: /metrics shows the index: state, agents, terms, bytes, zone size, build time
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_discovery_zone 32m;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    my $port = $ctx->port;
    ok index_ready($port), 'the index is built';
    for my $i (1 .. 20) {
        dpost($port, '/register', { name => "m$i", type => 'Thing Assistant',
                                    desc => "metrics agent number$i" });
    }
    my $res = $ctx->http(GET => '/metrics', port => $port);
    my %m = $res->content =~ /^(ioa_discovery_index_\w+) (\S+)$/mg;
    is $m{ioa_discovery_index_state}, 2, 'state 2: answering';
    is $m{ioa_discovery_index_agents}, 20, '20 agents';
    is $m{ioa_discovery_index_terms}, 22, '22 terms (metric, agent, number1..20)';
    cmp_ok $m{ioa_discovery_index_bytes}, '>', 0, 'bytes in use';
    cmp_ok $m{ioa_discovery_index_bytes}, '<', 2 * 1024 * 1024, 'a few pages for 20 agents';
    is $m{ioa_discovery_index_zone_bytes}, 32 * 1024 * 1024, 'the zone is 32m';
    like $m{ioa_discovery_index_build_seconds}, qr/^\d+\.\d{3}$/, 'build seconds';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 8: the keeper follows a failover of the registry's master in a Redis Cluster
A failover of the registry's master (Redis Cluster; skipped on a standalone
Redis): the keeper follows the new master and changes keep arriving.
--- http_config
    ioa_redis $TEST_NGINX_REDIS_SEEDS;
    ioa_redis_timeout 1s;
    ioa_redis_connect_timeout 500ms;
    ioa_redis_backoff_max 300ms;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $Cl = IoaTest::redis_cluster();
    SKIP: {
        skip 'needs a Redis Cluster (TEST_IOA_REDIS=cluster)', 6 unless $Cl;
        my $port = $ctx->port;
        ok index_ready($port), 'the index is built';
        my $reg = sub {
            my ($name) = @_;
            wait_for("$name registered", 20, sub {
                (dpost($port, '/register', { name => $name,
                    type => 'Thing Assistant', desc => "failover survivor $name" }))[0] == 200 });
        };
        ok $reg->('before'), 'registered before the failover';
        $Cl->refresh;
        my $m = $Cl->node_for('ioa:{reg}:agents');
        my ($rep) = $Cl->replicas_of($m);
        is $Cl->cmd_on($rep, 'CLUSTER', 'FAILOVER'), 'OK', "CLUSTER FAILOVER on $rep";
        ok wait_for('the replica to take over', 10, sub {
            $Cl->refresh; $Cl->node_for('ioa:{reg}:agents') == $rep }), "$rep is the registry's master";
        ok $reg->('after'), 'registered after the failover';
        ok wait_for('the index to have both', 10, sub {
            my (undef, $d, undef, $h) = dpost($port, '/retrieve_assistant',
                                             { capabilities => ['survivor'], limit => 5 });
            answered_by($h) eq 'index' && join(',', sort map { $_->{name} } @$d) eq 'after,before' }),
            'the index answers with both';
    }
--- no_error_log
[alert]
[crit]



=== TEST 9: presence still shows after more holders than the index's 1,024 holder slots
Holders come and go (each nginx worker restart is a new one): after more than
the index's 1,024 holder slots, presence still shows.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $port = $ctx->port;
    ok index_ready($port), 'the index is built';
    dpost($port, '/register', { name => 'nomad', type => 'Thing Assistant',
                                desc => 'wandering holder test' });
    # 1,100 holders, each holding the agent for a millisecond
    for my $h (1 .. 1100) {
        presence($ctx, "gone-$h", int(time * 1000) + 1, 'nomad');
    }
    presence($ctx, 'alive-1', int(time * 1000) + 600000, 'nomad');
    ok wait_for('the last holder to count', 5, sub {
        my (undef, $d) = dpost($port, '/retrieve_assistant',
            { capabilities => ['wandering'], online_only => JSON::PP::true });
        @$d == 1 && $d->[0]{online} }), 'online through the 1,101st holder';
--- no_error_log
[alert]
[crit]



=== TEST 11: /metrics counts discovery queries by ranker, with a latency histogram
/metrics counts discovery queries by what ranked them, with their latency as a
histogram; Prometheus' own parser reads the whole scrape.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
    location = /metrics { ioa_metrics; }
--- ioa_scenario
    my $port = $ctx->port;
    ok index_ready($port), 'the index is built';
    my $scrape = sub { scrape($ctx, port => $port) };
    my ($before) = $scrape->();
    my $n0 = $before->{ioa_discovery_queries_total}{'ranked_by=index'} // 0;
    for (1 .. 25) {
        dpost($port, '/retrieve_assistant', { capabilities => ['metrics probe'] });
    }
    my ($v, $types) = $scrape->();
    is $types->{ioa_discovery_queries}, 'counter', 'a counter';
    is $types->{ioa_discovery_query_duration_seconds}, 'histogram', 'a histogram';
    is $v->{ioa_discovery_queries_total}{'ranked_by=index'} - $n0, 25,
        '25 more queries ranked by the index';
    is $v->{ioa_discovery_query_duration_seconds_count}{''},
       $v->{ioa_discovery_queries_total}{'ranked_by=index'}
       + $v->{ioa_discovery_queries_total}{'ranked_by=redis'},
        'the histogram counts every query';
    my $bk = $v->{ioa_discovery_query_duration_seconds_bucket};
    my @by_le = sort { $a->[0] <=> $b->[0] }
                map { my ($le) = /^le=(.*)$/; [ $le eq '+Inf' ? 9e9 : $le, $bk->{$_} ] }
                keys %$bk;
    my @cum = map { $_->[1] } @by_le;
    is scalar(@cum), 14, '13 bounds and +Inf';
    is_deeply \@cum, [ sort { $a <=> $b } @cum ], 'buckets are cumulative';
    is $cum[-1], $v->{ioa_discovery_query_duration_seconds_count}{''}, '+Inf is the count';
    cmp_ok $v->{ioa_discovery_query_duration_seconds_sum}{''}, '>', 0, 'a sum of seconds';
    cmp_ok $v->{ioa_discovery_query_duration_seconds_sum}{''}
           / $v->{ioa_discovery_query_duration_seconds_count}{''}, '<', 0.5,
        'under half a second each';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 10: a worker killed while it reads the index does not hang the others
A worker killed while it reads the index (in the middle of ranking, under gdb)
does not hang the others: its share of the lock is released and the index
keeps following Redis.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $hub = one_worker_hub($ctx, 'reader');
    my $port = $hub->port;
    ok index_ready($port), 'the index is built';
    dpost($port, '/register', { name => "r$_", type => 'Thing Assistant',
                                desc => "lock probe number$_" }) for 1 .. 3;
    my ($worker) = $hub->worker_pids;
    # the worker stops in the middle of a query, holding the read lock,
    # and is killed there
    my $gdb = kill_inside($ctx, $worker, 'ngx_ioa_ix_agent_json', 'reader');
    dpost($port, '/retrieve_assistant', { capabilities => ['lock probe'] });
    ok wait_until(sub { !kill 0, $worker }, 20), 'the worker was killed while ranking';
    waitpid $gdb, 0;
    # the next worker writes (a registration), which needs the lock whole
    my ($code) = dpost($port, '/register', { name => 'after', type => 'Thing Assistant',
                                             desc => 'written after the reader died' });
    is $code, 200, 'a registration through the new worker';
    ok wait_until(sub {
        my (undef, $d, undef, $h) = dpost($port, '/retrieve_assistant',
                                          { capabilities => ['reader died'] });
        answered_by($h) eq 'index' && @$d && $d->[0]{name} eq 'after' }, 10),
        'the index has it: the writer was not held up by the dead reader';
    like $hub->error_log, qr/\[alert\].*worker \d+ died while reading the index; its share of the lock is released/,
        'the error log says what happened';
    $hub->stop;
--- no_error_log
[crit]



=== TEST 12: a worker killed while it writes the index does not hang the others
A worker killed while it writes the index (under gdb) does not hang the
others: the index is given up, discovery is answered by Redis, exactly, and
the error log and /metrics say so.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $hub = one_worker_hub($ctx, 'writer');
    my $port = $hub->port;
    ok index_ready($port), 'the index is built';
    my ($worker) = $hub->worker_pids;
    my $gdb = kill_inside($ctx, $worker, 'ngx_ioa_ix_set_rest', 'writer');
    # the registration is stored in Redis first; its worker then writes it
    # into the index, and dies there
    dpost($port, '/register', { name => 'halfway', type => 'Thing Assistant',
                                desc => 'written while the writer died' });
    ok wait_until(sub { !kill 0, $worker }, 20), 'the worker was killed while writing';
    waitpid $gdb, 0;
    my ($code, $d, $raw, $h);
    ok wait_until(sub {
        ($code, $d, $raw, $h) = dpost($port, '/retrieve_assistant',
                                      { capabilities => ['writer died'] });
        $code == 200 && answered_by($h) eq 'redis' }, 10),
        'discovery answers, from Redis';
    is_deeply [ map { $_->{name} } @$d ], ['halfway'], 'exactly: the agent is found';
    like $hub->error_log, qr/\[alert\].*worker \d+ died while writing the index, which can no longer be trusted/,
        'the error log says what happened';
    like $ctx->http(GET => '/metrics', port => $port)->content,
         qr/^ioa_discovery_index_state 4$/m, 'ioa_discovery_index_state 4';
    ($code) = dpost($port, '/register', { name => 'later', type => 'Thing Assistant',
                                          desc => 'registered after it' });
    is $code, 200, 'registration goes on';
    (undef, $d) = dpost($port, '/retrieve_assistant', { capabilities => ['registered after'] });
    is_deeply [ map { $_->{name} } @$d ], ['later'], 'and is found';
    $hub->stop;
--- no_error_log
[crit]
