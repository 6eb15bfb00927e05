package IoaTest::Facade;

# What the tests of the hub's clients and facades (t/240-ioactl.t,
# t/260-python-sdk.t, t/270-mcp.t, t/280-a2a-server.t) share: tokens from
# a key of their own, example agents run by ioa-agent (IoaTest::Proc
# children), waiting for them to be online, and a Node.js client of t/node
# driven by a list of steps (the real SDKs pinned in
# t/node/package-lock.json).

use strict;
use warnings;

use Cwd qw(abs_path);
use Exporter 'import';
use File::Basename qw(dirname);
use IPC::Run ();
use LWP::UserAgent ();

use IoaTest::Agent qw(json);
use IoaTest::Api ();
use IoaTest::Proc qw(bg stop_children $Scratch);

our @EXPORT_OK = qw(key token agent_proc stop_children online node_steps);

our $Repo = abs_path(dirname(__FILE__) . '/../../..');
our $AgentBin = $ENV{IOA_AGENT_BIN} || "$Repo/workers/build/ioa-agent";

# a fresh signing key, made once per test file: its path
my $Key;

sub key {
    return $Key if $Key;
    $Key = "$Scratch/jwt.key";
    system("$Repo/scripts/ioa-token", 'new-key', $Key) == 0
        or die "ioa-token new-key failed\n";
    return $Key;
}

sub token {
    my ($sub, $scope, $ttl) = @_;
    my $k = key();
    my $t = `$Repo/scripts/ioa-token sign --key $k --sub '$sub' --scope '$scope' --ttl ${\ ($ttl // 600)}`;
    chomp $t;
    return $t;
}

# an example agent: ioa-agent running a program per task, its log in
# $Scratch/agent-<name>.log
sub agent_proc {
    my ($ctx, $name, $desc, $token, @exec) = @_;
    return bg("agent-$name", $AgentBin, '--hub', 'http://127.0.0.1:' . $ctx->port,
              '--name', $name, '--desc', $desc, '--backoff-max', 1,
              ($token ? ('--token', $token) : ()), '--exec', @exec,
              { append => 1 })->{pid};
}

# the agents are registered and online (/query_assistant); when they are
# not in time, their logs say why
sub online {
    my ($ctx, $token, @names) = @_;
    my $ok = IoaTest::Api::wait_until(sub {
        my $ua = LWP::UserAgent->new(timeout => 5);
        my $res = $ua->post('http://127.0.0.1:' . $ctx->port . '/query_assistant',
            'Content-Type' => 'application/json',
            ($token ? (Authorization => "Bearer $token") : ()),
            Content => json()->encode({ name => [@names] }));
        my $d = eval { json()->decode($res->content) };
        $res->code == 200 && ref $d eq 'ARRAY' && !grep { !$_ || !$_->{online} } @$d;
    }, 15);
    unless ($ok) {
        for my $name (@names) {
            open my $fh, '<', "$Scratch/agent-$name.log" or next;
            local $/;
            Test::More::diag("agent $name: " . <$fh>);
        }
    }
    return $ok;
}

# node_steps($script, [@args], @steps): the steps through a t/node client,
# which prints one JSON array of outcomes; returns them
sub node_steps {
    my ($script, $args, @steps) = @_;
    my ($out, $err) = ('', '');
    IPC::Run::run(['/usr/bin/node', "$Repo/t/node/$script", @$args],
                  '<', \json()->encode(\@steps), '>', \$out, '2>', \$err,
                  IPC::Run::timeout($ENV{IOA_NODE_TIMEOUT} || 180));
    my $res = eval { json()->decode($out) };
    die "$script: $err$out\n" unless ref $res eq 'ARRAY';
    return @$res;
}

1;
