# t/redis-scripts.t: the Lua scripts in redis-scripts/, run against a real
# Redis that this file starts on a free loopback port and stops at the end.
# Plain Test::More (no nginx needed): prove t/redis-scripts.t
#
# Scripts are loaded with `redis-cli -x SCRIPT LOAD` and run with EVALSHA over
# a tiny RESP client below, so nested replies (room_record) arrive as Perl
# arrays and error replies as Err objects whose first word is the code.
# register.lua and retrieve.lua take terms, not text: the helpers below get
# them from the hub's own C tokenizer through build/ioa-terms (`make`),
# exactly as the module and the worker would (IoaTest::Terms).

use strict;
use warnings;

use Test::More;
use File::Temp qw(tempdir);
use IO::Socket::INET;
use IO::Select;
use Digest::SHA qw(sha1_hex);
use FindBin;
use JSON::PP ();
use Time::HiRes qw(sleep);

use lib "$FindBin::Bin/lib";
use IoaTest::Port ();
use IoaTest::Terms qw(terms doc_terms $TermsBin);

my $root    = "$FindBin::Bin/..";
my $scripts = "$root/redis-scripts";

chomp(my $server = `command -v redis-server 2>/dev/null` // '');
chomp(my $cli    = `command -v redis-cli 2>/dev/null` // '');
plan skip_all => 'redis-server and redis-cli are needed' unless $server && $cli;
plan skip_all => "$TermsBin is not built; run `make` first" unless -x $TermsBin;

# --- a private Redis ----------------------------------------------------------

my $dir = tempdir('ioa-redis-scripts-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my $pidfile = "$dir/pid";
my $port;

END {
    # Stop our own redis-server by its pid, also when a test died half-way.
    if (defined $pidfile && open my $fh, '<', $pidfile) {
        my $pid = <$fh>;
        close $fh;
        if (defined $pid && $pid =~ /^(\d+)/) {
            $pid = $1;
            kill 'TERM', $pid;
            for (1 .. 50) { last unless kill 0, $pid; sleep 0.1 }
            kill 'KILL', $pid if kill 0, $pid;
        }
    }
}

$port = IoaTest::Port::free_port();

system($server, '--port', $port, '--bind', '127.0.0.1', '--daemonize', 'yes',
       '--dir', $dir, '--pidfile', $pidfile, '--logfile', "$dir/log",
       '--save', '', '--appendonly', 'no') == 0
    or BAIL_OUT("redis-server did not start");

my $r;
for (1 .. 100) {
    $r = Resp->connect($port) and last;
    sleep 0.05;
}
BAIL_OUT("cannot connect to redis on port $port") unless $r;
for (1 .. 100) { last if -s $pidfile; sleep 0.05 }
is($r->cmd('PING'), 'PONG', "redis-server is up on port $port");

# Small stream nodes so MAXLEN ~ visibly trims with a few dozen entries.
is($r->cmd('CONFIG', 'SET', 'stream-node-max-entries', 5), 'OK',
   'stream-node-max-entries 5');

# --- load every script ---------------------------------------------------------

my %sha;
for my $name (qw(register retrieve query list_agents teamup_members
                 room_create post room_record presence verify room_erase room_goals goal_feed_erase room_tail
                 goal_erase goal_message goal_cancel agent_rooms
                 position_save position_load room_expire room_forget agent_forget
                 goal_index goal_list worker_list limit_lease)) {
    my $file = "$scripts/$name.lua";
    ok(-f $file, "$name.lua exists") or next;
    my $src = slurp($file);
    like($src, qr/\A--/, "$name.lua starts with its comment block");
    chomp(my $sha = `$cli -p $port -x SCRIPT LOAD < '$file' 2>&1`);
    is($sha, sha1_hex($src), "$name.lua loads with SCRIPT LOAD") or diag $sha;
    $sha{$name} = $sha;
}

{
    for my $name (qw(register retrieve)) {
        unlike(slurp("$scripts/$name.lua"), qr/string\.lower|\bSTOP\b|BEGIN tokenizer/,
               "$name.lua carries no tokenizer: ioa_tokenize.c is the only one");
    }
    my ($a) = slurp("$scripts/query.lua") =~ /(-- BEGIN record.*?-- END record)/s;
    ($b) = slurp("$scripts/retrieve.lua") =~ /(-- BEGIN record.*?-- END record)/s;
    ok(defined $a && defined $b && $a eq $b,
       'the task record is read the same way in query.lua and retrieve.lua');
    my @redact = map { (slurp("$scripts/$_.lua") =~ /(-- BEGIN redact.*?-- END redact)/s)[0] }
                 qw(room_erase goal_feed_erase goal_erase);
    ok(defined $redact[0] && !grep({ !defined || $_ ne $redact[0] } @redact),
       'quotes are redacted the same way in room_erase.lua, goal_feed_erase.lua and goal_erase.lua');
}

# an agent's task record as query.lua and retrieve.lua return it
sub record_json {
    my (%c) = @_;
    return sprintf '{"completed":%d,"partial":%d,"failed":%d,"timed_out":%d,"latency_ms":%s}',
        (map { $c{$_} // 0 } qw(completed partial failed timed_out)),
        $c{latency_ms} // 'null';
}

sub run_script {
    my ($name, $keys, @argv) = @_;
    return $r->cmd('EVALSHA', $sha{$name}, scalar @$keys, @$keys, @argv);
}

sub err_code {
    my ($reply) = @_;
    return ref $reply eq 'Err' ? (split ' ', $$reply)[0] : undef;
}

# --- registry helpers ------------------------------------------------------------

my $NOW = 1_700_000_000_000;

# The terms are those of desc and of each tag, as /register makes them
# (tags that are not an array of strings add none: the script refuses them),
# unless the caller gives its own.
sub register {
    my ($B, $name, %o) = @_;
    my $tags = $o{tags} // '[]';
    my $list = eval { JSON::PP->new->decode($tags) };
    $list = [] unless ref $list eq 'ARRAY' && !grep { ref || !defined } @$list;
    my $terms = $o{terms} // doc_terms($o{desc} // '', @$list);
    return run_script('register',
        [ "${B}agent:$name", "${B}agents", "${B}stats" ],
        $B, $name, $o{type} // 'Thing Assistant', $o{desc} // '', $tags,
        $o{protocol} // '0', $o{now} // $NOW, $o{created} // '2024-01-01-00-00-00',
        $o{max} // '0', $terms, (defined $o{a2a} ? ('', '', $o{a2a}) : ()));
}

# queries are texts tokenized here; raw => 1 passes them as they are
sub retrieve {
    my ($B, %o) = @_;
    my @q = $o{raw} ? @{ $o{queries} } : map { terms($_) } @{ $o{queries} };
    my $rep = run_script('retrieve', [ "${B}stats", "${B}online" ],
        $B, $o{now} // $NOW, $o{limit} // 10, $o{online_only} // '0',
        $o{exclude} // '', @q);
    return $rep if ref $rep eq 'Err';
    my @rows;
    push @rows, [ splice @$rep, 0, 8 ] while @$rep;
    return \@rows;
}

sub names { [ map { $_->[0] } @{ $_[0] } ] }

# The index must always be exact: n = agents, total_len = sum of len, every
# term of every agent in the term's sorted set (idx:) and hash (tf:) with the
# same entry, tf * 2^32 + len, and nothing else there; the online index
# (oidx:) holds the same entries for exactly the agents in onidx.
my $SPLIT = 2**32;

sub index_consistent {
    my ($B, $label) = @_;
    my @agents = @{ $r->cmd('ZRANGE', "${B}agents", 0, -1) };
    my ($n, $total) = @{ $r->cmd('HMGET', "${B}stats", 'n', 'total_len') };
    my %on = map { $_ => 1 } @{ $r->cmd('ZRANGE', "${B}onidx", 0, -1) };
    my (%want, %want_on, $sum, @bad);
    for my $a (@agents) {
        my ($terms, $len) = @{ $r->cmd('HMGET', "${B}agent:$a", 'terms', 'len') };
        $sum += $len;
        for my $t (split ' ', $terms) {
            $want{$t}{$a} = $len;
            $want_on{$t}{$a} = $len if $on{$a};
        }
    }
    my (%got, %got_on);
    for my $k (@{ $r->cmd('KEYS', "${B}idx:*") }) {
        (my $t = $k) =~ s/^\Q${B}\Eidx://;
        my %z = @{ $r->cmd('ZRANGE', $k, 0, -1, 'WITHSCORES') };
        my %h = @{ $r->cmd('HGETALL', "${B}tf:$t") };
        for my $a (keys %z) {
            push @bad, "$t/$a: hash $h{$a} zset $z{$a}" unless ($h{$a} // '') eq $z{$a};
            push @bad, "$t/$a: tf 0" unless $z{$a} >= $SPLIT;
            $got{$t}{$a} = $z{$a} % $SPLIT;
        }
        push @bad, "$t: hash has more" if keys %h != keys %z;
    }
    for my $k (@{ $r->cmd('KEYS', "${B}oidx:*") }) {
        (my $t = $k) =~ s/^\Q${B}\Eoidx://;
        my %z = @{ $r->cmd('ZRANGE', $k, 0, -1, 'WITHSCORES') };
        for my $a (keys %z) {
            push @bad, "online $t/$a differs" unless $z{$a} eq ($r->cmd('HGET', "${B}tf:$t", $a) // '');
            $got_on{$t}{$a} = $z{$a} % $SPLIT;
        }
    }
    is($n // 0, scalar @agents, "$label: stats n = number of agents");
    is($total // 0, $sum // 0, "$label: stats total_len = sum of lengths");
    is_deeply(\%got, \%want, "$label: the index holds exactly the agents' terms and lengths");
    is_deeply(\%got_on, \%want_on, "$label: the online index holds exactly the online agents'");
    ok(!@bad, "$label: sorted sets and hashes agree") or diag join "\n", @bad[0 .. min(9, $#bad)];
}

sub min { $_[0] < $_[1] ? $_[0] : $_[1] }

# --- register / re-register ----------------------------------------------------

my $B = 'hub:{reg}:';    # deliberately not "ioa:", nothing may hard-code it

is_deeply(register($B, 'alice', desc => 'Translates documents between English and French',
                   tags => '["translation","french"]', protocol => '1',
                   created => '2024-05-01-10-00-00'),
          [ 'created', '2024-05-01-10-00-00' ], 'register a new agent: created');
# translate document between english french + translation french
is($r->cmd('HGET', "${B}agent:alice", 'len'), 7, 'alice: length counts desc and tags');
is($r->cmd('HGET', "${B}tf:french", 'alice'), 2 * $SPLIT + 7, 'alice: tag counted once more (tf 2, len 7)');
is($r->cmd('ZSCORE', "${B}idx:french", 'alice'), 2 * $SPLIT + 7, 'alice: the same entry in the sorted set');
is($r->cmd('HGET', "${B}agent:alice", 'terms'),
   'between document english french translate translation', 'alice: distinct terms kept');

is_deeply(register($B, 'bob', desc => 'Weather forecasts for any city', now => $NOW + 1),
          [ 'created', '2024-01-01-00-00-00' ], 'register a second agent');
is_deeply([ @{ $r->cmd('HMGET', "${B}stats", 'n', 'total_len') } ], [ 2, 10 ],
          'stats after two registrations');
index_consistent($B, 'two agents');

is_deeply(register($B, 'alice', desc => 'Summarizes long reports', tags => '["summary"]',
                   type => 'Human Assistant', protocol => '0', now => $NOW + 5,
                   created => '2030-01-01-00-00-00'),
          [ 'updated', '2024-05-01-10-00-00' ], 're-register: updated, first created_at kept');
is_deeply([ @{ $r->cmd('HMGET', "${B}stats", 'n', 'total_len') } ], [ 2, 7 ],
          're-register: n unchanged, total_len follows the new document');
is_deeply([ @{ $r->cmd('HMGET', "${B}agent:alice", qw(desc type tags protocol updated_at created_at)) } ],
          [ 'Summarizes long reports', 'Human Assistant', '["summary"]', '0', $NOW + 5,
            '2024-05-01-10-00-00' ], 're-register: fields updated');
is($r->cmd('EXISTS', map { ("${B}idx:$_", "${B}tf:$_") } qw(french translate)), 0,
   're-register: the index keys of dropped terms are gone');
is($r->cmd('ZSCORE', "${B}idx:summary", 'alice'), $SPLIT + 4,
   're-register: the entries carry the new length');
is($r->cmd('ZSCORE', "${B}agents", 'alice'), $NOW, 're-register: agents zset keeps first time');
index_consistent($B, 'after re-register');
is_deeply(retrieve($B, queries => [ 'French translation' ]), [], 'old terms no longer match');
is_deeply(names(retrieve($B, queries => [ 'summary of a report' ])), [ 'alice' ],
          'new terms match');

register($B, 'alice', desc => 'Summarizes long reports', tags => '["summary"]', now => $NOW + 9);
is_deeply([ @{ $r->cmd('HMGET', "${B}stats", 'n', 'total_len') } ], [ 2, 7 ],
          'identical re-register changes no statistic');
register($B, 'carol', desc => '', now => $NOW + 10);
index_consistent($B, 'with an empty description');

is(err_code(register($B, 'dave', tags => '{"a":"b"}')), 'BADARG', 'tags as an object: BADARG');
is(err_code(register($B, 'dave', tags => '[1,2]')), 'BADARG', 'tags not strings: BADARG');
is(err_code(register($B, 'dave', tags => 'not json')), 'BADARG', 'tags not JSON: BADARG');
is(err_code(register($B, 'dave', protocol => 'yes')), 'BADARG', 'bad protocol flag: BADARG');
is(err_code(register($B, '')), 'BADARG', 'empty name: BADARG');
is(err_code(run_script('register', [ "${B}agent:eve", "${B}agents", "${B}stats" ],
                       $B, 'dave', 'Thing Assistant', 'x', '[]', '0', $NOW, 'c', '0', '')),
   'BADARG', 'agent key not matching the name: BADARG');
is(err_code(run_script('register', [ "${B}agent:dave", "${B}agents", "${B}stats" ],
                       $B, 'dave', 'Thing Assistant', 'x', '[]', '0', $NOW, 'c', '0')),
   'BADARG', 'no terms argument: BADARG');
is(err_code(register($B, 'dave', max => '')), 'BADARG', 'max_agents not a number: BADARG');
is($r->cmd('EXISTS', "${B}agent:dave", "${B}agent:eve"), 0, 'failed registrations store nothing');
index_consistent($B, 'after refused registrations');

# The scripts take terms as they are given: no second tokenizer in Lua.
{
    my $GB = 'given:{reg}:';
    register($GB, 'gil', desc => 'a text the terms do not come from', terms => ' alpha  beta alpha ours ');
    is($r->cmd('HGET', "${GB}agent:gil", 'terms'), 'alpha beta ours',
       'register.lua: the terms given, distinct and sorted, "ours" not folded again');
    is($r->cmd('HGET', "${GB}agent:gil", 'len'), 4, 'register.lua: the length is the number of terms');
    is($r->cmd('HGET', "${GB}tf:alpha", 'gil'), 2 * $SPLIT + 4, 'register.lua: a repeated term has tf 2');
    is($r->cmd('EXISTS', "${GB}idx:text"), 0, 'register.lua: desc is stored, not indexed');
    is_deeply(names(retrieve($GB, raw => 1, queries => [ 'ours' ])), ['gil'],
              'retrieve.lua: query terms as given');
    is_deeply(retrieve($GB, raw => 1, queries => [ 'Alpha' ]), [], 'retrieve.lua: not lowercased');
    is_deeply(names(retrieve($GB, queries => [ 'ALPHAs!' ])), ['gil'],
              'the C tokenizer makes "alpha" of "ALPHAs!"');

    is(err_code(register($GB, 'huge', terms => 'x ' x 1048576)), 'BADARG',
       'a document of 2^20 terms: BADARG');
    is($r->cmd('EXISTS', "${GB}agent:huge"), 0, '... and nothing stored');
    is(register($GB, 'big', terms => 'x ' x 1048575)->[0], 'created', '2^20 - 1 terms are indexed');
    is($r->cmd('HGET', "${GB}tf:x", 'big'), 1048575 * $SPLIT + 1048575, '... with an exact entry');

    is(err_code(register($GB, 'newt', max => 2)), 'FULL', 'max_agents 2 with 2 agents: FULL');
    is($r->cmd('EXISTS', "${GB}agent:newt"), 0, '... and nothing stored');
    is(register($GB, 'gil', max => 1, terms => 'beta')->[0], 'updated',
       'a registered agent updates whatever the cap');
    is(register($GB, 'newt', max => 3)->[0], 'created', 'below the cap: created');
    index_consistent($GB, 'terms given');
}

# --- BM25 ranking ----------------------------------------------------------------

my $RB = 'rank:{reg}:';
my %corpus = (    # name => [desc, registration time]
    anna => [ 'image image crop',                               1000 ],
    carl => [ 'image scale crop',                               1001 ],
    sam  => [ 'image short',                                    1002 ],
    lena => [ 'image lorem ipsum dolor sitx amet consectetur',  1002 ],
    rita => [ 'rotate kiwi mango',                              1003 ],
    xena => [ 'crop kiwi mango',                                1004 ],
);
register($RB, $_, desc => $corpus{$_}[0], now => $corpus{$_}[1]) for sort keys %corpus;
index_consistent($RB, 'ranking corpus');

# Expected BM25 computed here independently: N = 6, avgdl = 21 / 6.
sub bm25 {
    my ($tf, $dl, $df) = @_;
    my ($N, $avgdl) = (6, 21 / 6);
    my $idf = log(1 + ($N - $df + 0.5) / ($df + 0.5));
    return $idf * $tf * 2.2 / ($tf + 1.2 * (0.25 + 0.75 * $dl / $avgdl));
}

my $res = retrieve($RB, queries => [ 'image' ]);
is_deeply(names($res), [qw(anna sam carl lena)],
          'repeated term first, then shorter documents before longer ones');
is_deeply([ map { $_->[4] } @$res ],
          [ map { sprintf '%.4f', $_ } bm25(2, 3, 4), bm25(1, 2, 4), bm25(1, 3, 4), bm25(1, 7, 4) ],
          'scores are BM25 (k1 1.2, b 0.75) with 4 decimals');
is_deeply($res->[0], [ 'anna', 'Thing Assistant', 'image image crop', '[]', $res->[0][4], '0', '0',
                       record_json() ],
          'a result row is name, type, desc, tags, score, online, protocol, record');
$r->cmd('HSET', "${RB}rep:anna", completed => 3, failed => 1, timed_out => 2,
        latency_ms => 301, timed => 2);
is(retrieve($RB, queries => [ 'image' ])->[0][7],
   record_json(completed => 3, failed => 1, timed_out => 2, latency_ms => 150),
   'the record counts the workers wrote, and the mean latency');
$r->cmd('DEL', "${RB}rep:anna");

is_deeply(names(retrieve($RB, queries => [ 'crop rotate' ])), [qw(rita anna carl xena)],
          'a rare term outweighs a common one; equal scores ordered by name');
is_deeply(names(retrieve($RB, queries => [ 'CROPS, rotating?' ])), [qw(anna carl xena)],
          'case, punctuation and plurals are folded (rotating is not rotate)');
is_deeply(names(retrieve($RB, limit => 2, queries => [ 'image' ])), [qw(anna sam)],
          'limit keeps the top results');
is_deeply(names(retrieve($RB, limit => 2, queries => [ 'image', 'crop rotate', 'mango' ])),
          [qw(anna sam rita xena)],
          'several queries: top-k each, merged in query order, duplicates dropped');
is(retrieve($RB, limit => 2, queries => [ 'image', 'crop' ])->[0][4], sprintf('%.4f', bm25(2, 3, 4)),
   'a duplicate keeps the score of its first query');
is_deeply(names(retrieve($RB, limit => 2, exclude => 'anna', queries => [ 'image' ])), [qw(sam carl)],
          'the excluded sender never appears, and does not use a slot');
is_deeply(retrieve($RB, queries => [ 'the and of to with' ]), [], 'stopwords only: no result');
is_deeply(retrieve($RB, queries => [ 'unheard' ]), [], 'unknown term: no result');
is_deeply(retrieve('empty:{reg}:', queries => [ 'image' ]), [], 'empty registry: no result');
is(err_code(retrieve($RB, queries => [])), 'BADARG', 'no query: BADARG');
is(err_code(retrieve($RB, limit => 0, queries => [ 'x' ])), 'BADARG', 'limit 0: BADARG');

{
    my $UB = 'utf:{reg}:';
    register($UB, 'uma', desc => "\xc3\x9cbersetzung caf\xc3\xa9 na\xc3\xafve");
    register($UB, 'ugo', desc => 'cafe only');
    is_deeply(names(retrieve($UB, queries => [ "Caf\xc3\xa9?" ])), ['uma'],
              'UTF-8 words are kept whole');
    is_deeply(names(retrieve($UB, queries => [ "\xc3\xbcbersetzung" ])), [],
              'only ASCII is lowercased');
}

# --- presence and online filtering -------------------------------------------------

sub presence {
    my ($holder, $expiry, @names) = @_;
    return run_script('presence', [ "${RB}online" ], $RB, $holder, $expiry, $NOW, @names);
}

is(presence('w1', $NOW + 10_000, qw(carl lena)), 2, 'presence: two agents online');
is(presence('w1', $NOW - 1, 'sam'), 1, 'presence: an expiry in the past');
is(retrieve($RB, queries => [ 'image' ])->[2][5], '1', 'online flag in results');
is_deeply(names(retrieve($RB, online_only => '1', queries => [ 'image' ])), [qw(carl lena)],
          'online_only keeps agents whose expiry is after now');
is_deeply(names(retrieve($RB, online_only => '1', now => $NOW + 20_000, queries => [ 'image' ])),
          [], 'online_only: nobody once the expiry has passed');

# lena is held by two workers; one letting go leaves her online
is(presence('w2', $NOW + 5_000, 'lena'), 1, 'a second holder for lena');
is($r->cmd('ZSCORE', "${RB}online", 'lena'), $NOW + 10_000, 'online keeps the latest expiry');
is(presence('w1', '0', 'lena'), 1, 'presence 0: the first holder lets go');
is($r->cmd('ZSCORE', "${RB}online", 'lena'), $NOW + 5_000,
   'still online, until the remaining holder\'s expiry');
presence('w2', '0', 'lena');
is($r->cmd('ZSCORE', "${RB}online", 'lena'), undef, 'the last holder gone: offline');
is($r->cmd('EXISTS', "${RB}holders:lena"), 0, 'and no holders left');

$r->cmd('ZADD', "${RB}online", 5, 'ghost');
presence('w1', $NOW + 10_000, 'carl');
is($r->cmd('ZSCORE', "${RB}online", 'ghost'), undef, 'heartbeat drops entries expired for a day');
is($r->cmd('ZSCORE', "${RB}online", 'sam'), $NOW - 1, 'and keeps recently expired ones');
is(err_code(presence('w1', 'soon', 'x')), 'BADARG', 'presence: BADARG');
is(err_code(presence('', $NOW, 'x')), 'BADARG', 'presence: an empty holder is BADARG');

# --- the online index (presence.lua keeps oidx: for online_only) ------------------

{
    my $OB = 'on:{reg}:';
    my $GRACE = 600_000;    # presence.lua's ONIDX_GRACE
    my $pres = sub {
        my ($holder, $expiry, $now, @names) = @_;
        return run_script('presence', [ "${OB}online" ], $OB, $holder, $expiry, $now, @names);
    };
    my $online = sub {
        my ($now, $q) = @_;
        return names(retrieve($OB, online_only => '1', now => $now, queries => [ $q ]));
    };
    my $indexed = sub { [ sort @{ $r->cmd('ZRANGE', "${OB}oidx:$_[0]", 0, -1) } ] };

    register($OB, 'olga', desc => 'image crop');
    register($OB, 'otto', desc => 'image');
    $pres->('w1', $NOW + 30_000, $NOW, 'olga', 'pat');
    is_deeply($indexed->('image'), ['olga'], 'an agent coming online is copied into the online index');
    index_consistent($OB, 'online index: one registered agent online, one unregistered');
    is_deeply($online->($NOW, 'image'), ['olga'], 'online_only reads it there');

    register($OB, 'pat', desc => 'image rotate');
    is_deeply($indexed->('rotate'), ['pat'], 'registering while online indexes the agent online too');
    register($OB, 'olga', desc => 'rotate only now');
    is_deeply($indexed->('image'), ['pat'], 're-registering while online drops the old terms there');
    is_deeply($indexed->('rotate'), [qw(olga pat)], '... and adds the new ones');
    index_consistent($OB, 'online index after registrations while online');

    $pres->('w2', $NOW + 20_000, $NOW, 'pat');
    $pres->('w1', '0', $NOW, 'pat');
    is_deeply($indexed->('image'), ['pat'], 'one holder of two letting go: still indexed online');
    $pres->('w2', '0', $NOW, 'pat');
    is_deeply($indexed->('image'), [], 'the last holder letting go: out of the online index');
    index_consistent($OB, 'online index after releases');

    # w1 dies holding olga until NOW + 30 s: nobody lets her go
    is_deeply($online->($NOW + 40_000, 'rotate'), [],
              'an expired agent still in the online index is not returned');
    $pres->('w3', $NOW + 30_000 + $GRACE, $NOW + 30_000 + $GRACE - 1, 'otto');
    is_deeply($indexed->('rotate'), ['olga'], 'kept while within the grace (other clocks may lag)');
    $pres->('w3', $NOW + 30_000 + $GRACE + 60_000, $NOW + 30_000 + $GRACE + 1, 'otto');
    is_deeply($indexed->('rotate'), [], 'swept by a later heartbeat once past it');
    is($r->cmd('ZSCORE', "${OB}onidx", 'olga'), undef, '... and out of onidx');
    index_consistent($OB, 'online index after the sweep');

    # the sweep takes at most 100 names per heartbeat
    my @many = map { sprintf 'm%03d', $_ } 1 .. 150;
    register($OB, $_, desc => 'image many') for @many;
    $pres->('w4', $NOW, $NOW - 1, @many);
    my $later = $NOW + $GRACE + 10;
    $pres->('w3', $later + 60_000, $later, 'otto');
    is($r->cmd('ZCARD', "${OB}oidx:many"), 50, 'a heartbeat sweeps at most 100 stale names');
    $pres->('w3', $later + 60_000, $later, 'otto');
    is($r->cmd('ZCARD', "${OB}oidx:many"), 0, 'the next one the rest');
    index_consistent($OB, 'online index after a large sweep');
}

# --- the tie rule: a stop on an exact tie must look at names ----------------------
#
# "kay" and "dee" score exactly the same (tf 2 + tf 1 and tf 1 + tf 2 of two
# terms with the same idf, at one length); "dee" wins on its name.  "zed"
# (the rare third term) fills the top first, then kay's cursor yields kay.
# The bound left is then exactly kay's score, met only by an agent at the
# cursors standing at "dee": the walk may not stop there.
{
    my $TB = 'tie:{reg}:';
    register($TB, 'kay', desc => 'xxx xxx yyy');
    register($TB, 'dee', desc => 'xxx yyy yyy');
    register($TB, 'zed', desc => 'zzz');
    register($TB, sprintf('f%02d', $_), desc => 'qqq rrr sss') for 1 .. 17;
    my $res = retrieve($TB, limit => 2, queries => [ 'xxx yyy zzz' ]);
    is($res->[0][4], $res->[1][4], 'tie rule: kay and dee score the same');
    is_deeply(names(retrieve($TB, limit => 1, queries => [ 'xxx yyy zzz' ])), ['dee'],
              'tie rule: the equal score with the smaller name is found before stopping');
}

# --- exact BM25 on a random corpus, against a reference written here ---------------
#
# retrieve.lua stops reading postings as soon as no unread agent can still
# enter the top (see its header).  It must return exactly what scoring every
# agent would: same names, same order (ties by name in byte order), same
# scores.  A few thousand agents over a Zipf vocabulary, repeated words (tf up
# to 5), tags, stopwords, many agents of one length, a block of agents with
# identical descriptions whose names differ in case and punctuation, 30 %
# online, some expired but still in the online index; a few hundred queries
# with every option.  The reference is plain Perl over the same documents.

{
    my $XB = 'rand:{reg}:';
    my $rng = 20240601;      # our own LCG: the same corpus on every perl
    my $rand = sub { $rng = ($rng * 1103515245 + 12345) % 2**31; return $rng / 2**31 * ($_[0] // 1) };
    my @sy = qw(ka ri to mu sen la vo dre pi nax qua zel bo tri fen gor li sha mon dac ver ul pra ti on);
    my (%seen, @vocab);
    while (@vocab < 400) {
        my $w = join '', map { $sy[int $rand->(scalar @sy)] } 1 .. 2 + int $rand->(2);
        # no trailing "s" and 4+ letters: the tokenizer keeps such words as they are
        push @vocab, $w if length $w >= 4 && $w !~ /s$/ && !$seen{$w}++;
    }
    my (@cum, $acc);
    push @cum, $acc += 1 / $_ for 1 .. @vocab;
    my $draw = sub {
        my $x = $rand->($acc);
        my ($lo, $hi) = (0, $#cum);
        while ($lo < $hi) {
            my $m = int(($lo + $hi) / 2);
            if ($cum[$m] < $x) { $lo = $m + 1 } else { $hi = $m }
        }
        return $vocab[$lo];
    };

    my (%doc, @all);
    my $add = sub {
        my ($name, $words, $tags) = @_;
        my $desc = join ' ', map { $rand->() < 0.15 ? "the $_" : $_ } @$words;
        my $tj = '[' . join(',', map { qq("$_") } @$tags) . ']';
        my $rep = register($XB, $name, desc => ucfirst($desc) . '.', tags => $tj);
        die "register $name: $$rep" if ref $rep eq 'Err';
        my @toks = (@$words, @$tags);
        $doc{$name} = { len => scalar @toks, tf => {} };
        $doc{$name}{tf}{$_}++ for @toks;
        push @all, $name;
    };
    for my $i (1 .. 2500) {
        my @w = map { $draw->() } 1 .. 3 + int $rand->(10);
        push @w, ($w[0]) x (1 + int $rand->(4)) if $rand->() < 0.15;
        $add->(sprintf('a%05d', $i), \@w, [ map { $draw->() } 1 .. int $rand->(3) ]);
    }
    my @same = ($vocab[3], $vocab[9], $vocab[40]);
    $add->($_, \@same, []) for qw(Zed alpha Beta a-b a_b aB A.b b b0 Ab a+b a@b), map { "t$_" } 1 .. 40;
    $add->(sprintf('s%04d', $_), [ $vocab[0], $vocab[1], $vocab[2 + $_ % 5], $vocab[60] ], [])
        for 1 .. 300;        # 300 agents of length 4 sharing the commonest words
    index_consistent($XB, 'random corpus');

    my (%online, @on, @stale);
    for my $name (@all) {
        my $x = $rand->();
        if ($x < 0.3) { push @on, $name; $online{$name} = 1 } elsif ($x < 0.35) { push @stale, $name }
    }
    run_script('presence', [ "${XB}online" ], $XB, 'w1', $NOW + 60_000, $NOW, @on);
    run_script('presence', [ "${XB}online" ], $XB, 'w2', $NOW - 5_000, $NOW - 10_000, @stale);
    index_consistent($XB, 'random corpus with presence');

    my %post;
    for my $name (@all) {
        push @{ $post{$_} }, $name for keys %{ $doc{$name}{tf} };
    }
    my $N = @all;
    my $total = 0;
    $total += $doc{$_}{len} for @all;
    my $avgdl = $total / $N;
    my ($k1, $bb) = (1.2, 0.75);
    my ($k1p1, $omb) = ($k1 + 1, 1 - $bb);
    my %stop = map { $_ => 1 } qw(the and of to with for);

    my $reference = sub {
        my (%o) = @_;
        my (@out, %emitted);
        for my $q (@{ $o{queries} }) {
            my (%dup, @terms, %score);
            for my $t (split ' ', $q) {
                push @terms, $t unless $stop{$t} || $dup{$t}++;
            }
            for my $t (@terms) {
                my $df = @{ $post{$t} || [] } or next;
                my $idf = log(1 + ($N - $df + 0.5) / ($df + 0.5));
                for my $d (@{ $post{$t} }) {
                    my ($f, $dl) = ($doc{$d}{tf}{$t}, $doc{$d}{len});
                    $score{$d} = ($score{$d} // 0) + $idf * $f * $k1p1 / ($f + $k1 * ($omb + $bb * $dl / $avgdl));
                }
            }
            my @rank = sort { $score{$b} <=> $score{$a} || $a cmp $b }
                       grep { $_ ne $o{exclude} && (!$o{online_only} || $online{$_}) } keys %score;
            splice @rank, $o{limit} if @rank > $o{limit};
            for (@rank) {
                push @out, [ $_, sprintf('%.4f', $score{$_}), $online{$_} ? '1' : '0' ] unless $emitted{$_}++;
            }
        }
        return \@out;
    };

    my ($bad, $nonempty, @diag) = (0, 0);
    for my $i (1 .. 400) {
        my @qs;
        for (1 .. ($rand->() < 0.2 ? 2 + int $rand->(2) : 1)) {
            my @w = map { $draw->() } 1 .. 1 + int $rand->(4);
            push @w, 'the' if $rand->() < 0.3;
            push @w, 'unheardof' if $rand->() < 0.1;
            push @w, $w[0] if $rand->() < 0.1;
            push @qs, join ' ', @w;
        }
        my %o = (queries => \@qs, limit => (1, 3, 3, 10, 50)[int $rand->(5)],
                 online_only => $rand->() < 0.3 ? 1 : 0,
                 exclude => $rand->() < 0.5 ? $all[int $rand->(scalar @all)] : '');
        $o{queries} = [ $same[0] ] if $i % 40 == 0;      # the tie block, cut by limit
        my $want = $reference->(%o);
        my $got = retrieve($XB, queries => $o{queries}, limit => $o{limit},
                           online_only => $o{online_only} ? '1' : '0', exclude => $o{exclude});
        $got = [ map { [ @$_[0, 4, 5] ] } @$got ] unless ref $got eq 'Err';
        $nonempty++ if @$want;
        next if ref $got ne 'Err' && Test::More::_deep_check($got, $want);
        $bad++;
        push @diag, "query " . join(' | ', @{ $o{queries} }) . " limit $o{limit} online_only $o{online_only}"
            . " exclude '$o{exclude}':\n  got  " . (ref $got eq 'Err' ? $$got : join ' ', map { "$_->[0]=$_->[1]" } @$got)
            . "\n  want " . join(' ', map { "$_->[0]=$_->[1]" } @$want) if @diag < 5;
    }
    ok($nonempty > 300, "random corpus: $nonempty of 400 queries have results");
    is($bad, 0, 'random corpus: every answer is exactly the full BM25 ranking (names, order, scores, online)')
        or diag join "\n", @diag;
}

# --- query -----------------------------------------------------------------------

$r->cmd('HSET', "${RB}rep:sam", partial => 2);
$res = run_script('query', [ "${RB}online" ], $RB, $NOW, qw(carl nobody sam));
is_deeply($res, [ '1', 'carl', 'Thing Assistant', 'image scale crop', '[]', '2024-01-01-00-00-00', '1', '0', record_json(), '',
                  '0', 'nobody', '', '', '', '', '0', '0', '', '',
                  '1', 'sam', 'Thing Assistant', 'image short', '[]', '2024-01-01-00-00-00', '0', '0',
                  record_json(partial => 2), '' ],
          'query: 10-tuples in request order (the record, then a2a_url), unknown names marked 0');
$r->cmd('DEL', "${RB}rep:sam");
is(run_script('query', [ "${B}online" ], $B, $NOW, 'alice')->[4], '["summary"]', 'query: tags as JSON');
is(err_code(run_script('query', [ "${B}online" ], $B, $NOW)), 'BADARG', 'query without a name: BADARG');
{
    my $AB = 'a2a:{reg}:';
    register($AB, 'ada', desc => 'bridges an A2A agent',
             a2a => 'http://127.0.0.1:9/.well-known/agent-card.json');
    is(run_script('query', [ "${AB}online" ], $AB, $NOW, 'ada')->[9],
       'http://127.0.0.1:9/.well-known/agent-card.json', 'query: a2a_url as registered');
    is(run_script('list_agents', [ "${AB}agents", "${AB}online" ], $AB, $NOW, 0, 1)->[8],
       'http://127.0.0.1:9/.well-known/agent-card.json', 'list: a2a_url as registered');
    register($AB, 'ada', desc => 'bridges an A2A agent');
    is(run_script('query', [ "${AB}online" ], $AB, $NOW, 'ada')->[9], '',
       'query: re-registered without a2a_url, the old one is gone');
}

# --- goal_message ------------------------------------------------------------------

{
    my ($meta, $inbox) = ('ioa:{goal:m1}:meta', 'ioa:{goal:m1}:inbox');
    my $msg = sub { run_script('goal_message', [ $meta, $inbox ], 'Ann', $_[0], $NOW, 2) };
    is(err_code($msg->('hi')), 'NOGOAL', 'goal_message: no such goal');
    $r->cmd('HSET', $meta, state => 'running');
    $r->cmd('PEXPIRE', $meta, 60_000);
    like($msg->('one'), qr/^\d+-\d+$/, 'goal_message: the message id');
    my $e = $r->cmd('XRANGE', $inbox, '-', '+')->[0][1];
    is_deeply($e, [ sender => 'Ann', content => 'one', at => $NOW ], 'goal_message: sender, content, at');
    ok($r->cmd('PTTL', $inbox) > 0, 'goal_message: the inbox expires with the goal');
    $msg->('two');
    is(err_code($msg->('three')), 'FULL', 'goal_message: a full inbox refuses, never trims');
    is($r->cmd('XLEN', $inbox), 2, 'goal_message: both kept');
    $r->cmd('DEL', $inbox);
    for my $st (qw(concluded failed cancelled cancelling)) {
        $r->cmd('HSET', $meta, state => $st);
        is(${ $msg->('late') }, "ENDED $st", "goal_message: $st refuses");
    }
    is($r->cmd('EXISTS', $inbox), 0, 'goal_message: nothing added to an ended goal');

    # the owner: the goal's launcher only ("" for anyone)
    $r->cmd('HSET', $meta, state => 'running', launched_by => 'ops');
    my $as = sub { run_script('goal_message', [ $meta, $inbox ], 'x', 'hi', $NOW, 5, $_[0]) };
    is(err_code($as->('eve')), 'NOTYOURS', 'goal_message: another launcher: NOTYOURS');
    is($r->cmd('EXISTS', $inbox), 0, 'goal_message: ... and nothing added');
    like($as->('ops'), qr/^\d+-\d+$/, 'goal_message: its launcher posts');
    like($as->(''), qr/^\d+-\d+$/, 'goal_message: no owner given: anyone');
    $r->cmd('DEL', $meta, $inbox);
}

# --- goal_cancel -------------------------------------------------------------------

{
    my $meta = 'ioa:{goal:c1}:meta';
    my $cancel = sub { run_script('goal_cancel', [ $meta ], 'ioa:{goal:c1}:control', $NOW, '', $_[0]) };
    is(err_code($cancel->('')), 'NOGOAL', 'goal_cancel: no such goal');
    $r->cmd('HSET', $meta, state => 'running', launched_by => 'ops');
    is(err_code($cancel->('eve')), 'NOTYOURS', 'goal_cancel: another launcher: NOTYOURS');
    is($r->cmd('HGET', $meta, 'state'), 'running', 'goal_cancel: ... and the goal runs on');
    is($cancel->('ops'), 1, 'goal_cancel: its launcher cancels');
    is($r->cmd('HGET', $meta, 'state'), 'cancelling', 'goal_cancel: cancelling');
    is($cancel->(''), 1, 'goal_cancel: no owner given: anyone');
    $r->cmd('DEL', $meta);
}

# --- list_agents -------------------------------------------------------------------

sub list_page {
    my ($off, $cnt) = @_;
    my $rep = run_script('list_agents', [ "${RB}agents", "${RB}online" ], $RB, $NOW, $off, $cnt);
    my $total = shift @$rep;
    my @names;
    while (@$rep) { my @t = splice @$rep, 0, 8; push @names, $t[0] }
    return [ $total, @names ];
}
is_deeply(list_page(0, 100), [ 6, qw(anna carl lena sam rita xena) ],
          'list: by registration time, equal times by name');
is_deeply(list_page(2, 2), [ 6, qw(lena sam) ], 'list: a middle page');
is_deeply(list_page(5, 2), [ 6, 'xena' ], 'list: the last page is short');
is_deeply(list_page(9, 2), [6], 'list: past the end');
is_deeply(list_page(0, 0), [6], 'list: count 0 gives the total only');
register($RB, 'anna', desc => 'image image crop', now => 99_999);
is_deeply(list_page(0, 1), [ 6, 'anna' ], 'list: re-registering keeps the position');
is_deeply([ @{ run_script('list_agents', [ "${RB}agents", "${RB}online" ], $RB, $NOW, 1, 1) } ],
          [ 6, 'carl', 'Thing Assistant', 'image scale crop', '[]', '2024-01-01-00-00-00', '1', '0', '' ],
          'list: a row is name, type, desc, tags, created_at, online, protocol, a2a_url');
is(err_code(run_script('list_agents', [ "${RB}agents", "${RB}online" ], $RB, $NOW, -1, 1)),
   'BADARG', 'list: negative offset: BADARG');

# --- teamup_members -------------------------------------------------------------------

$res = run_script('teamup_members', [ "${RB}agents" ], $RB, 'c1', 0, qw(anna ghost carl spook));
is_deeply([ err_code($res), $$res ], [ 'UNKNOWN_AGENT', 'UNKNOWN_AGENT ghost, spook are not registered' ],
          'teamup with unknown names: UNKNOWN_AGENT naming them');
is($r->cmd('EXISTS', "${RB}rooms:anna", "${RB}rooms:carl", "${RB}rooms:ghost"), 0,
   'a refused teamup changes nothing');
is(run_script('teamup_members', [ "${RB}agents" ], $RB, 'c1', 0, qw(anna carl anna)), 2,
   'teamup: distinct members counted');
is_deeply($r->cmd('SMEMBERS', "${RB}rooms:carl"), ['c1'], 'teamup: room recorded per member');
# ioa_max_agent_rooms: carl is in 1 room
$res = run_script('teamup_members', [ "${RB}agents" ], $RB, 'c2', 1, qw(anna carl));
is_deeply([ err_code($res), $$res ], [ 'TOOMANYROOMS', 'TOOMANYROOMS anna, carl are in 1 rooms already' ],
          'teamup past max: TOOMANYROOMS naming them');
is($r->cmd('SISMEMBER', "${RB}rooms:anna", 'c2'), 0, '... and nothing recorded');
is(run_script('teamup_members', [ "${RB}agents" ], $RB, 'c2', 2, qw(anna carl)), 2, 'within max: recorded');
is(err_code(run_script('teamup_members', [ "${RB}agents" ], $RB, 'c3', 'x', 'anna')), 'BADARG',
   'max not a number: BADARG');
$r->cmd('SREM', "${RB}rooms:$_", 'c2') for qw(anna carl);

# --- position_save, position_load: an SSE inbox's cursor -----------------------------

{
    my $K = 'ioa:{pos:0123456789abcdef}';
    my $save = sub { run_script('position_save', [$K], @_[0 .. 2], 3, 3600) };
    my $load = sub { run_script('position_load', [$K], $_[0], 600) };
    is(err_code($load->(1)), 'NOPOS', 'position_load of an unknown cursor: NOPOS');
    $save->(1, 's', 'a:1-0,b:1-0,c:1-0');
    $save->(2, 'd', 'b:2-0');
    $save->(3, 'd', 'd:3-0,a:3-0');
    is($load->(1), 'a:1-0,b:1-0,c:1-0', 'version 1: the snapshot');
    is($load->(2), 'a:1-0,b:2-0,c:1-0', 'version 2: a change applied, the order kept');
    is($load->(3), 'a:3-0,b:2-0,c:1-0,d:3-0', 'version 3: changes applied, a new room appended');
    ok($r->cmd('TTL', $K) <= 600, 'a load leaves the cursor ten minutes');
    $save->(4, 'd', 'c:4-0');
    $save->(5, 'd', 'c:5-0');         # keep 3: versions 3 .. 5, rebuilt from s1
    ok($r->cmd('TTL', $K) > 600, 'a save gives the cursor its hour');
    is($load->(5), 'a:3-0,b:2-0,c:5-0,d:3-0', 'the newest resolves from the snapshot and every change');
    is($load->(3), 'a:3-0,b:2-0,c:1-0,d:3-0', 'so does the oldest kept');
    $save->(5, 's', 'a:3-0,b:2-0,c:5-0,d:3-0');
    $save->(6, 'd', 'e:6-0');
    $save->(7, 'd', 'e:7-0');         # versions 5 .. 7: s5 rebuilds them all
    is_deeply([ sort @{ $r->cmd('HKEYS', $K) } ], [qw(d6 d7 s5)], 'what no version kept needs is deleted');
    is(err_code($load->(4)), 'NOPOS', 'a version older than keep: NOPOS');
    is($load->(7), 'a:3-0,b:2-0,c:5-0,d:3-0,e:7-0', 'the newest, from the newer snapshot');
    is(err_code(run_script('position_save', [$K], 1, 'x', 't', 3, 3600)), 'BADARG', 'a bad kind: BADARG');
    $r->cmd('DEL', $K);
}

# --- agent_rooms: an agent's rooms a batch at a time ---------------------------------

{
    $r->cmd('SADD', "${RB}rooms:many", map { "room$_" } 1 .. 300);
    my ($cursor, $batches, $first, %seen) = ('0', 0);
    do {
        my $res = run_script('agent_rooms', [ "${RB}rooms:many" ], $cursor, 100);
        like($res->[0], qr/^\d{13}$/, 'agent_rooms: Redis\' time in ms') unless $batches;
        $first //= scalar @{ $res->[1] };
        $seen{$_}++ for @{ $res->[1] };
        $cursor = $res->[2];
        $batches++;
    } while ($cursor ne '0' && $batches < 100);
    ok($first < 300, "agent_rooms: a batch, not the whole set ($first of 300)");
    is(scalar keys %seen, 300, "agent_rooms: every room, in $batches batches");
    my $small = run_script('agent_rooms', [ "${RB}rooms:carl" ], '0', 100);
    is_deeply([ $small->[1], $small->[2] ], [ ['c1'], '0' ], 'agent_rooms: a small set whole, cursor "0"');
    $r->cmd('DEL', "${RB}rooms:many");
}

# --- rooms: create, post, record ----------------------------------------------------------

sub room { my $id = shift; return "hub:{room:$id}:" }
my $R1 = room('c1');

is(run_script('room_create', [ "${R1}meta", "${R1}members" ], 'c1', 'Imaging', 'anna', $NOW, '',
              qw(anna carl)), 'OK', 'room_create');
is(err_code(run_script('room_create', [ "${R1}meta", "${R1}members" ], 'c1', 'x', 'sam', $NOW, '', 'sam')),
   'ROOMEXISTS', 'room_create twice: ROOMEXISTS');
{
    my $made = $r->cmd('HGET', "${R1}meta", 'made');
    my $now = $r->cmd('TIME');
    $now = $now->[0] * 1000 + int($now->[1] / 1000);
    ok($made =~ /^\d+$/ && $made <= $now && $made > $now - 5000, "room_create: made, by Redis's clock ($made)");
}
is_deeply([ sort @{ $r->cmd('SMEMBERS', "${R1}members") } ], [qw(anna carl)], 'second create changed nothing');
is(err_code(run_script('room_create', [ room('c0') . 'meta', room('c0') . 'members' ], 'c0', '', 'a', $NOW, '')),
   'BADARG', 'room_create without members: BADARG');

my $sub = Resp->connect($port);
is_deeply($sub->cmd('SUBSCRIBE', 'chan:c1'), [ 'subscribe', 'chan:c1', 1 ], 'subscribed to the room channel');

sub post {
    my ($R, $sender, $env, $maxlen, $chan) = @_;
    return run_script('post', [ "${R}members", "${R}log" ], $sender, $env, $maxlen // '0', $chan // 'chan:c1');
}
sub next_message {
    return undef unless IO::Select->new($sub->{s})->can_read(5);
    return $sub->read;
}

my $env1 = '{"content":"hi","sender":"anna","comm_id":"c1","state":1,"type":4}';
my $id1 = post($R1, 'anna', $env1);
like($id1, qr/^\d+-\d+$/, 'post by a member returns the stream id');
is_deeply($r->cmd('XRANGE', "${R1}log", '-', '+'),
          [ [ $id1, [ 'e', $env1, 'h', sha1_hex(genesis('c1') . "\n0-0\n" . sha1_hex($env1)),
                      'p', '0-0', 'd', sha1_hex($env1) ] ] ],
          'the envelope is in the log, e first, then h chaining its digest to the genesis value, then p, the id before it (none: 0-0), then d, the digest');
is_deeply(next_message(), [ 'message', 'chan:c1', "$id1 $env1" ], 'and was published as "id json"');

is(err_code(post($R1, 'sam', '{"content":"intruder"}')), 'NOTMEMBER', 'post by a non-member: NOTMEMBER');
is(err_code(post(room('nope'), 'anna', '{}')), 'NOROOM', 'post to an unknown room: NOROOM');
is($r->cmd('XLEN', "${R1}log"), 1, 'nothing stored for refused posts');
is($r->cmd('EXISTS', room('nope') . 'log'), 0, 'no log created for an unknown room');
my $id2 = post($R1, 'carl', '{"n":2}');
is_deeply(next_message(), [ 'message', 'chan:c1', "$id2 {\"n\":2}" ],
          'nothing was published for refused posts (the next message is the next good post)');
ok(cmp_ids($id1, $id2) < 0, 'ids increase');
is({ @{ $r->cmd('XRANGE', "${R1}log", $id2, $id2)->[0][1] } }->{p}, $id1,
   'the second entry\'s p is the first\'s id (a reader that finds p above its last id knows entries were trimmed)');

my $R2 = room('c2');
run_script('room_create', [ "${R2}meta", "${R2}members" ], 'c2', '', 'anna', $NOW, '', 'anna');
my $last;
$last = post($R2, 'anna', qq({"i":$_}), 10, 'chan:c2') for 1 .. 60;
my $len = $r->cmd('XLEN', "${R2}log");
ok($len >= 10 && $len < 20, "maxlen 10 trims the log approximately (XLEN $len)");
is($r->cmd('XREVRANGE', "${R2}log", '+', '-', 'COUNT', 1)->[0][0], $last, 'trimming keeps the newest');

my $R3 = room('c3');
run_script('room_create', [ "${R3}meta", "${R3}members" ], 'c3', 'Paging', 'rita', $NOW + 7, '',
           qw(rita anna carl));
my @ids = map { post($R3, 'rita', qq({"i":$_}), '0', 'chan:c3') } 1 .. 25;
is($r->cmd('XLEN', "${R3}log"), 25, 'maxlen 0 keeps everything');

sub record { run_script('room_record', [ map { $_[0] . $_ } qw(meta members log) ], @_[1 .. $#_]) }
$res = record($R3, '-', 10);
is_deeply([ @$res[ 0 .. 4 ] ], [ '1', 'Paging', 'rita', $NOW + 7, [qw(anna carl rita)] ],
          'room_record: meta and sorted members');
my @page = @{ $res->[5] };
is_deeply([ @page[ grep { $_ % 2 == 0 } 0 .. $#page ] ], [ @ids[ 0 .. 9 ] ], 'first page: ids 1-10');
is($page[1], '{"i":1}', 'entries carry the envelope');
@page = @{ record($R3, $ids[9], 10)->[5] };
is_deeply([ @page[ grep { $_ % 2 == 0 } 0 .. $#page ] ], [ @ids[ 10 .. 19 ] ],
          'second page starts after the given id (exclusive)');
@page = @{ record($R3, $ids[19], 10)->[5] };
is(scalar @page, 10, 'last page is short (5 entries)');
is_deeply(record($R3, $ids[24], 10)->[5], [], 'after the last id: empty');
is(scalar @{ record($R3, '-', 0)->[5] }, 50, 'count 0: the whole log');
is(record($R3, '-', 10)->[6], '1', 'more: "1" when entries follow the page');
is(record($R3, $ids[19], 10)->[6], '0', 'more: "0" on the last page');
is(record($R3, $ids[14], 10)->[6], '0', 'more: "0" on a page that ends exactly at the end');
is(record($R3, '-', 0)->[6], '0', 'more: "0" for the whole log');
$res = record($R3, '-', -1);
is_deeply([ @$res[ 0 .. 6 ] ], [ '1', 'Paging', 'rita', $NOW + 7, [qw(anna carl rita)], [], '0' ],
          'count -1: the room and its members, no log');
is($res->[7], $ids[24], 'count -1: and the id of the log\'s last entry');
my $R4 = room('c4');
run_script('room_create', [ "${R4}meta", "${R4}members" ], 'c4', '', 'rita', $NOW, '', 'rita');
is(record($R4, '-', -1)->[7] =~ s/-0$//r, $r->cmd('HGET', "${R4}meta", 'made'),
   'count -1 of a room that never spoke: when it was made, as an id');
is(record(room('nope'), '-', -1)->[7], undef, 'count -1 of an unknown room: 7 elements');

# room_tail: the walk back to the newest page's start, in steps
sub tail { run_script('room_tail', [ "$_[0]log" ], @_[1 .. $#_]) }
is_deeply(tail($R3, '+', 11, 1 << 20), [ 11, $ids[14], '1' ],
          'room_tail: 11 back from the end reach the 15th (the start of a page of 10 below it)');
is_deeply(tail($R3, '+', 30, 1 << 20), [ 25, $ids[0], '0' ],
          '30 back from 25: the log\'s start first, all 25 walked');
is_deeply(tail($R3, '+', 25, 1 << 20), [ 25, $ids[0], '1' ],
          'exactly 25 back: reached');
$res = tail($R3, '+', 20, 30);
is_deeply($res, [ 16, $ids[9], '' ], 'max_bytes 30: the step ends after its batch of 16, not reached');
is_deeply(tail($R3, $res->[1], 4, 30), [ 4, $ids[5], '1' ], '... and the next step goes on below it');
is_deeply(tail($R3, $ids[0], 5, 30), [ 0, '', '0' ], 'below the first entry: nothing, the start');
is_deeply(tail(room('nope'), '+', 5, 30), [ 0, '', '0' ], 'a missing log: nothing, the start');
is(err_code(tail($R3, '+', 0, 30)), 'BADARG', 'want 0: BADARG');
is(err_code(tail($R3, '+', 5, 0)), 'BADARG', 'max_bytes 0: BADARG');
# max_bytes: every envelope here is 7 or 8 bytes ({"i":1} .. {"i":25})
@page = @{ record($R3, '-', 0, 30)->[5] };
is(scalar @page / 2, 4, 'max_bytes 30: the page stops before the entry that would pass it');
is(record($R3, '-', 0, 30)->[6], '1', '... and says more follows');
@page = @{ record($R3, '-', 0, 1)->[5] };
is(scalar @page / 2, 1, 'max_bytes smaller than one entry: still one (a page always moves on)');
is(err_code(record($R3, '-', -2)), 'BADARG', 'count -2: BADARG');
is(err_code(record($R3, '-', 1, 'x')), 'BADARG', 'max_bytes not a number: BADARG');
is_deeply(record(room('nope'), '-', 10), [ '0', '', '', '', [], [], '0' ], 'room_record of an unknown room');
is_deeply(record($R1, '', 1)->[5], [ $id1, $env1 ], 'start "" is the beginning too');

# --- floor control (post.lua with KEYS[3] floor, KEYS[4] meta, ARGV[5] type) ------

my $RF = room('f1');
run_script('room_create', [ "${RF}meta", "${RF}members" ], 'f1', 'Floor', 'chair', $NOW, '',
           qw(chair ann bob cat));
is_deeply($sub->cmd('SUBSCRIBE', 'chan:f1'), [ 'subscribe', 'chan:f1', 2 ],
          'subscribed to the floor room channel');

my $turn_n = 0;
# A post with the 4-key contract: type ('' for none), the publish mode (''
# PUBLISH) and next_speaker names.
sub turn {
    my ($sender, $type, @next) = @_;
    $turn_n++;
    my $env = qq({"from":"$sender","type":"$type","n":$turn_n});
    return run_script('post', [ map { "$RF$_" } qw(members log floor meta) ],
                      $sender, $env, '0', 'chan:f1', $type, '', @next);
}
sub floor_is {
    my ($want, $label) = @_;
    my $have = $r->cmd('EXISTS', "${RF}floor")
             ? [ sort @{ $r->cmd('SMEMBERS', "${RF}floor") } ] : 'open';
    is_deeply($have, $want, $label);
}
sub set_floor {
    $r->cmd('DEL', "${RF}floor");
    $r->cmd('SADD', "${RF}floor", @_) if @_;
}
sub accepted {
    my ($reply, $label) = @_;
    like(ref $reply ? $$reply : $reply, qr/^\d+-\d+$/, $label);
    return $reply;
}

# Open floor: no key until a directed turn, and plain envelopes never make one.
floor_is('open', 'a new room has an open floor (no floor key)');
accepted(turn('cat', '4'), 'open floor: any member may take a turn');
floor_is('open', 'open floor: a turn without next_speaker keeps it open');
accepted(turn('cat', '4', ''), 'open floor: next_speaker "" is empty');
floor_is('open', 'open floor: still open after next_speaker ""');
accepted(turn('cat', '', 'bob'), 'an envelope without a type is accepted');
floor_is('open', 'an envelope without a type never makes a floor, whatever its next_speaker');
accepted(turn('cat', $_, 'bob'), "type $_ is accepted on an open floor") for 0 .. 3, 7, 8;
floor_is('open', 'types 0-3, 7 and 8 never make a floor');
accepted(post($RF, 'cat', '{"legacy":1,"type":4,"next_speaker":"bob"}', '0', 'chan:f1'),
         'the legacy call (2 keys, 4 args) is accepted');
accepted(run_script('post', [ map { "$RF$_" } qw(members log floor meta) ],
                    'cat', '{"four":1}', '0', 'chan:f1'),
         'the 4-key call without ARGV[5] is accepted');
floor_is('open', 'neither the legacy call nor a call without ARGV[5] touches the floor');

# The first directed turn makes the floor.
my $ida = accepted(turn('ann', '4', 'bob', 'ann'), 'ann addresses bob and herself');
floor_is([qw(ann bob)], 'floor := next_speaker');

my $xlen = $r->cmd('XLEN', "${RF}log");
# Read what was published so far, up to ann's turn: a blocking read (select()
# cannot see what Perl has already buffered), bounded by an alarm.
if (!ref $ida) {
    local $SIG{ALRM} = sub { die "timed out reading the floor room channel\n" };
    alarm 5;
    while (my $m = $sub->read) { last if $m->[2] =~ /^\Q$ida\E / }
    alarm 0;
}
my $no = turn('cat', '4', 'ann');
is(err_code($no), 'NOTYOURTURN', 'a member out of turn: NOTYOURTURN');
is($$no, 'NOTYOURTURN cat does not have the floor; next: ann,bob',
   'the error names the sender and the floor, sorted');
is($r->cmd('XLEN', "${RF}log"), $xlen, 'NOTYOURTURN: nothing stored');
floor_is([qw(ann bob)], 'NOTYOURTURN: the floor is unchanged');
is(err_code(turn('cat', $_)), 'NOTYOURTURN', "type $_ is a turn: refused out of turn") for 5, 6, 9, 10, 11;
{
    my $last = $r->cmd('XREVRANGE', "${RF}log", '+', '-', 'COUNT', 1)->[0];
    is($r->cmd('GET', "${RF}chain"), "$last->[0] $last->[1][3]",
       'refused turns do not extend the chain: the head is still the last stored entry');
}
is(err_code(turn('zed', '4')), 'NOTMEMBER', 'a non-member is NOTMEMBER before any floor check');
my $idp = accepted(turn('cat', '8', 'ann'), 'progress (8) out of turn is accepted');
is_deeply(next_message(), [ 'message', 'chan:f1', "$idp {\"from\":\"cat\",\"type\":\"8\",\"n\":$turn_n}" ],
          'nothing was published for the refused turns (the next message is the progress)');
accepted(turn('cat', '7', 'ann'), 'result (7) out of turn is accepted');
accepted(turn('cat', '', 'ann'), 'an envelope without a type out of turn is accepted');
accepted(turn('cat', $_, 'ann'), "type $_ out of turn is accepted") for 0 .. 3;
floor_is([qw(ann bob)], '0-3, 7, 8 and untyped envelopes never change the floor');
accepted(post($RF, 'cat', '{"legacy":2}', '0', 'chan:f1'), 'the legacy call is never refused by the floor');
floor_is([qw(ann bob)], 'and does not change it');

# Non-creator turns: floor := floor - {S} + L (members only).
set_floor(qw(bob cat));
accepted(turn('bob', '4', 'ann', 'ghost', 'ann'), 'bob takes his turn');
floor_is([qw(ann cat)], 'floor - {bob} + [ann]; the non-member ghost is ignored');
accepted(turn('cat', '4'), 'cat takes her turn without naming anyone');
floor_is(['ann'], 'floor - {cat}: ann still holds the floor');
accepted(turn('ann', '4'), 'ann takes the last turn without naming anyone');
floor_is(['ann'], 'an empty result becomes {sender} when the room had a floor');
accepted(turn('ann', '4', ''), 'ann with next_speaker ""');
floor_is(['ann'], '"" is empty too: {sender}');
accepted(turn('ann', '4', 'ghost', 'chair-x'), 'ann names only non-members');
floor_is(['ann'], 'only non-members named: empty, so {sender}');
accepted(turn('ann', '4', 'ann', 'cat'), 'ann names herself and cat');
floor_is([qw(ann cat)], 'a speaker may name herself');

# 5, 6, 9 and 10 keep the speaker on the floor.
for my $t ([ 5, 'SYNC_TASK_ASSIGNMENT' ], [ 6, 'ASYNC_TASK_ASSIGNMENT' ]) {
    set_floor('ann');
    accepted(turn('ann', $t->[0], 'bob', 'cat'), "$t->[1] by ann to bob and cat");
    floor_is([qw(ann bob cat)], "$t->[1]: the assignees and the assigner");
}
set_floor(qw(ann bob));
accepted(turn('ann', '9', ''), 'PAUSE with next_speaker ""');
floor_is([qw(ann bob)], 'PAUSE: the pauser keeps the floor (and bob keeps his)');
set_floor('bob');
accepted(turn('bob', '10', 'ann'), 'CONCLUDE_GROUP_DISCUSSION by bob naming ann');
floor_is([qw(ann bob)], 'CONCLUDE_GROUP_DISCUSSION: the concluder keeps the floor');
set_floor('bob');
accepted(turn('bob', '4', 'ann'), 'a DISCUSSION turn for comparison');
floor_is(['ann'], 'DISCUSSION: the speaker does not keep the floor');
$r->cmd('DEL', "${RF}floor");
accepted(turn('cat', '6'), 'an assignment on an open floor naming nobody');
floor_is(['cat'], 'the assigner alone holds the floor');
$r->cmd('DEL', "${RF}floor");

# The creator chairs the room: may always speak, and re-addresses the floor.
set_floor(qw(ann bob));
accepted(turn('chair', '4', 'cat'), 'the creator speaks without holding the floor');
floor_is(['cat'], 'a creator turn replaces the floor with its next_speaker');
accepted(turn('chair', '5', 'bob'), 'the creator assigns a task to bob');
floor_is([qw(bob chair)], 'creator + SYNC_TASK_ASSIGNMENT: floor := [bob] + creator');
accepted(turn('chair', '4'), 'the creator speaks naming nobody');
floor_is(['chair'], 'creator, empty result, room had a floor: {creator}');
accepted(turn('chair', '4', 'ghost'), 'the creator names only a non-member');
floor_is(['chair'], 'non-members are ignored for the creator too');
$r->cmd('DEL', "${RF}floor");
accepted(turn('chair', '4'), 'the creator on an open floor naming nobody');
floor_is('open', 'the floor stays open');
$r->cmd('HSET', "${RF}meta", 'creator', 'ann');
set_floor('bob');
accepted(turn('ann', '4', 'cat'), 'the creator is read from the meta hash (now ann)');
is(err_code(turn('chair', '4')), 'NOTYOURTURN', 'and the former creator has no privilege left');
$r->cmd('HSET', "${RF}meta", 'creator', 'chair');

# CONCLUSION ends the conversation: the floor is deleted.
set_floor('bob');
accepted(turn('bob', '11', 'ann'), 'CONCLUSION by the floor holder');
floor_is('open', 'CONCLUSION deletes the floor: open again');
accepted(turn('cat', '4'), 'anyone may speak after a CONCLUSION');
set_floor('bob');
accepted(turn('chair', '11'), 'CONCLUSION by the creator');
floor_is('open', 'open again after the creator\'s CONCLUSION');

# A turn type without the floor keys is a caller bug, refused before storing.
$xlen = $r->cmd('XLEN', "${RF}log");
is(err_code(run_script('post', [ "${RF}members", "${RF}log" ], 'cat', '{"x":1}', '0', 'chan:f1', '4')),
   'BADARG', 'ARGV[5] a turn type with only 2 keys: BADARG');
is($r->cmd('XLEN', "${RF}log"), $xlen, 'BADARG: nothing stored');

# --- the hash chain (post.lua writes h and R..chain; verify.lua checks) ----------

sub genesis { sha1_hex("ioa-room-chain-v2\n$_[0]") }
sub genesis_v1 { sha1_hex("ioa-room-chain-v1\n$_[0]") }
sub verify_batch {
    my ($R, $cursor, $state, $count) = @_;
    return run_script('verify', [ "${R}log", "${R}chain" ], $cursor, $state, $count);
}
# loops verify.lua as ioa-worker verify-room does: (status, id, note, checked, unchained);
# the redacted and legacy (chain v1) counts of the last walk in %Counts
our %Counts;
sub verify_all {
    my ($R, $count) = @_;
    my ($cursor, $state, $checked, $unchained, $start) = ('', '', 0, 0, '');
    %Counts = (redacted => 0, legacy => 0);
    while (1) {
        my $v = verify_batch($R, $cursor, $state, $count // 3);
        return ('error', $$v) if ref $v eq 'Err';
        $checked += $v->[3];
        $unchained += $v->[4];
        $Counts{redacted} += $v->[7] // 0;
        $Counts{legacy} += $v->[8] // 0;
        $start = $v->[0] eq 'broken' ? ($v->[6] || $start) : ($v->[5] || $start);
        ($cursor, $state) = @$v[1, 2];
        next if $v->[0] eq 'more';
        return ($v->[0], $v->[1], $v->[0] eq 'broken' ? $v->[5] : $start, $checked, $unchained);
    }
}
sub chain_entries {
    return map { [ $_->[0], { @{ $_->[1] } } ] } @{ $r->cmd('XRANGE', "$_[0]log", '-', '+') };
}

{
    my $RC = room('ch1');
    run_script('room_create', [ "${RC}meta", "${RC}members" ], 'ch1', '', 'ann', $NOW, '', 'ann');
    my @id = map { post($RC, 'ann', qq({"i":$_}), '0', 'chan:ch1') } 1 .. 8;
    my @e = chain_entries($RC);
    is($e[0][1]{d}, sha1_hex('{"i":1}'), 'chain v2: d is the envelope\'s digest');
    is_deeply([ @{ $r->cmd('XRANGE', "${RC}log", '-', '+')->[0][1] }[0, 2, 4, 6] ], [qw(e h p d)],
              'chain v2: the fields are e, h, p, d in that order');
    is($e[0][1]{h}, sha1_hex(genesis('ch1') . "\n0-0\n" . sha1_hex('{"i":1}')),
       'chain: the first entry links to sha1("ioa-room-chain-v2\n<comm_id>") and id 0-0, over d');
    my $links = grep { $e[$_][1]{h} eq sha1_hex("$e[$_-1][1]{h}\n$e[$_-1][0]\n" . sha1_hex($e[$_][1]{e})) } 1 .. $#e;
    is($links, 7, 'chain: every later entry links to the previous hash and id, over the digest');
    is($r->cmd('GET', "${RC}chain"), "$id[-1] $e[-1][1]{h}", 'chain: the head is "<last id> <last h>"');
    is_deeply([ verify_all($RC, $_) ], [ 'ok', $id[-1], "genesis $id[0]", 8, 0 ],
              "verify.lua, batch $_: ok, 8 links from genesis") for 1, 3, 8, 100;
    is(err_code(verify_batch($RC, '', '', 0)), 'BADARG', 'verify.lua: count 0 is BADARG');

    # an edited envelope (the stream rewritten with the same ids)
    $r->cmd('DEL', "${RC}log");
    for my $x (@e) {
        my $env = $x->[0] eq $id[4] ? '{"i":55}' : $x->[1]{e};
        $r->cmd('XADD', "${RC}log", $x->[0], 'e', $env, map { $_ => $x->[1]{$_} } qw(h p d));
    }
    is_deeply([ (verify_all($RC))[0 .. 2] ], [ 'broken', $id[4], 'hash mismatch: e does not match its digest d' ],
              'verify.lua: an edited envelope is the first broken link (its digest)');
    $r->cmd('XDEL', "${RC}log", $id[4]);
    is_deeply([ (verify_all($RC))[0 .. 2] ], [ 'broken', $id[5], 'hash mismatch' ],
              'verify.lua: after an XDEL the next entry is broken');

    # an unchained entry after the chain started (a hub without the chain)
    my $RD = room('ch2');
    run_script('room_create', [ "${RD}meta", "${RD}members" ], 'ch2', '', 'ann', $NOW, '', 'ann');
    post($RD, 'ann', '{"i":1}', '0', 'chan:ch2');
    my $bare = $r->cmd('XADD', "${RD}log", '*', 'e', '{"i":2}');
    is_deeply([ (verify_all($RD))[0 .. 2] ], [ 'broken', $bare, 'missing hash' ],
              'verify.lua: an entry without h after the chain start is "missing hash"');

    # a room from before the chain: unchained entries, then the chain from genesis
    my $RL = room('ch3');
    run_script('room_create', [ "${RL}meta", "${RL}members" ], 'ch3', '', 'ann', $NOW, '', 'ann');
    $r->cmd('XADD', "${RL}log", '*', 'e', qq({"old":$_})) for 1 .. 4;
    is_deeply([ verify_all($RL) ], [ 'ok', ($r->cmd('XREVRANGE', "${RL}log", '+', '-', 'COUNT', 1))->[0][0], '', 0, 4 ],
              'verify.lua: only pre-chain entries: ok, 4 unchained');
    my $first = post($RL, 'ann', '{"new":1}', '0', 'chan:ch3');
    post($RL, 'ann', '{"new":2}', '0', 'chan:ch3');
    my @l = chain_entries($RL);
    is($l[4][1]{h}, sha1_hex(genesis('ch3') . "\n0-0\n" . sha1_hex('{"new":1}')),
       'chain: a pre-chain room\'s first new entry links to the genesis value');
    is_deeply([ (verify_all($RL))[0, 2, 3, 4] ], [ 'ok', "genesis $first", 2, 4 ],
              'verify.lua: 4 unchained, then 2 links from genesis');

    # trimmed: the oldest retained entry is the anchor
    $r->cmd('XTRIM', "${RC}log", 'MAXLEN', 3);
    my @t = chain_entries($RC);
    is_deeply([ (verify_all($RC))[0, 2, 3] ], [ 'ok', "anchor $t[0][0] $t[0][1]{h}", 3 ],
              'verify.lua: a trimmed log verifies from its anchor');
    # a lost tail is caught by the head
    $r->cmd('XDEL', "${RC}log", $t[2][0]);
    is_deeply([ (verify_all($RC))[0 .. 2] ], [ 'broken', $t[2][0], 'tail missing' ],
              'verify.lua: a deleted last entry is "tail missing", named by the head');
    # a lost head: post.lua goes on from the last chained entry
    $r->cmd('DEL', "${RC}chain");
    is_deeply([ (verify_all($RC))[0 .. 2] ], [ 'broken', $t[1][0], 'head missing' ],
              'verify.lua: chained entries without a head key: "head missing"');
    post($RC, 'ann', '{"i":9}', '0', 'chan:ch1');
    is((verify_all($RC))[0], 'ok', 'post.lua rebuilds a lost head from the last chained entry');
    is_deeply([ verify_all(room('nothing')) ], [ 'empty', '', '', 0, 0 ], 'verify.lua: no log, no head: empty');
}

# --- erasure and chain v1 -> v2 (room_erase.lua) ------------------------------------

# loops room_erase.lua as the hub does: (status, erased, rehashed, old head, new head)
sub erase_all {
    my ($R, $sender, $count) = @_;
    my ($cursor, $old, $new, $erased, $rehashed) = ('', '', '', 0, 0);
    while (1) {
        my $v = run_script('room_erase', [ "${R}log", "${R}log:rw", "${R}chain" ],
                           $sender, 1_700_000_000_123, 'root', $cursor, $old, $new, $count // 3);
        return ('error', $$v) if ref $v eq 'Err';
        ($cursor, $old, $new) = @$v[1 .. 3];
        $erased += $v->[4];
        $rehashed += $v->[5];
        next if $v->[0] eq 'more';
        return ($v->[0], $erased, $rehashed, $old, $new);
    }
}
# appends entries the way post.lua did before chain v2 (h over e, no d)
sub post_v1 {
    my ($R, $cid, @env) = @_;
    my $head = $r->cmd('GET', "${R}chain");
    my ($pid, $ph) = $head ? split(' ', $head) : ('0-0', genesis_v1($cid));
    for my $e (@env) {
        my $h = sha1_hex("$ph\n$pid\n$e");
        my $id = $r->cmd('XADD', "${R}log", '*', 'e', $e, 'h', $h, 'p', $pid);
        ($pid, $ph) = ($id, $h);
    }
    $r->cmd('SET', "${R}chain", "$pid $ph");
}
sub env_of { my ($s, $i, $cid) = @_; qq({"sender":"$s","comm_id":"$cid","type":8,"content":"$s $i","timestamp":17$i}) }

{
    # a v2 room: two senders, one erased
    my $RE = room('er1');
    run_script('room_create', [ "${RE}meta", "${RE}members" ], 'er1', '', 'ann', $NOW, '', 'ann', 'bob');
    post($RE, $_->[0], env_of(@$_, 'er1'), '0', 'chan:er1') for map { ([ 'ann', $_ ], [ 'bob', $_ ]) } 1 .. 4;
    my @before = chain_entries($RE);
    my $head = $r->cmd('GET', "${RE}chain");
    is_deeply([ erase_all($RE, 'bob') ], [ 'done', 4, 0, $head, $head ],
              'room_erase.lua: 4 of bob\'s envelopes erased, nothing re-hashed, the head unchanged');
    my @after = chain_entries($RE);
    is_deeply([ map { $_->[0] } @after ], [ map { $_->[0] } @before ], 'erase: the ids are unchanged');
    is_deeply([ map { $_->[1]{e} } grep { $_->[1]{e} =~ /"ann"/ } @after ],
              [ map { $_->[1]{e} } grep { $_->[1]{e} =~ /"ann"/ } @before ], 'erase: ann\'s envelopes untouched');
    my ($m) = grep { $_->[0] eq $before[1][0] } @after;
    is_deeply(JSON::PP::decode_json($m->[1]{e}),
              { sender => 'bob', comm_id => 'er1', type => 8, timestamp => 171, content => '[erased]',
                erased => { at => 1_700_000_000_123, by => 'root' } },
              'erase: bob\'s envelope is a marker of the same shape, content "[erased]", who and when');
    is($m->[1]{r}, '1700000000123 root', 'erase: "r" says when and by whom');
    is_deeply([ @{ $m->[1] }{qw(d h p)} ], [ @{ $before[1][1] }{qw(d h p)} ], 'erase: d, h and p are kept');
    is_deeply([ (verify_all($RE))[0, 3] ], [ 'ok', 8 ], 'verify.lua: an erased room is intact ...');
    is($Counts{redacted}, 4, '... with 4 entries redacted');
    is_deeply([ erase_all($RE, 'bob') ], [ 'done', 0, 0, $head, $head ], 'erase again: nothing left to erase');
    post($RE, 'bob', env_of('bob', 9, 'er1'), '0', 'chan:er1');
    is((verify_all($RE))[0], 'ok', 'a post after the erasure chains on');
    is($r->cmd('TTL', "${RE}log"), -1, 'the log has no expiry after the rename');
    is($r->cmd('EXISTS', "${RE}log:rw"), 0, 'and the copy is gone');

    # tampered vs redacted
    my @e = chain_entries($RE);
    my $rewrite = sub {
        my ($victim, $edit) = @_;
        $r->cmd('DEL', "${RE}log");
        for my $x (@e) {
            my %f = %{ $x->[1] };
            $edit->(\%f) if $x->[0] eq $victim;
            $r->cmd('XADD', "${RE}log", $x->[0], map { exists $f{$_} ? ($_ => $f{$_}) : () } qw(e h p d r));
        }
    };
    $rewrite->($e[2][0], sub { $_[0]{e} =~ s/ann 2/ann forged/ });
    is_deeply([ (verify_all($RE))[0 .. 2] ], [ 'broken', $e[2][0], 'hash mismatch: e does not match its digest d' ],
              'verify.lua: an edited envelope is tampered, named');
    $rewrite->($e[2][0], sub { $_[0]{r} = '1 x' });
    is_deeply([ (verify_all($RE))[0 .. 2] ], [ 'broken', $e[2][0], 'bad redaction' ],
              'verify.lua: "r" on an envelope that is not a marker: tampered, not redacted');
    $rewrite->($e[1][0], sub { $_[0]{e} =~ s/\[erased\]/changed/ });
    is((verify_all($RE))[0], 'ok', 'verify.lua: a marker\'s text is not covered (it has no secret to keep)');
    $rewrite->($e[2][0], sub { });
    $rewrite->($e[3][0], sub { $_[0]{d} = sha1_hex('x') });
    is_deeply([ erase_all($RE, 'ann', 100) ], [ 'error', "TAMPERED $e[3][0] hash mismatch" ],
       'room_erase.lua refuses a tampered log (a redacted entry\'s d changed): TAMPERED naming the entry');
    is($r->cmd('EXISTS', "${RE}log:rw"), 0, 'and leaves no copy');
    is(chain_entries($RE), @e, 'and the log as it was');

    # BUSY
    $r->cmd('XADD', "${RE}log:rw", '1-1', 'e', 'x');
    is(err_code(run_script('room_erase', [ "${RE}log", "${RE}log:rw", "${RE}chain" ], 'ann', 1, 'r', '', '', '', 5)),
       'BUSY', 'a second rewrite of the same room: BUSY');
    is(err_code(run_script('room_erase', [ "${RE}log", "${RE}log:rw", "${RE}chain" ], 'ann', 1, 'r', $e[0][0], '', '', 0)),
       'BADARG', 'count 0: BADARG');
    $r->cmd('DEL', "${RE}log:rw");
    is(err_code(run_script('room_erase', [ "${RE}log", "${RE}log:rw", "${RE}chain" ], 'ann', 1, 'r', $e[0][0], '', '', 5)),
       'LOST', 'a later batch without its copy: LOST');

    # a chain v1 room: verifies, is migrated by the erasure, verifies under v2
    my $RV = room('v1room');
    run_script('room_create', [ "${RV}meta", "${RV}members" ], 'v1room', '', 'ann', $NOW, '', 'ann');
    post_v1($RV, 'v1room', map { env_of($_->[0], $_->[1], 'v1room') } map { ([ 'ann', $_ ], [ 'bob', $_ ]) } 1 .. 3);
    my @v1 = chain_entries($RV);
    is_deeply([ (verify_all($RV, 2))[0, 2, 3] ], [ 'ok', "genesis $v1[0][0]", 6 ], 'verify.lua: a v1 room verifies');
    is($Counts{legacy}, 6, '... 6 entries under chain v1');
    post($RV, 'ann', env_of('ann', 7, 'v1room'), '0', 'chan:v1room');
    is_deeply([ (verify_all($RV))[0, 3] ], [ 'ok', 7 ], 'a v2 post to a v1 room chains to the v1 head');
    is($Counts{legacy}, 6, '... 6 v1 and 1 v2');
    my $oldhead = $r->cmd('GET', "${RV}chain");
    my @pre = chain_entries($RV);
    my @m = erase_all($RV, 'bob', 2);
    is_deeply([ @m[0 .. 3] ], [ 'done', 3, 7, $oldhead ], 'erase in a v1 room: 3 erased, all 7 re-hashed');
    is($r->cmd('GET', "${RV}chain"), $m[4], 'the head is the new v2 head');
    isnt($m[4], $oldhead, 'which differs from the v1 head');
    my @v2 = chain_entries($RV);
    is_deeply([ map { $_->[0] } @v2 ], [ map { $_->[0] } @pre ], 'ids unchanged');
    is($v2[0][1]{h}, sha1_hex(genesis('v1room') . "\n0-0\n" . sha1_hex($v1[0][1]{e})),
       'the first entry now chains to the v2 genesis');
    is_deeply([ (verify_all($RV))[0, 2, 3] ], [ 'ok', "genesis $v2[0][0]", 7 ], 'verify.lua: intact under v2 ...');
    is_deeply({ %Counts }, { redacted => 3, legacy => 0 }, '... 3 redacted, none left under v1');
    is_deeply([ erase_all($RV, '') ], [ 'done', 0, 0, $m[4], $m[4] ], 'a migration of a v2 room changes nothing');

    # a migration only (no sender), and a tampered v1 room refused
    my $RM = room('v1b');
    run_script('room_create', [ "${RM}meta", "${RM}members" ], 'v1b', '', 'ann', $NOW, '', 'ann');
    post_v1($RM, 'v1b', map { env_of('ann', $_, 'v1b') } 1 .. 5);
    my @b = chain_entries($RM);
    is_deeply([ (erase_all($RM, ''))[0 .. 2] ], [ 'done', 0, 5 ], 'migrate only: 5 re-hashed, none erased');
    is_deeply([ (verify_all($RM))[0, 3] ], [ 'ok', 5 ], 'and it verifies');
    is_deeply([ map { $_->[1]{e} } chain_entries($RM) ], [ map { $_->[1]{e} } @b ], 'the envelopes unchanged');
    my $RT = room('v1t');
    run_script('room_create', [ "${RT}meta", "${RT}members" ], 'v1t', '', 'ann', $NOW, '', 'ann');
    post_v1($RT, 'v1t', map { env_of('ann', $_, 'v1t') } 1 .. 5);
    my @t = chain_entries($RT);
    $r->cmd('XDEL', "${RT}log", $t[2][0]);
    is_deeply([ erase_all($RT, '') ], [ 'error', "TAMPERED $t[3][0] hash mismatch" ],
              'a tampered v1 room is refused, naming the first broken link');
    is($r->cmd('XLEN', "${RT}log"), 4, 'and left as it was');

    # a trimmed v1 room: the anchor keeps its hash
    my $RA = room('v1a');
    post_v1($RA, 'v1a', map { env_of('ann', $_, 'v1a') } 1 .. 6);
    $r->cmd('XTRIM', "${RA}log", 'MAXLEN', 4);
    my @a = chain_entries($RA);
    is_deeply([ (erase_all($RA, 'ann'))[0 .. 2] ], [ 'done', 4, 4 ], 'trimmed v1 room: 4 erased, 4 re-chained');
    is((chain_entries($RA))[0][1]{h}, $a[0][1]{h}, 'the anchor keeps its hash');
    is_deeply([ (verify_all($RA))[0, 2, 3] ], [ 'ok', "anchor $a[0][0] $a[0][1]{h}", 4 ],
              'it verifies from the same anchor');
    is((erase_all(room('nothing'), 'ann'))[0], 'same', 'an empty log: "same"');
}

# --- an erasure's other copies: the coordinator's quotes (room_erase.lua KEYS[4]),
# a goal's feed (goal_feed_erase.lua), its record (goal_erase.lua), the goals of a
# room (room_goals.lua) -------------------------------------------------------------

# loops room_erase.lua with its quotes key: (status, erased, quoted)
sub erase_quotes {
    my ($R, $sender, $mode, @texts) = @_;
    my ($cursor, $old, $new, $erased, $quoted) = ('', '', '', 0, 0);
    while (1) {
        my $v = run_script('room_erase', [ "${R}log", "${R}log:rw", "${R}chain", "${R}log:rwq" ],
                           $sender, 1_700_000_000_123, 'root', $cursor, $old, $new, 2, $mode,
                           $cursor eq '' ? @texts : ());
        return ('error', $$v) if ref $v eq 'Err';
        ($cursor, $old, $new) = @$v[1 .. 3];
        $erased += $v->[4];
        $quoted += $v->[6];
        next if $v->[0] eq 'more';
        return ($v->[0], $erased, $quoted);
    }
}
# loops goal_feed_erase.lua: (status, erased, quoted)
sub erase_feed {
    my ($G, $sender, $mode, @texts) = @_;
    my ($cursor, $erased, $quoted) = ('', 0, 0);
    while (1) {
        my $v = run_script('goal_feed_erase', [ "${G}log", "${G}log:rw", "${G}log:rwq" ],
                           $sender, 1_700_000_000_123, 'root', $cursor, 2, $mode,
                           $cursor eq '' ? @texts : ());
        return ('error', $$v) if ref $v eq 'Err';
        $cursor = $v->[1];
        $erased += $v->[2];
        $quoted += $v->[3];
        next if $v->[0] eq 'more';
        return ($v->[0], $erased, $quoted);
    }
}

{
    my $secret = 'Ann did: write the report';
    my $RQ = room('q1');
    run_script('room_create', [ "${RQ}meta", "${RQ}members" ], 'q1', '', 'coord', $NOW, '',
               qw(coord ann bob));
    post($RQ, 'coord', '{"sender":"coord","comm_id":"q1","type":6,"content":"tasks","ioa_goal":"g1","ioa_step":10}', '0', 'chan:q1');
    post($RQ, 'ann', qq({"sender":"ann","comm_id":"q1","type":7,"content":"result","task_conclusion":"$secret"}), '0', 'chan:q1');
    post($RQ, 'bob', qq({"sender":"bob","comm_id":"q1","type":7,"content":"I saw: $secret"}), '0', 'chan:q1');
    post($RQ, 'ann', '{"sender":"ann","comm_id":"q1","type":8,"content":"ok"}', '0', 'chan:q1');
    post($RQ, 'coord', qq({"sender":"coord","comm_id":"q1","type":11,"content":"Goal: g\\n   ann: $secret\\n   bob: ok\\n   carl: ann: ok","ioa_goal":"g1","ioa_step":41}), '0', 'chan:q1');
    my @before = chain_entries($RQ);

    is_deeply([ map { $_->[0] } @{ $r->cmd('XRANGE', "${RQ}log", '-', '+') } ], [ map { $_->[0] } @before ], 'five entries');
    my $g = run_script('room_goals', [ "${RQ}log" ], '', 2);
    is_deeply($g, [ $before[1][0], 'g1' ], 'room_goals.lua: a batch names the goals of its coordinator steps ...');
    is_deeply(run_script('room_goals', [ "${RQ}log" ], $g->[0], 2), [ $before[3][0] ], '... each once per batch ...');
    is_deeply(run_script('room_goals', [ "${RQ}log" ], $before[3][0], 2), [ '', 'g1' ], '... and "" at the end');

    is_deeply([ erase_quotes($RQ, 'ann', 'erase') ], [ 'done', 2, 1 ],
              'room_erase.lua with KEYS[4]: ann\'s 2 envelopes erased, 1 coordinator step quoting her redacted');
    my @after = chain_entries($RQ);
    my $c = JSON::PP::decode_json($after[4][1]{e});
    is($c->{content}, "Goal: g\n   ann: [erased]\n   bob: ok\n   carl: ann: [erased]",
       'the CONCLUSION: her result, and her short "ok" only where it is attributed to her');
    is_deeply($c->{erased}, { at => 1_700_000_000_123, by => 'root', quoting => 'ann' }, 'marked: erased, quoting ann');
    is($after[4][1]{r}, '1700000000123 root', 'with "r"');
    is_deeply([ @{ $after[4][1] }{qw(d h)} ], [ @{ $before[4][1] }{qw(d h)} ], 'd and h kept');
    like($after[4][1]{e}, qr/^\{"sender":"coord","comm_id":"q1","type":11,"content":/, 'the other bytes as they were');
    is($after[2][1]{e}, $before[2][1]{e}, 'bob quoting her: his own words, untouched');
    is($after[0][1]{e}, $before[0][1]{e}, 'a coordinator step without her words: untouched');
    is_deeply([ (verify_all($RQ))[0, 3] ], [ 'ok', 5 ], 'verify.lua: intact ...');
    is($Counts{redacted}, 3, '... 3 redacted');
    is($r->cmd('EXISTS', "${RQ}log:rwq"), 0, 'the texts key is gone');
    is_deeply([ erase_quotes($RQ, 'ann', 'erase') ], [ 'done', 0, 0 ], 'again: nothing');

    # "quotes": a text from elsewhere, the sender's own envelopes kept
    my $RP = room('q2');
    run_script('room_create', [ "${RP}meta", "${RP}members" ], 'q2', '', 'coord', $NOW, '', qw(coord ann));
    post($RP, 'ann', '{"sender":"ann","comm_id":"q2","type":4,"content":"hello there everyone"}', '0', 'chan:q2');
    post($RP, 'coord', qq({"sender":"coord","comm_id":"q2","type":7,"task_conclusion":"Sub: $secret","ioa_goal":"g2","ioa_step":16}), '0', 'chan:q2');
    is_deeply([ erase_quotes($RP, 'ann', 'quotes', $secret) ], [ 'done', 0, 1 ],
              '"quotes": the texts given redacted in the coordinator\'s step, ann\'s envelope kept');
    my @q2 = chain_entries($RP);
    like($q2[0][1]{e}, qr/hello there everyone/, 'her own envelope there stays');
    is(JSON::PP::decode_json($q2[1][1]{e})->{task_conclusion}, 'Sub: [erased]', 'the quote is gone');
    is(err_code(run_script('room_erase', [ "${RP}log", "${RP}log:rw", "${RP}chain", "${RP}log:rwq" ],
                           'ann', 1, 'r', '', '', '', 5, 'nope')), 'BADARG', 'an unknown mode: BADARG');

    # the feed
    my $G = 'hub:{room:goal-g1}:';
    my @ev = (
        '{"sender":"ioa-worker","timestamp":1,"event":"state","goal_id":"g1","state":"running","comm_id":"q1","conclusion":null,"error":null}',
        qq({"sender":"ioa-worker","timestamp":2,"event":"envelope","goal_id":"g1","envelope":{"id":"5-1","sender":"ann","comm_id":"q1","type":7,"content":"result","task_conclusion":"$secret","timestamp":2}}),
        qq({"sender":"ioa-worker","timestamp":3,"event":"envelope","goal_id":"g1","envelope":{"id":"5-2","sender":"bob","comm_id":"q1","type":7,"content":"I saw: $secret"}}),
        qq({"sender":"ioa-worker","timestamp":4,"event":"envelope","goal_id":"g1","envelope":{"id":"5-3","sender":"coord","comm_id":"q1","type":11,"content":"ann: $secret","ioa_goal":"g1"}}),
        qq({"sender":"ioa-worker","timestamp":5,"event":"state","goal_id":"g1","state":"concluded","comm_id":"q1","conclusion":"ann: $secret","error":null}),
    );
    $r->cmd('XADD', "${G}log", '*', 'e', $_) for @ev;
    $r->cmd('PEXPIRE', "${G}log", 600000);
    my @fb = @{ $r->cmd('XRANGE', "${G}log", '-', '+') };
    is_deeply([ erase_feed($G, 'ann', 'erase') ], [ 'done', 1, 2 ],
              'goal_feed_erase.lua: her envelope\'s copy erased, the coordinator\'s step and the conclusion redacted');
    my @fa = @{ $r->cmd('XRANGE', "${G}log", '-', '+') };
    is_deeply([ map { $_->[0] } @fa ], [ map { $_->[0] } @fb ], 'the ids unchanged');
    is($fa[1][1][1], '{"sender":"ioa-worker","timestamp":2,"event":"envelope","goal_id":"g1","envelope":{"id":"5-1",'
                     . '"comm_id":"q1","sender":"ann","type":7,"timestamp":2,"content":"[erased]",'
                     . '"erased":{"at":1700000000123,"by":"root"}}}',
       'her copy: the room\'s marker, in the order events.c writes, sender first');
    is($fa[2][1][1], $fb[2][1][1], 'bob\'s copy untouched');
    is(JSON::PP::decode_json($fa[3][1][1])->{envelope}{content}, 'ann: [erased]', 'the coordinator\'s step redacted');
    is_deeply(JSON::PP::decode_json($fa[3][1][1])->{envelope}{erased}, { at => 1_700_000_000_123, by => 'root', quoting => 'ann' },
              'and marked inside the envelope');
    my $fin = JSON::PP::decode_json($fa[4][1][1]);
    is($fin->{conclusion}, 'ann: [erased]', 'the final state\'s conclusion redacted');
    is($fin->{erased}{quoting}, 'ann', 'and marked');
    like($fa[4][1][1], qr/^\{"sender":"ioa-worker","timestamp":5,"event":"state",/, 'the rest as it was');
    is($fa[0][1][1], $fb[0][1][1], 'a state without her words untouched');
    ok($r->cmd('PTTL', "${G}log") > 500000, 'the feed keeps its expiry');
    is($r->cmd('EXISTS', "${G}log:rw") + $r->cmd('EXISTS', "${G}log:rwq"), 0, 'no copy, no texts left');
    is_deeply([ erase_feed($G, 'ann', 'erase') ], [ 'done', 0, 0 ], 'again: nothing');
    is((erase_feed('hub:{room:goal-none}:', 'ann', 'erase'))[0], 'same', 'no feed: "same"');

    # the record: the built-in planner's conclusion, and the LLM's
    my $M = 'hub:{goal:g1}:';
    my $tasks = '[{"agent":"ann","task_id":"t1","task_desc":"write the report"},'
              . '{"agent":"bob","task_id":"t2","task_desc":"check it"}]';
    my $account = "Goal: write and check\n2 of 2 parts done.\n1. write the report\n   ann: $secret\n"
                . "2. check it\n   bob: bob did: check it";
    $r->cmd('HSET', "${M}meta", state => 'concluded', comm_id => 'q1', parent => '', planner => 'builtin',
            goal => 'write and check', conclusion => $account);
    $r->cmd('HSET', "${M}fsm", tasks => $tasks, 'res:t1' => $secret, 'res:t2' => 'bob did: check it',
            conclusion => $account, stopped_by => 'ann: stop now please',
            proposals => qq([{"sid":"1-1","sender":"ann","type":6,"content":"let me do more work","tasks":{}}]));
    is_deeply(run_script('goal_erase', [ "${M}meta", "${M}fsm" ], 'ann', 1, 'root', 'erase', 'check'),
              [ 'concluded', 'q1', '', $secret, 'let me do more work', 'stop now please' ],
              'goal_erase.lua check: the state, the room, no parent, and what the record holds of ann');
    is($r->cmd('HGET', "${M}meta", 'conclusion'), $account, 'check changes nothing');
    is_deeply(run_script('goal_erase', [ "${M}meta", "${M}fsm" ], 'ann', 1700000000123, 'root', 'erase', ''),
              [ 5 ], 'erase: 5 fields (her result, her stop, her proposal, the conclusion twice)');
    (my $want = $account) =~ s/\Q$secret\E/[erased]/;
    is($r->cmd('HGET', "${M}meta", 'conclusion'), $want, 'the conclusion: her result redacted, bob\'s kept');
    is($r->cmd('HGET', "${M}fsm", 'conclusion'), $want, 'in the fsm too');
    is($r->cmd('HGET', "${M}fsm", 'res:t1'), '[erased]', 'her result');
    is($r->cmd('HGET', "${M}fsm", 'res:t2'), 'bob did: check it', 'his kept');
    is($r->cmd('HGET', "${M}fsm", 'stopped_by'), 'ann: [erased]', 'her stop');
    like($r->cmd('HGET', "${M}fsm", 'proposals'), qr/"content":"\[erased\]"/, 'her proposal');
    is($r->cmd('HGET', "${M}meta", 'erased'), '1700000000123 root', 'meta "erased": when and by whom');
    is_deeply(run_script('goal_erase', [ "${M}meta", "${M}fsm" ], 'ann', 1, 'root', 'erase', ''), [ 0 ], 'again: nothing');
    is_deeply(run_script('goal_erase', [ 'hub:{goal:none}:meta', 'hub:{goal:none}:fsm' ], 'ann', 1, 'root', 'erase', 'check'),
              [ '', '', '' ], 'no record: state ""');

    my $L = 'hub:{goal:g3}:';
    my $model = "The report is written (ann: $secret) and checked.\nWell done.";
    my $conc = "$model\n\nConcluded at the turn limit (max_turns 9).\n$account";
    $r->cmd('HSET', "${L}meta", state => 'concluded', comm_id => 'q3', parent => 'g4', planner => 'llm',
            conclusion => $conc);
    $r->cmd('HSET', "${L}fsm", tasks => $tasks, 'res:t1' => $secret, 'res:t2' => 'bob did: check it', conclusion => $conc);
    my $chk = run_script('goal_erase', [ "${L}meta", "${L}fsm" ], 'ann', 1, 'root', 'erase', 'check');
    is_deeply($chk, [ 'concluded', 'q3', 'g4', $secret, $model ],
              'the LLM wrote the conclusion from her result: its text is among the texts, the parent named');
    run_script('goal_erase', [ "${L}meta", "${L}fsm" ], 'ann', 1, 'root', 'erase', '');
    is($r->cmd('HGET', "${L}meta", 'conclusion'),
       "[erased]\n\nConcluded at the turn limit (max_turns 9).\n$want",
       'the model\'s text goes whole, the account keeps its reason line and bob\'s result');
    run_script('goal_erase', [ "${L}meta", "${L}fsm" ], 'bob', 1, 'root', 'erase', '');
    like($r->cmd('HGET', "${L}meta", 'conclusion'), qr/^\[erased\]\n\n.*\n   bob: \[erased\]$/s,
         'a conclusion that starts with "[erased]" is text, not JSON: bob\'s result goes too');
    $r->cmd('HSET', "${L}meta", conclusion => $conc);
    $r->cmd('HSET', "${L}fsm", 'res:t1' => 'ann did nothing of note here', 'res:t2' => 'bob did: check it',
            conclusion => $conc);
    is_deeply(run_script('goal_erase', [ "${L}meta", "${L}fsm" ], 'bob', 1, 'root', 'erase', 'check'),
              [ 'concluded', 'q3', 'g4', 'bob did: check it', $model ], 'bob had a result: the same for him');
    my $P = 'hub:{goal:g4}:';
    $r->cmd('HSET', "${P}meta", state => 'concluded', comm_id => 'q4', planner => 'builtin',
            conclusion => "Goal: p\n1 of 1 part done.\n1. p\n   coord: $conc");
    $r->cmd('HSET', "${P}fsm", tasks => '[{"agent":"ann","task_id":"t9"},{"agent":"coord","task_id":"t8"}]',
            'res:t9' => 'ann in the parent', 'res:t8' => $conc);
    is_deeply(run_script('goal_erase', [ "${P}meta", "${P}fsm" ], 'ann', 1, 'root', 'quotes', 'check', $secret),
              [ 'concluded', 'q4', '' ], '"quotes" check: her own words in the parent are not what is erased');
    is_deeply(run_script('goal_erase', [ "${P}meta", "${P}fsm" ], 'ann', 1, 'root', 'quotes', '', $secret, $model),
              [ 2 ], '"quotes": the sub-goal\'s texts where the parent quotes them');
    unlike($r->cmd('HGET', "${P}meta", 'conclusion') . $r->cmd('HGET', "${P}fsm", 'res:t8'), qr/\Q$secret\E|Well done/,
           'the parent\'s conclusion and the sub-team\'s result no longer hold them');
    is($r->cmd('HGET', "${P}fsm", 'res:t9'), 'ann in the parent', 'her own result in the parent stays');
}

# --- the publish mode (post.lua ARGV[6]): PUBLISH, or SPUBLISH on a Cluster --------

{
    my $ss = Resp->connect($port);
    is_deeply($ss->cmd('SSUBSCRIBE', 'chan:f1'), [ 'ssubscribe', 'chan:f1', 1 ],
              'a shard subscriber on the floor room channel');
    my $ps = Resp->connect($port);
    is_deeply($ps->cmd('SUBSCRIBE', 'chan:f1'), [ 'subscribe', 'chan:f1', 1 ],
              'and a plain one');
    my $plain_msg = sub {
        return undef unless IO::Select->new($ps->{s})->can_read(2);
        return $ps->read;
    };
    my $shard_msg = sub {
        return undef unless IO::Select->new($ss->{s})->can_read(2);
        return $ss->read;
    };
    my $quiet = sub {
        my $c = shift;
        return !IO::Select->new($c->{s})->can_read(0.2);
    };
    my $post_mode = sub {
        my ($mode, @next) = @_;
        return run_script('post', [ map { "$RF$_" } qw(members log floor meta) ],
                          'chair', qq({"mode":"$mode"}), '0', 'chan:f1', '4', $mode, @next);
    };
    my $id = accepted($post_mode->('s', 'ann'), 'mode "s" is accepted');
    is_deeply($shard_msg->(), [ 'smessage', 'chan:f1', qq($id {"mode":"s"}) ],
              'mode "s": SPUBLISHed as "id json"');
    ok($quiet->($ps), 'mode "s": not PUBLISHed');
    floor_is(['ann'], 'mode "s": the names after ARGV[6] address the floor');
    $id = accepted($post_mode->('sf'), 'mode "sf" is accepted');
    is_deeply($shard_msg->(), [ 'smessage', 'chan:f1', qq($id {"mode":"sf"}) ],
              'mode "sf": SPUBLISHed');
    is_deeply($plain_msg->(), [ 'message', 'chan:f1', qq($id {"mode":"sf"}) ],
              'mode "sf": and PUBLISHed (the observer copy)');
    $id = accepted($post_mode->(''), 'mode "" is accepted');
    is_deeply($plain_msg->(), [ 'message', 'chan:f1', qq($id {"mode":""}) ],
              'mode "": PUBLISHed');
    ok($quiet->($ss), 'mode "": not SPUBLISHed');
}

# --- agent_forget: the registry's retention ------------------------------------------

{
    my $B = 'af:{reg}:';
    my $t0 = 1_700_000_000_000;
    my $forget = sub {
        my ($name, $now, $keep) = @_;
        return run_script('agent_forget', [ "${B}agent:$name", "${B}agents", "${B}stats", "${B}seen" ],
                          $B, $name, $now, $keep // 1000);
    };
    register($B, 'ada', desc => 'translates French poems', tags => '["poetry"]', now => $t0);
    register($B, 'bob', desc => 'reviews French grammar', now => $t0);
    register($B, 'cy', desc => 'paints poems', now => $t0);
    is($r->cmd('ZSCORE', "${B}seen", 'ada'), $t0, 'register.lua: seen at registration');
    $r->cmd('SADD', "${B}rooms:ada", 'r1', 'r2');
    $r->cmd('HSET', "${B}rep:ada", 'completed', 3);
    is_deeply($forget->('ada', $t0 + 500), [ 'live', $t0 ], 'seen within the retention: kept');

    # bob is connected: never removed, and his seen entry moves to now
    run_script('presence', [ "${B}online" ], $B, 'w1', $t0 + 9_000, $t0 + 5_000, 'bob');
    is_deeply($forget->('bob', $t0 + 5_000), [ 'live', $t0 + 5_000 ], 'connected now: kept');
    is($r->cmd('ZSCORE', "${B}seen", 'bob'), $t0 + 5_000, '... seen now');
    run_script('presence', [ "${B}online" ], $B, 'w1', 0, $t0 + 6_000, 'bob');
    is($r->cmd('ZSCORE', "${B}seen", 'bob'), $t0 + 6_000, 'presence.lua: seen when his last connection went');
    is_deeply($forget->('bob', $t0 + 6_500), [ 'live', $t0 + 6_000 ], 'and kept a retention after that');

    is_deeply($forget->('ada', $t0 + 1_000), [ 'forgotten', 2 ], 'ada, not seen for the retention: removed (she was in 2 rooms)');
    is($r->cmd('EXISTS', "${B}agent:ada", "${B}rooms:ada", "${B}rep:ada"), 0,
       '... her record, room set and task record are gone');
    is($r->cmd('ZSCORE', "${B}agents", 'ada'), undef, '... she is out of the agents');
    is($r->cmd('ZSCORE', "${B}seen", 'ada'), undef, '... and of seen');
    index_consistent($B, 'after agent_forget');
    is_deeply(names(retrieve($B, queries => [ 'poems' ])), ['cy'], 'retrieve no longer finds her');
    is_deeply($forget->('ada', $t0 + 2_000), ['gone'], 'again: gone');
    is(register($B, 'ada', desc => 'back again', now => $t0 + 3_000)->[0], 'created',
       'the name can be registered anew');
    index_consistent($B, 'after registering again');
    is(err_code($forget->('cy', $t0, 0)), 'BADARG', 'a retention of 0: BADARG');
    is(err_code(run_script('agent_forget', [ 'x', "${B}agents", "${B}stats", "${B}seen" ], $B, 'cy', $t0, 1)),
       'BADARG', 'keys not from B: BADARG');

    # "delete" (DELETE /agents/{name}): whether connected or seen lately
    run_script('presence', [ "${B}online" ], $B, 'w1', $t0 + 99_000, $t0 + 7_000, 'cy');
    $r->cmd('SADD', "${B}rooms:cy", 'r9');
    is_deeply(run_script('agent_forget', [ "${B}agent:cy", "${B}agents", "${B}stats", "${B}seen" ],
                         $B, 'cy', $t0 + 7_000, 0, 'delete'), [ 'forgotten', 1 ],
              'agent_forget "delete": a connected agent seen just now is removed');
    is($r->cmd('EXISTS', "${B}agent:cy", "${B}rooms:cy", "${B}holders:cy"), 0, '... its record, room set and holders');
    is($r->cmd('ZSCORE', "${B}online", 'cy'), undef, '... and its presence');
    index_consistent($B, 'after agent_forget delete');
    run_script('presence', [ "${B}online" ], $B, 'w1', 0, $t0 + 8_000, 'cy');
    is($r->cmd('ZSCORE', "${B}seen", 'cy'), undef,
       'presence.lua: its connection going afterwards leaves no seen entry of an agent not registered');
    is_deeply(run_script('agent_forget', [ "${B}agent:cy", "${B}agents", "${B}stats", "${B}seen" ],
                         $B, 'cy', $t0 + 9_000, 0, 'delete'), ['gone'], 'again: gone');
}

# --- room_expire, room_forget: the retention sweep's two halves ----------------------

{
    my $R = room('ex1');
    my @keys = map { "$R$_" } qw(meta members log floor chain);
    my $t0 = 1_700_000_000_000;
    run_script('room_create', [ "${R}meta", "${R}members" ], 'ex1', '', 'anna', $t0, '', qw(anna carl));
    is_deeply(run_script('room_expire', \@keys, $t0 + 500, 1000), [ 'live', $t0 ],
              'room_expire: a room without envelopes is dated by its creation');
    my ($what, @members) = @{ run_script('room_expire', \@keys, $t0 + 1000, 1000) };
    is_deeply([ $what, sort @members ], [ 'expired', 'anna', 'carl' ],
              '... and expires a retention after it, naming its members');
    is($r->cmd('EXISTS', @keys), 0, 'every key of the room is gone');
    is_deeply(run_script('room_expire', \@keys, $t0 + 9000, 1000), ['gone'], 'again: gone');

    run_script('room_create', [ "${R}meta", "${R}members" ], 'ex1', '', 'anna', $t0, '', 'anna');
    $r->cmd('XADD', "${R}log", ($t0 + 5000) . '-0', 'e', '{}');
    is_deeply(run_script('room_expire', \@keys, $t0 + 5500, 1000), [ 'live', $t0 + 5000 ],
              'a room that spoke is dated by its last envelope');
    is(err_code(run_script('room_expire', \@keys, 'soon', 1000)), 'BADARG', 'a bad now: BADARG');
    is(err_code(run_script('room_expire', \@keys, $t0, -1)), 'BADARG', 'a retention below 0: BADARG');
    is_deeply(run_script('room_expire', \@keys, $t0 + 9_000_000, 0), ['live'],
              'the deployment\'s retention off and none of its own: kept');
    is(err_code(run_script('room_expire', [ @keys, "${R}expired" ], $t0, 1000)), 'BADARG',
       'a tombstone without its time: BADARG');

    my $B = 'hub:{reg}:';
    $r->cmd('SADD', "${B}rooms:anna", 'ex1', 'other');
    $r->cmd('SADD', "${B}rooms:carl", 'ex1');
    $r->cmd('ZADD', "${B}roomlist", $t0, 'ex1');
    is(run_script('room_forget', [ "${B}roomlist" ], $B, 'ex1', 'anna', 'carl'), 2,
       'room_forget: out of both member sets');
    is_deeply($r->cmd('SMEMBERS', "${B}rooms:anna"), ['other'], "anna's other room stays");
    is($r->cmd('ZSCORE', "${B}roomlist", 'ex1'), undef, 'out of the index');
    is(run_script('room_forget', [ "${B}roomlist" ], $B, 'ex1', 'anna', 'carl'), 0,
       'run again: nothing to do');
    is(err_code(run_script('room_forget', [ 'x' ], $B, 'ex1')), 'BADARG', 'keys not from B: BADARG');
    is(err_code(run_script('room_forget', [ "${B}roomlist", 'x' ], $B, 'ex1')), 'BADARG',
       'a due index not from B: BADARG');
}

# --- room_expire "delete" (DELETE /rooms/{comm_id}) ----------------------------------

{
    my $R = room('del1');
    my @keys = map { "$R$_" } qw(meta members log floor chain expired);
    my $t0 = 1_700_000_000_000;
    run_script('room_create', [ "${R}meta", "${R}members" ], 'del1', '', 'anna', $t0, '', qw(anna carl));
    $r->cmd('XADD', "${R}log", '*', 'e', '{}');
    my ($what, $id, @members) = @{ run_script('room_expire', \@keys, $t0 + 1, 0, 86_400_000,
                                              'delete', '{"sender":"ioa"}', 'anna') };
    is($what, 'deleted', 'room_expire "delete": a room that just spoke, with no retention, is removed');
    like($id, qr/^\d+-\d+$/, '... the final envelope got an id');
    is_deeply([ sort @members ], [qw(anna carl)], '... its members named');
    is($r->cmd('EXISTS', map { "$R$_" } qw(meta members log floor chain)), 0, '... every key gone');
    is($r->cmd('GET', "${R}expired"), 'deleted:' . ($t0 + 1) . ':anna', '... the tombstone says deleted, when, by whom');
    is_deeply(run_script('room_expire', \@keys, $t0 + 2, 0, 86_400_000, 'delete', '{}', 'anna'), ['gone'],
              'again: gone');
}

# --- a room's own retention (/teamup "retention_s"), the due index, the tombstone -

{
    my $R = room('ex2');
    my @keys = map { "$R$_" } qw(meta members log floor chain expired);
    my $t0 = 1_700_000_000_000;
    is(err_code(run_script('room_create', [ "${R}meta", "${R}members" ], 'ex2', '', 'anna', $t0, '0', 'anna')),
       'BADARG', 'room_create: a retention of 0: BADARG');
    is(err_code(run_script('room_create', [ "${R}meta", "${R}members" ], 'ex2', '', 'anna', $t0, 'soon', 'anna')),
       'BADARG', '... or not a number: BADARG');
    is(run_script('room_create', [ "${R}meta", "${R}members" ], 'ex2', '', 'anna', $t0, '2000', qw(anna carl)),
       'OK', 'room_create with a retention of its own');
    is($r->cmd('HGET', "${R}meta", 'retention_ms'), '2000', '... kept in its meta as retention_ms');
    is_deeply(run_script('room_expire', \@keys, $t0 + 1000, 0, 86_400_000), [ 'live', $t0, $t0 + 2000 ],
              'room_expire: its own retention applies with the deployment\'s off, and says when it is due');
    is_deeply(run_script('room_expire', \@keys, $t0 + 1000, 1500, 86_400_000), [ 'live', $t0, $t0 + 1500 ],
              'a shorter deployment retention wins over its own');
    $r->cmd('XADD', "${R}log", ($t0 + 1800) . '-0', 'e', '{}');
    is_deeply(run_script('room_expire', \@keys, $t0 + 2500, 60_000, 86_400_000),
              [ 'live', $t0 + 1800, $t0 + 3800 ], 'a room that spoke is due its retention after its last envelope');
    my ($what, @members) = @{ run_script('room_expire', \@keys, $t0 + 3800, 60_000, 86_400_000) };
    is_deeply([ $what, sort @members ], [ 'expired', 'anna', 'carl' ],
              '... and expires then, though the deployment\'s retention is longer');
    is($r->cmd('EXISTS', @keys[0 .. 4]), 0, 'every key of the room is gone');
    is($r->cmd('GET', "${R}expired"), $t0 + 3800, 'the tombstone says when it expired');
    my $ttl = $r->cmd('PTTL', "${R}expired");
    ok($ttl > 86_000_000 && $ttl <= 86_400_000, "... and expires itself ($ttl ms)");
    is_deeply(run_script('room_expire', \@keys, $t0 + 9000, 1000, 86_400_000), ['gone'],
              'again: gone (the tombstone is no room)');

    my $B = 'hub:{reg}:';
    $r->cmd('SADD', "${B}rooms:anna", 'ex2');
    $r->cmd('ZADD', "${B}roomlist", $t0, 'ex2');
    $r->cmd('ZADD', "${B}roomdue", $t0 + 2000, 'ex2');
    is(run_script('room_forget', [ "${B}roomlist", "${B}roomdue" ], $B, 'ex2', 'anna'), 1,
       'room_forget with the due index');
    is($r->cmd('EXISTS', "${B}roomlist", "${B}roomdue"), 0, 'out of both indexes');
}

# --- limit_lease: a slice of a fleet-wide token bucket ------------------------------

{
    my $K = 'hub:{lim:a:anna}';
    # 10 requests a second (10000 thousandths), burst 5
    is_deeply(run_script('limit_lease', [$K], 10000, 5, 3), [ 3, 0 ],
              'limit_lease: a new bucket is full: 3 of 3 granted');
    my $l = run_script('limit_lease', [$K], 10000, 5, 3);
    ok($l->[0] == 2 && $l->[1] > 50 && $l->[1] <= 100,
       "... then what it holds, 2, and at most 100 ms until one more (@$l)");
    $l = run_script('limit_lease', [$K], 10000, 5, 1);
    ok($l->[0] == 0 && $l->[1] > 0 && $l->[1] <= 100,
       "empty: nothing granted, retry within 100 ms (@$l)");
    my $pttl = $r->cmd('PTTL', $K);
    ok($pttl > 1000 && $pttl <= 1500, "the key expires once the bucket is full again, plus a second ($pttl ms)");
    sleep 0.25;
    is(run_script('limit_lease', [$K], 10000, 5, 5)->[0], 2,
       'refilled at the rate by Redis\' clock: 2 after 250 ms');
    $r->cmd('DEL', $K);
    is(run_script('limit_lease', [$K], 10000, 5, 100)->[0], 5, 'never more than the burst');
    is(err_code(run_script('limit_lease', [$K], 0, 5, 1)), 'BADARG', 'a rate of 0: BADARG');
    is(err_code(run_script('limit_lease', [$K], 10000, 5, 0)), 'BADARG', 'want 0: BADARG');
    $r->cmd('SET', $K, 'x');
    like(${ run_script('limit_lease', [$K], 10000, 5, 1) }, qr/^WRONGTYPE/,
         'a key of another type: an error, the hub falls back to its own limit');
    $r->cmd('DEL', $K);
}

done_testing();

# --- helpers ----------------------------------------------------------------------

sub slurp {
    open my $fh, '<:raw', $_[0] or die "$_[0]: $!";
    local $/;
    return scalar <$fh>;
}

sub cmp_ids {
    my ($a1, $a2) = split /-/, $_[0];
    my ($b1, $b2) = split /-/, $_[1];
    return $a1 <=> $b1 || $a2 <=> $b2;
}

# A minimal RESP2 client: enough for EVALSHA, nested arrays and SUBSCRIBE.
package Err;
package Resp;

sub connect {
    my ($class, $port) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp') or return;
    binmode $s;
    return bless { s => $s }, $class;
}

sub cmd {
    my ($self, @args) = @_;
    my $out = '*' . @args . "\r\n";
    $out .= '$' . length($_) . "\r\n$_\r\n" for @args;
    print { $self->{s} } $out;
    return $self->read;
}

sub read {
    my ($self) = @_;
    my $line = readline $self->{s};
    die "redis closed the connection\n" unless defined $line;
    $line =~ s/\r\n\z//;
    my ($type, $rest) = (substr($line, 0, 1), substr($line, 1));
    return $rest if $type eq '+';
    return $rest + 0 if $type eq ':';
    return bless \$rest, 'Err' if $type eq '-';
    if ($type eq '$') {
        return undef if $rest < 0;
        my $buf = '';
        while (length $buf < $rest + 2) {
            my $got = CORE::read($self->{s}, $buf, $rest + 2 - length $buf, length $buf);
            die "short read from redis\n" unless $got;
        }
        return substr($buf, 0, $rest);
    }
    if ($type eq '*') {
        return undef if $rest < 0;
        return [ map { $self->read } 1 .. $rest ];
    }
    die "bad RESP line: $line\n";
}
