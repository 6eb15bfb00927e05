# IoaTest::Api -- JSON-over-HTTP helpers for ioa scenarios.
#
#   use IoaTest::Api;        # exports api jdec jenc wait_until curl_json
#                            # hub_ready
#   my ($code, $data, $res) = api($ctx, POST => '/register',
#                                 {name => 'Alice', ...});
#   # a hashref/arrayref body is JSON-encoded, a string is sent as is;
#   # $data is the decoded JSON answer (undef if it is not JSON)
#   ok wait_until(sub { ... }, 3), 'happened within 3 s';
#   my ($code, $data, $headers) = curl_json("http://127.0.0.1:$p/x",
#       method => 'POST', body => {...}, args => ['--http2-prior-knowledge']);
#
# JSON is UTF-8 bytes on the wire; decoded values are Perl characters.
# Booleans decode to JSON::PP::Boolean (true == 1, false == 0).

package IoaTest::Api;

use strict;
use warnings;

use Exporter ();
use File::Temp ();
use IO::Socket::INET ();
use JSON::PP ();
use Time::HiRes qw(sleep time);

our @ISA = ('Exporter');
our @EXPORT = qw(api jdec jenc wait_until curl_json hub_ready);

my $J = JSON::PP->new->utf8->canonical->allow_nonref;

sub jenc { $J->encode($_[0]) }

sub jdec {
    my $s = shift;
    return undef unless defined $s && length $s;
    my $v = eval { $J->decode($s) };
    return $v;
}

sub api {
    my ($ctx, $method, $path, $body, %opt) = @_;
    $body = jenc($body) if ref $body;
    my $res = $ctx->http($method, $path, body => $body // '', %opt);
    return ($res->code, jdec($res->content), $res);
}

# Polls $cond every 50 ms; true as soon as it is, false after $secs.
sub wait_until {
    my ($cond, $secs) = @_;
    my $deadline = time + ($secs // 3);
    while (1) {
        my $v = $cond->();
        return $v if $v;
        return 0 if time > $deadline;
        sleep 0.05;
    }
}

# One request with curl (e.g. over HTTP/2); returns (status, decoded JSON,
# {lower-case header => value}, raw body).
sub curl_json {
    my ($url, %opt) = @_;
    my @cmd = ('curl', '-sS', '-i', '--max-time', $opt{max_time} // 5,
               @{ $opt{args} || [] });
    push @cmd, '-X', $opt{method} if $opt{method};
    my @h = @{ $opt{headers} || [] };
    push @cmd, '-H', "$h[$_]: $h[$_ + 1]" for grep { $_ % 2 == 0 } 0 .. $#h;
    my $tmp;
    if (defined $opt{body}) {
        $tmp = File::Temp->new;
        binmode $tmp;
        print {$tmp} ref $opt{body} ? jenc($opt{body}) : $opt{body};
        close $tmp;
        push @cmd, '--data-binary', '@' . $tmp->filename;
    }
    push @cmd, $url;
    open my $fh, '-|', @cmd or die "cannot run curl: $!\n";
    binmode $fh;
    local $/;
    my $out = <$fh> // '';
    close $fh;
    # skip interim heads (100 Continue)
    my ($head, $body);
    while (1) {
        ($head, $body) = split /\r\n\r\n/, $out, 2;
        last unless defined $head && $head =~ m{^HTTP/\S+ 1\d\d} && defined $body;
        $out = $body;
    }
    my ($code) = ($head // '') =~ m{^HTTP/\S+ (\d{3})};
    my %h;
    for (split /\r\n/, $head // '') {
        my ($k, $v) = /^([^:]+):\s*(.*?)\s*$/ or next;
        $h{ lc $k } = $v;
    }
    return ($code, jdec($body), \%h, $body);
}

# hub_ready(): Redis emptied, and the runner's hub ready (every worker
# connected, IoaTest::runner_ready), for a block's init.  The runner's
# start hook has waited already; this says so again after the flush, and
# fails the block with what is missing when it is not.  (An argument, once
# the path polled, is accepted and ignored.)
sub hub_ready {
    IoaTest::redis_flush();
    my ($ok, $why) = IoaTest::runner_ready();
    Test::More::diag("hub_ready: $why") unless $ok;
    return $ok;
}

1;
