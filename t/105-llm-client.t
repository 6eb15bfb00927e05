# t/105-llm-client.t -- the worker's LLM client (workers/worker/llm.c),
# driven through workers/build/ioa-llm-check against scripted
# OpenAI-compatible servers: what the request looks like (URL, headers,
# body, response_format), where the configuration comes from (IOA_LLM_*,
# then OPENAI_*), and what the client does with every kind of answer: a
# good one, one to repair, retries with backoff (5xx, 429 Retry-After,
# output that is not JSON, a cut answer, a timeout, a refused connection),
# the format stepping down when a server refuses response_format, the
# errors that must not be retried (401, 404, a redirect, a huge answer),
# the tick, and server output that must not crash anything.
#
#   prove -It/lib t/105-llm-client.t
#
# It builds ioa-llm-check first (`make -C workers/worker llm-check`, a no-op
# when up to date); IOA_LLM_CHECK_BIN runs another build instead (a
# sanitizer one, say).  No nginx, no Redis: a plain Test::More file.
#
# A server is a forked child on a free loopback port that answers the
# requests in turn from its script (the last entry repeats) and keeps each
# request it received in a scratch directory, so a test can look at what
# the client sent.  Every answer carries "Connection: close", so each
# attempt is a new connection.

use strict;
use warnings;

use Cwd ();
use File::Basename ();
use File::Temp ();
use IO::Select ();
use IO::Socket::INET ();
use lib 't/lib';
use IoaTest::Port ();
use JSON::PP ();
use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);

my $Repo = Cwd::abs_path(File::Basename::dirname(__FILE__) . '/..');
my $Bin = $ENV{IOA_LLM_CHECK_BIN} || "$Repo/workers/build/ioa-llm-check";
my $Json = JSON::PP->new->utf8->canonical;   # bytes on the wire
my $Scratch = File::Temp::tempdir('ioa-llm-t-XXXXXX', TMPDIR => 1,
                                  CLEANUP => 1);
my %Servers;

if (!$ENV{IOA_LLM_CHECK_BIN}) {
    my $out = `make -s -C $Repo/workers/worker llm-check 2>&1`;
    if (!is $?, 0, 'make -C workers/worker llm-check builds ioa-llm-check') {
        diag $out;
        done_testing();
        exit;
    }
}

END {
    kill 'KILL', keys %Servers;
    waitpid $_, 0 for keys %Servers;
}

# ------------------------------------------------------------------ helpers

sub free_port { IoaTest::Port::free_port() }

# a chat completion as OpenAI writes it
sub completion {
    my ($content, %o) = @_;
    return $Json->encode({
        id => 'chatcmpl-1', object => 'chat.completion', model => 'm',
        choices => [{ index => 0, finish_reason => $o{finish} // 'stop',
                      message => { role => 'assistant',
                                   content => $content } }],
        $o{no_usage} ? () : (usage => {
            prompt_tokens => $o{pt} // 10, completion_tokens => $o{ct} // 5,
            total_tokens => ($o{pt} // 10) + ($o{ct} // 5) }),
    });
}

sub answer { return { status => 200, body => completion(@_) } }

sub error_answer {
    my ($status, $message, %o) = @_;
    return { status => $status, headers => $o{headers} || [],
             body => $Json->encode({ error => { message => $message,
                                                type => 'invalid_request_error',
                                                code => undef } }) };
}

# Script entries: { status, headers => [...], body } is sent as is;
# { hang => 1 } reads the request and never answers; { huge => N } sends a
# 200 whose body is N bytes of a JSON string.
sub serve {
    my @script = @_;
    my $srv = IO::Socket::INET->new(Listen => 32, LocalAddr => '127.0.0.1',
                                    LocalPort => 0, Proto => 'tcp',
                                    ReuseAddr => 1) or die $!;
    my $dir = File::Temp::tempdir(DIR => $Scratch);
    my $port = $srv->sockport;
    my $pid = fork // die "fork: $!";

    if ($pid == 0) {
        my (@held, $n);
        $SIG{PIPE} = 'IGNORE';
        while (my $c = $srv->accept) {
            my $req = read_request($c);
            next unless defined $req;
            my $act = $script[$n++ // 0] // $script[-1];
            open my $f, '>', "$dir/req-" . sprintf('%03d', $n) or die $!;
            binmode $f;
            print $f $req;
            close $f;
            if ($act->{hang}) {
                push @held, $c;
                next;
            }
            my $body = $act->{huge} ? '"' . ('x' x $act->{huge}) . '"'
                                    : $act->{body} // '';
            my $status = $act->{status} // 200;
            my $head = "HTTP/1.1 $status X\r\nContent-Type: application/json"
                     . "\r\nContent-Length: " . length($body)
                     . "\r\nConnection: close\r\n"
                     . join('', map { "$_\r\n" } @{ $act->{headers} || [] })
                     . "\r\n";
            syswrite_all($c, $head . $body);
            close $c;
        }
        POSIX::_exit(0);
    }

    close $srv;
    $Servers{$pid} = 1;

    return { port => $port, pid => $pid, dir => $dir,
             url => "http://127.0.0.1:$port/v1" };
}

sub syswrite_all {
    my ($c, $data) = @_;
    while (length $data) {
        my $n = syswrite $c, $data;
        return unless $n;
        substr($data, 0, $n) = '';
    }
}

sub read_request {
    my ($c) = @_;
    my $sel = IO::Select->new($c);
    my $buf = '';
    my $need;
    while (1) {
        if (!defined $need && $buf =~ /\r\n\r\n/) {
            my ($len) = $buf =~ /^Content-Length:\s*(\d+)/mi;
            $need = index($buf, "\r\n\r\n") + 4 + ($len // 0);
        }
        return $buf if defined $need && length $buf >= $need;
        return undef unless $sel->can_read(10);
        my $n = sysread $c, $buf, 65536, length $buf;
        return undef unless $n;
    }
}

sub stop_server {
    my ($s) = @_;
    kill 'KILL', $s->{pid};
    waitpid $s->{pid}, 0;
    delete $Servers{ $s->{pid} };
}

# the requests a server received: { line, headers => {lc name}, json }
sub requests {
    my ($s) = @_;
    my @r;
    for my $file (sort glob "$s->{dir}/req-*") {
        open my $f, '<', $file or die $!;
        binmode $f;
        local $/;
        my $raw = <$f>;
        my ($head, $body) = split /\r\n\r\n/, $raw, 2;
        my ($line, @h) = split /\r\n/, $head;
        my %h = map { /^([^:]+):\s*(.*)$/ ? (lc $1 => $2) : () } @h;
        push @r, { line => $line, headers => \%h, raw => $body,
                   json => eval { $Json->decode($body) } };
    }
    return @r;
}

# runs ioa-llm-check with exactly these IOA_LLM_* / OPENAI_* variables
# (and sends it SIGTERM after $TermAfter seconds when that is set)
our $TermAfter;

sub check {
    my ($env, @args) = @_;
    my ($out, $err) = ("$Scratch/out", "$Scratch/err");
    my $t0 = time;
    my $pid = fork // die "fork: $!";

    if ($pid == 0) {
        delete $ENV{$_} for grep { /^(IOA_LLM_|OPENAI_)/ || /_proxy$/i }
                            keys %ENV;
        %ENV = (%ENV, %$env);
        open STDOUT, '>', $out or die $!;
        open STDERR, '>', $err or die $!;
        exec $Bin, @args or POSIX::_exit(127);
    }

    if ($TermAfter) {
        sleep $TermAfter;
        kill 'TERM', $pid;
    }

    waitpid $pid, 0;
    my %r = (rc => $? >> 8, secs => time - $t0);
    for (['out', $out], ['err', $err]) {
        open my $f, '<', $_->[1] or die $!;
        local $/;
        $r{ $_->[0] } = <$f> // '';
    }
    $r{kv}{$1} = $2 while $r{out} =~ /^([a-z ]+): (.*)$/mg;
    $r{answer} = eval { $Json->decode($r{kv}{answer}) }
        if defined $r{kv}{answer};
    ($r{gap}) = ($r{kv}{ticks} // '') =~ /longest gap (\d+) ms/;

    return \%r;
}

sub show {
    my ($r) = @_;
    diag "exit $r->{rc} after $r->{secs} s\n--- stdout\n$r->{out}"
         . "--- stderr\n$r->{err}";
}

sub write_file {
    my ($name, $text) = @_;
    open my $f, '>', "$Scratch/$name" or die $!;
    print $f $text;
    close $f;
    return "$Scratch/$name";
}

my $Schema = $Json->decode('{"type":"object","properties":{'
    . '"greeting":{"type":"string"},"ok":{"type":"boolean"}},'
    . '"required":["greeting","ok"],"additionalProperties":false}');
my $Hello = '{"greeting":"hello","ok":true}';

# ------------------------------------------------------------------ configuration

subtest 'no endpoint configured: the built-in planner, exit 3' => sub {
    my $r = check({ IOA_LLM_API_KEY => 'sk-x', OPENAI_API_KEY => 'sk-y' });
    is $r->{rc}, 3, 'exit 3 (a key alone does not turn the LLM on)'
        or show($r);
    like $r->{out}, qr/^no LLM configured: the built-in planner is used/,
        'and says so';
};

subtest 'invalid values are refused with the variable named, exit 2' => sub {
    for (['IOA_LLM_BASE_URL', 'ftp://x/v1', 'IOA_LLM_BASE_URL'],
         ['OPENAI_BASE_URL', '127.0.0.1:8080', 'OPENAI_BASE_URL'],
         ['IOA_LLM_TIMEOUT', 'soon', 'IOA_LLM_TIMEOUT'],
         ['IOA_LLM_TIMEOUT', '0', 'IOA_LLM_TIMEOUT'],
         ['IOA_LLM_MAX_ATTEMPTS', '0', 'IOA_LLM_MAX_ATTEMPTS'],
         ['IOA_LLM_RESPONSE_FORMAT', 'xml', 'IOA_LLM_RESPONSE_FORMAT'],
         ['IOA_LLM_API_KEY', "sk-a\r\nX-Evil: 1", 'IOA_LLM_API_KEY'])
    {
        my ($var, $val, $named) = @$_;
        my %env = ($var =~ /BASE_URL/ ? () : (IOA_LLM_BASE_URL => 'http://127.0.0.1:9/v1'),
                   $var => $val);
        my $r = check(\%env);
        is $r->{rc}, 2, "$var=\"$val\": exit 2" or show($r);
        like $r->{err}, qr/error: \Q$named\E /, "the message names $named";
    }
};

# ------------------------------------------------------------------ a good answer

subtest 'json_schema answer: the request as OpenAI wants it' => sub {
    my $s = serve(answer($Hello, pt => 21, ct => 7));
    my $r = check({ IOA_LLM_BASE_URL => "$s->{url}/",       # trailing slash
                    IOA_LLM_API_KEY => 'sk-test',
                    IOA_LLM_MODEL => 'test-model',
                    # the IOA_ variables win over the OpenAI ones
                    OPENAI_BASE_URL => 'http://127.0.0.1:9/v1',
                    OPENAI_API_KEY => 'sk-wrong', OPENAI_MODEL => 'wrong' });
    is $r->{rc}, 0, 'exit 0' or show($r);
    is_deeply $r->{answer}, { greeting => 'hello', ok => JSON::PP::true },
        'the answer is the object';
    is $r->{kv}{endpoint}, "$s->{url}/chat/completions", 'endpoint shown';
    is $r->{kv}{model}, 'test-model', 'model shown';
    is $r->{kv}{format}, 'json_schema', 'json_schema first';
    is $r->{kv}{tokens}, '21 prompt + 7 completion', 'usage reported';
    is $r->{kv}{attempts}, 1, 'one attempt';
    like $r->{err}, qr/info: llm: check from test-model: 1 attempt, 21 prompt \+ 7 completion tokens, \d+ ms/,
        'one info line with model, attempts, tokens, time';

    my @q = requests($s);
    is scalar @q, 1, 'the server got one request';
    my $q = $q[0];
    is $q->{line}, 'POST /v1/chat/completions HTTP/1.1', 'POST to /v1/chat/completions';
    is $q->{headers}{authorization}, 'Bearer sk-test', 'Authorization from IOA_LLM_API_KEY';
    is $q->{headers}{'content-type'}, 'application/json', 'Content-Type';
    ok !exists $q->{headers}{expect}, 'no Expect: 100-continue';
    my $b = $q->{json};
    is $b->{model}, 'test-model', 'body: model';
    is_deeply $b->{messages}, [{ role => 'user', content =>
        'This is a connectivity check. Answer with a short greeting in '
        . '"greeting" and true in "ok".' }], 'body: the messages unchanged';
    is $b->{max_tokens}, 1024, 'body: max_tokens';
    is $b->{temperature}, 0.2, 'body: temperature';
    ok JSON::PP::is_bool($b->{stream}) && !$b->{stream}, 'body: stream false';
    is_deeply $b->{response_format}, { type => 'json_schema', json_schema => {
        name => 'check', schema => $Schema, strict => JSON::PP::true } },
        'body: response_format json_schema with the schema, strict';
    stop_server($s);
};

subtest 'OPENAI_BASE_URL, OPENAI_API_KEY, the default model' => sub {
    my $s = serve(answer($Hello));
    my $r = check({ OPENAI_BASE_URL => $s->{url}, OPENAI_API_KEY => 'sk-openai',
                    IOA_LLM_MAX_TOKENS => 300, IOA_LLM_TEMPERATURE => 0 });
    is $r->{rc}, 0, 'exit 0' or show($r);
    my ($q) = requests($s);
    is $q->{line}, 'POST /v1/chat/completions HTTP/1.1', 'the path appended to OPENAI_BASE_URL';
    is $q->{headers}{authorization}, 'Bearer sk-openai', 'Authorization from OPENAI_API_KEY';
    is $q->{json}{model}, 'gpt-4o-mini', 'model: the default';
    is $q->{json}{max_tokens}, 300, 'IOA_LLM_MAX_TOKENS';
    is $q->{json}{temperature}, 0, 'IOA_LLM_TEMPERATURE';
    stop_server($s);
};

subtest 'the whole endpoint as base URL, no key: no Authorization' => sub {
    my $s = serve(answer($Hello));
    my $r = check({ IOA_LLM_BASE_URL => "$s->{url}/chat/completions" });
    is $r->{rc}, 0, 'exit 0' or show($r);
    is $r->{kv}{'api key'}, 'none', 'no key shown';
    my ($q) = requests($s);
    is $q->{line}, 'POST /v1/chat/completions HTTP/1.1', 'not appended twice';
    ok !exists $q->{headers}{authorization}, 'no Authorization header';
    stop_server($s);
};

subtest '--messages and --schema: sent as given' => sub {
    my $schema = '{"type":"object","properties":{"n":{"type":"integer"}},'
               . '"required":["n"],"additionalProperties":false}';
    my $msgs = '[{"role":"system","content":"You count."},'
             . '{"role":"user","content":"How many? \u00e9\n"}]';
    my $s = serve(answer('{"n": 3}'));
    my $r = check({ IOA_LLM_BASE_URL => $s->{url} },
                  '--messages', write_file('m.json', $msgs),
                  '--schema', write_file('s.json', $schema),
                  '--schema-name', 'count plan!');
    is $r->{rc}, 0, 'exit 0' or show($r);
    is_deeply $r->{answer}, { n => 3 }, 'the answer';
    my ($q) = requests($s);
    is_deeply $q->{json}{messages}, $Json->decode($msgs), 'the messages';
    is_deeply $q->{json}{response_format}{json_schema}{schema},
        $Json->decode($schema), 'the schema';
    is $q->{json}{response_format}{json_schema}{name}, 'count_plan_',
        'the name made fit for OpenAI ([a-zA-Z0-9_-])';
    stop_server($s);
};

subtest '--no-schema: json_object, and JSON asked in the prompt' => sub {
    my $s = serve(answer('{"anything": [1, 2]}'));
    my $r = check({ IOA_LLM_BASE_URL => $s->{url} }, '--no-schema',
                  '--prompt', 'Say something.');
    is $r->{rc}, 0, 'exit 0' or show($r);
    my ($q) = requests($s);
    is_deeply $q->{json}{response_format}, { type => 'json_object' },
        'response_format json_object';
    like $q->{json}{messages}[-1]{content},
        qr/^Say something\.\n\nAnswer with one JSON object, and nothing else/,
        'the instruction appended to the last message';
    stop_server($s);
};

# ------------------------------------------------------------------ repair

subtest 'prose, a <think> block, ```json fences, a trailing comma: repaired' => sub {
    my $content = "<think>maybe {\"greeting\": \"no\", \"ok\": false}</think>\n"
        . "Sure! Here is the {answer}:\n```json\n"
        . "{\"greeting\": \"hi {there} \\\"}\\\"\", \"ok\": true,}\n```\n"
        . "Hope this helps {";
    my $s = serve(answer($content));
    my $r = check({ IOA_LLM_BASE_URL => $s->{url} });
    is $r->{rc}, 0, 'exit 0' or show($r);
    is_deeply $r->{answer}, { greeting => 'hi {there} "}"', ok => JSON::PP::true },
        'the object in the fences, not the thought or the prose';
    is $r->{kv}{attempts}, 1, 'no retry needed';
    is eval { $Json->decode($r->{kv}{content} // '') }, $content, 'the raw content kept';
    stop_server($s);
};

subtest 'repair: which object is taken, which answer is refused' => sub {
    for (['bare JSON after blanks', "\n  $Hello  \n", { greeting => 'hello', ok => JSON::PP::true }],
         ['an untagged fence', "```\n$Hello\n```", { greeting => 'hello', ok => JSON::PP::true }],
         ['a {placeholder} in prose first', 'Fill {name} in: {"n": 1}', { n => 1 }],
         ['an unclosed brace first', 'Oops { then {"n": 2}', { n => 2 }],
         ['trailing commas in arrays too', '{"a": [1, 2, ], "b": {"c": 3,},}', { a => [1, 2], b => { c => 3 } }],
         ['a broken object: not its parts', '{"plan": {"n": 1}, oops}', undef],
         ['comments (yajl skips them)', qq({"n": 1 /* one */ // one\n}), { n => 1 }],
         ['single quotes are not forgiven', "{'n': 1}", undef],
         ['an array: its first object', '[{"n": 1}, {"n": 2}]', { n => 1 }],
         ['a number', '42', undef])
    {
        my ($what, $content, $want) = @$_;
        my $s = serve(answer($content));
        my $r = check({ IOA_LLM_BASE_URL => $s->{url}, IOA_LLM_MAX_ATTEMPTS => 1 });
        if ($want) {
            is $r->{rc}, 0, "$what: exit 0" or show($r);
            is_deeply $r->{answer}, $want, "$what: the object";
        } else {
            is $r->{rc}, 1, "$what: exit 1" or show($r);
            like $r->{kv}{error}, qr/^model output is not a JSON object: /,
                "$what: refused";
        }
        stop_server($s);
    }
};

subtest 'invalid UTF-8, NULs and \\u escapes in the answer' => sub {
    my $body = completion('X');
    $body =~ s/"X"/"{\\"greeting\\": \\"caf\xff\xc3 \\\\u0000 cut\\", \\"lone\\": \\"<\\\\udc00>\\", \\"ok\\": true}"/;
    $body =~ s/"role"/"r\x00ole"/;              # a raw NUL outside the content
    my $s = serve({ status => 200, body => $body });
    my $r = check({ IOA_LLM_BASE_URL => $s->{url} });
    is $r->{rc}, 0, 'exit 0: the answer is still usable' or show($r);
    ok utf8::decode(my $copy = $r->{kv}{answer}), 'the answer printed is valid UTF-8';
    is $r->{answer}{greeting}, 'caf?? ', 'bad bytes became "?", a \\u0000 ends the string';
    is $r->{answer}{lone}, '<???>', 'a lone surrogate became "???"';
    is $r->{answer}{ok}, JSON::PP::true, 'the rest is intact';
    stop_server($s);
};

# ------------------------------------------------------------------ retries

subtest '500 then 200: two attempts, the server message logged' => sub {
    my $s = serve({ status => 500, body => '{"error":"model crashed"}' },
                  answer($Hello));
    my $r = check({ IOA_LLM_BASE_URL => $s->{url} });
    is $r->{rc}, 0, 'exit 0' or show($r);
    is $r->{kv}{attempts}, 2, 'two attempts';
    is scalar(() = requests($s)), 2, 'two requests';
    like $r->{err}, qr/warn: llm: check from gpt-4o-mini: attempt 1 of 4 failed: HTTP 500 from \S+: model crashed; again in \d+ ms/,
        'the failed attempt logged with the status and the message';
    like $r->{err}, qr/2 attempts, 10 prompt \+ 5 completion tokens/, 'and the call';
    stop_server($s);
};

subtest 'tokens are summed over attempts, unusable ones included' => sub {
    my $s = serve(answer('I would rather not.', pt => 100, ct => 20),
                  answer($Hello, pt => 110, ct => 9));
    my $r = check({ IOA_LLM_BASE_URL => $s->{url} });
    is $r->{rc}, 0, 'exit 0' or show($r);
    is $r->{kv}{attempts}, 2, 'two attempts';
    is $r->{kv}{tokens}, '210 prompt + 29 completion', 'both counted';
    stop_server($s);
};

subtest '429 with Retry-After: 1 is honoured, the tick keeps going' => sub {
    my $s = serve(error_answer(429, 'Rate limit reached', headers => ['Retry-After: 1']),
                  answer($Hello));
    my $r = check({ IOA_LLM_BASE_URL => $s->{url} });
    is $r->{rc}, 0, 'exit 0' or show($r);
    is $r->{kv}{attempts}, 2, 'two attempts';
    cmp_ok $r->{secs}, '>=', 0.95, 'waited the second the server asked for';
    cmp_ok $r->{secs}, '<', 3, 'not much longer';
    like $r->{err}, qr/HTTP 429 .*Rate limit reached; again in 1000 ms/, 'logged';
    cmp_ok $r->{gap}, '<=', 250, 'a tick at least every 250 ms while waiting';
    stop_server($s);
};

subtest 'cut at max_tokens, then a whole answer' => sub {
    my $s = serve(answer('{"greeting": "hel', finish => 'length'),
                  answer($Hello));
    my $r = check({ IOA_LLM_BASE_URL => $s->{url} });
    is $r->{rc}, 0, 'exit 0' or show($r);
    is $r->{kv}{attempts}, 2, 'two attempts';
    like $r->{err}, qr/model output was cut at max_tokens \(1024, IOA_LLM_MAX_TOKENS\)/,
        'the reason logged';
    stop_server($s);
};

subtest 'never a JSON object: fails after IOA_LLM_MAX_ATTEMPTS' => sub {
    my $s = serve(answer('I am a teapot.'));
    my $r = check({ IOA_LLM_BASE_URL => $s->{url}, IOA_LLM_MAX_ATTEMPTS => 3 });
    is $r->{rc}, 1, 'exit 1' or show($r);
    is $r->{kv}{error}, 'model output is not a JSON object: I am a teapot. (after 3 attempts)',
        'a clear error';
    is $r->{kv}{attempts}, 3, 'three attempts';
    is scalar(() = requests($s)), 3, 'three requests';
    is $r->{kv}{tokens}, '30 prompt + 15 completion', 'tokens of all three';
    like $r->{err}, qr/warn: llm: check from gpt-4o-mini failed: 3 attempts/, 'the failure logged';
    stop_server($s);
};

subtest 'a server that never answers: IOA_LLM_TIMEOUT per attempt' => sub {
    my $s = serve({ hang => 1 });
    my $r = check({ IOA_LLM_BASE_URL => $s->{url}, IOA_LLM_TIMEOUT => 1,
                    IOA_LLM_MAX_ATTEMPTS => 2 });
    is $r->{rc}, 1, 'exit 1' or show($r);
    like $r->{kv}{error}, qr/timed out after \d+ milliseconds.* \(IOA_LLM_TIMEOUT\) \(after 2 attempts\)$/,
        'the error says timeout';
    is $r->{kv}{attempts}, 2, 'retried';
    is scalar(() = requests($s)), 2, 'two requests';
    cmp_ok $r->{secs}, '>=', 2, 'each attempt waited a second';
    cmp_ok $r->{secs}, '<', 4.5, 'and no more (backoff 250-500 ms)';
    cmp_ok $r->{gap}, '<=', 250, 'a tick at least every 250 ms in flight';
    stop_server($s);
};

subtest 'connection refused: retried, then a clear error' => sub {
    my $port = free_port();
    my $r = check({ IOA_LLM_BASE_URL => "http://127.0.0.1:$port/v1",
                    IOA_LLM_MAX_ATTEMPTS => 2 });
    is $r->{rc}, 1, 'exit 1' or show($r);
    like $r->{kv}{error}, qr/^http:\/\/127\.0\.0\.1:$port\/v1\/chat\/completions: Failed to connect.*\(after 2 attempts\)$/,
        'the URL and curl\'s reason';
    is $r->{kv}{attempts}, 2, 'two attempts';
};

# ------------------------------------------------------------------ the server refuses a format

subtest 'response_format refused: json_schema, then json_object, then none' => sub {
    my $s = serve(error_answer(400, "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."),
                  error_answer(400, "'response_format.type' must be 'json_schema' or 'text'"),
                  answer("Here: $Hello"));
    my $r = check({ IOA_LLM_BASE_URL => $s->{url}, IOA_LLM_MAX_ATTEMPTS => 1 });
    is $r->{rc}, 0, 'exit 0, although IOA_LLM_MAX_ATTEMPTS is 1' or show($r);
    is $r->{kv}{attempts}, 3, 'three requests';
    is $r->{kv}{'final format'}, 'none', 'the format is none from now on';
    my @q = requests($s);
    is $q[0]{json}{response_format}{type}, 'json_schema', '1st: json_schema';
    is_deeply $q[1]{json}{response_format}, { type => 'json_object' }, '2nd: json_object';
    like $q[1]{json}{messages}[-1]{content},
        qr/\n\nAnswer with one JSON object matching this JSON Schema, and nothing else: no prose, no code fence\.\nJSON Schema: \{"type":"object"/,
        '2nd: the schema in the last message';
    ok !exists $q[2]{json}{response_format}, '3rd: no response_format';
    like $q[2]{json}{messages}[-1]{content}, qr/JSON Schema: \{/, '3rd: the schema in the prompt';
    is scalar(() = $r->{err} =~ /refused response_format/g), 2, 'one warning per step';
    like $r->{err}, qr/refused response_format json_schema \(HTTP 400: Invalid parameter.*\); using json_object from now on/,
        'the warning says what and why';
    stop_server($s);
};

subtest 'a schema strict mode refuses (OpenAI\'s subset): strict false, the schema kept' => sub {
    my $s = serve(error_answer(400, "Invalid schema for response_format 'check': In context=('properties', 'greeting'), 'maxLength' is not permitted."),
                  answer($Hello), answer($Hello));
    my $r = check({ IOA_LLM_BASE_URL => $s->{url}, IOA_LLM_MAX_ATTEMPTS => 1 });
    is $r->{rc}, 0, 'exit 0, although IOA_LLM_MAX_ATTEMPTS is 1' or show($r);
    my @q = requests($s);
    is scalar @q, 2, 'two requests';
    is $q[0]{json}{response_format}{json_schema}{strict}, JSON::PP::true, '1st: strict';
    is $q[1]{json}{response_format}{type}, 'json_schema', '2nd: still json_schema';
    is $q[1]{json}{response_format}{json_schema}{strict}, JSON::PP::false, '2nd: strict false';
    is_deeply $q[1]{json}{response_format}{json_schema}{schema},
        $q[0]{json}{response_format}{json_schema}{schema}, '2nd: the same schema';
    is $r->{kv}{'final format'}, 'json_schema', 'the format stays json_schema';
    like $r->{err}, qr/refused the schema in strict mode \(HTTP 400: Invalid schema.*\); sending it with strict false/,
        'the warning says what and why';
    stop_server($s);
};

subtest 'max_tokens and temperature refused (OpenAI reasoning models)' => sub {
    my $s = serve(error_answer(400, "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."),
                  error_answer(400, "Unsupported value: 'temperature' does not support 0.2 with this model. Only the default (1) value is supported."),
                  answer($Hello));
    my $r = check({ IOA_LLM_BASE_URL => $s->{url}, IOA_LLM_MAX_ATTEMPTS => 1 });
    is $r->{rc}, 0, 'exit 0' or show($r);
    my @q = requests($s);
    is scalar @q, 3, 'three requests';
    ok !exists $q[1]{json}{max_tokens} && $q[1]{json}{max_completion_tokens} == 1024,
        '2nd: max_completion_tokens instead of max_tokens';
    ok !exists $q[2]{json}{temperature}, '3rd: no temperature';
    is $q[2]{json}{response_format}{type}, 'json_schema', 'the format untouched';
    stop_server($s);
};

# ------------------------------------------------------------------ no retry

subtest '401: fails at once with the server\'s message' => sub {
    my $s = serve(error_answer(401, 'Incorrect API key provided: sk-bad.'));
    my $r = check({ IOA_LLM_BASE_URL => $s->{url}, IOA_LLM_API_KEY => 'sk-bad' });
    is $r->{rc}, 1, 'exit 1' or show($r);
    is $r->{kv}{error}, "HTTP 401 from $s->{url}/chat/completions: Incorrect API key provided: sk-bad.",
        'status, URL and message';
    is $r->{kv}{attempts}, 1, 'one attempt';
    is scalar(() = requests($s)), 1, 'one request';
    cmp_ok $r->{secs}, '<', 1, 'no backoff';
    stop_server($s);
};

subtest '404 for an unknown model (vLLM\'s error shape): no retry' => sub {
    my $s = serve({ status => 404, body => '{"object":"error","message":"The model `gpt-4o-mini` does not exist.","type":"NotFoundError","code":404}' });
    my $r = check({ IOA_LLM_BASE_URL => $s->{url} });
    is $r->{rc}, 1, 'exit 1' or show($r);
    like $r->{kv}{error}, qr/^HTTP 404 from \S+: The model `gpt-4o-mini` does not exist\.$/, 'the message';
    is $r->{kv}{attempts}, 1, 'one attempt';
    stop_server($s);
};

subtest 'a redirect is not followed: the base URL is wrong' => sub {
    my $s = serve({ status => 301, headers => ['Location: https://example.com/v1/chat/completions'],
                    body => '' });
    my $r = check({ IOA_LLM_BASE_URL => $s->{url} });
    is $r->{rc}, 1, 'exit 1' or show($r);
    like $r->{kv}{error}, qr/^HTTP 301 from \S+: \(no body\) \(redirected to https:\/\/example\.com\/v1\/chat\/completions: check IOA_LLM_BASE_URL\)$/,
        'says where to';
    is $r->{kv}{attempts}, 1, 'one attempt';
    stop_server($s);
};

subtest 'a huge answer is an error, not the worker\'s memory' => sub {
    my $s = serve({ huge => 5 * 1024 * 1024 });
    my $r = check({ IOA_LLM_BASE_URL => $s->{url} });
    is $r->{rc}, 1, 'exit 1' or show($r);
    is $r->{kv}{error}, "the answer from $s->{url}/chat/completions is larger than 4 MiB",
        'the reason';
    is $r->{kv}{attempts}, 1, 'one attempt';
    stop_server($s);
};

# ------------------------------------------------------------------ hostile output

subtest 'an HTML page, nesting bombs, no choices, null content: errors' => sub {
    for (['an HTML page', { status => 200, body => "<html><body>It works!</body></html>\n" },
          qr/^HTTP 200 from \S+ is not a JSON completion: <html><body>It works!<\/body><\/html>$/],
         ['a nesting bomb', { status => 200, body => '[' x 200000 },
          qr/^HTTP 200 from \S+ is not a JSON completion: \[{200}\.\.\.$/],
         ['no choices', { status => 200, body => '{"choices":[],"error":{"message":"overloaded"}}' },
          qr/^the answer from \S+ has no choices\[0\]\.message: overloaded$/],
         ['a bomb in the content', answer('{"a":' . ('[' x 100000) . ']}'),
          qr/^model output is not a JSON object: \{"a":\[+\.\.\.$/],
         ['null content', answer(undef),
          qr/^model output is empty \(finish_reason stop\)$/])
    {
        my ($what, $act, $error) = @$_;
        my $s = serve($act);
        my $r = check({ IOA_LLM_BASE_URL => $s->{url}, IOA_LLM_MAX_ATTEMPTS => 1 });
        is $r->{rc}, 1, "$what: exit 1, not a crash" or show($r);
        like $r->{kv}{error}, $error, "$what: the error says what came";
        stop_server($s);
    }
};

# ------------------------------------------------------------------ the tick

subtest 'the tick stops a call in flight at once' => sub {
    my $s = serve({ hang => 1 });
    my $r = check({ IOA_LLM_BASE_URL => $s->{url}, IOA_LLM_TIMEOUT => 30 },
                  '--abort-after', 500);
    is $r->{rc}, 4, 'exit 4: stopped' or show($r);
    cmp_ok $r->{secs}, '<', 1.5, 'within a tick of the stop';
    is $r->{kv}{error}, 'stopped', 'the error says stopped';
    like $r->{err}, qr/stopped during attempt 1/, 'logged';
    stop_server($s);
};

subtest 'SIGTERM: the tick says stop, the call ends at once' => sub {
    my $s = serve({ hang => 1 });
    local $TermAfter = 0.5;
    my $r = check({ IOA_LLM_BASE_URL => $s->{url}, IOA_LLM_TIMEOUT => 30 });
    is $r->{rc}, 4, 'exit 4: stopped' or show($r);
    cmp_ok $r->{secs}, '<', 1, 'within a tick of the signal';
    stop_server($s);
};

subtest 'the tick stops a backoff at once' => sub {
    my $s = serve(error_answer(503, 'busy', headers => ['Retry-After: 20']));
    my $r = check({ IOA_LLM_BASE_URL => $s->{url} }, '--abort-after', 700);
    is $r->{rc}, 4, 'exit 4: stopped' or show($r);
    cmp_ok $r->{secs}, '<', 1.5, 'not after the 20 s the server asked for';
    is scalar(() = requests($s)), 1, 'one request';
    stop_server($s);
};

done_testing();
