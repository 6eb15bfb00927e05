# t/145-erase.t -- POST /rooms/{comm_id}/erase (admin): one sender's
# envelopes in a room replaced by a redaction marker, with the same ids,
# while the room's hash chain still verifies ("redacted", not "tampered");
# rooms chained under v1 are re-chained under v2 in the same pass, a room
# that does not verify is refused; every change is in the audit stream.
#
#   make all && make -C workers/worker
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/145-erase.t
#   (TEST_IOA_REDIS=cluster: the same against a 3-master Redis Cluster)

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Api;
use IoaTest::JWT;

use FindBin;
use Cwd qw(abs_path);
use Digest::SHA qw(sha1_hex);
use File::Temp ();
use Time::HiRes qw(time);

no_root_location();
log_level('info');

our $Repo = abs_path("$FindBin::Bin/..");
our $Worker = $ENV{IOA_WORKER_BIN} || "$Repo/workers/build/ioa-worker";
our $KEYDIR = File::Temp::tempdir('ioa-erase-XXXXXX', TMPDIR => 1, CLEANUP => 1);
our $K = jwt_keys($KEYDIR);
$ENV{TEST_NGINX_KEYS} = $KEYDIR;

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value(init => 'main::hub_ready()') unless defined $block->init;
});

sub tok {
    my ($sub, $scope) = @_;
    return jwt($K, 'HS256', { sub => $sub, scope => $scope, exp => time + 300 });
}

sub bearer { [ Authorization => 'Bearer ' . tok(@_) ] }

sub room {
    my ($ctx, $h, @names) = @_;
    for my $n (@names) {
        my ($code) = api($ctx, POST => '/register',
            { name => $n, type => 'Human Assistant', desc => "agent $n" },
            headers => $h->($n));
        die "register $n: $code\n" unless $code == 200;
    }
    my ($code, $d) = api($ctx, POST => '/teamup',
        { sender => $names[0], agent_names => [ @names[1 .. $#names] ] },
        headers => $h->($names[0]));
    die "teamup: $code\n" unless $code == 200;
    return $d->{comm_id};
}

sub say_as {
    my ($ctx, $h, $who, $cid, $text) = @_;
    my ($code, $d) = api($ctx, POST => "/agents/$who/messages",
                         { comm_id => $cid, content => $text },
                         headers => $h->($who));
    die "post as $who: $code\n" unless $code == 200;
    return $d->{id};
}

sub log_key { "ioa:{room:$_[0]}:log" }

sub entries {
    my $r = redis_cmd('XRANGE', log_key($_[0]), '-', '+');
    return map { [ $_->[0], { @{ $_->[1] } } ] } @$r;
}

# the audit stream's entries as field hashes
sub audit {
    my $r = redis_cmd('XRANGE', 'ioa:{audit}:log', '-', '+');
    return map { { @{ $_->[1] } } } @$r;
}

# runs ioa-worker verify-room: (exit status, stdout)
sub verify {
    my ($cid) = @_;
    my $cmd = join ' ', map { "'$_'" } $Worker, 'verify-room',
        '--redis', IoaTest::redis_addrs(), '--scripts', "$Repo/redis-scripts", $cid;
    my $out = `$cmd 2>/dev/null`;
    return ($? >> 8, $out);
}

# rewrites the log with the same ids, $edit applied to one entry's fields
sub rewrite_entry {
    my ($cid, $id, $edit) = @_;
    my @e = entries($cid);
    redis_cmd('DEL', log_key($cid));
    for my $x (@e) {
        $edit->($x->[1]) if $x->[0] eq $id;
        my %f = %{ $x->[1] };
        redis_cmd('XADD', log_key($cid), $x->[0],
                  map { exists $f{$_} ? ($_ => $f{$_}) : () } qw(e h p d r));
    }
}

# appends envelopes the way post.lua did before chain v2 (h over e, no d)
sub post_v1 {
    my ($cid, @env) = @_;
    my $head = redis_cmd('GET', "ioa:{room:$cid}:chain");
    my ($pid, $ph) = $head ? split(' ', $head) : ('0-0', sha1_hex("ioa-room-chain-v1\n$cid"));
    for my $e (@env) {
        my $h = sha1_hex("$ph\n$pid\n$e");
        my $id = redis_cmd('XADD', log_key($cid), '*', 'e', $e, 'h', $h, 'p', $pid);
        ($pid, $ph) = ($id, $h);
    }
    redis_cmd('SET', "ioa:{room:$cid}:chain", "$pid $ph");
}

run_tests();

__DATA__

=== TEST 1: an admin's erasure of one sender leaves markers and a chain that verifies
an admin erases one sender: markers with the same ids, the other sender
intact, the chain verifies with N redacted, the erasure is audited.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    ioa_auth jwt;
    ioa_auth_jwt_key $TEST_NGINX_KEYS/hs256.key;
--- config
    location / { ioa_api; }
--- ioa_scenario
    ok -x $main::Worker, "ioa-worker is built ($main::Worker)";
    my $h = sub { main::bearer($_[0], 'agent') };
    my $cid = main::room($ctx, $h, 'Alice', 'Bob');
    my @ids = map { main::say_as($ctx, $h, $_ % 2 ? 'Alice' : 'Bob', $cid, "m$_") } 1 .. 6;
    my @before = main::entries($cid);
    my $admin = main::bearer('root', 'admin');

    my ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", { sender => 'Bob' }, headers => $h->('Bob'));
    is "$code $d->{code}", '403 forbidden', 'an agent: 403';
    ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", { sender => 'Bob' },
                      headers => main::bearer('eye', 'observer'));
    is "$code $d->{code}", '403 forbidden', 'an observer: 403';
    ($code) = api($ctx, POST => "/rooms/$cid/erase", { sender => 'Bob' });
    is $code, 401, 'no token: 401';
    ($code, $d) = api($ctx, POST => '/rooms/nosuchroom/erase', { sender => 'Bob' }, headers => $admin);
    is "$code $d->{code}", '404 unknown_room', 'an unknown room: 404';
    ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", {}, headers => $admin);
    is "$code $d->{code} $d->{field}", '400 invalid_request sender', 'no sender: 400 naming it';
    ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", 'nope', headers => $admin);
    is $code, 400, 'not JSON: 400';
    ($code) = api($ctx, GET => "/rooms/$cid/erase", undef, headers => $admin);
    is $code, 405, 'GET: 405';
    is scalar(main::audit()), 0, 'nothing audited for refused requests';

    ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", { sender => 'Bob' }, headers => $admin);
    is_deeply [ $code, @$d{qw(comm_id sender erased rechained head)} ],
              [ 200, $cid, 'Bob', 3, 0, redis_cmd('GET', "ioa:{room:$cid}:chain") ],
              'admin: 200, 3 erased, nothing re-chained, the head unchanged';

    my @after = main::entries($cid);
    is_deeply [ map { $_->[0] } @after ], [ map { $_->[0] } @before ], 'the ids are unchanged';
    my %env = map { $_->[0] => jdec($_->[1]{e}) } @after;
    is_deeply [ map { $env{$_}{content} } @ids ], [ 'm1', '[erased]', 'm3', '[erased]', 'm5', '[erased]' ],
              "Bob's contents are the marker, Alice's are intact";
    is_deeply [ @{ $env{$ids[1]} }{qw(sender comm_id)} ], [ 'Bob', $cid ], 'the marker keeps sender and comm_id';
    is $env{$ids[1]}{erased}{by}, 'root', 'and says who erased it';
    like $after[1][1]{r}, qr/^\d{13} root$/, '"r": when and by whom';
    is_deeply [ @{ $after[1][1] }{qw(d h)} ], [ @{ $before[1][1] }{qw(d h)} ], 'd and h are kept';

    ($code, $d) = api($ctx, POST => '/fetch_chat_record', { comm_id => $cid }, headers => $admin);
    is_deeply [ map { $_->{content} } @{ $d->{$cid}{chat_record} } ],
              [ 'm1', '[erased]', 'm3', '[erased]', 'm5', '[erased]' ], 'the chat record shows the markers';
    is_deeply [ map { $_->{id} } @{ $d->{$cid}{chat_record} } ], \@ids, 'with the same ids';

    ($code, $d) = api($ctx, GET => "/rooms/$cid/verify", undef, headers => $admin);
    is_deeply [ $code, @$d{qw(status checked redacted legacy)} ], [ 200, 'intact', 6, 3, 0 ],
              'GET /verify: intact, 6 checked, 3 redacted';
    my ($rc, $out) = main::verify($cid);
    is $rc, 0, 'verify-room: exit 0' or diag $out;
    like $out, qr/: intact: 6 entries chained from genesis \Q$ids[0]\E, 0 unchained before it, 3 redacted; head /,
         'verify-room: intact, 3 redacted';

    my @a = main::audit();
    is scalar @a, 1, 'one audit entry';
    is_deeply [ sort keys %{ $a[0] } ], [qw(action actor at detail target)], 'with exactly its five fields';
    is_deeply [ @{ $a[0] }{qw(action actor target detail)} ], [ 'envelopes_erased', 'root', "$cid/Bob", 'erased=3' ],
              'envelopes_erased by root, comm_id/sender, the count';
    ok abs($a[0]{at} / 1000 - time) < 60, '"at" is now, in ms';

    ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", { sender => 'Bob' }, headers => $admin);
    is_deeply [ $code, $d->{erased} ], [ 200, 0 ], 'again: nothing left to erase';
    is scalar(main::audit()), 1, 'and nothing audited';
    my $later = main::say_as($ctx, $h, 'Bob', $cid, 'after');
    ($code, $d) = api($ctx, GET => "/rooms/$cid/verify", undef, headers => $admin);
    is_deeply [ @$d{qw(status checked redacted)} ], [ 'intact', 7, 3 ], 'a later post chains on';

    # tampered is not redacted
    main::rewrite_entry($cid, $ids[2], sub { $_[0]{e} =~ s/m3/forged/ });
    ($code, $d) = api($ctx, GET => "/rooms/$cid/verify", undef, headers => $admin);
    is_deeply [ @$d{qw(status broken_at reason)} ], [ 'broken', $ids[2], 'hash mismatch: e does not match its digest d' ],
              'an edited envelope: broken, named';
    ($rc, $out) = main::verify($cid);
    like "$rc $out", qr/^1 room \Q$cid\E: BROKEN at \Q$ids[2]\E: hash mismatch: e does not match its digest d/,
         'verify-room names it too';
    main::rewrite_entry($cid, $ids[2], sub { $_[0]{e} =~ s/forged/m3/; $_[0]{r} = '1 x' });
    ($code, $d) = api($ctx, GET => "/rooms/$cid/verify", undef, headers => $admin);
    is_deeply [ @$d{qw(status broken_at reason)} ], [ 'broken', $ids[2], 'bad redaction' ],
              '"r" added to an envelope that is not a marker: broken, not redacted';
    ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", { sender => 'Alice' }, headers => $admin);
    is "$code $d->{code}", '409 room_tampered', 'erasing in a tampered room: 409 room_tampered';
    like $d->{message}, qr/\Q$ids[2]\E bad redaction/, 'naming the entry';
    is jdec((main::entries($cid))[0][1]{e})->{content}, 'm1', 'nothing was erased';
--- no_error_log
[alert]
[crit]



=== TEST 2: an erasure re-chains a v1 room under v2 so it verifies; a tampered one fails
a room chained under v1 verifies, is re-chained under v2 by the erasure (old
and new heads audited) and verifies after; a tampered v1 room is refused.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    my $h = sub { [] };
    my $cid = main::room($ctx, $h, 'Alice', 'Bob');
    main::post_v1($cid, map { qq({"sender":"$_->[0]","comm_id":"$cid","content":"$_->[1]"}) }
                        [ 'Alice', 'a1' ], [ 'Bob', 'b1' ], [ 'Alice', 'a2' ], [ 'Bob', 'b2' ]);
    my $v1head = redis_cmd('GET', "ioa:{room:$cid}:chain");
    my ($code, $d) = api($ctx, GET => "/rooms/$cid/verify");
    is_deeply [ @$d{qw(status checked legacy redacted)} ], [ 'intact', 4, 4, 0 ], 'a v1 room: intact, 4 under v1';
    my $id5 = main::say_as($ctx, $h, 'Bob', $cid, 'b3');
    ($code, $d) = api($ctx, GET => "/rooms/$cid/verify");
    is_deeply [ @$d{qw(status checked legacy)} ], [ 'intact', 5, 4 ], 'a post through the hub chains on under v2';
    my ($rc, $out) = main::verify($cid);
    like $out, qr/intact: 5 entries chained from genesis \S+, 0 unchained before it, 4 under chain v1; head /,
         'verify-room counts the v1 entries' or diag $out;
    my $before = redis_cmd('GET', "ioa:{room:$cid}:chain");

    ($code, $d) = api($ctx, POST => "/rooms/$cid/erase", { sender => 'Bob' });
    is_deeply [ $code, @$d{qw(erased rechained)} ], [ 200, 3, 5 ], 'erase: 3 erased, 5 re-chained';
    is $d->{head}, redis_cmd('GET', "ioa:{room:$cid}:chain"), 'the answer names the new head';
    isnt $d->{head}, $before, 'which is not the old one';
    ($code, $d) = api($ctx, GET => "/rooms/$cid/verify");
    is_deeply [ @$d{qw(status checked legacy redacted)} ], [ 'intact', 5, 0, 3 ], 'intact under v2, 3 redacted';

    my @a = main::audit();
    is_deeply [ map { $_->{action} } @a ], [ 'chain_migrated', 'envelopes_erased' ], 'audited: the migration, then the erasure';
    is_deeply [ @{ $a[0] }{qw(actor target)} ], [ '-', $cid ], 'open mode: actor "-", the room';
    is $a[0]{detail}, "entries=5 v1_head=$before v2_head=" . redis_cmd('GET', "ioa:{room:$cid}:chain"),
       'the migration names the old and the new head';
    is_deeply [ @{ $a[1] }{qw(target detail)} ], [ "$cid/Bob", 'erased=3' ], 'the erasure its count';

    # a tampered v1 room
    my $cid2 = main::room($ctx, $h, 'Carol', 'Dave');
    main::post_v1($cid2, map { qq({"sender":"Carol","comm_id":"$cid2","content":"c$_"}) } 1 .. 4);
    my @e = main::entries($cid2);
    main::rewrite_entry($cid2, $e[1][0], sub { $_[0]{e} =~ s/c2/forged/ });
    ($code, $d) = api($ctx, POST => "/rooms/$cid2/erase", { sender => 'Carol' });
    is "$code $d->{code}", '409 room_tampered', 'a tampered v1 room is not re-chained: 409';
    like $d->{message}, qr/\Q$e[1][0]\E hash mismatch/, 'naming the first broken link';
    is_deeply [ map { $_->[1]{h} } main::entries($cid2) ], [ map { $_->[1]{h} } @e ], 'the log is as it was';
    is scalar(main::audit()), 2, 'and nothing more is audited';
--- no_error_log
[alert]
[crit]
