# IoaTest::Instance -- one more nginx next to the runner's, for scale-out
# tests (several hub instances sharing one Redis).
#
#   my $b = IoaTest::Instance->start(
#       dir     => $ctx->servroot . '/instance-b',   # its own prefix, wiped
#       workers => 1,                                # worker_processes
#       http_config => "ioa_redis 127.0.0.1:$port;", # into http { }
#       config  => 'location / { ioa_api; }',        # into its server { }
#       [main => 'worker_rlimit_nofile 20000;'],     # main context
#       [events => 'worker_connections 8192;'],      # its events { }
#   $b->port; $b->pid; $b->error_log; $b->error_log_file;
#   [no_ready_wait => 1],    # started on purpose while Redis is down
#   );                       # returns once every worker can talk to Redis
#   $b->ready;               # the same wait again, from the log's start
#   $b->stop;                                        # QUIT, TERM, KILL by PID
#
# It loads the same modules as the runner ($TEST_NGINX_LOAD_MODULES, made
# absolute), runs the same binary ($TEST_NGINX_BINARY) in the foreground
# (`daemon off`, master on) as our child so we reap it, on a free loopback
# port of its own, and writes its pid and logs under `dir`.
#
# Stopping is by PID only (the master, then any worker it left behind), and
# happens whatever way the test ends: explicitly, when the object goes out of
# scope (a scenario that dies drops it), or in END.  Only the process that
# started an instance stops it, so a forked child exiting never does.

package IoaTest::Instance;

use strict;
use warnings;

use Cwd ();
use File::Path qw(make_path remove_tree);
use IO::Socket::INET ();
use POSIX qw(WNOHANG);
use Scalar::Util qw(weaken);
use Time::HiRes qw(sleep time);

use IoaTest::Port ();
use IoaTest::Ready ();

my %Live;          # pid -> weakened object, for END

sub _free_port { IoaTest::Port::free_port(avoid => [@_]) }

sub _slurp {
    my ($file, $from) = @_;
    open my $fh, '<', $file or return '';
    binmode $fh;
    seek $fh, $from, 0 if $from;
    local $/;
    return scalar(<$fh>) // '';
}

# "ioa_auth off;" for a configuration that serves ioa_api without saying
# how clients authenticate: the tests of everything but authentication run
# in IoA's open mode, stated explicitly as an operator must.
sub auth_default {
    my $text = shift;
    return $text =~ /\bioa_api\b/ && $text !~ /\bioa_auth\b/
        ? "ioa_auth off;\n" : '';
}

sub start {
    my ($class, %opt) = @_;
    my $dir = $opt{dir} // die "IoaTest::Instance: dir required\n";
    $dir = Cwd::abs_path($dir) // $dir if -e $dir;
    my $binary = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
    my @loads = map { Cwd::abs_path($_) // $_ }
                split ' ', ($ENV{TEST_NGINX_LOAD_MODULES} // '');
    my $workers = $opt{workers} // 1;
    my $level = $opt{log_level} // 'debug';

    for my $attempt (1 .. 5) {
        my $port = $opt{port} // _free_port($ENV{TEST_NGINX_SERVER_PORT},
                                            $opt{avoid} ? @{ $opt{avoid} } : ());
        remove_tree($dir);
        make_path("$dir/conf", "$dir/logs", "$dir/html");
        my $conf = "$dir/conf/nginx.conf";
        my $loads = join '', map { "load_module $_;\n" } @loads;
        my $user = $> == 0 ? "user root;\n" : '';
        my $listen_opts = $opt{reuseport} // 1 ? ' reuseport' : '';
        # Tests written before authentication run in IoA's open mode, said
        # explicitly as an operator must (see IoaTest::_scenario_preprocess).
        my $auth = auth_default(($opt{http_config} // '')
                                . ($opt{config} // ''));
        open my $fh, '>', $conf or die "IoaTest::Instance: $conf: $!\n";
        print $fh <<"_EOC_";
${loads}worker_processes $workers;
daemon off;
master_process on;
error_log $dir/logs/error.log $level;
pid $dir/logs/nginx.pid;
$user@{[ $opt{main} // '' ]}
events {
    accept_mutex off;
    @{[ $opt{events} // 'worker_connections 256;' ]}
}

http {
    access_log $dir/logs/access.log;
    client_body_temp_path $dir/client_body_temp;
    proxy_temp_path $dir/proxy_temp;
    fastcgi_temp_path $dir/fastcgi_temp;
    scgi_temp_path $dir/scgi_temp;
    uwsgi_temp_path $dir/uwsgi_temp;
    default_type text/plain;

$auth@{[ $opt{http_config} // '' ]}

    server {
        listen 127.0.0.1:$port$listen_opts;
        server_name localhost;

@{[ $opt{config} // '' ]}
    }
}
_EOC_
        close $fh;

        my $pid = fork // die "IoaTest::Instance: fork: $!\n";
        if ($pid == 0) {
            open STDIN, '<', '/dev/null';
            open STDOUT, '>', '/dev/null';
            open STDERR, '>', "$dir/logs/nginx.stderr";
            exec $binary, '-p', "$dir/", '-c', $conf, '-e',
                 "$dir/logs/error.log"
                or POSIX::_exit(127);
        }

        # Up = the pid file is there (written after the sockets are bound)
        # and the port accepts; down = the child exited.
        my $deadline = time + 10;
        my $rc;
        while (time < $deadline) {
            if (waitpid($pid, WNOHANG) == $pid) { $rc = $?; last }
            if (-s "$dir/logs/nginx.pid") {
                my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                    PeerPort => $port, Proto => 'tcp', Timeout => 1);
                if ($s) {
                    close $s;
                    my $self = bless { pid => $pid, port => $port,
                        dir => $dir, owner => $$, workers => $workers,
                        wait_for => IoaTest::Ready::for_conf(_slurp($conf),
                                                             $level),
                        }, $class;
                    $Live{$pid} = $self;
                    weaken $Live{$pid};
                    return $opt{no_ready_wait} ? $self : $self->ready;
                }
            }
            sleep 0.02;
        }
        my $stderr = _slurp("$dir/logs/nginx.stderr");
        if (!defined $rc) {
            _stop_pid($pid);
            die "IoaTest::Instance: nginx in $dir did not come up: $stderr\n";
        }
        next if $stderr =~ /Address already in use/ && !$opt{port}
                && $attempt < 5;
        die "IoaTest::Instance: nginx in $dir exited ($rc): $stderr\n";
    }
    die "IoaTest::Instance: no port found for nginx in $dir\n";
}

# Started is not ready: the pid file and a listening port say nginx is up,
# not that its workers' Redis connections are (under ASan that takes a
# while, and /health_check answers 503 meanwhile).  IoaTest::Ready waits
# for each worker's own "ioa redis: ready" in error.log; dies with what is
# missing.  start() does this already unless told no_ready_wait; a hub
# whose configuration cannot be waited on (no ioa_redis, error_log above
# notice) is returned as started.
sub ready {
    my ($self, %opt) = @_;
    my $n = $self->{wait_for} or return $self;
    my ($ok, $why) = IoaTest::Ready::wait(log => $self->error_log_file,
        workers => $n, index => $opt{index}, timeout => $opt{timeout});
    die "IoaTest::Instance: nginx on port $self->{port} is not ready: $why\n"
        unless $ok;
    return $self;
}

sub pid  { $_[0]{pid} }
sub port { $_[0]{port} }
sub dir  { $_[0]{dir} }
sub error_log_file { "$_[0]{dir}/logs/error.log" }
sub error_log { _slurp($_[0]->error_log_file, $_[1]) }

# The master's children: its worker processes.
sub worker_pids {
    my $self = shift;
    my @kids;
    for my $stat (glob '/proc/[0-9]*/stat') {
        open my $fh, '<', $stat or next;
        my $line = <$fh> // next;
        push @kids, $1 if $line =~ /^(\d+) \(.*\) \S+ (\d+) /s
                          && $2 == $self->{pid};
    }
    return sort { $a <=> $b } @kids;
}

sub _alive {
    my $pid = shift;
    return 0 unless $pid && kill 0, $pid;
    waitpid $pid, WNOHANG;
    open my $fh, '<', "/proc/$pid/stat" or return 0;
    my $stat = <$fh> // '';
    return $stat !~ /^\d+ \(.*\) [ZX] /s;
}

sub _wait_gone {
    my ($pids, $secs) = @_;
    my $deadline = time + $secs;
    while (time < $deadline) {
        return 1 unless grep { _alive($_) } @$pids;
        sleep 0.02;
    }
    return !grep { _alive($_) } @$pids;
}

# QUIT (graceful), then TERM, then KILL: the master and the workers it had.
sub _stop_pid {
    my ($pid, @workers) = @_;
    if (_alive($pid)) {
        kill 'QUIT', $pid;
        if (!_wait_gone([$pid], 5)) {
            my @all = grep { _alive($_) } $pid, @workers;
            kill 'TERM', @all;
            if (!_wait_gone(\@all, 1)) {
                kill 'KILL', @all;
                _wait_gone(\@all, 1);
            }
        }
    }
    waitpid $pid, 0;
    # a worker that outlived its master (it should not) is ours too
    my @left = grep { _alive($_) } @workers;
    kill 'KILL', @left if @left;
}

sub stop {
    my $self = shift;
    return unless $self->{pid} && $self->{owner} == $$;
    my $pid = delete $self->{pid};
    delete $Live{$pid};
    _stop_pid($pid, $self->worker_pids_of($pid));
}

sub worker_pids_of {
    my ($self, $pid) = @_;
    local $self->{pid} = $pid;
    return $self->worker_pids;
}

sub DESTROY {
    my $self = shift;
    local ($@, $!, $?);
    $self->stop if $self->{pid};
}

END {
    local $?;
    for my $obj (grep { defined } values %Live) {
        $obj->stop;
    }
}

1;
