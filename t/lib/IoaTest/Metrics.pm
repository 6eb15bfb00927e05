# IoaTest::Metrics -- reads /metrics the way Prometheus does.
#
#   use IoaTest::Metrics;     # exports scrape
#   my ($v, $types, $text) = scrape($ctx, port => $port, path => '/metrics');
#   $v->{ioa_envelopes_posted_total}{'transport=websocket'}   # a value
#   $v->{ioa_redis_up}{'node=127.0.0.1:6379'}
#   $types->{ioa_envelopes_posted}                            # 'counter'
#
# The text goes through the Prometheus project's own parser
# (t/lib/prom-parse.py, Debian's python3-prometheus-client); scrape() dies
# with the text if the parser refuses it, so a test fails on anything
# Prometheus would not take.  Samples are keyed by their labels, sorted and
# joined as "k=v,k=v" ('' for none).  Families are named as the parser
# names them: a counter without its _total.

package IoaTest::Metrics;

use strict;
use warnings;

use Exporter ();
use JSON::PP ();

our @ISA = ('Exporter');
our @EXPORT = qw(scrape);

sub scrape {
    my ($ctx, %o) = @_;
    my $res = $ctx->http(GET => $o{path} // '/metrics',
                         ($o{port} ? (port => $o{port}) : ()));
    die "GET /metrics: " . $res->status_line . "\n" unless $res->code == 200;
    my $text = $res->content;
    my $file = $ctx->servroot . '/metrics.txt';
    open my $fh, '>', $file or die "$file: $!\n";
    print $fh $text;
    close $fh;
    my $json = `/usr/bin/python3 t/lib/prom-parse.py < $file`;
    die "prom-parse.py refused:\n$text\n" if $?;
    my $doc = JSON::PP->new->decode($json);
    my %v;
    for my $s (@{ $doc->{samples} }) {
        my ($n, $l, $x) = @$s;
        $v{$n}{ join ',', map { "$_=$l->{$_}" } sort keys %$l } = $x;
    }
    return (\%v, $doc->{types}, $text);
}

1;
