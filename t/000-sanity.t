# t/000-sanity.t -- proves the test tooling itself, with stock nginx only (no
# ioa module is loaded): the Test::Nginx-format runner in t/lib, IoaTest's
# private Redis, `--- ioa_scenario`, and $TEST_NGINX_* expansion.
#
# It must pass unchanged under both runners:
#     prove -It/lib t/000-sanity.t
#     prove -I/path/to/openresty/test-nginx/lib -It/lib t/000-sanity.t
# so it only uses sections and behaviour both share.  repeat_each(2) checks
# that each block is self-contained (blocks also run in random order).

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;

repeat_each(2);

# Read by `eval` sections as $::LongBody (they run in another package).
our $LongBody = join '', map { "line $_ of a body long enough to diff\n" } 1 .. 40;

run_tests();

__DATA__

=== TEST 1: return: status, body, headers, and a quiet error.log
--- config
    location = /hello {
        return 200 "hello";
    }
--- request
GET /hello
--- response_body chomp
hello
--- response_headers
Content-Type: text/plain
Content-Length: 5
!X-Powered-By
--- no_error_log
[error]
[warn]



=== TEST 2: error_code, and a message that must reach error.log
--- config
    location = /missing {
        root /nonexistent-ioa-sanity-dir;
    }
--- request
GET /missing
--- error_code: 404
--- error_log
No such file or directory
--- no_error_log
[alert]



=== TEST 3: raw_request goes out byte for byte (HTTP/1.0, no Host header)
--- config
    location = /raw {
        return 200 "proto=$server_protocol host=[$http_host]";
    }
--- raw_request eval
"GET /raw HTTP/1.0\r\n\r\n"
--- response_body chomp
proto=HTTP/1.0 host=[]



=== TEST 4: eval sections read `our` variables of the test file
--- config eval
"location = /long { return 200 '$::LongBody'; }"
--- request
GET /long
--- response_body eval: $::LongBody



=== TEST 5: several requests, one expected value per request
--- config
    location /n/ {
        return 200 "$uri";
    }
--- request eval
["GET /n/1", "GET /n/2"]
--- error_code eval
[200, 200]
--- response_body eval
["/n/1", "/n/2"]



=== TEST 6: a response body given as a regex
--- config
    location = /r {
        return 200 "hello world";
    }
--- request
GET /r
--- response_body eval
qr/^hello \w+$/



=== TEST 7: $TEST_NGINX_* is expanded in config (IoaTest's redis port)
--- config
    location = /port {
        return 200 "$TEST_NGINX_REDIS_PORT";
    }
--- request
GET /port
--- response_body eval: $ENV{TEST_NGINX_REDIS_PORT}



=== TEST 8: more_headers, and a POST body sent with its Content-Length
--- config
    location = /echo {
        return 200 "$request_method $http_x_ioa $content_length";
    }
--- more_headers
X-Ioa: yes
--- request
POST /echo
hello world
--- response_body chomp
POST yes 11



=== TEST 9: response_headers_like and response_body_like
--- config
    location = /t {
        add_header X-Conn "c-$connection";
        return 200 "time $msec";
    }
--- request
GET /t
--- response_headers_like
X-Conn: c-\d+
--- response_body_like: ^time \d+\.\d{3}$



=== TEST 10: http_config lands in http{}, main_config at the top level
--- main_config
    worker_rlimit_nofile 1024;
--- http_config
    map $uri $ioa_tag {
        default "mapped";
    }
--- config
    location = /map {
        return 200 $ioa_tag;
    }
--- request
GET /map
--- response_body chomp
mapped



=== TEST 11: a request nginx never answers: --- timeout with --- abort
--- config
--- raw_request eval
"GET / HTTP/1.1\r\nHost: localhost\r\n"
--- timeout: 0.3
--- abort
--- ignore_response
--- no_error_log
[error]



=== TEST 12: must_die: an unknown directive stops nginx with a clear message
--- config
    ioa_no_such_directive on;
--- must_die
--- suppress_stderr
--- error_log
[emerg]
unknown directive "ioa_no_such_directive"



=== TEST 13: ioa_scenario: Redis through IoaTest, nginx through raw sockets
--- config
    location = /kv {
        return 200 "k=$arg_k";
    }
--- ioa_scenario
    ok !defined $ctx->body, 'no request of its own: the scenario is the block';
    my $res = $ctx->http(GET => '/');
    like $res->content, qr/It works!/, 'nginx is up before the scenario runs';

    # Redis replies are typed and byte-exact.
    is $ctx->redis('FLUSHALL'), 'OK', 'FLUSHALL';
    is $ctx->redis('SET', 'ioa:s', "a\r\nb"), 'OK', 'SET';
    is $ctx->redis('GET', 'ioa:s'), "a\r\nb", 'GET is byte-exact';
    is $ctx->redis('GET', 'ioa:none'), undef, 'nil is undef';
    is $ctx->redis('INCR', 'ioa:n'), 1, 'integer reply';
    like $ctx->redis('LPUSH', 'ioa:s', 'x'), qr/^WRONGTYPE/,
        'an error reply is a value';

    # Two requests on one kept-alive connection, read to the close.
    my $s = $ctx->connect;
    print $s "GET /kv?k=1 HTTP/1.1\r\nHost: localhost\r\n\r\n"
           . "GET /kv?k=2 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    my @bodies = $ctx->read_all($s, 3) =~ /\r\n\r\n(k=\d)/g;
    is_deeply \@bodies, ['k=1', 'k=2'], 'two responses on one connection';

    my $res = $ctx->http(GET => '/kv?k=3');
    is $res->code, 200, 'ctx->http status';
    is $res->content, 'k=3', 'ctx->http body';

    ok $ctx->wait_for_log(qr{http request line: "GET /kv\?k=3 HTTP/1\.1"}, 2),
        'wait_for_log finds the request in error.log';
    like nginx_error_log(), qr{GET /kv\?k=1 }, 'nginx_error_log() reads it too';

    # Restart the private redis on the same port.
    redis_stop();
    ok !eval { redis_cmd('PING'); 1 }, 'redis_stop stops redis';
    redis_start();
    is redis_cmd('PING'), 'PONG', 'redis_start brings it back';
    is redis_port(), $ENV{TEST_NGINX_REDIS_PORT}, 'on the same port';
--- no_error_log
[error]



=== TEST 14: HTTP/2 with prior knowledge on a per-block random port
--- http_config
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 http2;
        location / {
            return 200 "h2 $server_protocol";
        }
    }
--- config
--- ioa_scenario
    my $port = $ctx->rand_port(1);
    my $out = `curl -sS --http2-prior-knowledge --max-time 5 -w ' %{http_version}' http://127.0.0.1:$port/`;
    is $out, 'h2 HTTP/2.0 2', 'curl and nginx speak HTTP/2';
--- no_error_log
[error]



=== TEST 15: a chunked response is decoded (sub_filter drops Content-Length)
--- config
    location = /c {
        sub_filter 'hello' 'bye';
        sub_filter_types *;
        return 200 "hello world";
    }
--- request
GET /c
--- response_headers
Transfer-Encoding: chunked
--- response_body chomp
bye world
