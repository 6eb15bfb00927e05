# Test::Nginx::Socket -- ioa's own runner for Test::Nginx-format test files.
#
# Why this exists: openresty's Test::Nginx is not packaged for Debian, but
# everything it is built on is (Test::Base, Test::LongString, libwww-perl,
# IPC::Run).  This module reads the same `=== TEST` / `--- section` block
# format and prints the same TAP test names, so every t/*.t file runs both
#
#     prove -It/lib -r t/                          (this runner)
#     prove -I/path/to/test-nginx/lib -It/lib t/   (upstream, in operators' CI)
#
# It is written from upstream's documented semantics, not from its code.
#
# Shape, per block (blocks are shuffled unless no_shuffle(), as upstream):
#   1. build nginx.conf from main_config / http_config / config (with
#      $TEST_NGINX_* expanded from the environment, $TEST_NGINX_RAND_PORT_N
#      allocated per block), wipe logs, start a fresh nginx, the same
#      "restart every block" behaviour as upstream's default (but with
#      `daemon off` and nginx as our child, so we can reap it);
#   2. send each request (a plain socket; curl --http2-prior-knowledge in
#      HTTP/2 mode), parse the response, run the status / header / body
#      checks, then the add_response_body_check hooks, then the error.log
#      checks on the log lines written since the previous check;
#   3. repeat step 2 repeat_each() times.
# nginx is stopped by its PID (QUIT, then TERM, then KILL for the master and
# its workers) before the next block and in END.
#
# A block with `--- no_request` sends none: step 2 only runs the
# add_response_body_check hooks (with no response) and the error.log
# checks, for blocks whose hooks drive nginx themselves (IoaTest's
# scenarios).  Upstream has no such section.
#
# Kept out on purpose: valgrind/stap/check-leak/benchmark/HUP modes, embedded
# TCP/UDP servers, access-log checks, user_files.  Unknown sections are
# ignored (as Test::Base does), which is what lets IoaTest add its own
# `--- ioa_scenario`.
#
# Environment: TEST_NGINX_BINARY (/usr/sbin/nginx), TEST_NGINX_LOAD_MODULES,
# TEST_NGINX_SERVER_PORT / TEST_NGINX_PORT (default: a free loopback port),
# TEST_NGINX_SERVROOT (default t/servroot-<pid>, removed at exit),
# TEST_NGINX_NO_CLEAN (leave nginx and servroot behind), TEST_NGINX_USE_HTTP2,
# TEST_NGINX_TIMEOUT (3 s), TEST_NGINX_LOG_LEVEL (debug), TEST_NGINX_NO_SHUFFLE,
# TEST_NGINX_MASTER_PROCESS.  TEST_NGINX_CHECK_LEAK is accepted and ignored.

package Test::Nginx::Socket;

use strict;
use warnings;

# Lower-case -base: subclass Test::Base and inherit its exports (blocks, plan,
# is, like, ...) without Spiffy's `my $self = shift` source filter.
use Test::Base -base;

use File::Path qw(make_path remove_tree);
use File::Spec ();
use HTTP::Response ();
use IO::Select ();
use IO::Socket::INET ();
use IPC::Run ();
use List::Util qw(shuffle);
use POSIX qw(WNOHANG);
use Test::LongString ();
use Text::Diff ();
use Time::HiRes qw(sleep time);

our @EXPORT = qw(
    run_tests run_test repeat_each no_shuffle master_on master_off
    master_process_enabled workers worker_connections log_level
    no_long_string no_root_location add_block_preprocessor
    add_response_body_check add_cleanup_handler add_start_hook env_to_nginx
    server_port server_port_for_client server_addr server_name server_root
    html_dir timeout bail_out config_preamble is_str
);

# ---------------------------------------------------------------- settings

our $NginxBinary   = $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx';
our $LoadModules   = $ENV{TEST_NGINX_LOAD_MODULES} // '';
our $UseHttp2      = $ENV{TEST_NGINX_USE_HTTP2};
our $NoClean       = $ENV{TEST_NGINX_NO_CLEAN};
our $Timeout       = $ENV{TEST_NGINX_TIMEOUT} || 3;
our $LogLevel      = $ENV{TEST_NGINX_LOG_LEVEL} || 'debug';
our $NoShuffle     = $ENV{TEST_NGINX_NO_SHUFFLE} || 0;
our $MasterProcessEnabled = $ENV{TEST_NGINX_MASTER_PROCESS} || 'off';
our $Workers           = 1;
our $WorkerConnections = 64;
our $RepeatEach        = 1;
our $NoLongString      = 0;
our $NoRootLocation    = 0;
our $ServerAddr        = '127.0.0.1';
our $ServerName        = 'localhost';
our $ConfigPreamble    = '';
our (@EnvToNginx, @BlockPreprocessors, @ResponseBodyChecks, @CleanupHandlers,
     @StartHooks);

# Lets IoaTest tell this runner from upstream's.
our $IoaRunner = 1;

# TEST_NGINX_RAND_PORT_N -> port, for the block being run (upstream's name).
our $RandPorts = {};
our $NginxVersion;          # canonical, e.g. 1.022001

use IoaTest::Port ();

my $MainPid = $$;
my $ErrLogPos = 0;          # error.log bytes already seen by the checks

# A free loopback port for a server of the test: IoaTest::Port (below the
# ephemeral range, never the same twice), avoiding the ports given.
sub free_port { IoaTest::Port::free_port(avoid => [@_]) }

our $PortIsAuto = !($ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT});
our $ServerPort = $ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT}
                  || free_port();
our $ServerPortForClient = $ENV{TEST_NGINX_CLIENT_PORT} || $ServerPort;
$ENV{TEST_NGINX_SERVER_PORT} = $ServerPort;

# A private server root per test process, so two runs never collide.
our $ServRootIsOurs = !$ENV{TEST_NGINX_SERVROOT};
our $ServRoot = $ENV{TEST_NGINX_SERVROOT}
    || File::Spec->rel2abs(-d 't' ? "t/servroot-$$"
                           : File::Spec->catdir(File::Spec->tmpdir,
                                                "servroot-$$"));
$ENV{TEST_NGINX_SERVER_ROOT} = $ServRoot;
our $LogDir     = "$ServRoot/logs";
our $ErrLogFile = "$LogDir/error.log";
our $AccLogFile = "$LogDir/access.log";
our $PidFile    = "$LogDir/nginx.pid";
our $HtmlDir    = "$ServRoot/html";
our $ConfDir    = "$ServRoot/conf";
our $ConfFile   = "$ConfDir/nginx.conf";

# Let Ctrl-C and `kill` run the END blocks that stop nginx (and redis).
my %SigNum = (HUP => 1, INT => 2, TERM => 15);
for my $sig (keys %SigNum) {
    $SIG{$sig} = sub { exit 128 + $SigNum{$sig} }
        if !$SIG{$sig} || $SIG{$sig} eq 'DEFAULT';
}

# ------------------------------------------------ exported knobs (upstream's)

sub repeat_each (@) { $RepeatEach = shift if @_; $RepeatEach }
sub no_shuffle () { $NoShuffle = 1 }
sub master_on () { $MasterProcessEnabled = 'on' }
sub master_off () { $MasterProcessEnabled = 'off' }
sub master_process_enabled (@) {
    return $MasterProcessEnabled unless @_;
    $MasterProcessEnabled = shift() ? 'on' : 'off';
}
sub workers (@) { $Workers = shift if @_; $Workers }
sub worker_connections (@) { $WorkerConnections = shift if @_; $WorkerConnections }
sub log_level (@) { $LogLevel = shift if @_; $LogLevel }
sub no_long_string () { $NoLongString = 1 }
sub no_root_location () { $NoRootLocation = 1 }
sub add_block_preprocessor (&) { unshift @BlockPreprocessors, shift }
sub add_response_body_check ($) { push @ResponseBodyChecks, shift }
sub add_cleanup_handler ($) { unshift @CleanupHandlers, shift }
# Not in upstream: called as ($block, $nginx_conf_text) once a block's
# nginx is up (its pid file written), before its first request; IoaTest
# waits there for the hub to be ready (IoaTest::Ready).
sub add_start_hook ($) { push @StartHooks, shift }
sub server_port (@) { $ServerPort = shift if @_; $ServerPort }
sub server_port_for_client (@) {
    $ServerPortForClient = shift if @_;
    $ServerPortForClient;
}
sub server_addr (@) { $ServerAddr = shift if @_; $ServerAddr }
sub server_name (@) { $ServerName = shift if @_; $ServerName }
sub server_root () { $ServRoot }
sub html_dir () { $HtmlDir }
sub timeout (@) { $Timeout = shift if @_; $Timeout }
sub config_preamble ($) { $ConfigPreamble = shift }

sub env_to_nginx (@) {
    for my $v (@_) {
        croak "env_to_nginx: bad argument value: $v"
            if $v !~ /^[A-Za-z_]/ || $v =~ /\n/;
        push @EnvToNginx, $v;
    }
}

sub is_str (@) {
    my ($got, $expected, $desc) = @_;
    return Test::More::like($got, $expected, $desc)
        if ref $expected && ref $expected eq 'Regexp';
    return Test::More::is($got, $expected, $desc) if $NoLongString;
    my $ok = Test::LongString::is_string($got, $expected, $desc);
    # is_string shows where strings part; a diff shows what changed.
    if (!$ok && defined $got && defined $expected
        && ($got =~ tr/\n//) + ($expected =~ tr/\n//) > 2)
    {
        Test::More::diag(Text::Diff::diff(\$expected, \$got,
            { STYLE => 'Unified', FILENAME_A => 'expected',
              FILENAME_B => 'got' }));
    }
    return $ok;
}

sub bail_out (@) {
    cleanup();
    Test::More::BAIL_OUT(join '', @_);
}

# ---------------------------------------------------------------- helpers

sub parse_time {
    my $t = shift;
    return undef unless defined $t;
    $t =~ s/^\s+|\s+$//g;
    return $1 / 1000 if $t =~ /^([\d.]+)ms$/;
    $t =~ s/s$//;
    return $t;
}

sub slurp {
    my ($file, $from) = @_;
    open my $fh, '<', $file or return undef;
    binmode $fh;
    seek $fh, $from, 0 if $from;
    local $/;
    my $data = <$fh>;
    return $data // '';
}

# Replace every $TEST_NGINX_FOO by the environment variable; a missing one is
# a mistake in the test file, so bail out like upstream rather than guess.
sub expand_env_in_text {
    my ($text, $name) = @_;
    return $text unless defined $text && !ref $text;
    $text =~ s{\$(TEST_NGINX_[_A-Z0-9]+)}{
        my $var = $1;
        if ($var =~ /^TEST_NGINX_RAND_PORT_\d+$/) {
            my @taken = ($ServerPort, values %$RandPorts);
            $RandPorts->{$var} //= free_port(@taken);
        } elsif (!defined $ENV{$var}) {
            bail_out("$name - No environment $var defined.\n");
        } else {
            $ENV{$var};
        }
    }ge;
    return $text;
}

# Alive and not a zombie: PID 1 in a container may never reap a daemonized
# nginx, and a zombie still answers kill(0).
sub is_running {
    my $pid = shift;
    return 0 unless $pid && kill 0, $pid;
    waitpid $pid, WNOHANG;
    open my $fh, '<', "/proc/$pid/stat" or return 0;
    my $stat = <$fh> // '';
    return $stat !~ /^\d+ \(.*\) [ZX] /s;
}

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

sub wait_gone {
    my ($pids, $secs) = @_;
    my $deadline = time + $secs;
    while (time < $deadline) {
        return 1 unless grep { is_running($_) } @$pids;
        sleep 0.02;
    }
    return !grep { is_running($_) } @$pids;
}

sub nginx_version {
    my $out = `$NginxBinary -V 2>&1`;
    bail_out("Cannot run $NginxBinary -V (set TEST_NGINX_BINARY): $out")
        if $? != 0 || $out !~ m{/(\d+)\.(\d+)\.(\d+)};
    return sprintf '%d.%03d%03d', $1, $2, $3;
}

# ------------------------------------------------------------ nginx control

sub write_config_file {
    my ($block, $config) = @_;
    my $name = $block->name;

    my $http_config = expand_env_in_text($block->http_config // '', $name);
    my $main_config = expand_env_in_text($block->main_config // '', $name);
    my $post_main   = expand_env_in_text($block->post_main_config // '', $name);
    my $loads = join '', map { "load_module $_;\n" } split ' ', $LoadModules;

    # HTTP/2 without TLS needs `listen ... http2` before nginx 1.25.1 and
    # `http2 on;` from then on (the directive did not exist before).
    my ($listen_opts, $h2_directive) = ('', '');
    if (use_http2($block)) {
        if ($NginxVersion >= 1.025001) { $h2_directive = ' http2 on;' }
        else                           { $listen_opts  = ' http2' }
    }

    my $nginx_V = `$NginxBinary -V 2>&1`;
    my $temp_paths = join ' ', map { "${_}_temp_path $ServRoot/${_}_temp;" }
        grep { my $m = $_; $nginx_V !~ /--without-http_${m}_module/
               && $http_config !~ /\b${m}_temp_path\b/ }
        qw(client_body proxy fastcgi scgi uwsgi);

    my $env_lines = join '', map { my $v = /\s/ ? "'$_'" : $_; "env $v;\n" }
        @EnvToNginx;
    my $root_location = $NoRootLocation ? '' : <<"_EOC_";
        location / {
            root $HtmlDir;
            index index.html index.htm;
        }
_EOC_
    my $user = $> == 0 ? "user root;\n" : '';

    open my $out, '>', $ConfFile or bail_out("Can't write $ConfFile: $!");
    print $out <<"_EOC_";
${loads}worker_processes  $Workers;
daemon off;
master_process $MasterProcessEnabled;
error_log $ErrLogFile $LogLevel;
pid       $PidFile;
${env_lines}
$main_config

http {
    access_log $AccLogFile; $temp_paths

    default_type text/plain;
    keepalive_timeout  68000ms;

$http_config

    server {
        listen          $ServerAddr:$ServerPort$listen_opts;$h2_directive
        server_name     '$ServerName';
        client_max_body_size 30M;

        # Begin preamble config...
$ConfigPreamble
        # End preamble config...

        # Begin test case config...
$config
        # End test case config.

$root_location    }
}

$post_main

events {
    accept_mutex off;
    worker_connections  $WorkerConnections;
}
$user
_EOC_
    close $out;
}

sub setup_server_root {
    # Only ever delete what this runner creates inside the server root.
    remove_tree($ConfDir, $LogDir, $HtmlDir, glob("$ServRoot/*_temp"));
    make_path($ConfDir, $LogDir, $HtmlDir);
    open my $fh, '>', "$HtmlDir/index.html"
        or bail_out("Can't write $HtmlDir/index.html: $!");
    print $fh '<html><head><title>It works!</title></head>'
            . '<body>It works!</body></html>';
    close $fh;
}

# nginx runs in the foreground (`daemon off`) as our own child: we reap it
# ourselves, because PID 1 in a container may never reap a daemonized nginx
# and `pgrep nginx` would then show zombies after every run.  Its stderr goes
# to a file, where nginx prints configuration errors.
our $NginxPid;

# Starts nginx for a block.  Returns 0 once it is up, or its exit code when it
# fails to start and $expect_death is set (must_die); bails out otherwise.
sub start_nginx {
    my ($block, $config, $expect_death) = @_;
    my $name = $block->name;
    stop_nginx();
    for my $attempt (1 .. 5) {
        $RandPorts = {};
        my $conf = expand_env_in_text($config // '', $name);
        setup_server_root();
        write_config_file($block, $conf);
        $ErrLogPos = 0;

        my $errfile = "$LogDir/nginx.stderr";
        my @cmd = ($NginxBinary, '-p', "$ServRoot/", '-c', $ConfFile,
                   '-e', $ErrLogFile);
        my $pid = fork // bail_out("fork failed: $!");
        if ($pid == 0) {
            open STDOUT, '>', '/dev/null';
            open STDERR, '>', $errfile;
            exec @cmd or POSIX::_exit(127);
        }

        # Up = the pid file exists (nginx writes it after binding its
        # listening sockets); down = the child exited.
        my ($rc, $deadline) = (undef, time + 10 * $Timeout);
        while (time < $deadline) {
            if (waitpid($pid, WNOHANG) == $pid) {
                $rc = $? >> 8 || 255;
                last;
            }
            last if -s $PidFile;
            sleep 0.01;
        }
        if (!defined $rc) {
            $NginxPid = $pid;
            return 0 if -s $PidFile;
            bail_out("$name - nginx wrote no pid file $PidFile in time");
        }
        return $rc if $expect_death;

        my $stderr = slurp($errfile) // '';
        # Lost a race for an auto-picked port: pick another and retry.
        if ($stderr =~ /Address already in use/ && $attempt < 5) {
            if ($PortIsAuto) {
                $ServerPort = $ServerPortForClient = free_port();
                $ENV{TEST_NGINX_SERVER_PORT} = $ServerPort;
            }
            sleep 0.1 * $attempt;
            next;
        }
        # prove shows only the first line of a bail-out message.
        (my $why = $stderr) =~ s/^\s+|\s+$//g;
        $why =~ s/\s*\n\s*/ | /g;
        Test::More::diag("nginx stderr:\n$stderr");
        bail_out("$name - Cannot start nginx (exit code $rc): $why"
                 . "  [command: @cmd]");
    }
}

# QUIT (graceful), then TERM, then KILL for the master and its workers.
sub stop_nginx {
    my $pid = $NginxPid // return;
    undef $NginxPid;
    if (is_running($pid)) {
        kill 'QUIT', $pid;
        if (!wait_gone([$pid], $Timeout)) {
            warn "nginx $pid did not quit in ${Timeout}s, sending TERM\n";
            my @all = ($pid, child_pids($pid));
            kill 'TERM', @all;
            if (!wait_gone(\@all, 1)) {
                kill 'KILL', @all;
                wait_gone(\@all, 1);
            }
        }
    }
    waitpid $pid, 0;
    unlink $PidFile;
}

sub cleanup {
    return unless $$ == $MainPid;
    $_->() for @CleanupHandlers;
}

END {
    if ($$ == $MainPid) {
        local $?;        # keep the test script's exit status
        cleanup();
        if ($NoClean) {
            print STDERR "# TEST_NGINX_NO_CLEAN: nginx and $ServRoot left "
                       . "behind\n" if -d $ServRoot;
        } else {
            stop_nginx();
            remove_tree($ServRoot) if $ServRootIsOurs && -d $ServRoot;
        }
    }
}

# ------------------------------------------------------------ the test loop

sub run_tests () {
    $NginxVersion = nginx_version();
    my @blocks = Test::Base::blocks();
    @blocks = shuffle @blocks unless $NoShuffle;
    for my $block (@blocks) {
        $_->($block) for @BlockPreprocessors;
        $block->set_value(name => "$0 " . $block->name);
        run_test($block);
    }
    stop_nginx() unless $NoClean;
    cleanup();
}

sub run_test ($) {
    my $block = shift;
    return if defined $block->SKIP;
    my $name = $block->name;

    if (defined(my $spec = $block->skip_nginx)) {
        $spec =~ /^\s*(\d+)\s*:\s*([<>]=?)\s*(\d+)\.(\d+)\.(\d+)\s*(?::\s*(.*?))?\s*$/
            or bail_out("$name - Invalid --- skip_nginx spec: $spec");
        my ($n, $op, $reason) = ($1, $2, $6);
        my $ver = sprintf '%d.%03d%03d', $3, $4, $5;
        if (eval "$NginxVersion $op $ver") {
            SKIP: { Test::More::skip("$name - " . ($reason
                      || "nginx version $op $3.$4.$5"), $n) }
            return;
        }
    }

    # Upstream reuses the previous block's nginx when a block has no config,
    # and blocks run shuffled: require one so a test cannot pass here only.
    bail_out("$name - No '--- config' section (an empty one will do)")
        unless defined $block->config;

    local $LogLevel = $block->log_level // $LogLevel;

    if (defined $block->must_die) {
        for my $i (0 .. $RepeatEach - 1) {
            my $rc = start_nginx($block, $block->config, 1);
            my $want = $block->must_die;
            if ($want =~ /^\d+$/) {
                Test::More::is($want, $rc, "$name - die with the expected exit code");
            } else {
                Test::More::isnt($rc, 0, "$name - die as expected");
            }
            check_error_log($block, $i);
            stop_nginx() if $rc == 0;
        }
        return;
    }

    start_nginx($block, $block->config);
    if (@StartHooks) {
        my $conf = slurp($ConfFile) // '';
        $_->($block, $conf) for @StartHooks;
    }
    if (defined $block->init) {
        eval $block->init;
        bail_out("$name - init failed: $@") if $@;
    }
    for my $i (0 .. $RepeatEach - 1) {
        run_requests($block, $i);
    }
}

sub get_indexed_value {
    my ($name, $value, $req_idx, $need_array) = @_;
    if ($need_array) {
        return $value->[$req_idx] if ref $value eq 'ARRAY';
        bail_out("$name - You asked for many requests, the expected results "
                 . "should be arrays as well.");
    }
    return ref $value eq 'ARRAY' ? $value->[0] : $value;
}

sub use_http2 {
    my $block = shift;
    return 0 if defined $block->no_http2;
    return 0 unless $UseHttp2 || defined $block->http2;
    return 0 if defined $block->raw_request || defined $block->pipelined_requests
                || !defined $block->request;
    return 0 if !ref $block->request && $block->request =~ m{HTTP/1\.0};
    return 1;
}

# ---------------------------------------------------------------- requests

sub parse_more_headers {
    my $in = shift // '';
    my ($out, $chunked) = ('', 0);
    for my $line (split /\n+/, $in) {
        next if $line =~ /^\s*#/ || $line !~ /\S/;
        my ($k, $v) = split /:\s*/, $line, 2;
        $v //= '';
        $chunked = 1 if lc $k eq 'transfer-encoding' && $v eq 'chunked';
        $out .= "$k: $v\r\n";
    }
    return ($out, $chunked);
}

# "METHOD [URI [VERSION]]\nbody" -> full HTTP/1.x request text.
sub build_request {
    my ($name, $text, $more_headers, $conn) = @_;
    $text //= '';
    1 while $text =~ s/^\s*#[^\n]*\n|^\s+//;
    my ($first, $body) = split /\n/, $text, 2;
    bail_out("$name - Request line should be non-empty")
        unless defined $first && $first =~ /\S/;
    my ($meth, $uri, $ver) = split ' ', $first;
    $uri //= '/';
    $ver //= 'HTTP/1.1';
    $body //= '';
    my ($hdr, $chunked) = parse_more_headers($more_headers);
    my $head = '';
    $head .= "Host: $ServerName\r\n" if $hdr !~ /^Host:/mi;
    $head .= "Connection: $conn\r\n" if $hdr !~ /^Connection/mi;
    $head .= $hdr;
    if (!$chunked && $body ne '' && $hdr !~ /^Content-Length:/mi) {
        $body =~ s/^\s+|\s+$//gs;
        $head .= 'Content-Length: ' . length($body) . "\r\n";
    }
    return "$meth $uri $ver\r\n$head\r\n$body";
}

# Returns ([connection, ...], $npipelined): a connection is a list of
# [bytes, delay_before] packets; $npipelined counts the responses expected on
# the one connection of --- pipelined_requests (0 otherwise).
sub get_requests {
    my $block = shift;
    my $name = $block->name;
    my $more = $block->more_headers;
    my $hdr_for = sub {
        my $i = shift;
        return $more unless ref $more eq 'ARRAY';
        return $more->[$i] // bail_out("$name - --- more_headers lacks data "
                                       . "for request $i");
    };

    if (defined(my $raw = $block->raw_request)) {
        my $delay = parse_time($block->raw_request_middle_delay);
        return ([[ map { ref $_ ? [$_->{value}, $_->{delay_before}]
                                : [$_, $delay] } ref $raw ? @$raw : ($raw) ]],
                0);
    }
    if (my $reqs = $block->pipelined_requests) {
        bail_out("$name - invalid entries in --- pipelined_requests")
            unless ref $reqs eq 'ARRAY';
        my $all = join '', map {
            build_request($name, expand_env_in_text($reqs->[$_], $name),
                          $hdr_for->($_),
                          $_ == $#$reqs ? 'close' : 'keep-alive')
        } 0 .. $#$reqs;
        return ([[[$all]]], scalar @$reqs);
    }
    my $request = $block->request;
    bail_out("$name - request empty") unless defined $request;
    my @reqs = ref $request eq 'ARRAY' ? @$request : ($request);
    my @conns;
    for my $i (0 .. $#reqs) {
        # Packets of one request are joined: their delays are not kept.
        my $r = ref $reqs[$i] ? join '', map { ref $_ ? $_->{value} : $_ }
                                         @{ $reqs[$i] }
                              : $reqs[$i];
        push @conns, [[ build_request($name, $r, $hdr_for->($i), 'close') ]];
    }
    return (\@conns, 0);
}

# One connection: write the packets, read until the server closes it.
sub send_request {
    my ($block, $packets, $timeout) = @_;
    my $name = $block->name;
    local $SIG{PIPE} = 'IGNORE';    # nginx may close before we finish writing
    my $sock;
    for my $try (1 .. 20) {
        $sock = IO::Socket::INET->new(PeerAddr => $ServerAddr,
            PeerPort => $ServerPortForClient, Proto => 'tcp',
            Timeout => $timeout) and last;
        sleep 0.05 * $try;
    }
    if (!$sock) {
        Test::More::fail("$name - Can't connect to "
                         . "$ServerAddr:$ServerPortForClient: $!");
        return '';
    }
    binmode $sock;
    for my $p (@$packets) {
        my ($data, $delay) = @$p;
        sleep $delay if $delay;
        my $off = 0;
        while ($off < length $data) {
            my $n = syswrite $sock, $data, length($data) - $off, $off;
            if (!defined $n) {
                warn "$name - write failed: $!\n";
                last;
            }
            $off += $n;
        }
    }
    if (defined(my $how = $block->shutdown)) {
        shutdown $sock, $how =~ /(\d)/ ? $1 : 1;
    }

    my ($resp, $sel) = ('', IO::Select->new($sock));
    my $deadline = time + $timeout;
    while (1) {
        my $left = $deadline - time;
        if ($left <= 0 || !$sel->can_read($left)) {
            Test::More::fail("ERROR: client socket timed out - $name")
                unless defined $block->abort;
            last;
        }
        my $n = sysread $sock, my $buf, 65536;
        last if !$n;             # EOF or ECONNRESET
        $resp .= $buf;
    }
    close $sock;
    return $resp;
}

sub send_request_by_curl {
    my ($block, $req, $timeout) = @_;
    my $name = $block->name;
    my ($head, $body) = split /\r\n\r\n/, $req, 2;
    my ($line, @headers) = split /\r\n/, $head;
    my ($meth, $uri) = split ' ', $line;
    my @cmd = ('curl', '-sS', '-i', '--http2-prior-knowledge',
               '-H', 'User-Agent:', '-H', 'Accept:', '-H', 'Host:',
               '--max-time', $timeout);
    push @cmd, $meth eq 'HEAD' ? '-I' : $meth ne 'GET' ? ('-X', $meth) : ();
    push @cmd, map { ('-H', $_) } grep { !/^(Connection|Content-Length)\s*:/i }
        @headers;
    if (defined $body && $body ne '') {
        my $file = "$HtmlDir/curl.data.bin";
        open my $fh, '>', $file or bail_out("Can't write $file: $!");
        binmode $fh;
        print $fh $body;
        close $fh;
        push @cmd, '--data-binary', "\@$file";
    }
    push @cmd, "http://$ServerAddr:$ServerPortForClient$uri";
    IPC::Run::run(\@cmd, \undef, \my $out, \my $err);
    if (!defined $out || $out eq '') {
        Test::More::fail("$name - command \"@cmd\" failed: " . ($err // ''));
        return '';
    }
    return $out;
}

# Returns (HTTP::Response, raw header text, unread bytes after the body).
sub parse_response {
    my ($name, $raw, $head_req) = @_;
    my ($raw_headers) = $raw =~ /^(.*?\r\n)\r\n/s;
    my $res = HTTP::Response->parse($raw);
    my $code = $res->code;
    $res->code(undef) if defined $code && $code !~ /^\d+$/;
    return ($res, $raw_headers // '', undef)
        if !$res->code || $res->code =~ /^(1\d\d|204|304)$/ || $head_req;

    my ($body, $left) = ($res->content // '', undef);
    if (lc($res->header('Transfer-Encoding') // '') eq 'chunked') {
        my ($decoded, $err) = ('');
        while (1) {
            if ($body !~ s/^[ \t]*([0-9a-fA-F]+)[^\r\n]*\r\n//) {
                $err = 'no chunk size';
                last;
            }
            my $len = hex $1;
            if ($len == 0) {       # the last chunk, trailers, empty line
                $err = 'bad trailer' if $body !~ s/^(?:[^\r\n]+\r\n)*\r\n//;
                $left = $body;
                last;
            }
            if (substr($body, $len, 2) ne "\r\n") {
                $err = 'truncated chunk or no CRLF after it';
                last;
            }
            $decoded .= substr $body, 0, $len;
            substr($body, 0, $len + 2) = '';
        }
        Test::More::fail("$name - invalid chunked body received ($err)")
            if $err;
        $res->content($decoded);
    } elsif (defined(my $len = $res->header('Content-Length'))) {
        if (length $body > $len) {
            $left = substr $body, $len;
            $res->content(substr $body, 0, $len);
        } elsif (length $body < $len) {
            warn "WARNING: $name - response body truncated: $len expected, "
               . "but got " . length($body) . "\n";
        }
    }
    return ($res, $raw_headers // '', $left);
}

sub run_requests {
    my ($block, $rep) = @_;
    my $name = $block->name;
    my $timeout = parse_time($block->timeout) // $Timeout;
    my $wait = parse_time($block->wait);

    # --- no_request (IoaTest sets it for a scenario block without a
    # request): nginx is up and ready, the extensions run with no response,
    # then the error.log checks
    if (defined $block->no_request) {
        $_->($block, undef, 0, $rep, 0) for @ResponseBodyChecks;
        sleep $wait if $wait;
        check_error_log($block, $rep);
        return;
    }
    my ($conns, $npipe) = get_requests($block);
    my @conns = @$conns;
    my $need_array = $npipe || @conns > 1;
    my $h2 = use_http2($block);
    my $req_idx = 0;

    for my $c (0 .. $#conns) {
        my $packets = $conns[$c];
        my $all = join '', map { $_->[0] } @$packets;
        my $head_req = $all =~ /^\s*HEAD\s/;
        my $raw = $h2 ? send_request_by_curl($block, $all, $timeout)
                      : send_request($block, $packets, $timeout);
        for my $p (1 .. ($npipe || 1)) {
            if (!defined $block->ignore_response) {
                my ($res, $raw_headers, $left) =
                    parse_response($name, $raw, $head_req);
                check_response($block, $res, $raw_headers, $req_idx, $rep,
                               $need_array);
                $raw = $left // '';
                warn "WARNING: $name - unexpected extra bytes after the "
                   . "response: \"$raw\"\n" if !$npipe && $raw ne '';
            }
            my $last = $c == $#conns && $p == ($npipe || 1);
            if (!$last) {
                sleep $wait if $wait;
                check_error_log($block, $rep);
            }
            $req_idx++;
        }
    }
    sleep $wait if $wait;
    check_error_log($block, $rep);
}

sub check_response {
    my ($block, $res, $raw_headers, $i, $rep, $need_array) = @_;
    my $name = $block->name;
    my $code = ($res && $res->code) || '';

    # status
    if (defined $block->error_code_like) {
        my $pat = get_indexed_value($name, $block->error_code_like, $i, $need_array);
        Test::More::like($code, qr/$pat/sm, "$name - status code ok");
    } else {
        my $want = defined $block->error_code
            ? get_indexed_value($name, $block->error_code, $i, $need_array)
            : 200;
        Test::More::is($code, $want, "$name - status code ok");
    }

    # headers
    for my $which (qw(like unlike)) {
        my $section = "raw_response_headers_$which";
        my $pat = $block->$section // next;
        $pat = get_indexed_value($name, $pat, $i, $need_array);
        no strict 'refs';
        &{"Test::More::$which"}($raw_headers, qr/$pat/s,
                                "$name - raw resp headers $which");
    }
    for my $which (qw(response_headers response_headers_like)) {
        my $spec = $block->$which // next;
        $spec = get_indexed_value($name, $spec, $i, $need_array);
        for my $line (split /\n/, $spec) {
            $line =~ s/^\s+|\s+$//g;
            next if $line eq '';
            if ($line =~ s/^!\s*//) {
                Test::More::unlike($raw_headers, qr/^\s*\Q$line\E\s*:/mi,
                    "$name - header $line not present in the raw headers");
                next;
            }
            my ($key, $val) = split /\s*:\s*/, $line, 2;
            $val //= '';
            $val =~ s/\$ServerPort(ForClient)?\b/$1 ? $ServerPortForClient : $ServerPort/ge;
            my $got = ($res && $res->header($key)) // '';
            if ($which eq 'response_headers') {
                Test::More::is($got, $val, "$name - header $key ok");
            } else {
                Test::More::like($got, qr/^$val$/, "$name - header $key like ok");
            }
        }
    }

    # body
    my $content = $res ? $res->content : undef;
    if (defined $block->response_body) {
        my $want = get_indexed_value($name, $block->response_body, $i, $need_array);
        if (defined $want && !ref $want) {
            $want =~ s/\$ServerPort(ForClient)?\b/$1 ? $ServerPortForClient : $ServerPort/ge;
            $want = expand_env_in_text($want, $name);
        }
        my $desc = "(repeated req $rep, req $i)";
        if (ref $want) {
            Test::More::like($content, $want, "$name - response_body - like $desc");
        } else {
            is_str($content, $want,
                   "$name - response_body - response is expected $desc");
        }
    } else {
        for my $which (qw(like unlike)) {
            my $section = "response_body_$which";
            my $pat = $block->$section // next;
            $pat = get_indexed_value($name, $pat, $i, $need_array);
            $pat =~ s/\$ServerPort(ForClient)?\b/$1 ? $ServerPortForClient : $ServerPort/ge
                unless ref $pat;
            my $summary = $content // '';
            $summary =~ s/^\s+|\s+$//g;
            $summary =~ s/\s+/ /g;
            no strict 'refs';
            &{"Test::More::$which"}($content, qr/$pat/s,
                "$name - response_body_$which - response is expected ($summary)");
        }
    }

    # extensions (IoaTest's --- ioa_scenario rides on this hook)
    $_->($block, $content, $i, $rep, 0) for @ResponseBodyChecks;
}

# ------------------------------------------------------------- error.log

# The lines nginx wrote since the previous call (or since it started).
sub error_log_data {
    # Give the log phase, which runs after the response is sent, a moment.
    sleep 0.05;
    my $data = slurp($ErrLogFile, $ErrLogPos) // return [];
    $ErrLogPos += length $data;
    return [ split /^/m, $data ];
}

sub log_patterns {
    my $pats = shift;
    return [$pats] if ref $pats eq 'Regexp';
    return [ grep { defined } @$pats ] if ref $pats eq 'ARRAY';
    chomp $pats;
    return [ split /\n+/, $pats ];
}

sub fmt_str {
    my $s = shift;
    chomp $s;
    $s =~ s/"/\\"/g;
    $s =~ s/\r/\\r/g;
    $s =~ s/\n/\\n/g;
    return $s;
}

sub check_error_log {
    my ($block, $rep) = @_;
    my $name = $block->name;
    my $lines = error_log_data();
    my $matches = sub {
        my ($line, $pat) = @_;
        return ref $pat ? $line =~ $pat : index($line, $pat) >= 0;
    };
    # The patterns' text, to know whether the test itself mentions a level.
    my $all = join "\n", map { ref eq 'ARRAY' ? @$_ : $_ } grep { defined }
        $block->error_log, $block->no_error_log;

    if (defined(my $grep = $block->grep_error_log)) {
        $grep = $grep->[$rep] if ref $grep eq 'ARRAY';
        my $want = $block->grep_error_log_out
            // bail_out("$name - No --- grep_error_log_out defined");
        $want = $want->[$rep] if ref $want eq 'ARRAY';
        $want = expand_env_in_text($want, $name);
        my $got = '';
        for my $line (@$lines) {
            $got .= "$&\n" if (ref $grep ? $line =~ $grep : $line =~ /\Q$grep\E/)
                              && $& !~ /\n/;
        }
        is_str($got, $want, "$name - grep_error_log_out (req $rep)");
    }

    if (defined $block->error_log) {
        for my $pat (@{ log_patterns($block->error_log) }) {
            if (grep { $matches->($_, $pat) } @$lines) {
                Test::More::pass("$name - pattern \"$pat\" matches a line "
                                 . "in error.log (req $rep)");
            } else {
                Test::More::fail("$name - pattern \"$pat\" should match a "
                                 . "line in error.log (req $rep)");
            }
        }
    }

    if (defined $block->no_error_log) {
        for my $pat (@{ log_patterns($block->no_error_log) }) {
            my ($hit) = grep { $matches->($_, $pat) } @$lines;
            my $p = fmt_str($pat);
            if (defined $hit) {
                Test::More::fail("$name - pattern \"$p\" should not match any "
                    . "line in error.log but matches line \"" . fmt_str($hit)
                    . "\" (req $rep)");
            } else {
                Test::More::pass("$name - pattern \"$p\" does not match a "
                                 . "line in error.log (req $rep)");
            }
        }
    }

    # Like upstream: loud but not fatal, unless the test asked about them.
    for my $level (qw(alert crit emerg)) {
        next if index($all, "[$level") >= 0;
        warn "WARNING: $name - " . fmt_str($_) . "\n"
            for grep { /\[$level\]/ } @$lines;
    }
    for my $line (grep { /\bAssertion .*?failed\b/ } @$lines) {
        Test::More::fail("$name - " . fmt_str($line));
    }
}

1;
