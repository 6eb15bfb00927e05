# t/235-embedding.t -- semantic discovery: `ioa_embedding` sends texts to a
# real OpenAI-compatible /v1/embeddings (llama-server on a generated
# random-weight model, t/lib/IoaTest/Llama.pm) through a location of the
# hub's own, stores each agent's vector with it in Redis, and ranks by the
# documented hybrid of BM25 and cosine similarity; an endpoint that is down
# costs nothing but the semantic part, and agents registered meanwhile are
# embedded later.
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/235-embedding.t
#
# The cosine similarities the hub must agree with are computed here, from
# vectors asked of llama-server directly.

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Instance;
use IoaTest::Api;
use IoaTest::Port ();
use IoaTest::Discovery;
use IoaTest::Llama;

use HTTP::Tiny ();
use IO::Socket::INET ();
use JSON::PP ();
use Time::HiRes qw(sleep time);

no_root_location();
no_shuffle();
log_level('info');

our $JSON = JSON::PP->new->canonical;


# the hub, with its embeddings location proxying to 127.0.0.1:$lport
sub hub {
    my ($ctx, $lport, $name) = @_;
    my $loc = 'location = /_ioa/embeddings { internal; '
        . "proxy_pass http://127.0.0.1:$lport/v1/embeddings; "
        . 'proxy_method POST; proxy_set_header Content-Type application/json; '
        . 'proxy_pass_request_headers off; proxy_set_body $ioa_embedding_body; '
        . 'subrequest_output_buffer_size 1m; proxy_connect_timeout 1s; '
        . 'proxy_read_timeout 5s; }';
    my $hub = IoaTest::Instance->start(dir => $ctx->servroot . "/$name",
        workers => 2,
        http_config => "ioa_redis 127.0.0.1:" . $ctx->redis_port . ";\n"
                       . "ioa_embedding /_ioa/embeddings model=tiny weight=0.5;",
        config => "location / { ioa_api; } $loc", log_level => 'info');
    index_ready($hub->port) or die "the hub's index was not built\n";
    return $hub;
}

# unit vectors straight from the endpoint
sub embed {
    my ($url, @texts) = @_;
    my $r = HTTP::Tiny->new(timeout => 10)->post("$url/embeddings",
        { headers => { 'Content-Type' => 'application/json' },
          content => $JSON->encode({ model => 'tiny', input => \@texts }) });
    die "embeddings: $r->{status} $r->{content}\n" unless $r->{status} == 200;
    my @out;
    for my $d (@{ $JSON->decode($r->{content})->{data} }) {
        my @v = @{ $d->{embedding} };
        my $n = 0;
        $n += $_ * $_ for @v;
        $n = sqrt $n;
        $out[$d->{index}] = [ map { $_ / $n } @v ];
    }
    return @out;
}

sub dot {
    my ($a, $b) = @_;
    my $s = 0;
    $s += $a->[$_] * $b->[$_] for 0 .. $#$a;
    return $s;
}

sub agents { return (
    [ 'atlas',   'maps of mountains and rivers' ],
    [ 'baker',   'bread cakes and pastries every morning' ],
    [ 'coder',   'writes software in rust and go' ],
    [ 'doctor',  'medical advice for common illnesses' ],
    [ 'elf',     'wraps presents and ribbons' ],
    [ 'farmer',  'grows wheat corn and potatoes' ],
    [ 'guide',   'tours of old castles' ],
    [ 'hacker',  'finds security holes in web servers' ],
    [ 'inker',   'draws comics with ink' ],
    [ 'jester',  'tells jokes at parties' ],
    [ 'keeper',  'keeps bees and sells honey' ],
    [ 'lawyer',  'reads contracts and finds loopholes' ],
) }

run_tests();

__DATA__

=== TEST 1: discovery ranks by cosine similarity of stored vectors, mixing in BM25
registration stores a 64-dimension vector with the agent; a query with no word
in common ranks by cosine similarity, equal to the one computed here; words in
common mix in BM25 as documented.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- empty_redis
--- ioa_scenario
    my @AGENTS = agents();
    my $url = llama_server($ctx->servroot . '/logs/llama.log', embeddings => 1);
    my ($lport) = $url =~ /:(\d+)\//;
    my $hub = hub($ctx, $lport, 'hub');
    for my $a (@AGENTS) {
        my ($code, undef, $raw) = dpost($hub->port, '/register',
            { name => $a->[0], type => 'Thing Assistant', desc => $a->[1] });
        die "register $a->[0]: $code $raw\n" unless $code == 200;
    }
    my $h = $ctx->redis('HGETALL', 'ioa:{reg}:agent:atlas');
    my %h = @$h;
    is $h{vec_model}, 'tiny', 'the model is recorded with the vector';
    is $h{vec_dim}, 64, 'and its dimension';
    is length $h{vec}, 256, '64 float32';
    my @stored = unpack 'f<64', $h{vec};
    my ($want) = embed($url, $AGENTS[0][1]);
    my $err = 0;
    $err += abs($stored[$_] - $want->[$_]) for 0 .. 63;
    cmp_ok $err, '<', 1e-3, 'the stored vector is the endpoint\'s, of length 1';

    # one text a call, as the hub asks at registration (a batch can give
    # slightly other numbers)
    my @vecs = map { (embed($url, $_->[1]))[0] } @AGENTS;
    my $query = 'zq xv wk';              # no word of any description
    my ($qv) = embed($url, $query);
    my @by_cos = sort { $b->[1] <=> $a->[1] }
                 map { [ $AGENTS[$_][0], dot($vecs[$_], $qv) ] } 0 .. $#AGENTS;

    my ($code, $d, $raw, $hd) = dpost($hub->port, '/retrieve_assistant',
                                       { capabilities => [$query], limit => 5 });
    is $code, 200, 'retrieve: 200';
    is $hd->{'x-ioa-ranking'}, 'hybrid', 'X-Ioa-Ranking: hybrid';
    is_deeply [ map { $_->{name} } @$d ], [ map { $_->[0] } @by_cos[0 .. 4] ],
        'the top 5 by cosine similarity, in its order';
    my $worst = 0;
    for my $i (0 .. 4) {
        my $e = abs($d->[$i]{similarity} - $by_cos[$i][1]);
        $worst = $e if $e > $worst;
    }
    cmp_ok $worst, '<', 2e-4, 'each similarity as computed here (4 decimals)';
    is_deeply [ map { $_->{ranking} } @$d ], [ ('hybrid') x 5 ], 'each says "hybrid"';
    is_deeply [ map { $_->{bm25} + 0 } @$d ], [ (0) x 5 ], 'no word in common: BM25 0';
    ok !(grep { abs($_->{score} - 0.5 * $_->{similarity}) > 2e-4 } @$d),
        'score = 0.5 * similarity when BM25 is 0 (weight=0.5)';

    # a word of one description: BM25 brings it, the formula holds
    ($code, $d) = dpost($hub->port, '/retrieve_assistant',
                        { capabilities => ['honey zq'], limit => 12 });
    is $d->[0]{name}, 'keeper', 'the agent with the word first';
    my $best = 0;
    $_->{bm25} > $best and $best = $_->{bm25} for @$d;
    ok !(grep { abs($_->{score} - (0.5 * $_->{bm25} / $best + 0.5 * $_->{similarity})) > 3e-4 } @$d),
        'score = 0.5 * bm25 / best bm25 + 0.5 * similarity for each';
    my @scores = map { $_->{score} } @$d;
    is_deeply \@scores, [ sort { $b <=> $a } @scores ], 'best score first';
    $hub->stop;
    llama_stop();
--- no_error_log
[alert]
[crit]



=== TEST 2: with the embedding endpoint down discovery falls back to BM25 and says so
the endpoint down: registration succeeds without a vector, discovery ranks by
BM25 and says so (log, header, field); back up, the agents registered
meanwhile are embedded later and ranked by the hybrid.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- empty_redis
--- ioa_scenario
    my @AGENTS = agents();
    my $lport = IoaTest::Port::free_port();
    my $hub = hub($ctx, $lport, 'hub-down');
    for my $a (@AGENTS) {
        my ($code) = dpost($hub->port, '/register',
            { name => $a->[0], type => 'Thing Assistant', desc => $a->[1] });
        is $code, 200, "$a->[0] registered with the endpoint down" if $a->[0] eq 'atlas';
        die "register $a->[0]: $code\n" unless $code == 200;
    }
    is $ctx->redis('HGET', 'ioa:{reg}:agent:atlas', 'vec'), undef, 'no vector stored';
    my ($code, $d, undef, $hd) = dpost($hub->port, '/retrieve_assistant',
                                       { capabilities => ['honey'] });
    is $code, 200, 'retrieve still answers';
    like $hd->{'x-ioa-ranking'}, qr/^bm25; /, 'X-Ioa-Ranking: bm25; and why';
    is_deeply [ map { $_->{name} } @$d ], ['keeper'], 'by BM25';
    is $d->[0]{ranking}, 'bm25', 'the agent says "bm25"';
    ok !exists $d->[0]{similarity}, 'no similarity';
    like $hub->error_log, qr/ioa_embedding: .*discovery ranks by BM25 alone/,
        'the error log says so';

    my $url = llama_server($ctx->servroot . '/logs/llama.log',
                           embeddings => 1, port => $lport);
    # discovery requests carry the agents without a vector to the endpoint
    ok wait_for('every agent to get its vector', 20, sub {
        dpost($hub->port, '/retrieve_assistant', { capabilities => ['zq'] });
        !grep { !defined $ctx->redis('HGET', "ioa:{reg}:agent:$_->[0]", 'vec_dim') }
              @AGENTS }), 'every agent got its vector later';
    ($code, $d, undef, $hd) = dpost($hub->port, '/retrieve_assistant',
                                    { capabilities => ['zq xv wk'], limit => 12 });
    is $hd->{'x-ioa-ranking'}, 'hybrid', 'now hybrid';
    is scalar(grep { $_->{similarity} != 0 } @$d), 12, 'every agent has a similarity';
    $hub->stop;
    llama_stop();
--- no_error_log
[alert]
[crit]
