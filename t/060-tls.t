# t/060-tls.t -- wss:// and https:// through nginx's own TLS.
#
# The module writes WebSocket frames with c->send_chain and SSE events through
# nginx's output filters, which is what makes "listen ... ssl" work without
# anything ioa-specific.  These blocks prove it end to end: a WebSocket agent
# on a TLS port and one on a plain port share a room; a large envelope (more
# than one TLS record and more than one socket write) crosses intact; the
# close handshake works over TLS; and an HTTP agent posts over https.
#
#   TEST_NGINX_LOAD_MODULES=/work/main/build/ngx_http_ioa_module.so \
#       prove -It/lib t/060-tls.t

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(register teamup envelope wait_health);
use File::Temp ();

no_root_location();
log_level('info');

# A self-signed certificate, made before nginx starts; the config sections
# read its directory from $TEST_NGINX_CERT_DIR.
our $CertDir = File::Temp::tempdir('ioa-tls-XXXXXX', TMPDIR => 1, CLEANUP => 1);
system("openssl req -x509 -newkey rsa:2048 -nodes -keyout $CertDir/key.pem"
       . " -out $CertDir/cert.pem -days 2 -subj /CN=localhost 2>/dev/null") == 0
    or die "openssl could not make a test certificate\n";
$ENV{TEST_NGINX_CERT_DIR} = $CertDir;

sub fresh {
    my $ctx = shift;
    $ctx->redis('FLUSHALL');
    wait_health($ctx);
}

run_tests();

__DATA__

=== TEST 1: a wss:// and a ws:// agent share a room; a 60 KB envelope crosses TLS intact
A wss:// agent and a ws:// agent share a room; a 60 KB envelope crosses TLS
intact both ways; close 1000 over TLS.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
}
server {
    listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 ssl;
    ssl_certificate     $TEST_NGINX_CERT_DIR/cert.pem;
    ssl_certificate_key $TEST_NGINX_CERT_DIR/key.pem;
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob));
    my $tls = $ctx->rand_port(1);
    my $a = IoaTest::Agent->connect($ctx, 'Alice', '', ssl => 1, port => $tls);
    ok $a->ok, 'Alice upgraded over TLS' or diag $a->error;
    my $b = IoaTest::Agent->connect($ctx, 'Bob');
    ok $b->ok, 'Bob upgraded over plain TCP' or diag $b->error;
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    sleep 0.2;

    $a->post(envelope(comm_id => $cid, content => 'hello over tls'));
    for my $x ($a, $b) {
        my $m = $x->recv(5);
        is $m && $m->{content}, 'hello over tls', $x->name . ' got it';
    }

    my $big = 'x' x 60000;
    $b->post(envelope(comm_id => $cid, content => $big));
    my $m = $a->recv(5);
    is length($m ? $m->{content} : ''), 60000, '60 KB reached the TLS agent';
    is $m && $m->{content}, $big, 'intact';
    $b->recv(5);

    $a->post(envelope(comm_id => $cid, content => "$big!"));
    $m = $b->recv(5);
    is $m && $m->{content}, "$big!", '60 KB from the TLS agent reached Bob';
    $a->recv(5);

    $a->ws->close(1000, 'bye');
    my ($code) = $a->ws->recv_close(5);
    is $code, 1000, 'close 1000 answered over TLS';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: an HTTP agent posts over https and reads its SSE inbox over TLS
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
}
server {
    listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 ssl;
    ssl_certificate     $TEST_NGINX_CERT_DIR/cert.pem;
    ssl_certificate_key $TEST_NGINX_CERT_DIR/key.pem;
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    register($ctx, qw(Alice Bob));
    my $cid = teamup($ctx, 'Alice', ['Bob']);
    my $base = 'https://127.0.0.1:' . $ctx->rand_port(1);

    # Bob's inbox over TLS, from the room's beginning (since=0-0), so it
    # does not matter whether curl connects before or after the post
    open my $inbox, '-|', 'curl', '-skN', '--max-time', '6',
        "$base/agents/Bob/inbox?since=0-0" or die "curl: $!";
    sleep 0.2;

    my $body = envelope(comm_id => $cid, content => 'posted over https');
    my $out = `curl -sSk -X POST --data-binary '$body' $base/agents/Alice/messages`;
    like $out, qr/^\{"id":"\d+-\d+","comm_id":"$cid"\}/, 'posted over https';

    my $got = '';
    while (my $line = <$inbox>) {
        $got .= $line;
        last if $got =~ /posted over https/;
    }
    close $inbox;
    like $got, qr/^retry: /m, 'the stream opened';
    like $got, qr/^data: \{"id":"\d+-\d+",.*posted over https/m,
        'the envelope arrived as an SSE event over TLS';
--- no_error_log
[alert]
[crit]
[emerg]
