# IoaTest::Agent -- an IoA agent as tests drive it: register, team up,
# connect to /ws/{name}, post envelopes and read what the hub delivers.
#
#   use IoaTest::Agent qw(register teamup envelope wait_health);
#   register($ctx, qw(Alice Bob));                # POST /register each
#   my $cid = teamup($ctx, 'Alice', ['Bob']);     # POST /teamup -> comm_id
#   my $a = IoaTest::Agent->connect($ctx, 'Alice', '?echo=0');
#   ok $a->ok, 'connected' or diag $a->error;
#   $a->post(envelope(comm_id => $cid, content => 'hi'));
#   my $m = $a->recv(5);        # next JSON frame, decoded (undef: timeout)
#   my @m = $a->recv_n(10, 5);  # 10 frames or fewer on timeout
#   ok $a->quiet(0.5), 'nothing more arrived';
#
# Each decoded frame keeps its raw text in $m->{_raw}.  Pings are answered
# by IoaTest::WS; only text frames are returned.  Everything has a timeout
# so a broken hub fails a test instead of hanging it.

package IoaTest::Agent;

use strict;
use warnings;

use Exporter ();
use JSON::PP ();
use Time::HiRes qw(sleep time);
use IoaTest::WS ();

our @ISA = ('Exporter');
our @EXPORT_OK = qw(register teamup envelope wait_health fresh_hub json);

# UTF-8 bytes in and out: what goes over the socket.
my $JSON = JSON::PP->new->utf8->canonical->allow_nonref;

sub json { $JSON }

# POST /register for every name ("Human Assistant", a short desc); dies on
# anything but 200 so a scenario stops early with the reason.
sub register {
    my ($ctx, @names) = @_;
    for my $name (@names) {
        my $res = $ctx->http(POST => '/register', body => $JSON->encode({
            name => $name, type => 'Human Assistant',
            desc => "$name, a test agent" }));
        die "register $name: " . $res->status_line . ' ' . $res->content . "\n"
            unless $res->code == 200;
    }
    return scalar @names;
}

# POST /teamup as $sender with $names; returns the comm_id (dies otherwise).
sub teamup {
    my ($ctx, $sender, $names, $team_name) = @_;
    my $res = $ctx->http(POST => '/teamup', body => $JSON->encode({
        sender => $sender, agent_names => $names, team_name => $team_name }));
    die "teamup: " . $res->status_line . ' ' . $res->content . "\n"
        unless $res->code == 200;
    my $doc = $JSON->decode($res->content);
    die "teamup: no comm_id in " . $res->content . "\n"
        unless ($doc->{comm_id} // '') =~ /^[0-9a-f]{32}$/;
    return $doc->{comm_id};
}

# Polls /health_check until it answers $want (200 by default); returns the
# last HTTP::Response (check ->code: the wait may have timed out).
sub wait_health {
    my ($ctx, $want, $timeout) = @_;
    $want //= 200;
    my $deadline = time + ($timeout // 10);
    my $res;
    while (1) {
        $res = eval { $ctx->http(GET => '/health_check', timeout => 2) };
        return $res if $res && $res->code == $want;
        return $res if time > $deadline;
        sleep 0.05;
    }
}

# A clean slate for a scenario: Redis emptied, and the hub healthy again
# (it reloads its scripts and resubscribes); dies if it does not recover.
sub fresh_hub {
    my ($ctx) = @_;
    $ctx->redis('FLUSHALL');
    my $res = wait_health($ctx, 200, 10);
    die "the hub did not become healthy: " . $res->status_line . "\n"
        unless $res->code == 200;
}

# An IoA AgentMessage as IoA's clients send it (every field, enums as
# integers), as JSON text with the fields in IoA's declaration order.
# Arguments override fields; extra => [k => v, ...] appends unknown fields;
# drop => [names] leaves fields out.
my @Fields = (
    content => '', sender => '', comm_id => '', next_speaker => '',
    state => 1, type => 4, proposal_id => '', goal => undef,
    team_members => undef, team_up_depth => undef, task_id => '',
    task_desc => '', task_conclusion => '', task_abstract => '',
    triggers => [], updated_plan => '',
    is_collaborative_planning_enabled => JSON::PP::false, max_turns => undef,
);

sub envelope {
    my (%arg) = @_;
    my @extra = @{ delete $arg{extra} || [] };
    my %drop = map { $_ => 1 } @{ delete $arg{drop} || [] };
    my @out;
    for (my $i = 0; $i < @Fields; $i += 2) {
        my $k = $Fields[$i];
        next if $drop{$k};
        my $v = exists $arg{$k} ? delete $arg{$k} : $Fields[$i + 1];
        push @out, $JSON->encode($k) . ':' . $JSON->encode($v);
    }
    push @out, map { $JSON->encode($_) . ':' . $JSON->encode($arg{$_}) }
               sort keys %arg;
    while (my ($k, $v) = splice @extra, 0, 2) {
        push @out, $JSON->encode($k) . ':' . $JSON->encode($v);
    }
    return '{' . join(',', @out) . '}';
}

# ------------------------------------------------------------ connections

# connect($ctx, $name, $query, %ws_opt): GET /ws/$name$query.  Always returns
# an object; ->ok / ->error tell how the handshake went.  %ws_opt goes to
# IoaTest::WS->connect (e.g. pipeline => [$frame_text] sends frames in the
# same write as the handshake, ssl => 1 with port => $p speaks wss://).
sub connect {
    my ($class, $ctx, $name, $query, %opt) = @_;
    my $path = '/ws/' . _uri_escape($name) . ($query // '');
    my $port = delete $opt{port} // $ctx->port;     # e.g. a TLS port
    my $ws = IoaTest::WS->connect($ctx->host, $port, $path,
                                  timeout => 5, %opt);
    return bless { ws => $ws, name => $name, pending => [] }, $class;
}

sub _uri_escape {
    my $s = shift;
    utf8::encode($s);           # a name is characters; a path is UTF-8 bytes
    $s =~ s/([^A-Za-z0-9_.~-])/sprintf '%%%02X', ord $1/ge;
    return $s;
}

sub ws    { $_[0]{ws} }
sub name  { $_[0]{name} }
sub ok    { $_[0]{ws}->ok }
sub error { $_[0]{ws}->error }

# Posts an envelope (JSON text, or a hash ref that is encoded).
sub post {
    my ($self, $env) = @_;
    $env = $JSON->encode($env) if ref $env;
    defined $self->{ws}->send_text($env)
        or die "$self->{name}: sending failed: $!\n";
    return $self;
}

# The next text frame, decoded; undef on timeout, EOF or close.  A frame that
# is not JSON is returned as { _raw => ..., _bad_json => 1 }.
sub recv {
    my ($self, $timeout) = @_;
    my $text = $self->{ws}->recv_text($timeout // 5) // return undef;
    my $m = eval { $JSON->decode($text) };
    $m = { _bad_json => 1 } unless ref $m eq 'HASH';
    $m->{_raw} = $text;
    return $m;
}

# Up to $n frames, waiting at most $timeout seconds for all of them.
sub recv_n {
    my ($self, $n, $timeout) = @_;
    my $deadline = time + ($timeout // 10);
    my @got;
    while (@got < $n) {
        my $left = $deadline - time;
        last if $left <= 0;
        my $m = $self->recv($left) // last;
        push @got, $m;
    }
    return @got;
}

# Frames until one matches $pred (a code ref); returns (match, [skipped]).
sub recv_until {
    my ($self, $pred, $timeout) = @_;
    my $deadline = time + ($timeout // 10);
    my @skipped;
    while (1) {
        my $left = $deadline - time;
        return (undef, \@skipped) if $left <= 0;
        my $m = $self->recv($left) // return (undef, \@skipped);
        local $_ = $m;
        return ($m, \@skipped) if $pred->($m);
        push @skipped, $m;
    }
}

# True if no text frame arrives within $secs; the frame otherwise.
sub quiet {
    my ($self, $secs) = @_;
    my $m = $self->recv($secs // 0.5);
    $self->{last_noise} = $m;
    return !defined $m;
}

sub noise { $_[0]{last_noise} }

sub close {
    my $self = shift;
    $self->{ws}->close(1000);
    $self->{ws}->recv_close(2);
    $self->{ws}->disconnect;
}

sub disconnect { $_[0]{ws}->disconnect }

1;
