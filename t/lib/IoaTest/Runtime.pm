# IoaTest::Runtime -- ioa-agent processes in tests: start one (exec, http
# or a2a adapter) with its log in a scratch directory, stop it by PID through
# a guard, wait for it to be online, and drive it from "Alice", a WebSocket
# agent, with IoA task assignments.  Shared by t/090-ioa-agent.t and
# t/285-a2a-member.t.
#
#   use IoaTest::Runtime;   # exports everything below into main, with
#                           # $AgentBin, $Scratch and %Children
#
# IOA_AGENT_BIN runs another build of ioa-agent (an ASan one, say).
# %Children (pid => what) is every process started here or by the test
# file (servers too); END kills what is left: an agent by its pid, a server
# by its process group (see _server_child).

package IoaTest::Runtime;

use strict;
use warnings;

use Cwd ();
use Encode ();
use Exporter ();
use File::Basename ();
use File::Temp ();
use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

use IoaTest::Agent qw(register teamup envelope);
use IoaTest::Api;

our @ISA = ('Exporter');
our @EXPORT = qw($AgentBin $Scratch %Children scratch agent wait_online
    alice_room assign recv_from strip progress_text result_text
    _server_child stop_child slurp);

our ($AgentBin, $Scratch, %Children);

$AgentBin = $ENV{IOA_AGENT_BIN}
            || Cwd::abs_path(File::Basename::dirname(__FILE__) . '/../../..')
               . '/workers/build/ioa-agent';

# Agents' logs, tool servers and second hubs live in a scratch directory of
# the test file, not in the servroot: upstream Test::Nginx wipes the
# servroot between blocks and refuses when files of ours are in it.
$Scratch = File::Temp::tempdir('ioa-agent-t-XXXXXX', TMPDIR => 1,
                               CLEANUP => 1);

sub scratch {
    my $dir = "$Scratch/$_[0]";
    mkdir $dir;
    return $dir;
}


END {
    local $?;
    for my $pid (keys %Children) {
        kill 'KILL', $Children{$pid} =~ /^agent/ ? $pid : -$pid;
        waitpid $pid, 0;
    }
}


# Starts ioa-agent; returns a guard (IoaAgentProc) that stops it by PID.
#   agent($ctx, name => 'Shouter', exec => ['tr', 'a-z', 'A-Z'],
#         [http => $url], [a2a => $url], [port => $hub_port], [desc, type,
#         tags => [..], timeout, args => [..]], [from_card => 1])
# from_card (with a2a): neither --name nor --desc, the card's are taken;
# name still names the log and the guard.
sub agent {
    my ($ctx, %o) = @_;
    my $dir = scratch('agents');
    mkdir $dir;
    (my $file = $ctx->name) =~ s/\W+/_/g;
    (my $who = $o{name}) =~ s/[^A-Za-z0-9]+/_/g;       # any name, a plain file
    my $log = "$dir/" . substr($file, 0, 40) . "-$who.log";
    # argv is bytes: a name in any script goes as UTF-8
    my $name = Encode::encode_utf8($o{name});
    my @cmd = ($AgentBin, '--hub', 'http://127.0.0.1:' . ($o{port} // $ctx->port),
               $o{from_card} ? ()
                   : ('--name', $name,
                      '--desc', Encode::encode_utf8($o{desc} // "$o{name}, a test agent")),
               '--backoff-max', 1);
    push @cmd, '--type', $o{type} if $o{type};
    push @cmd, '--tag', $_ for @{ $o{tags} || [] };
    push @cmd, '--timeout', $o{timeout} if defined $o{timeout};
    push @cmd, @{ $o{args} || [] };
    push @cmd, $o{http} ? ('--http', $o{http})
             : $o{a2a}  ? ('--a2a', $o{a2a})
             :            ('--exec', @{ $o{exec} });
    open my $fh, '>', $log or die "$log: $!\n";     # a fresh log
    close $fh;
    my $pid = fork // die "fork: $!\n";
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>>', $log;
        open STDERR, '>>', $log;
        exec @cmd or POSIX::_exit(127);
    }
    $Children{$pid} = "agent $o{name}";
    return IoaAgentProc->new(pid => $pid, log => $log, name => $o{name});
}

# Polls /query_assistant until the agent is (or is not) online.
sub wait_online {
    my ($ctx, $name, $want, $secs) = @_;
    $want //= 1;
    return wait_until(sub {
        my ($code, $d) = api($ctx, POST => '/query_assistant', { name => $name });
        $code == 200 && ($d->{online} ? 1 : 0) == $want;
    }, $secs // 5);
}

# Alice (a WebSocket agent) and a room with her and @names; returns
# ($alice, $comm_id).
sub alice_room {
    my ($ctx, @names) = @_;
    register($ctx, 'Alice') unless $ctx->{alice_registered}++;
    my $alice = IoaTest::Agent->connect($ctx, 'Alice');
    die 'Alice: ' . $alice->error . "\n" unless $alice->ok;
    my $cid = teamup($ctx, 'Alice', \@names);
    return ($alice, $cid);
}

# An IoA assignment from Alice: type 6 (async) unless sync => 1.
sub assign {
    my ($alice, $cid, $to, $content, %f) = @_;
    my $sync = delete $f{sync};
    $alice->post(envelope(comm_id => $cid, content => $content,
                          next_speaker => $to, type => $sync ? 5 : 6, %f));
}

# Envelopes Alice receives until $n have arrived from $from (others are
# kept in ->{skipped}); dies with the agent's log on timeout.
sub recv_from {
    my ($alice, $from, $n, $secs, $agent) = @_;
    my (@got, @skipped);
    my $deadline = time + ($secs // 10);
    while (@got < $n) {
        my $left = $deadline - time;
        my $m = $left > 0 ? $alice->recv($left) : undef;
        if (!$m) {
            Test::More::diag("agent log:\n" . $agent->log) if $agent;
            die "recv_from $from: got " . scalar(@got) . " of $n\n";
        }
        if (($m->{sender} // '') eq $from) { push @got, $m } else { push @skipped, $m }
    }
    return @got;
}


# An envelope without what the hub adds (id, timestamp, the raw text),
# after checking their shape.
sub strip {
    my ($m) = @_;
    my %e = %$m;
    Test::More::like(delete $e{id}, qr/^\d+-\d+$/, "envelope id is a Stream id");
    Test::More::like(delete $e{timestamp}, qr/^\d{13}$/, 'timestamp in ms');
    delete $e{_raw};
    return \%e;
}


sub progress_text { "Team, the following task is being executed in the background by myself.\n$_[0]" }

sub result_text {
    my ($abstract, $how) = @_;
    return "Just a quick interruption to our current discussion. The task \"$abstract\" $how.";
}


# In a test server's process: its own process group (stop_child() ends it
# and every connection it forked), and away from the TAP pipe, which prove
# reads until the last process holding it exits.
sub _server_child {
    POSIX::setpgid(0, 0);
    open STDIN, '<', '/dev/null';
    open STDOUT, '>', '/dev/null';
    open STDERR, '>', '/dev/null';
    $SIG{CHLD} = 'IGNORE';
}

sub stop_child {
    my ($pid) = @_;
    return unless $pid && delete $Children{$pid};
    kill 'TERM', -$pid;
    my $deadline = time + 3;
    while (waitpid($pid, WNOHANG) == 0) {
        if (time > $deadline) { kill 'KILL', -$pid; waitpid $pid, 0; last }
        sleep 0.02;
    }
}


sub slurp {
    open my $fh, '<', $_[0] or return undef;
    local $/;
    return scalar <$fh>;
}

# ---------------------------------------------------------------- the guard

package IoaAgentProc;

use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

sub new { my ($class, %a) = @_; bless {%a}, $class }
sub pid { $_[0]{pid} }

sub log {
    open my $fh, '<', $_[0]{log} or return '';
    local $/;
    return scalar(<$fh>) // '';
}

sub alive {
    my $self = shift;
    return 0 unless defined $self->{pid};
    return 1 if waitpid($self->{pid}, WNOHANG) == 0;
    $self->{status} = $?;       # reaped here: keep what stop() returns
    delete $IoaTest::Runtime::Children{ delete $self->{pid} };
    return 0;
}

# Sends $sig (TERM) and waits up to $secs for the exit; returns the wait
# status, or undef if it had to be killed.
sub stop {
    my ($self, $sig, $secs) = @_;
    my $pid = delete $self->{pid} // return $self->{status};
    kill $sig // 'TERM', $pid;
    my $deadline = time + ($secs // 8);
    while (1) {
        my $r = waitpid $pid, WNOHANG;
        if ($r == $pid) { $self->{status} = $?; last }
        if (time > $deadline) {
            kill 'KILL', $pid;
            waitpid $pid, 0;
            $self->{status} = undef;
            last;
        }
        sleep 0.02;
    }
    delete $IoaTest::Runtime::Children{$pid};
    return $self->{status};
}

# Waits until the log has a line matching $re (after $from bytes).
sub wait_log {
    my ($self, $re, $secs, $from) = @_;
    my $deadline = time + ($secs // 5);
    while (time < $deadline) {
        my $l = substr $self->log, $from // 0;
        return $1 // $& if $l =~ $re;
        sleep 0.05;
    }
    return undef;
}

sub DESTROY { local ($?, $@, $!); $_[0]->stop('KILL', 2) if $_[0]{pid} }

1;
