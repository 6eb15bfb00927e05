# IoaTest::JWT -- keys and tokens for the authentication tests.
#
#   use IoaTest::JWT;
#   my $k = jwt_keys($dir);     # writes hs256.key, rsa.pub/.pem, ec.pub/.pem,
#                               # rsa-other.pem (a key nginx does not know)
#   my $t = jwt($k, 'HS256', { sub => 'Alice', scope => 'agent',
#                              exp => time + 60 });
#   # RS256 / ES256 sign with openssl(1) and the private keys in $dir;
#   # jwt($k, 'RS256', $claims, key => "$dir/rsa-other.pem") signs with
#   # another key, jwt($k, 'HS256', $claims, header => {alg => 'none'})
#   # forges a header (a hash, or JSON text as is; claims may be text too).
#
# Tokens are made here independently of the module (Digest::SHA for HMAC,
# the openssl command for RSA and ECDSA, the JWS r||s form of ECDSA built
# from openssl's DER), so a verification bug in the module cannot hide
# behind a shared mistake.

package IoaTest::JWT;

use strict;
use warnings;

use Digest::SHA qw(hmac_sha256);
use Exporter ();
use File::Temp ();
use JSON::PP ();
use MIME::Base64 qw(encode_base64url);

our @ISA = ('Exporter');
our @EXPORT = qw(jwt jwt_keys);

my $J = JSON::PP->new->utf8->canonical;

sub _run {
    my @cmd = @_;
    system(@cmd) == 0 or die "IoaTest::JWT: @cmd failed\n";
}

sub jwt_keys {
    my $dir = shift;
    mkdir $dir;
    my %k = (dir => $dir, secret => join '', map { chr(33 + int rand 90) } 1 .. 48);
    open my $fh, '>', "$dir/hs256.key" or die "$dir/hs256.key: $!\n";
    print {$fh} "$k{secret}\n";
    close $fh;
    for my $name (qw(rsa rsa-other)) {
        _run('openssl', 'genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048',
             '-out', "$dir/$name.pem", '-quiet');
        _run("openssl pkey -in $dir/$name.pem -pubout -out $dir/$name.pub 2>/dev/null");
    }
    _run('openssl', 'genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256',
         '-out', "$dir/ec.pem");
    _run("openssl pkey -in $dir/ec.pem -pubout -out $dir/ec.pub 2>/dev/null");
    return \%k;
}

# DER ECDSA-Sig-Value (SEQUENCE { INTEGER r, INTEGER s }) -> r || s, 32 bytes each
sub _der_to_jws {
    my $der = shift;
    my ($pos, @int) = (2);
    $pos++ if ord(substr $der, 1, 1) & 0x80;   # long-form length (never for P-256)
    for (1 .. 2) {
        die "IoaTest::JWT: bad DER\n" unless ord(substr $der, $pos, 1) == 0x02;
        my $len = ord substr $der, $pos + 1, 1;
        my $v = substr $der, $pos + 2, $len;
        $v =~ s/^\x00+//;
        push @int, ("\x00" x (32 - length $v)) . $v;
        $pos += 2 + $len;
    }
    return join '', @int;
}

sub jwt {
    my ($k, $alg, $claims, %opt) = @_;
    my $header = $opt{header} // { alg => $alg, typ => 'JWT' };
    my $input = encode_base64url(ref $header ? $J->encode($header) : $header) . '.'
              . encode_base64url(ref $claims ? $J->encode($claims) : $claims);
    my $sig;
    if ($alg eq 'HS256') {
        $sig = hmac_sha256($input, $opt{secret} // $k->{secret});
    } else {
        my $key = $opt{key} // ($alg eq 'RS256' ? "$k->{dir}/rsa.pem" : "$k->{dir}/ec.pem");
        my $in = File::Temp->new;
        binmode $in;
        print {$in} $input;
        close $in;
        open my $fh, '-|', 'openssl', 'dgst', '-sha256', '-sign', $key, $in->filename
            or die "openssl: $!\n";
        binmode $fh;
        local $/;
        $sig = <$fh>;
        close $fh or die "IoaTest::JWT: openssl dgst failed\n";
        $sig = _der_to_jws($sig) if $alg eq 'ES256';
    }
    return "$input." . encode_base64url($sig);
}

1;
