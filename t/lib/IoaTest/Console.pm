# IoaTest::Console -- the web console (console/) as the browser tests
# serve it.
#
#   use IoaTest::Console;   # exports console_conf
#   $ENV{TEST_NGINX_CONSOLE_CONF} = console_conf($scratch_dir);
#   # then, in a server block:  include $TEST_NGINX_CONSOLE_CONF;
#
# console_conf() writes the console's locations exactly as conf.d/ioa.conf
# ships them, with the alias pointed at this checkout's console/ (as
# `make run` does), so the tests serve what operators install.

package IoaTest::Console;

use strict;
use warnings;

use Cwd ();
use Exporter ();
use File::Basename ();

our @ISA = ('Exporter');
our @EXPORT = qw(console_conf);

sub console_conf {
    my ($dir) = @_;
    my $repo = Cwd::abs_path(File::Basename::dirname(__FILE__) . '/../../..');
    open my $fh, '<', "$repo/conf.d/ioa.conf" or die "conf.d/ioa.conf: $!\n";
    my $conf = do { local $/; <$fh> };
    my ($loc) = $conf =~ /^(    location = \/console \{.*?^    location \/console\/ \{.*?^    \}\n)/ms
        or die "conf.d/ioa.conf has no console locations\n";
    $loc =~ s{alias /usr/share/ioa/console/;}{alias $repo/console/;} or die "no alias\n";
    my $file = "$dir/console.conf";
    open my $out, '>', $file or die "$file: $!\n";
    print {$out} $loc;
    close $out;
    return $file;
}

1;
