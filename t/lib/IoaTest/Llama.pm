# IoaTest::Llama -- a real OpenAI-compatible LLM server for the tests.
#
#   use IoaTest::Llama;
#   my $base = llama_server($logfile);   # "http://127.0.0.1:<port>/v1"
#
# llama.cpp's llama-server, built once from the llama.cpp source carried in
# the node-llama-cpp npm package and cached outside the repo by
# scripts/llm/build-llama-server.sh (IOA_LLAMA_SERVER names another binary),
# serving a tiny random-weight model that scripts/llm/tiny-gguf.py writes
# into a temp directory.  Random weights answer noise, but noise of the
# requested JSON Schema: the LLM path is exercised end to end, and the
# answers fuzz whatever consumes them.  The server is stopped (SIGTERM, by
# PID) when the test process ends.

package IoaTest::Llama;

use strict;
use warnings;

use Exporter ();
use Cwd ();
use File::Basename ();
use File::Temp ();
use HTTP::Tiny ();
use IO::Socket::INET ();
use POSIX ();
use Time::HiRes qw(sleep time);

use IoaTest::Port ();

our @ISA = ('Exporter');
our @EXPORT = qw(llama_server llama_stop);

my $Repo = File::Basename::dirname(File::Basename::dirname(
    File::Basename::dirname(File::Basename::dirname(
        Cwd::abs_path(__FILE__)))));
my @Pids;
my $Last;

# llama_server($log, %opt): embeddings => 1 serves /v1/embeddings (mean
# pooling) instead of chat; port => N listens there (a test that stops the
# server and brings it back on the same address); returns the base URL.
sub llama_server {
    my ($log, %opt) = @_;
    my $bin = $ENV{IOA_LLAMA_SERVER};
    ($bin) = (`bash $Repo/scripts/llm/build-llama-server.sh` =~ /(\S+)\s*\z/)
        unless $bin;
    die "no llama-server (see scripts/llm/build-llama-server.sh)\n"
        unless $bin && -x $bin;
    my $dir = File::Temp::tempdir(CLEANUP => 1);
    my $out = `/usr/bin/python3 $Repo/scripts/llm/tiny-gguf.py --seed 7 $dir/tiny.gguf 2>&1`;
    $? == 0 or die "tiny-gguf.py failed: $out\n";
    my $port = $opt{port} // IoaTest::Port::free_port();
    my @extra = $opt{embeddings} ? ('--embeddings', '--pooling', 'mean') : ();
    my $pid = fork // die "fork: $!\n";
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>>', $log // '/dev/null';
        open STDERR, '>&', \*STDOUT;
        exec $bin, '-m', "$dir/tiny.gguf", '--host', '127.0.0.1',
             # one thread, no polling: with two, ggml's threads spin at
             # their barriers, and on a loaded machine (the suite runs
             # files side by side) a test's server burned three times the
             # CPU it needs; the model is tiny, one thread is plenty
             '--port', $port, '-c', 16384, '-np', 2, '-t', 1, '-tb', 1,
             '--poll', 0, '--no-webui',
             @extra
            or POSIX::_exit(127);
    }
    push @Pids, $pid;
    $Last = $pid;
    my $deadline = time + 60;
    while (time < $deadline) {
        my $r = HTTP::Tiny->new(timeout => 1)->get("http://127.0.0.1:$port/health");
        return "http://127.0.0.1:$port/v1" if $r->{status} == 200;
        sleep 0.1;
    }
    die "llama-server did not come up on port $port\n";
}

# stops the server llama_server() started last
sub llama_stop {
    my $pid = $Last // return;
    undef $Last;
    kill 'TERM', $pid;
    waitpid $pid, 0;
    @Pids = grep { $_ != $pid } @Pids;
}

END {
    for my $pid (@Pids) {
        kill 'TERM', $pid;
        waitpid $pid, 0;
    }
}

1;
