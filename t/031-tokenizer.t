# t/031-tokenizer.t -- the discovery tokenizer, lib/ioa_tokenize.c,
# the one definition of a term (the hub's /register and /retrieve_assistant,
# the worker's queries; the Redis scripts take its terms as they are).
#
#   make && prove -It/lib t/031-tokenizer.t
#
# The C file is run through build/ioa-terms (scripts/ioa-terms.c) and checked
# against the documented rules written in Perl on their own
# (IoaTest::Terms::tokens): lowercase ASCII; a word is a run of [A-Za-z0-9]
# and bytes >= 0x80; words of one byte and stopwords are dropped; "ies" ->
# "y" in a word of more than 4 bytes, else a trailing "s" (not "ss") goes in
# a word of more than 3 bytes.  First fixed cases whose expected terms are
# written out here, then a few thousand random strings built to hit every
# rule's edges, then documents of several texts (a description and its
# tags) joined as /register joins them.  Plain Test::More: no nginx, no
# Redis.

use strict;
use warnings;

use Test::More;
use FindBin;

use lib "$FindBin::Bin/lib";
use IoaTest::Terms qw(terms tokens $TermsBin @Stopwords);

plan skip_all => "$TermsBin is not built; run `make` first" unless -x $TermsBin;

# ------------------------------------------------------------- fixed cases
#
# [text, its terms as the scripts get them, what the case shows]

my @cases = (
    [ 'Translates documents between English and French',
      'translate document between english french', 'a description' ],
    [ 'queries', 'query', '"ies" -> "y" beyond 4 bytes' ],
    [ 'Skies', 'sky', '... at 5 bytes' ],
    [ 'ties', 'tie', '... not at 4 bytes: the "s" rule then' ],
    [ 'ies', 'ies', '3 bytes: neither rule' ],
    [ 'APIs', 'api', 'uppercase, plural' ],
    [ 'class', 'class', '"ss" stays' ],
    [ 'bus', 'bus', 'a 3-byte word keeps its "s"' ],
    [ 'buses', 'buse', 'only one "s" goes' ],
    [ '100s 2024', '100 2024', 'digits are word bytes' ],
    [ 'The AND of, to; WITH', '', 'stopwords only, any case' ],
    [ join(' ', @Stopwords), '', "every stopword (@{[ scalar @Stopwords ]})" ],
    [ 'SHOULD shoulds', 'should', 'the longest stopword, and a longer word' ],
    [ 'ours thes', 'our the', 'the stopword test sees the word before folding' ],
    [ "it's a b x1", 'x1', 'one-byte words dropped ("s", "a", "b")' ],
    [ 'C++/Rust, e-mail; foo_bar R2-D2!', 'rust mail foo bar r2 d2', 'punctuation separates' ],
    [ "line1\nline2\ttab\r\n", 'line1 line2 tab', 'control bytes separate' ],
    [ "Caf\xc3\xa9? na\xc3\xafve", "caf\xc3\xa9 na\xc3\xafve", 'UTF-8 words kept whole' ],
    [ "\xc3\x9cbersetzung", "\xc3\x9cbersetzung", 'only ASCII is lowercased' ],
    [ "caf\xc3\xa9s \xc3\xa9s", "caf\xc3\xa9 \xc3\xa9s", 'plural folding counts bytes' ],
    [ "\xe9 \xe9t\xe9", "\xe9t\xe9", 'one high byte is a one-byte word; any byte >= 0x80 is a word byte' ],
    [ "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xa7\xe7\xbf\xbb\xe8\xa8\xb3",
      "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xa7\xe7\xbf\xbb\xe8\xa8\xb3", 'a CJK run is one word' ],
    [ '', '', 'an empty text' ],
    [ ' , . ', '', 'separators only' ],
);

for my $c (@cases) {
    my ($text, $want, $what) = @$c;
    is(terms($text), $want, "C: $what");
    is(join(' ', tokens($text)), $want, "Perl rules: $what");
}

# ------------------------------------------------------------ random texts
#
# Pieces chosen for the rules' edges: stopwords in any case, endings "s",
# "ss", "ies" on stems of 0-4 bytes, single bytes, UTF-8 and stray high
# bytes, punctuation and control bytes (NUL aside: ioa-terms reads
# NUL-terminated texts).  Our own LCG, so every run and every perl sees the
# same strings.

my $rng = 20240613;
my $rand = sub { $rng = ($rng * 1103515245 + 12345) % 2**31; return int($rng / 2**31 * $_[0]) };
my @stem = ('', qw(a b x Q z9 ab api Tie bu cla boss quer SERI 7));
my @end = ('', qw(s S ss ies IES es y));
my @glue = (' ', ',', '.', '-', '_', "'", '/', "\n", "\t", "\x01", "\x7f", '!', '  ');
my @high = ("\xc3\xa9", "\xc3\x9c", "\xe6\x97\xa5", "\x80", "\xff", "\xc3");

my $piece = sub {
    my $k = $rand->(10);
    if ($k < 2) {      # a stopword, some letters uppercase
        (my $w = $Stopwords[$rand->(scalar @Stopwords)]) =~ s/(.)/$rand->(4) ? $1 : uc $1/ge;
        return $w;
    }
    return $stem[$rand->(scalar @stem)] . $end[$rand->(scalar @end)] if $k < 6;
    return $high[$rand->(scalar @high)] . ($rand->(2) ? $end[$rand->(scalar @end)] : '') if $k < 8;
    return chr(1 + $rand->(255));
};

my ($n, $bad, $nonempty, @diag) = (3000, 0, 0);
for (1 .. $n) {
    my $text = '';
    $text .= $piece->() . ($rand->(3) ? $glue[$rand->(scalar @glue)] : '') for 1 .. $rand->(12);
    my $want = join ' ', tokens($text);
    my $got = terms($text);
    $nonempty++ if length $want;
    next if $got eq $want;
    $bad++;
    push @diag, sprintf("text %s\n  C    %s\n  Perl %s", map { unpack 'H*', $_ } $text, $got, $want)
        if @diag < 5;
}
ok($nonempty > $n / 2, "random texts: $nonempty of $n have terms");
is($bad, 0, "random texts: the C tokenizer gives the Perl rules' terms on all $n")
    or diag join "\n", @diag;

# --------------------------------------------------- a document of several texts
#
# /register indexes a description and then each tag in one argument
# (ioa_token_join() on one buffer of the texts' lengths plus one each);
# ioa-terms -- DESC TAG... does the same with an exact-size buffer.

sub doc {
    open my $fh, '-|', $TermsBin, '--', @_ or die "$TermsBin: $!";
    binmode $fh;
    local $/;
    my $out = <$fh> // '';
    close $fh or die "$TermsBin -- ...: exit status $?\n";
    $out =~ s/\n\z//;
    return $out;
}

is(doc('Translates documents', 'translation', 'French!'),
   'translate document translation french', 'a document: desc, then each tag');
is(doc('the', 'ab', '', 'a', 'cd'), 'ab cd', 'texts without terms add no space');
is(doc(), '', 'no text: no term');

($bad, @diag) = (0);
for (1 .. 200) {
    my @texts;
    for (0 .. $rand->(4)) {
        my $t = '';
        $t .= $piece->() . $glue[$rand->(scalar @glue)] for 0 .. $rand->(5);
        $t =~ tr/\0//d;
        push @texts, $t;
    }
    my $want = join ' ', map { tokens($_) } @texts;
    my $got = doc(@texts);
    next if $got eq $want;
    $bad++;
    push @diag, join(' | ', map { unpack 'H*', $_ } @texts) . "\n  C    $got\n  Perl $want" if @diag < 5;
}
is($bad, 0, 'random documents of 1-5 texts: the same terms as each text in turn')
    or diag join "\n", @diag;

done_testing();
