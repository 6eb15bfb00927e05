# IoaTest::Goals -- goals end to end with real ioa-worker processes: start
# and stop workers, queue goals the way POST /launch_goal does, read the
# goal's record, room and feed, and play the agent runtime for scripted
# agents.  Shared by t/100-goals.t and t/102-decisions.t.
#
#   use IoaTest::Goals;      # exports everything below into main, with
#                            # $COORD %Workers %Seen @Held
#
# IOA_WORKER_BIN runs another build of the worker (an ASan one, say).
# Workers are child processes with their own logs in
# <servroot>/logs/worker-<name>.log; they are stopped by PID (SIGTERM, and
# each must exit 0) and killed in END if a block died.

package IoaTest::Goals;

use strict;
use warnings;

use Cwd ();
use Exporter ();
use File::Basename ();
use JSON::PP ();
use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

use IoaTest;
use IoaTest::Agent qw(envelope fresh_hub json);
use IoaTest::Api;

our @ISA = ('Exporter');
our @EXPORT = qw($COORD %Workers %Seen @Held %Partial $Repo $WorkerBin
    fresh worker stop_workers kill9 reap_dead worker_logs worker_log
    register_agents connect_agents launch meta fsm state_of room feed
    coordinator_steps types usual_steps usual_types team_size by_step id_lt
    names_in drive act answer release job_pending);

our ($COORD, %Workers, %Seen, @Held, %Partial, $Repo, $WorkerBin);

$Repo = Cwd::abs_path(File::Basename::dirname(__FILE__) . '/../../..');
$WorkerBin = $ENV{IOA_WORKER_BIN} || "$Repo/workers/build/ioa-worker";
$COORD = 'ioa-coordinator';

# %Workers: pid => { name, log }

END {
    local $?;
    for my $pid (keys %Workers) {
        kill 'KILL', $pid;
        waitpid $pid, 0;
    }
}

sub fresh {
    my $ctx = shift;
    stop_workers();
    redis_cmd('CONFIG', 'SET', 'maxmemory', 0);   # a test that filled it
    fresh_hub($ctx);
}

# Starts ioa-worker as consumer $name; returns its pid.
#   worker($ctx, 'w1', task_timeout => 2, claim_idle => 1, crash_after => 2,
#          args => ['--max-rounds', 2])
sub worker {
    my ($ctx, $name, %o) = @_;
    my $log = $ctx->servroot . "/logs/worker-$name.log";
    my @args = ('--redis', redis_addrs(),     # every master on a Cluster
                '--scripts', "$Repo/redis-scripts", '--consumer', $name,
                '--task-timeout', $o{task_timeout} // 60,
                '--claim-idle', $o{claim_idle} // 15,
                '--turn-timeout', $o{turn_timeout} // 30,
                defined $o{token_budget} ? ('--token-budget', $o{token_budget}) : (),
                @{ $o{args} // [] });
    my $pid = fork // die "fork: $!\n";
    if ($pid == 0) {
        $ENV{IOA_WORKER_TEST_CRASH_AFTER_STEP} = $o{crash_after}
            if defined $o{crash_after};
        delete @ENV{grep { /^(?:IOA_LLM_|OPENAI_)/ } keys %ENV};
        $ENV{$_} = $o{env}{$_} for keys %{ $o{env} // {} };
        open STDIN, '<', '/dev/null';
        open STDOUT, '>>', $log;
        open STDERR, '>>', $log;
        exec $WorkerBin, @args or POSIX::_exit(127);
    }
    $Workers{$pid} = { name => $name, log => $log };
    return $pid;
}

# SIGTERM to every worker still running; returns { name => exit status }.
# A worker that does not exit within 5 s is killed (status 'KILL').
sub stop_workers {
    my %status;
    kill 'TERM', $_ for keys %Workers;
    my $deadline = time + 5;
    while (%Workers && time < $deadline) {
        for my $pid (keys %Workers) {
            my $r = waitpid $pid, WNOHANG;
            next unless $r == $pid || $r == -1;
            $status{ $Workers{$pid}{name} } = $? & 127 ? 'signal ' . ($? & 127)
                                                       : $? >> 8;
            delete $Workers{$pid};
        }
        sleep 0.02 if %Workers;
    }
    for my $pid (keys %Workers) {
        kill 'KILL', $pid;
        waitpid $pid, 0;
        $status{ $Workers{$pid}{name} } = 'KILL';
        delete $Workers{$pid};
    }
    return \%status;
}

# kill -9 one worker by pid and reap it
sub kill9 {
    my $pid = shift;
    kill 'KILL', $pid;
    waitpid $pid, 0;
    delete $Workers{$pid};
}

sub reap_dead {
    for my $pid (keys %Workers) {
        delete $Workers{$pid} if waitpid($pid, WNOHANG) == $pid;
    }
}

sub worker_logs {
    my $ctx = shift;
    my $dir = $ctx->servroot . '/logs';
    my $out = '';
    for my $f (sort glob "$dir/worker-*.log") {
        open my $fh, '<', $f or next;
        local $/;
        $out .= "==> $f\n" . (<$fh> // '');
    }
    return $out;
}

sub worker_log {
    my ($ctx, $name) = @_;
    open my $fh, '<', $ctx->servroot . "/logs/worker-$name.log" or return '';
    local $/;
    return <$fh> // '';
}

# register_agents($ctx, Ann => 'writes reports', Ben => ['checks figures', 1])
# (an array: the description and speaks_protocol)
sub register_agents {
    my ($ctx, %desc) = @_;
    for my $name (sort keys %desc) {
        my ($d, $proto) = ref $desc{$name} ? @{ $desc{$name} } : ($desc{$name}, 0);
        my ($code, undef, $res) = api($ctx, POST => '/register',
            { name => $name, type => 'Thing Assistant', desc => $d,
              speaks_protocol => $proto ? JSON::PP::true : JSON::PP::false });
        die "register $name: " . $res->status_line . "\n" unless $code == 200;
    }
}

# Connects each agent over WebSocket and waits until the registry counts it
# online (discovery recruits online agents only).
sub connect_agents {
    my ($ctx, @names) = @_;
    my %a;
    for my $name (@names) {
        $a{$name} = IoaTest::Agent->connect($ctx, $name);
        die "$name: " . $a{$name}->error . "\n" unless $a{$name}->ok;
    }
    wait_until(sub {
        !grep { !defined redis_cmd('ZSCORE', 'ioa:{reg}:online', $_) } @names
    }, 5) or die "agents not online\n";
    return \%a;
}

# Queues a goal exactly as POST /launch_goal does; returns the goal id.
#   launch(goal => '...', [team_member_names => [..], max_turns => n, ...],
#          [_parent => $gid], [_state => 'cancelling'], [_person => 'Ann'],
#          [_admin => 0])
# (_person: meta launched_by, the goal's person; _admin: meta
# launcher_admin, 1 unless given, as in open mode)
sub launch {
    my (%req) = @_;
    my $parent = delete $req{_parent} // '';
    my $person = delete $req{_person} // '';
    my $admin = delete $req{_admin} // 1;
    my $state = delete $req{_state} // 'queued';
    my @cont = defined $req{comm_id} ? (comm_id => $req{comm_id}) : ();
    my $gid = join '', map { sprintf '%04x', int rand 65536 } 1 .. 8;
    my $depth = $req{team_up_depth} // '';
    redis_cmd('HSET', "ioa:{goal:$gid}:meta", goal_id => $gid,
              goal => $req{goal}, request => json()->encode(\%req),
              state => $state, created_at => int(time * 1000),
              parent => $parent, depth => $depth, launched_by => $person,
              launcher_admin => $admin, @cont);
    my $r = redis_cmd('XGROUP', 'CREATE', 'ioa:{jobs}:goals', 'workers', '0',
                      'MKSTREAM');
    die "XGROUP: $r\n" if ref $r && "$r" !~ /BUSYGROUP/;
    redis_cmd('XADD', 'ioa:{jobs}:goals', '*', goal_id => $gid);
    return $gid;
}

sub meta {
    my $gid = shift;
    return { @{ redis_cmd('HGETALL', "ioa:{goal:$gid}:meta") } };
}

sub fsm {
    my $gid = shift;
    return { @{ redis_cmd('HGETALL', "ioa:{goal:$gid}:fsm") } };
}

sub state_of { redis_cmd('HGET', "ioa:{goal:$_[0]}:meta", 'state') // '' }

# A log stream's entries in order, decoded, each with its stream id under
# $idkey and the stored text in _raw.
sub log_entries {
    my ($key, $idkey) = @_;
    my $r = redis_cmd('XRANGE', $key, '-', '+');
    return map {
        my $raw = { @{ $_->[1] } }->{e};
        my $e = json()->decode($raw);
        $e->{$idkey} = $_->[0];
        $e->{_raw} = $raw;
        $e
    } @$r;
}

# The room's envelopes (the Stream id in id), and the goal's event feed
# (its id in _id).
sub room { log_entries("ioa:{room:$_[0]}:log", 'id') }
sub feed { log_entries("ioa:{room:goal-$_[0]}:log", '_id') }

sub coordinator_steps {
    return map { $_->{ioa_step} } grep { $_->{sender} eq $COORD } @_;
}

sub types { map { $_->{type} } @_ }

# The coordinator's steps for a team of $k members that only run tasks
# (run(task) -> result agents, registered without speaks_protocol): the
# plan (1), one DISCUSSION on behalf of each member (2 ..), the assignment
# (10), PAUSE (11), CONCLUDE_GROUP_DISCUSSION (40), CONCLUSION (41).
sub usual_steps { my $k = shift; (1, map({ 1 + $_ } 1 .. $k), 10, 11, 40, 41) }
sub usual_types { my $k = shift; (4, (4) x $k, 6, 9, 10, 11) }
sub team_size { scalar(@{ redis_cmd('SMEMBERS', "ioa:{room:$_[0]}:members") }) - 1 }
sub by_step { map { ($_->{ioa_step} => $_) } grep { $_->{sender} eq $COORD } @_ }

# Stream ids compare as (ms, seq), not as strings
sub id_lt {
    my ($am, $as) = split /-/, $_[0];
    my ($bm, $bs) = split /-/, $_[1];
    return $am < $bm || ($am == $bm && $as < $bs);
}

sub names_in {
    my $ns = shift;
    return ref $ns ? @$ns : ($ns // '') eq '' ? () : ($ns);
}

# Plays the agent runtime for every agent of $agents (name => Agent) until
# $until->() is true or $secs pass; returns whether $until became true.
# $how->{name}: 'answer' (progress, then result), 'fail' (progress, then a
# failed result), 'progress' (progress only), 'silent', 'hold' (noted in
# @Held, answered by release()), 'own_id' (answers under a task_id of its
# own making, as IoA's clients do), 'forge' (answers, and also posts a
# result for another agent's task), 'mute' (answers tasks, but never takes
# a discussion turn), 'fail_mute' (both), 'partial' (answers "partial"
# every time),
# 'empty' (reports "completed" with nothing in its result),
# 'partial_once' (the first task partial, later ones completed; %Partial
# counts them), 'vanish' (reports progress, then drops its connection for
# good), or a proposal on its first discussion turn: { tasks => {member =>
# {task_desc}} } (an ASYNC_TASK_ASSIGNMENT) or { conclude => 'answer' } (a
# CONCLUDE_GROUP_DISCUSSION).  An agent addressed by a DISCUSSION (next_speaker)
# answers with a DISCUSSION back to the speaker, unless 'silent' or
# 'mute'.  A SYNC_TASK_ASSIGNMENT is answered with the result alone.
# Every frame an agent reads is kept in $Seen{name}.
sub drive {
    my (%o) = @_;
    my $deadline = time + ($o{secs} // 20);
    while (1) {
        for my $name (sort keys %{ $o{agents} }) {
            my $a = $o{agents}{$name};
            next unless $a->ws->socket;         # gone ('vanish')
            while (defined(my $m = $a->recv(0.01))) {
                push @{ $Seen{$name} }, $m;
                act($a, $m, $o{how}{$name} // 'answer');
            }
        }
        return 1 if $o{until}->();
        return 0 if time > $deadline;
    }
}

sub act {
    my ($a, $m, $how) = @_;
    my $name = $a->name;
    my $type = $m->{type} // -1;
    return unless grep { $_ eq $name } names_in($m->{next_speaker});
    if (ref $how eq 'HASH') {       # a proposal on the first turn, once
        # the first turn is the plan's DISCUSSION (step 1) of this goal's
        # room: a DISCUSSION of an earlier goal's room still in the socket
        # (its step 9 answer, addressed to the proposer) must not take it
        return unless $type == 4 && ($m->{ioa_step} // 1) == 1
                      && !$how->{done}++;
        # plan: IoA's collaborative planning, an updated_plan in the turn
        # (alone: a DISCUSSION; with tasks or conclude: in that proposal)
        $a->post(envelope(comm_id => $m->{comm_id},
            type => $how->{conclude} ? 10 : $how->{tasks} || !defined $how->{plan} ? 6 : 4,
            next_speaker => [$m->{sender}],
            content => $how->{conclude} // "$name proposes more work",
            (defined $how->{plan} ? (updated_plan => $how->{plan}) : ()),
            $how->{tasks} ? (extra => [tasks => $how->{tasks}]) : ()));
        return;
    }
    if ($type == 4 && ($m->{sender} // '') ne $name) {
        return if $how eq 'silent' || $how eq 'mute' || $how eq 'fail_mute';
        $a->post(envelope(comm_id => $m->{comm_id}, type => 4,
            next_speaker => [$m->{sender}],
            content => "$name: I agree with the plan"));
        return;
    }
    return unless $type == 6 || $type == 5;
    my $task = $m->{tasks}{$name} or return;
    return if $how eq 'silent';
    $how = 'sync' if $type == 5 && $how eq 'answer';
    if ($how eq 'hold') {
        push @Held, [$a, $m, $task];
        return;
    }
    if ($how eq 'vanish') {
        answer($a, $m, $task, 'progress');
        $a->disconnect;
        return;
    }
    answer($a, $m, $task, $how);
}

sub answer {
    my ($a, $m, $task, $how) = @_;
    my $name = $a->name;
    $task = { %$task, task_id => 'own-' . int rand 1e9 } if $how eq 'own_id';
    if ($how eq 'forge') {
        my ($other) = grep { $_ ne $name } sort keys %{ $m->{tasks} };
        $a->post(envelope(comm_id => $m->{comm_id}, type => 7, next_speaker => '',
            task_id => $m->{tasks}{$other}{task_id},
            task_conclusion => "forged by $name"));
    }
    $a->post(envelope(comm_id => $m->{comm_id}, type => 8,
        next_speaker => $m->{sender}, task_id => $task->{task_id},
        task_desc => $task->{task_desc},
        content => "$name: working on it in the background"))
        unless $how eq 'sync';
    return if $how eq 'progress';
    $how = $Partial{$name}++ ? 'answer' : 'partial' if $how eq 'partial_once';
    # first_clause: an agent that does only the first of the clauses a task
    # carries ("a; b"), and says it completed the task
    $task = { %$task, task_desc => (split /; /, $task->{task_desc})[0] }
        if $how eq 'first_clause';
    my $status = $how =~ /^fail/ ? 'failed'
               : $how eq 'partial' ? 'partial' : 'completed';
    if ($how eq 'empty') {
        $a->post(envelope(comm_id => $m->{comm_id}, type => 7, next_speaker => '',
            task_id => $task->{task_id}, task_conclusion => '', content => '',
            extra => [task_status => 'completed']));
        return;
    }
    $a->post(envelope(comm_id => $m->{comm_id}, type => 7, next_speaker => '',
        task_id => $task->{task_id},
        task_conclusion => $status eq 'completed' ? "$name did: $task->{task_desc}"
                         : $status eq 'partial' ? "$name did half of it"
                         : "$name could not do it",
        content => 'result', extra => [task_status => $status]));
}

sub release {
    answer(@$_, 'answer') for splice @Held;
}

sub job_pending { redis_cmd('XPENDING', 'ioa:{jobs}:goals', 'workers')->[0] }

1;
