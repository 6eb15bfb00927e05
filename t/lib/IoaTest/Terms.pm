# IoaTest::Terms -- discovery terms for tests.
#
# register.lua and retrieve.lua take terms, not text: the caller tokenizes
# with lib/ioa_tokenize.c, the one tokenizer.  Tests that run the scripts
# straight in Redis get their terms from that same C file, through
# build/ioa-terms (scripts/ioa-terms.c, built by `make`), so they never carry
# a tokenizer of their own that could drift from the hub's.
#
#   use IoaTest::Terms qw(terms doc_terms tokens $TermsBin);
#   terms($text)        the terms of $text from the C tokenizer, joined by
#                       single spaces: what retrieve.lua takes for a query
#   doc_terms($desc, @tags)  the same for a document (desc, then each tag):
#                       what register.lua takes
#   tokens($text)       the documented rules written here in Perl on their
#                       own, as a list: the reference the C tokenizer is
#                       checked against (t/031-tokenizer.t) and the BM25
#                       reference of t/030-registry.t tokenizes with
#   @Stopwords          the words tokens() drops
#
# IOA_TERMS_BIN runs another build of ioa-terms.  One ioa-terms process
# (-0: NUL-terminated texts in, one line out per text, flushed) serves a whole
# test file; it is read with sysread and a deadline, so a tokenizer that hangs
# fails the test instead of hanging it.

package IoaTest::Terms;

use strict;
use warnings;

use Cwd ();
use Exporter ();
use File::Basename ();
use IO::Select ();
use IPC::Open2 ();

our @ISA = ('Exporter');
our @EXPORT_OK = qw(terms doc_terms tokens $TermsBin @Stopwords);

our $TermsBin = $ENV{IOA_TERMS_BIN}
    || Cwd::abs_path(File::Basename::dirname(__FILE__) . '/../../..')
       . '/build/ioa-terms';

my ($pid, $to, $from, $buf);

END {
    if ($pid) {
        local $?;
        close $to;
        waitpid $pid, 0;
    }
}

sub terms {
    my ($text) = @_;
    die "IoaTest::Terms: a text with a NUL byte cannot be sent\n"
        if $text =~ /\0/;
    if (!$pid) {
        die "IoaTest::Terms: $TermsBin is not built (make)\n" unless -x $TermsBin;
        $pid = IPC::Open2::open2($from, $to, $TermsBin, '-0');
        binmode $_ for $from, $to;
        $buf = '';
    }
    my $out = "$text\0";
    local $SIG{PIPE} = 'IGNORE';
    my $off = 0;
    while ($off < length $out) {
        my $n = syswrite $to, $out, length($out) - $off, $off;
        die "IoaTest::Terms: write to ioa-terms: $!\n" unless defined $n;
        $off += $n;
    }
    my $sel = IO::Select->new($from);
    while ((my $nl = index $buf, "\n") < 0) {
        $sel->can_read(10) or die "IoaTest::Terms: ioa-terms did not answer\n";
        my $n = sysread $from, $buf, 65536, length $buf;
        die "IoaTest::Terms: ioa-terms ended\n" unless $n;
    }
    my $nl = index $buf, "\n";
    my $line = substr $buf, 0, $nl;
    substr($buf, 0, $nl + 1) = '';
    return $line;
}

# What /register does with a description and its tags: each text's terms
# after the previous ones (a text without terms adds no space).
sub doc_terms {
    return join ' ', grep { length } map { terms($_) } @_;
}

# ---------------------------------------------------------- the rules in Perl
#
# Written from the rules as documented (ioa_tokenize.c's header), not from
# its code: words are runs of ASCII letters and digits and bytes >= 0x80;
# ASCII is lowercased, other bytes kept; words of one byte and stopwords are
# dropped; then "ies" becomes "y" in a word of more than 4 bytes, or else a
# trailing "s" not after another "s" goes in a word of more than 3 bytes.

our @Stopwords = qw(the a an and or of to in on for with is are be by at as
  it its that this these those from can could i you me my your we our us he
  she they them their his her was were been has have had do does not no but
  if so than then there what which who how will would should may into about
  all any);
my %STOP = map { $_ => 1 } @Stopwords;

sub tokens {
    my @out;
    for my $w ($_[0] =~ /([A-Za-z0-9\x80-\xff]+)/g) {
        $w =~ tr/A-Z/a-z/;
        next if length $w < 2 || $STOP{$w};
        if (length $w > 4 && $w =~ /ies\z/) { $w =~ s/ies\z/y/ }
        elsif (length $w > 3 && $w =~ /[^s]s\z/) { chop $w }
        push @out, $w;
    }
    return @out;
}

1;
