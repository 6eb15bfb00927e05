# t/001-test-style.t -- the test files read as the specification: every
# block's title says in at most 80 characters what it proves (the longer
# account goes in the block's description, the lines between the title
# and its first section, which Test::Base keeps as $block->description),
# and no block carries a request whose only job is to start nginx (the
# harness starts the hub and waits for it; a scenario is the whole block,
# see t/lib/IoaTest.pm).  Reads the files only: no nginx, no Redis.
#
#   prove t/001-test-style.t

use strict;
use warnings;

use File::Basename ();
use Test::More;

my $MAX_TITLE = 80;
my $dir = File::Basename::dirname(__FILE__);
my @files = sort glob "$dir/*.t";
ok @files > 10, scalar(@files) . ' test files';

my ($blocks, @long, @placeholder, @dup) = (0);
for my $f (@files) {
    open my $fh, '<', $f or die "$f: $!\n";
    local $/;
    my $src = <$fh>;
    my (undef, $data) = split /^__DATA__\n/m, $src, 2;
    next unless defined $data;
    my %seen;
    for my $block (split /^(?==== )/m, $data) {
        next unless $block =~ /\A=== (.*)\n/;
        my $name = $1;
        $blocks++;
        my ($title) = $name =~ /^TEST \S+: (.*)$/;
        $title //= $name;
        push @long, sprintf('%s %s (%d)', File::Basename::basename($f), $name, length $title)
            if length $title > $MAX_TITLE;
        push @dup, "$f: $name" if $seen{$name}++;
        # a scenario block whose request only brought nginx up
        push @placeholder, "$f: $name"
            if $block =~ /^--- ioa_scenario$/m
               && $block =~ /^--- request\n\s*GET \/health_check\s*\n(?:--- (?:error_code_like: \S+|error_code: 200)\n)?--- ioa_scenario/m;
    }
}
ok $blocks > 100, "$blocks blocks";
is scalar @long, 0, "every title says what its block proves in at most $MAX_TITLE characters"
    or diag join "\n", @long;
is scalar @placeholder, 0, 'no scenario block has a request that only starts nginx'
    or diag join "\n", @placeholder;
is scalar @dup, 0, 'no two blocks of a file share a name' or diag join "\n", @dup;

done_testing;
