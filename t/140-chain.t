# t/140-chain.t -- tamper-evident room logs: every envelope post.lua appends
# carries "h", a hash chaining it to the one before, and
# `ioa-worker verify-room` walks a room's log (redis-scripts/verify.lua, in
# batches) and names the first broken link.
#
# Envelopes are posted through nginx by real agents; the log is then
# tampered with directly in Redis, as an intruder with Redis access would,
# and the verifier must exit 1 naming exactly the first broken entry.
#
#   make $PWD/build/ngx_http_ioa_module.so && make -C workers/worker
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/140-chain.t
#   (TEST_IOA_REDIS=cluster: the same against a 3-master Redis Cluster)

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(register teamup envelope fresh_hub);
use FindBin;
use Cwd qw(abs_path);
use Digest::SHA ();

no_root_location();
log_level('info');

our $Repo = abs_path("$FindBin::Bin/..");
our $Worker = $ENV{IOA_WORKER_BIN} || "$Repo/workers/build/ioa-worker";

# ------------------------------------------------------------------ helpers

sub log_key { "ioa:{room:$_[0]}:log" }

# [id, {field => value}] of every entry
sub entries {
    my $r = redis_cmd('XRANGE', log_key($_[0]), '-', '+');
    return map { [ $_->[0], { @{ $_->[1] } } ] } @$r;
}

# runs the verifier; returns (exit status, its stdout)
sub verify {
    my ($cid, @opt) = @_;
    my $cmd = join ' ', map { "'$_'" } $Worker, 'verify-room',
        '--redis', IoaTest::redis_addrs(), '--scripts', "$Repo/redis-scripts",
        @opt, $cid;
    my $out = `$cmd 2>/dev/null`;
    return ($? >> 8, $out);
}

# posts $n plain envelopes as $agent and waits until it got them back
sub post_n {
    my ($agent, $cid, $tag, $n) = @_;
    $agent->post(envelope(comm_id => $cid, content => "$tag $_",
                          next_speaker => '')) for 1 .. $n;
    my @m = $agent->recv_n($n, 10);
    Test::More::is(scalar @m, $n, $agent->name . ": $n envelopes came back");
}

# rewrites the log as a copy with the same ids and fields, $edit applied
# to each entry's field hash (an edit in place, which XADD cannot do)
sub rewrite_log {
    my ($cid, $edit) = @_;
    my @e = entries($cid);
    redis_cmd('DEL', log_key($cid));
    for my $x (@e) {
        $edit->($x->[0], $x->[1]);
        my %f = %{ $x->[1] };
        my @f = map { exists $f{$_} ? ($_ => delete $f{$_}) : () } qw(e h);
        redis_cmd('XADD', log_key($cid), $x->[0], @f, %f);
    }
}

# reads frames until none comes for a while
sub drain { for my $ag (@_) { 1 while $ag->recv(0.3) } }

sub setup {
    my ($ctx) = @_;
    fresh_hub($ctx);
    register($ctx, qw(Alice Bob Carol));
    my %ag = map { $_ => IoaTest::Agent->connect($ctx, $_) } qw(Alice Bob Carol);
    Test::More::ok($ag{$_}->ok, "$_ connected") for sort keys %ag;
    my $cid = teamup($ctx, 'Alice', ['Bob', 'Carol']);
    drain(values %ag);
    return ($cid, @ag{qw(Alice Bob Carol)});
}

run_tests();

__DATA__

=== TEST 1: envelopes posted through nginx form a chain the verifier accepts
Every entry has e then h, and the head key names the last one; a resume still
delivers them; batches of any size give the same answer.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    ok -x $main::Worker, "ioa-worker is built ($main::Worker)"
        or BAIL_OUT('make -C workers/worker first');
    my ($cid, $a, $b, $c) = main::setup($ctx);
    main::post_n($a, $cid, 'a', 5);
    main::drain($b, $c);
    main::post_n($b, $cid, 'b', 4);
    main::drain($a, $c);

    my @e = main::entries($cid);
    ok @e >= 9, scalar(@e) . ' entries in the log';
    ok !(grep { ($_->[1]{h} // '') !~ /^[0-9a-f]{40}$/ } @e), 'every entry has a 40-hex h';
    my $raw = redis_cmd('XRANGE', main::log_key($cid), '-', '+', 'COUNT', 1);
    is_deeply [ map { $_ } @{ $raw->[0][1] }[0, 2] ], ['e', 'h'], 'fields: e first, then h';
    is redis_cmd('GET', "ioa:{room:$cid}:chain"), "$e[-1][0] $e[-1][1]{h}",
       'the head key is "<last id> <last h>"';

    my ($rc, $out) = main::verify($cid);
    is $rc, 0, 'verify-room: exit 0' or diag $out;
    like $out, qr/^room \Q$cid\E: intact: ${\ scalar @e} entries chained from genesis \Q$e[0][0]\E, 0 unchained before it; head \Q$e[-1][0] $e[-1][1]{h}\E$/,
         'it says intact, how many, from the genesis entry, and the head';
    for my $batch (1, 2, 3, 1000) {
        my ($rc2, $out2) = main::verify($cid, '--batch', $batch);
        is "$rc2 $out2", "$rc $out", "--batch $batch: the same answer";
    }

    # catch-up reads entries that now have two fields
    my $late = IoaTest::Agent->connect($ctx, 'Carol', "?resume=$cid:$e[3][0]");
    my @m = $late->recv_n(@e - 4, 5);
    is scalar @m, @e - 4, 'a resume after the 4th entry delivers the rest';
    is $m[0]{id}, $e[4][0], 'starting with the 5th';

=== TEST 2: tampering is caught and named precisely, with exit 1 each time
An edited envelope is named exactly (hash mismatch); a re-hashed edit breaks
the next link; an XDEL in the middle breaks the entry after it; a deleted tail
is caught by the head.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my ($cid, $a, $b, $c) = main::setup($ctx);
    main::post_n($a, $cid, 'x', 12);
    my @e = main::entries($cid);
    my ($rc, $out) = main::verify($cid);
    is $rc, 0, 'intact before tampering' or diag $out;

    # 1. one envelope's content changed, its h left as it was
    my $victim = $e[6][0];
    main::rewrite_log($cid, sub {
        $_[1]{e} =~ s/"content":"[^"]*"/"content":"forged"/ if $_[0] eq $victim });
    isnt((main::entries($cid))[6][1]{e}, $e[6][1]{e}, 'the 7th envelope was edited');
    ($rc, $out) = main::verify($cid, '--batch', 4);
    is $rc, 1, 'edited: exit 1';
    like $out, qr/^room \Q$cid\E: BROKEN at \Q$victim\E: hash mismatch: e does not match its digest d/,
         'edited: names that entry (its envelope no longer matches its digest)'
        or diag $out;

    # 2. the same edit with its d and h recomputed (chain v2: h covers d):
    # its own link holds, the next fails
    main::rewrite_log($cid, sub {
        return unless $_[0] eq $victim;
        my $prev = $e[5];
        $_[1]{d} = Digest::SHA::sha1_hex($_[1]{e});
        $_[1]{h} = Digest::SHA::sha1_hex("$prev->[1]{h}\n$prev->[0]\n$_[1]{d}");
    });
    ($rc, $out) = main::verify($cid);
    is $rc, 1, 're-hashed edit: exit 1';
    like $out, qr/BROKEN at \Q$e[7][0]\E: hash mismatch/, 're-hashed edit: names the entry after it'
        or diag $out;

    # restore, then delete one entry in the middle
    my %orig = map { $_->[0] => $_->[1] } @e;
    main::rewrite_log($cid, sub { %{ $_[1] } = %{ $orig{$_[0]} } });
    ($rc, $out) = main::verify($cid);
    is $rc, 0, 'restored: intact again' or diag $out;
    redis_cmd('XDEL', main::log_key($cid), $e[3][0]);
    ($rc, $out) = main::verify($cid);
    is $rc, 1, 'XDEL: exit 1';
    like $out, qr/BROKEN at \Q$e[4][0]\E: hash mismatch/, 'XDEL: names the entry after the gap'
        or diag $out;

    # a new room: delete its last entry; no later post hides it
    my $cid2 = teamup($ctx, 'Bob', ['Carol']);
    main::drain($b, $c);
    main::post_n($b, $cid2, 'y', 3);
    my @e2 = main::entries($cid2);
    redis_cmd('XDEL', main::log_key($cid2), $e2[-1][0]);
    ($rc, $out) = main::verify($cid2);
    is $rc, 1, 'tail XDEL: exit 1';
    like $out, qr/BROKEN at \Q$e2[-1][0]\E: tail missing/, 'tail XDEL: names the missing entry'
        or diag $out;
    # ... and the next post chains to the head, so the gap stays visible
    main::post_n($b, $cid2, 'z', 1);
    ($rc, $out) = main::verify($cid2);
    like $out, qr/BROKEN at \S+: hash mismatch/, 'after a later post: still broken' or diag $out;

    ($rc, $out) = main::verify('no-such-room');
    is $rc, 2, 'an unknown room: exit 2';

=== TEST 3: a room capped by ioa_room_log_maxlen verifies from its anchor
The anchor is the oldest retained entry; a room trimmed by hand verifies the
same way.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_room_log_maxlen 10;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my ($cid, $a, $b, $c) = main::setup($ctx);
    # stream nodes hold 100 entries by default: MAXLEN ~ 10 trims whole
    # nodes only, so post enough for one to go
    for my $round (1 .. 6) {
        main::post_n($a, $cid, "r$round", 40);
    }
    my @e = main::entries($cid);
    ok @e < 240, 'the log was trimmed (' . scalar(@e) . ' of 240 left)';
    my ($rc, $out) = main::verify($cid, '--batch', 50);
    is $rc, 0, 'capped room: exit 0' or diag $out;
    like $out, qr/intact: ${\ scalar @e} entries chained from anchor \Q$e[0][0] $e[0][1]{h}\E,/,
         'it starts at the anchor, the oldest retained entry, and names its hash'
        or diag $out;

    redis_cmd('XTRIM', main::log_key($cid), 'MAXLEN', 7);
    @e = main::entries($cid);
    ($rc, $out) = main::verify($cid);
    is $rc, 0, 'XTRIM to 7: exit 0' or diag $out;
    like $out, qr/intact: 7 entries chained from anchor \Q$e[0][0]\E /, 'anchored at the new oldest entry'
        or diag $out;

=== TEST 4: three members posting at once still make one chain the verifier accepts
Entries written before the chain existed are reported, not broken.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my ($cid, $a, $b, $c) = main::setup($ctx);
    for my $i (1 .. 30) {
        $_->post(envelope(comm_id => $cid, content => $_->name . " $i",
                          next_speaker => '')) for $a, $b, $c;
    }
    my @m = $a->recv_n(90, 15);
    is scalar @m, 90, 'all 90 arrived';
    main::drain($b, $c);
    my @e = main::entries($cid);
    my ($rc, $out) = main::verify($cid, '--batch', 7);
    is $rc, 0, 'concurrent posters: exit 0' or diag $out;
    like $out, qr/intact: ${\ scalar @e} entries chained from genesis/, 'every entry is in the chain'
        or diag $out;

    # a room from before the chain: entries without h, and no head key
    my $old = 'legacy-room';
    redis_cmd('HSET', "ioa:{room:$old}:meta", 'creator', 'Alice', 'created_at', 1);
    redis_cmd('SADD', "ioa:{room:$old}:members", 'Alice', 'Bob');
    redis_cmd('XADD', main::log_key($old), '*', 'e', qq({"sender":"Alice","content":"old $_"}))
        for 1 .. 3;
    ($rc, $out) = main::verify($old);
    is $rc, 0, 'only old entries: exit 0' or diag $out;
    like $out, qr/intact: 0 entries chained from nowhere \(no chained entry\), 3 unchained before it; head none/,
         'they are counted as unchained' or diag $out;
    $a->post(envelope(comm_id => $old, content => 'new', next_speaker => ''));
    # (the hub does not deliver it to Alice: it learns an agent's rooms from
    # the registry, which this hand-made room is not in; post.lua stores it)
    for (1 .. 50) { last if redis_cmd('XLEN', main::log_key($old)) == 4; select undef, undef, undef, 0.1 }
    my $got = { id => redis_cmd('XREVRANGE', main::log_key($old), '+', '-', 'COUNT', 1)->[0][0] };
    is redis_cmd('XLEN', main::log_key($old)), 4, 'a post to the old room is stored';
    ($rc, $out) = main::verify($old);
    is $rc, 0, 'old entries then chained ones: exit 0' or diag $out;
    like $out, qr/intact: 1 entries chained from genesis \Q$got->{id}\E, 3 unchained before it/,
         'the chain starts at the first new entry' or diag $out;
