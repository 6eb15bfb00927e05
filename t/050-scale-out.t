# t/050-scale-out.t -- the hub scaled out: several nginx workers, and several
# nginx instances, on one Redis.  What must hold is what a single worker
# gives: every member of a room sees every envelope of the room exactly once,
# in the room's Stream order, wherever it is connected; presence and teamups
# cross process and instance boundaries.
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/050-scale-out.t
#
# Instance A is the runner's nginx (master on, 2 workers).  Its extra server
# on $TEST_NGINX_RAND_PORT_1 listens with `reuseport`, so each worker has its
# own accept queue and the kernel spreads connections over both; which worker
# owns a connection is read from `ss -tnp` (the nginx pid holding the server
# side of our client's port).  Instance B is a second nginx started by the
# scenario (IoaTest::Instance): its own prefix under the server root, its own
# port, the same module and the same Redis; it is stopped by PID when the
# scenario ends, also when it dies.
#
# Concurrency is real: after the agents are connected and teamed up, one
# child process per agent sends its envelopes and reads the room at the same
# time as the others (released together by a pipe), then reports what it saw.

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use File::Temp ();
use IoaTest::Instance;

use JSON::PP ();
use POSIX ();
use Time::HiRes ();

master_on();
workers(2);
no_root_location();   # `location / { ioa_api; }` is the block's own
no_shuffle();
log_level('info');    # debug logs of 1000+ frames only slow the run down

our $JSON = JSON::PP->new->canonical;

# ------------------------------------------------------------------ helpers
# (compiled in package main, like the scenarios that call them)

sub http_json {
    my ($ctx, $port, $path, $body) = @_;
    my $res = $ctx->http(POST => $path, port => $port,
                         headers => ['Content-Type' => 'application/json'],
                         body => $JSON->encode($body));
    my $doc = eval { $JSON->decode($res->content) };
    return ($res->code, $doc, $res->content);
}

sub register_agent {
    my ($ctx, $port, $name, $desc) = @_;
    my ($code, undef, $raw) = http_json($ctx, $port, '/register',
        { name => $name, type => 'Thing Assistant', desc => $desc });
    die "register $name: $code $raw\n" unless $code == 200;
}

sub teamup {
    my ($ctx, $port, $sender, @names) = @_;
    my ($code, $doc, $raw) = http_json($ctx, $port, '/teamup',
        { sender => $sender, agent_names => \@names, team_name => 'scale' });
    die "teamup: $code $raw\n" unless $code == 200 && $doc && $doc->{comm_id};
    return $doc->{comm_id};
}

sub ws_agent {
    my ($ctx, $port, $name) = @_;
    my $ws = $ctx->ws("/ws/$name", port => $port, timeout => 5);
    die "ws $name on $port: " . ($ws->error // '?') . "\n" unless $ws->ok;
    return $ws;
}

# The pid of the nginx process that holds the server side of this client
# connection: the worker the connection was accepted by.
sub conn_pid {
    my ($ws, $server_port) = @_;
    my $cport = $ws->socket->sockport;
    for (1 .. 50) {
        my $out = `ss -Htnp state established '( sport = :$server_port and dport = :$cport )' 2>&1`;
        return $1 if $out =~ /pid=(\d+)/;
        Time::HiRes::sleep(0.02);
    }
    die "no nginx process found for the connection 127.0.0.1:$cport -> "
      . "$server_port (ss -tnp)\n";
}

# The children of a master pid (its workers).
sub child_pids {
    my $ppid = shift;
    my @kids;
    for my $stat (glob '/proc/[0-9]*/stat') {
        open my $fh, '<', $stat or next;
        my $line = <$fh> // next;
        push @kids, $1 if $line =~ /^(\d+) \(.*\) \S+ (\d+) /s && $2 == $ppid;
    }
    return @kids;
}

sub master_pid_of {
    my $servroot = shift;
    open my $fh, '<', "$servroot/logs/nginx.pid" or return undef;
    my $pid = <$fh> // return undef;
    return $pid =~ /(\d+)/ ? $1 : undef;
}

# Every agent of %$agents (name => IoaTest::WS) sends $per envelopes into the
# room and reads the room until it has seen $expect envelopes of it (or the
# deadline passes), all at the same time, one child process per agent.
# Returns { name => { ids => [..], senders => [..], contents => [..],
#                     errors => [..], other => [..], eof => 0|1 } }.
sub exchange {
    my ($ctx, $agents, $comm_id, $per, $expect, $timeout) = @_;
    # not in the servroot: upstream Test::Nginx refuses to wipe a servroot
    # holding files of ours
    my $dir = File::Temp::tempdir('ioa-exchange-XXXXXX', TMPDIR => 1,
                                  CLEANUP => 1);
    my %pid_of;

    pipe my $go_r, my $go_w or die "pipe: $!\n";
    for my $name (sort keys %$agents) {
        my $ws = $agents->{$name};
        my $out = "$dir/exchange-$name.json";
        unlink $out;
        my $pid = fork // die "fork: $!\n";
        if ($pid == 0) {
            close $go_w;
            my $rc = eval {
                sysread $go_r, my $buf, 1;   # 0 bytes: the parent let go
                my $r = agent_loop($ws, $name, $comm_id, $per, $expect,
                                   $timeout);
                open my $fh, '>', "$out.tmp" or die "$out: $!";
                print $fh $JSON->encode($r);
                close $fh;
                rename "$out.tmp", $out;
                0;
            } // do { warn "agent $name: $@"; 1 };
            POSIX::_exit($rc);   # no END blocks, no Test::Builder in a child
        }
        $pid_of{$name} = $pid;
    }
    close $go_r;
    close $go_w;          # all children start now

    my $deadline = Time::HiRes::time() + $timeout + 5;
    my %left = reverse %pid_of;
    while (%left && Time::HiRes::time() < $deadline) {
        for my $pid (keys %left) {
            delete $left{$pid} if waitpid($pid, POSIX::WNOHANG()) == $pid;
        }
        Time::HiRes::sleep(0.02) if %left;
    }
    for my $pid (keys %left) {       # hung children: ours, stop them by pid
        kill 'KILL', $pid;
        waitpid $pid, 0;
    }

    my %res;
    for my $name (keys %pid_of) {
        my $file = "$dir/exchange-$name.json";
        open my $fh, '<', $file or do { $res{$name} = undef; next };
        local $/;
        $res{$name} = $JSON->decode(<$fh>);
    }
    return \%res;
}

sub agent_loop {
    my ($ws, $name, $comm_id, $per, $expect, $timeout) = @_;
    my %r = (ids => [], senders => [], contents => [], errors => [],
             other => [], eof => 0);
    my $sent = 0;
    my $deadline = Time::HiRes::time() + $timeout;
    while (@{ $r{ids} } < $expect && Time::HiRes::time() < $deadline) {
        if ($sent < $per) {
            $ws->send_text($JSON->encode({
                comm_id => $comm_id, content => "$name #$sent",
                next_speaker => '', state => 1, type => 7 }))
                // die "send failed: $!";
            $sent++;
        }
        # Drain what is there; block briefly only once everything is sent.
        while (1) {
            my $t = $ws->recv_text($sent < $per ? 0 : 0.25);
            if (!defined $t) {
                if ($ws->eof || defined $ws->close_code) {
                    $r{eof} = 1;
                    push @{ $r{other} }, 'closed: '
                        . ($ws->close_code // 'EOF') . ' '
                        . ($ws->close_reason // '');
                    return \%r;
                }
                last;
            }
            my $m = eval { $JSON->decode($t) };
            if (!$m) {
                push @{ $r{other} }, $t;
            } elsif (($m->{op} // '') eq 'error') {
                push @{ $r{errors} }, $t;
            } elsif (($m->{comm_id} // '') eq $comm_id && defined $m->{id}) {
                push @{ $r{ids} }, $m->{id};
                push @{ $r{senders} }, $m->{sender};
                push @{ $r{contents} }, $m->{content};
            } else {
                push @{ $r{other} }, $t;
            }
            last if $sent < $per;
        }
    }
    # a little longer, to catch duplicates or strays after the last one
    while (defined(my $t = $ws->recv_text(0.2))) {
        my $m = eval { $JSON->decode($t) } // {};
        if (($m->{comm_id} // '') eq $comm_id && defined $m->{id}) {
            push @{ $r{ids} }, $m->{id};
            push @{ $r{senders} }, $m->{sender};
            push @{ $r{contents} }, $m->{content};
        } else {
            push @{ $r{other} }, $t;
        }
    }
    return \%r;
}

# The room's Stream, oldest first: [id, sender, content] each.
sub room_log {
    my ($ctx, $comm_id) = @_;
    my $entries = $ctx->redis('XRANGE', "ioa:{room:$comm_id}:log", '-', '+');
    die "XRANGE: $entries\n" unless ref $entries eq 'ARRAY';
    return [ map {
        my ($id, $fields) = @$_;
        my %f = @$fields;
        my $e = $JSON->decode($f{e});
        [ $id, $e->{sender}, $e->{content} ]
    } @$entries ];
}

# The checks every exchange must pass: the Stream holds each agent's $per
# envelopes once, and every agent saw exactly the Stream, in its order.
sub check_room {
    my ($ctx, $comm_id, $res, $per, $where) = @_;
    my @names = sort keys %$res;
    my $log = room_log($ctx, $comm_id);
    my @log_ids = map { $_->[0] } @$log;
    my $total = $per * @names;

    is scalar(@log_ids), $total, "the Stream holds all $total envelopes";
    my %per_sender;
    $per_sender{ $_->[1] }++ for @$log;
    is_deeply \%per_sender, { map { $_ => $per } @names },
        "$per envelopes of every sender in the Stream";
    my %uniq_content = map { $_->[2] => 1 } @$log;
    is scalar(keys %uniq_content), $total, 'no envelope stored twice';

    for my $name (@names) {
        my $r = $res->{$name};
        if (!$r) {
            fail "$name ($where->{$name}) reported nothing";
            next;
        }
        is_deeply $r->{errors}, [], "$name ($where->{$name}): no error frames";
        is_deeply $r->{other}, [], "$name ($where->{$name}): no other frames";
        my $got = $r->{ids};
        my %seen;
        my @dups = grep { $seen{$_}++ } @$got;
        my %in_log = map { $_ => 1 } @log_ids;
        my @missing = grep { !$seen{$_} } @log_ids;
        is_deeply \@dups, [], "$name ($where->{$name}): no duplicates";
        is_deeply \@missing, [], "$name ($where->{$name}): no envelope lost";
        is_deeply $got, \@log_ids,
            "$name ($where->{$name}): exactly the Stream's ids, in its order"
            or diag "$name got " . scalar(@$got) . " ids, first difference at "
                  . first_diff($got, \@log_ids);
        my %from = map { $_ => 1 } @{ $r->{senders} };
        is scalar(grep { $from{$_} } @names), scalar(@names),
            "$name ($where->{$name}) heard every member";
    }

    # and every agent saw the same sequence as every other (redundant with
    # the above when it passes; says more when it does not)
    my $first = $res->{ $names[0] } or return;
    for my $name (@names[1 .. $#names]) {
        next unless $res->{$name};
        ok "@{ $res->{$name}{ids} }" eq "@{ $first->{ids} }",
            "$name and $names[0] saw the same sequence";
    }
}

sub first_diff {
    my ($a, $b) = @_;
    for my $i (0 .. (@$a > @$b ? $#$a : $#$b)) {
        return "#$i: got " . ($a->[$i] // 'nothing') . ', want '
             . ($b->[$i] // 'nothing')
            if ($a->[$i] // '') ne ($b->[$i] // '');
    }
    return 'none';
}

# An agent's entry in /retrieve_assistant's answer, or undef.
sub retrieve {
    my ($ctx, $port, $caps, $online_only) = @_;
    my ($code, $doc, $raw) = http_json($ctx, $port, '/retrieve_assistant',
        { sender => 'nobody', capabilities => $caps,
          online_only => $online_only ? JSON::PP::true : JSON::PP::false,
          limit => 10 });
    die "retrieve_assistant: $code $raw\n"
        unless $code == 200 && ref $doc eq 'ARRAY';
    return { map { $_->{name} => $_ } @$doc };
}

sub start_instance_b {
    my ($ctx, %opt) = @_;
    my $b = IoaTest::Instance->start(
        # outside the servroot: upstream Test::Nginx wipes that between
        # blocks, and must not race a second nginx's last writes
        dir => File::Temp::tempdir('ioa-instance-b-XXXXXX', TMPDIR => 1,
                                   CLEANUP => 1),
        workers => $opt{workers} // 1,
        log_level => 'info',
        avoid => [ $ctx->port, eval { $ctx->rand_port(1) } ],
        http_config => "ioa_redis 127.0.0.1:" . $ctx->redis_port . ";",
        config => 'location / { ioa_api; }',
    );
    return $b;
}

run_tests();

__DATA__

=== TEST 1: agents on two workers of one instance share a room in Stream order
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 reuseport;
        location / { ioa_api; }
    }
--- config
    location / { ioa_api; }
--- empty_redis
--- ioa_scenario
    my $port = $ctx->rand_port(1);
    # ready: the runner waited for both workers (IoaTest::Ready)

    my $master = master_pid_of($ctx->servroot);
    my %workers = map { $_ => 1 } child_pids($master);
    is scalar(keys %workers), 2, 'instance A runs 2 workers' or diag "master $master";

    # Connect agents until both workers hold at least 3; keep 3 of each.
    my (%by_pid, %pid_of, @extra);
    for my $i (1 .. 60) {
        my $name = "w$i";
        register_agent($ctx, $port, $name, "scale worker test agent $i");
        my $ws = ws_agent($ctx, $port, $name);
        my $pid = conn_pid($ws, $port);
        die "connection of $name is held by pid $pid, not a worker of $master\n"
            unless $workers{$pid};
        if (@{ $by_pid{$pid} ||= [] } < 3) {
            push @{ $by_pid{$pid} }, [$name, $ws];
            $pid_of{$name} = $pid;
        } else {
            push @extra, $ws;
        }
        last if keys %by_pid == 2 && !grep { @$_ < 3 } values %by_pid;
    }
    $_->close(1000) for @extra;
    my @pids = sort keys %by_pid;
    is scalar(@pids), 2, 'agents are spread over both workers';
    is_deeply [ map { scalar @{ $by_pid{$_} } } @pids ], [3, 3],
        '3 agents on each worker'
        or diag Test::More::explain { map { $_ => [ map { $_->[0] } @{ $by_pid{$_} } ] } @pids };

    my %agents = map { $_->[0] => $_->[1] } map { @$_ } values %by_pid;
    my @names = sort keys %agents;
    my $comm_id = teamup($ctx, $port, $names[0], @names);

    my $res = exchange($ctx, \%agents, $comm_id, 30, 30 * @names, 20);
    my %where = map { $_ => "worker $pid_of{$_}" } @names;
    check_room($ctx, $comm_id, $res, 30, \%where);

    # the connections were not moved meanwhile: still on those workers
    is_deeply { map { $_ => conn_pid($agents{$_}, $port) } @names }, \%pid_of,
        'each agent stayed on its worker';
    $_->close(1000) for values %agents;
--- no_error_log
[error]
[alert]
[crit]



=== TEST 2: agents split between two instances on one Redis share a room in Stream order
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1 reuseport;
        location / { ioa_api; }
    }
--- config
    location / { ioa_api; }
--- empty_redis
--- ioa_scenario
    my $pa = $ctx->rand_port(1);
    # ready: the runner waited for both workers (IoaTest::Ready)
    my $b = start_instance_b($ctx, workers => 2);
    my $pb = $b->port;
    my $a_master = master_pid_of($ctx->servroot);
    my %a_workers = map { $_ => 1 } child_pids($a_master);
    my %b_workers = map { $_ => 1 } $b->worker_pids;
    is scalar(keys %b_workers), 2, 'instance B runs 2 workers';

    my (%agents, %where);
    for my $i (1 .. 6) {
        my ($name, $port, $inst) = $i <= 3 ? ("a$i", $pa, 'A') : ("b$i", $pb, 'B');
        # register half of them through the other instance: it is one registry
        register_agent($ctx, $i % 2 ? $pa : $pb, $name, "scale instance agent $i");
        $agents{$name} = ws_agent($ctx, $port, $name);
        my $pid = conn_pid($agents{$name}, $port);
        $where{$name} = "instance $inst, pid $pid";
        ok $inst eq 'A' ? $a_workers{$pid} : $b_workers{$pid},
            "$name is held by a worker of instance $inst";
    }

    # the team is made through B this time; A's members learn of it by event
    my @names = sort keys %agents;
    my $comm_id = teamup($ctx, $pb, 'b4', @names);

    my $res = exchange($ctx, \%agents, $comm_id, 30, 30 * @names, 20);
    check_room($ctx, $comm_id, $res, 30, \%where);

    $_->close(1000) for values %agents;
    my $b_log = $b->error_log;
    unlike $b_log, qr/\[(error|alert|crit|emerg)\]/, "instance B's error.log is clean"
        or diag join '', grep { /\[(error|alert|crit|emerg)\]/ } split /^/m, $b_log;
    my $b_master = $b->pid;
    $b->stop;
    ok !grep({ IoaTest::Instance::_alive($_) } $b_master, keys %b_workers),
        'instance B (master and workers) is stopped';
--- no_error_log
[error]
[alert]
[crit]



=== TEST 3: an agent connected only to instance B is online in A's /retrieve_assistant
Presence across instances.
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- empty_redis
--- ioa_scenario
    my $pa = $ctx->port;
    # ready: the runner waited for both workers (IoaTest::Ready)
    my $b = start_instance_b($ctx);
    my $pb = $b->port;

    my $desc = 'radio telescope astronomy star charts';
    register_agent($ctx, $pa, 'stargazer', $desc);      # will be on B only
    register_agent($ctx, $pb, 'stayhome', $desc);       # never connects
    my $caps = ['radio telescope star charts'];

    # A's discovery index learns of the agent registered on B through
    # Redis pub/sub, a moment after B answered: ask again until it has
    # (5 s at most; at once on an idle machine)
    my ($all, $t_all) = (undef, Time::HiRes::time());
    while (1) {
        $all = retrieve($ctx, $pa, $caps, 0);
        last if ($all->{stargazer} && $all->{stayhome})
                || Time::HiRes::time() - $t_all > 5;
        Time::HiRes::sleep(0.02);
    }
    ok $all->{stargazer} && $all->{stayhome}, 'A finds both agents'
        or diag Test::More::explain $all;
    ok !$all->{stargazer}{online}, 'stargazer is offline before it connects';

    my $ws = ws_agent($ctx, $pb, 'stargazer');

    # presence is written right after the handshake; give Redis a moment to
    # get it (well below the 5 s heartbeat, so the heartbeat cannot be what
    # makes this pass)
    my ($found, $t0) = (undef, Time::HiRes::time());
    while (Time::HiRes::time() - $t0 < 1) {
        $found = retrieve($ctx, $pa, $caps, 1);
        last if $found->{stargazer};
        Time::HiRes::sleep(0.02);
    }
    ok $found->{stargazer}, 'A lists stargazer with online_only while it is on B'
        or diag Test::More::explain $found;
    is $found->{stargazer} && $found->{stargazer}{online} ? 1 : 0, 1,
        'A reports stargazer online: true';
    ok !$found->{stayhome}, 'online_only leaves out the agent that never connected';
    $all = retrieve($ctx, $pa, $caps, 0);
    ok $all->{stayhome} && !$all->{stayhome}{online},
        'without online_only it is listed as online: false';

    # leaving B is seen by A too
    $ws->close(1000);
    $ws->recv_close(2);
    my $gone;
    $t0 = Time::HiRes::time();
    while (Time::HiRes::time() - $t0 < 2) {
        $found = retrieve($ctx, $pa, $caps, 1);
        last if $gone = !$found->{stargazer};
        Time::HiRes::sleep(0.05);
    }
    ok $gone, 'after it leaves B, A no longer lists stargazer as online';
    $b->stop;
--- no_error_log
[error]
[alert]
[crit]



=== TEST 4: a teamup made through A reaches members connected to B at once
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- empty_redis
--- ioa_scenario
    my $pa = $ctx->port;
    # ready: the runner waited for both workers (IoaTest::Ready)
    my $b = start_instance_b($ctx);
    my $pb = $b->port;

    register_agent($ctx, $pa, $_, "teamup across instances $_")
        for qw(lead mate1 mate2);
    my $lead  = ws_agent($ctx, $pa, 'lead');     # on A
    my $mate1 = ws_agent($ctx, $pb, 'mate1');    # on B
    my $mate2 = ws_agent($ctx, $pb, 'mate2');    # on B
    # let the connections settle (rooms loaded) before the team exists
    Time::HiRes::sleep(0.2);

    for my $round (1 .. 3) {
        my $comm_id = teamup($ctx, $pa, 'lead', 'mate1', 'mate2');
        my $t0 = Time::HiRes::time();
        # the very first envelope, posted the moment /teamup answered
        $lead->send_text($::JSON->encode({ comm_id => $comm_id,
            content => "first words $round", next_speaker => 'mate1',
            state => 1, type => 7 }));
        my $first_id;
        for my $m ([mate1 => $mate1], [mate2 => $mate2], [lead => $lead]) {
            my ($name, $ws) = @$m;
            my $t = $ws->recv_text(3);
            my $e = eval { $::JSON->decode($t // '') } // {};
            is $e->{content}, "first words $round",
                "round $round: $name got the first envelope of the new room"
                or diag "got: " . ($t // 'nothing');
            is $e->{comm_id}, $comm_id, "round $round: $name: in that room";
            $first_id //= $e->{id};
            is $e->{id}, $first_id, "round $round: $name: the same id";
        }
        my $dt = Time::HiRes::time() - $t0;
        ok $dt < 1.5, sprintf 'round %d: it arrived at once (%.3f s)', $round, $dt;
        my $log = room_log($ctx, $comm_id);
        is_deeply [ map { $_->[0] } @$log ], [ $first_id // 'none' ],
            "round $round: it is the room's first and only Stream entry";

        # and B's members can answer at once, heard on A and B
        $mate2->send_text($::JSON->encode({ comm_id => $comm_id,
            content => "reply $round", next_speaker => 'lead',
            state => 1, type => 7 }));
        for my $m ([lead => $lead], [mate1 => $mate1], [mate2 => $mate2]) {
            my ($name, $ws) = @$m;
            my $e = eval { $::JSON->decode($ws->recv_text(3) // '') } // {};
            is $e->{content}, "reply $round", "round $round: $name got B's reply";
        }
    }
    $_->close(1000) for $lead, $mate1, $mate2;
    $b->stop;
--- no_error_log
[error]
[alert]
[crit]



=== TEST 5: an agent on A and B at once stays online after leaving A (it is still on B)
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    # An agent that reconnects to another instance before its old
    # connection is noticed as gone has two connections for a while; the
    # old one closing must not make it look offline.
    $ctx->redis('FLUSHALL');
    my $pa = $ctx->port;
    # ready: the runner waited for both workers (IoaTest::Ready)
    my $b = start_instance_b($ctx);
    my $pb = $b->port;

    register_agent($ctx, $pa, 'roamer', 'roaming seismograph earthquake sensor');
    my $caps = ['seismograph earthquake'];
    my $on_b = ws_agent($ctx, $pb, 'roamer');
    my $on_a = ws_agent($ctx, $pa, 'roamer');
    my $t0 = Time::HiRes::time();
    my $found;
    while (Time::HiRes::time() - $t0 < 1) {
        $found = retrieve($ctx, $pa, $caps, 1);
        last if $found->{roamer};
        Time::HiRes::sleep(0.02);
    }
    ok $found->{roamer}, 'roamer is online while on A and B';

    # the connection on A goes away; the one on B stays
    $on_a->close(1000);
    $on_a->recv_close(2);
    # wait until A has handled the close (its offline update, if any, has
    # reached Redis): the online score changes or 1 s passes
    my $before = $ctx->redis('ZSCORE', 'ioa:{reg}:online', 'roamer');
    $t0 = Time::HiRes::time();
    while (Time::HiRes::time() - $t0 < 1) {
        my $now = $ctx->redis('ZSCORE', 'ioa:{reg}:online', 'roamer');
        last if ($now // '') ne ($before // '');
        Time::HiRes::sleep(0.01);
    }
    $found = retrieve($ctx, $pa, $caps, 1);
    ok $found->{roamer}, 'roamer is still online at A: it is connected to B'
        or diag 'online zset: ' . join ' ', @{ $ctx->redis('ZRANGE',
                  'ioa:{reg}:online', 0, -1, 'WITHSCORES') };
    # B's index follows presence events like A's, a round trip behind
    # (slower under sanitizers, and on a loaded machine): B's answer is
    # waited for, as A's was above
    $t0 = Time::HiRes::time();
    while (Time::HiRes::time() - $t0 < 10) {
        $found = retrieve($ctx, $pb, $caps, 1);
        last if $found->{roamer};
        Time::HiRes::sleep(0.02);
    }
    ok $found->{roamer}, 'and at B, where it is connected';
    $on_b->close(1000);
    $b->stop;
--- no_error_log
[error]
[alert]
[crit]
