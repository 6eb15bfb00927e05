# IoaTest::Discovery -- what the discovery tests (t/230, t/235) share.
#
#   use IoaTest::Discovery;   # exports dpost answered_by index_ready wait_for
#   my ($code, $doc, $raw, $headers) = dpost($port, '/retrieve_assistant',
#                                            { capabilities => ['x'] });
#   answered_by($headers)     # 'index' or 'redis' (X-Ioa-Discovery)
#   ok index_ready($port), 'the index is built';
#   ok wait_for('C to see it', 2, sub { ... }), 'C sees it';  # diag on timeout
#
# dpost() goes through HTTP::Tiny rather than $ctx->http so that it can
# reach any instance a scenario started; $headers has lower-case names.

package IoaTest::Discovery;

use strict;
use warnings;

use Exporter ();
use HTTP::Tiny ();
use JSON::PP ();
use IoaTest::Api qw(wait_until);
use Test::More ();

our @ISA = ('Exporter');
our @EXPORT = qw(dpost answered_by index_ready wait_for);

my $J = JSON::PP->new->canonical;

sub dpost {
    my ($port, $path, $body) = @_;
    my $r = HTTP::Tiny->new(timeout => 10)->post("http://127.0.0.1:$port$path",
        { headers => { 'Content-Type' => 'application/json' },
          content => ref $body ? $J->encode($body) : $body });
    return ($r->{status}, eval { $J->decode($r->{content}) }, $r->{content},
            $r->{headers});
}

sub answered_by { return $_[0]{'x-ioa-discovery'} // '' }

# True once the instance on $port answers discovery from its index: it has
# connected to Redis and its first refresh has ended.  An instance built
# with sanitizers may take seconds to get there, hence the generous default.
sub index_ready {
    my ($port, $secs) = @_;
    return wait_until(sub {
        answered_by((dpost($port, '/retrieve_assistant',
                           { capabilities => ['x'] }))[3]) eq 'index' },
        $secs // 15);
}

# wait_until with a name for the diagnostic when it times out.
sub wait_for {
    my ($what, $secs, $cond) = @_;
    return 1 if wait_until($cond, $secs);
    Test::More::diag("timed out waiting for $what");
    return 0;
}

1;
