# IoaTest::ScriptedLLM -- an OpenAI-compatible chat completions server whose
# answers the test writes, for exact LLM decisions (t/lib/IoaTest/Llama.pm
# runs the real llama-server, whose answers are noise).
#
#   use IoaTest::ScriptedLLM;
#   my $llm = scripted_llm(sub {
#       my ($req) = @_;            # the request body, decoded
#       return '{"decision":"conclude",...}';   # the model's content
#   });
#   ... IOA_LLM_BASE_URL => $llm->{url} ...
#   my @reqs = scripted_requests($llm);   # every request body, decoded
#
# The server is a forked child serving one request per connection; the
# responder runs there, so it sees the test's variables as they were when
# the server started.  A responder that returns a hash ref sends it as the
# HTTP answer ({status, body}); {hang => 1} never answers (the connection
# is held open, and the next requests are served as usual: a model that
# hangs on one call).  The server is killed when the test ends.

package IoaTest::ScriptedLLM;

use strict;
use warnings;

use Exporter ();
use File::Temp ();
use IO::Select ();
use IO::Socket::INET ();
use JSON::PP ();
use POSIX ();

our @ISA = ('Exporter');
our @EXPORT = qw(scripted_llm scripted_requests);

my $Json = JSON::PP->new->utf8->canonical;
my %Pids;

END {
    local $?;
    for my $pid (keys %Pids) {
        kill 'KILL', $pid;
        waitpid $pid, 0;
    }
}

sub scripted_llm {
    my ($respond) = @_;
    my $srv = IO::Socket::INET->new(Listen => 32, LocalAddr => '127.0.0.1',
                                    LocalPort => 0, Proto => 'tcp',
                                    ReuseAddr => 1) or die "listen: $!\n";
    my $dir = File::Temp::tempdir(CLEANUP => 1);
    my $port = $srv->sockport;
    my $pid = fork // die "fork: $!\n";

    if ($pid == 0) {
        $SIG{PIPE} = 'IGNORE';
        my $n = 0;
        my @hung;
        while (my $c = $srv->accept) {
            my $body = _read_body($c);
            next unless defined $body;
            open my $f, '>', sprintf('%s/req-%04d', $dir, ++$n) or die $!;
            binmode $f;
            print $f $body;
            close $f;
            my $req = eval { $Json->decode($body) } // {};
            my $out = eval { $respond->($req) } // '{}';
            if (ref $out && $out->{hang}) {
                push @hung, $c;         # held open, never answered
                next;
            }
            my ($status, $text) = ref $out ? ($out->{status}, $out->{body})
                                           : (200, _completion($out));
            my $head = "HTTP/1.1 $status X\r\nContent-Type: application/json"
                     . "\r\nContent-Length: " . length($text)
                     . "\r\nConnection: close\r\n\r\n";
            syswrite $c, $head . $text;
            close $c;
        }
        POSIX::_exit(0);
    }

    close $srv;
    $Pids{$pid} = 1;
    return { pid => $pid, dir => $dir,
             url => "http://127.0.0.1:$port/v1" };
}

sub scripted_requests {
    my ($llm) = @_;
    my @r;
    for my $file (sort glob "$llm->{dir}/req-*") {
        open my $f, '<', $file or next;
        binmode $f;
        local $/;
        my $body = <$f>;
        push @r, eval { $Json->decode($body) } // {};
    }
    return @r;
}

# a chat completion as OpenAI writes it, with the content the test chose
sub _completion {
    my ($content) = @_;
    return $Json->encode({
        id => 'chatcmpl-scripted', object => 'chat.completion', model => 'm',
        choices => [{ index => 0, finish_reason => 'stop',
                      message => { role => 'assistant', content => $content } }],
        usage => { prompt_tokens => 10, completion_tokens => 5,
                   total_tokens => 15 },
    });
}

sub _read_body {
    my ($c) = @_;
    my $sel = IO::Select->new($c);
    my ($buf, $need) = ('', undef);
    while (1) {
        if (!defined $need && $buf =~ /\r\n\r\n/) {
            my ($len) = $buf =~ /^Content-Length:\s*(\d+)/mi;
            $need = index($buf, "\r\n\r\n") + 4 + ($len // 0);
        }
        return substr($buf, index($buf, "\r\n\r\n") + 4)
            if defined $need && length $buf >= $need;
        return undef unless $sel->can_read(10);
        my $n = sysread $c, $buf, 65536, length $buf;
        return undef unless $n;
    }
}

1;
