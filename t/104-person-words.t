# t/104-person-words.t -- a person's words in a running goal
# (workers/worker/person.c): without a model only the command "stop" (the
# whole message, trimmed, any case, "/stop" too) ends the goal, and every
# other message is work, even one that starts with "stop" or "conclude";
# with a model, whether a message ends the goal, changes a part or adds
# work is the model's schema-checked decision, and an answer that fails
# the check makes the message work, never an end.  Each decision goes to
# the goal's feed (event "person"), quoting the message.  Real nginx +
# module + Redis, a real ioa-worker, the model scripted
# (IoaTest::ScriptedLLM).
#
#   TEST_NGINX_LOAD_MODULES=$PWD/build/ngx_http_ioa_module.so \
#       prove -It/lib t/104-person-words.t

use strict;
use warnings;

use Cwd ();
use File::Basename ();

BEGIN {
    my $bin = $ENV{IOA_WORKER_BIN}
              || Cwd::abs_path(File::Basename::dirname(__FILE__) . '/..')
                 . '/workers/build/ioa-worker';
    if (!-x $bin) {
        require Test::More;
        Test::More::plan(skip_all => "$bin is not built");
    }
}

use Test::Nginx::Socket 'no_plan';
use lib 't/lib';      # after Test::Nginx::Socket: see IoaTest.pm
use IoaTest;
use IoaTest::Agent qw(envelope fresh_hub json);
use IoaTest::Api;
use IoaTest::Goals;
use IoaTest::ScriptedLLM;
use JSON::PP ();

no_root_location();
no_shuffle();
log_level('info');

sub demo_agents {
    my ($ctx) = @_;
    register_agents($ctx,
        Counter  => 'counts the words in a text',
        Shouter  => 'shouts a text in upper case');
    return connect_agents($ctx, qw(Counter Shouter));
}

# the goal's "person" feed events, their decisions in order
sub person_decisions {
    return map { $_->{decision} } grep { ($_->{event} // '') eq 'person' } feed($_[0]);
}

# the review's decision envelopes of the goal's room
sub decisions {
    return grep { $_->{sender} eq $COORD && $_->{ioa_decision} } @_;
}

# posts each message into the goal and waits for its decision in the feed
sub say_all {
    my ($ctx, $gid, @msgs) = @_;
    my $n = () = person_decisions($gid);
    for my $m (@msgs) {
        my ($code) = api($ctx, POST => "/goals/$gid/messages", { content => $m });
        return 0 unless $code == 202;
        $n++;
        return 0 unless wait_until(sub { person_decisions($gid) >= $n }, 10);
    }
    return 1;
}

run_tests();

__DATA__

=== TEST 1: no model: only the command "stop" ends the goal, words are work
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    @Held = ();
    my $ag = demo_agents($ctx);
    worker($ctx, 'w1', task_timeout => 60);

    my $gid = launch(goal => 'Count the words in "a b c".');
    ok drive(agents => $ag, how => { Counter => 'hold' }, until => sub { @Held }),
       'Counter has its task' or diag worker_logs($ctx);
    my $long = 'x' . ("\x{e9}" x 200);
    ok say_all($ctx, $gid, 'Conclude with a cost table', 'Stop using source A, use B',
               'enough of that, shout "done"', $long),
       'four messages decided' or diag worker_logs($ctx);
    is state_of($gid), 'running', 'none of them ended the goal';
    my @d = person_decisions($gid);
    is_deeply [ map { "$_->{decision} $_->{by}" } @d ], [ ('add_work rule') x 4 ],
        'each is work, by the rule';
    is_deeply $d[0], { decision => 'add_work', by => 'rule', sender => 'user',
                       message => 'Conclude with a cost table', part => undef,
                       text => 'Conclude with a cost table',
                       reason => 'a message that is not the command stop is work' },
        'the record quotes the message';
    is $d[3]{message}, 'x' . ("\x{e9}" x 149) . '...', 'a long message is quoted cut on a character';
    like fsm($gid)->{requests}, qr/"Conclude with a cost table".*"Stop using source A, use B"/,
        'the messages wait for the review';

    release();
    ok drive(agents => $ag, until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my $m = meta($gid);
    isnt $m->{ended}, 'person', 'not ended by the person';
    my ($dec) = decisions(room($m->{comm_id}));
    like $dec->{ioa_decision}{reason},
        qr/^user asked: "Conclude with a cost table"; user asked: "Stop using source A, use B"; user asked: "enough of that, shout "done""/,
        'the review quotes them';
    like fsm($gid)->{parts}, qr/shout \\"done\\"/, 'and they are parts of the goal';

    # the command, any case, trimmed, with or without the slash
    for my $cmd ('stop', '  STOP ', '/Stop') {
        my $g = launch(goal => 'Count the words in "d e f".');
        ok drive(agents => $ag, how => { Counter => 'silent' },
                 until => sub { grep { $_->{type} == 6 } room(meta($g)->{comm_id} // 'none') }),
           'assigned' or diag worker_logs($ctx);
        ok say_all($ctx, $g, $cmd), "'$cmd' decided";
        ok wait_until(sub { state_of($g) eq 'concluded' }, 10), "'$cmd' concluded the goal"
            or diag worker_logs($ctx);
        is meta($g)->{ended}, 'person', 'ended: person';
        my ($e) = person_decisions($g);
        is "$e->{decision} $e->{by} $e->{message}", "end command $cmd", 'an end by the command, quoted';
    }
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 2: a model reads each message; an answer that fails the check is work
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    @Held = ();
    my $ag = demo_agents($ctx);
    my %reading = (
        'Conclude with a cost table' => '{"decision":"add_work","part":1,"text":"shout a cost table","reason":"a table before the end"}',
        'Stop using source A, use B' => '{"decision":"change_part","part":1,"text":"Count the words in \"a b c\" from source B","reason":"source B instead of A"}',
        'We are done here, thanks'   => '{"decision":"end","text":"","reason":"the person has what it needs"}',
        'Stop, that is enough.'      => '{"decision":"end","text":"","reason":"asked to stop"}',
        'part nine, please'          => '{"decision":"change_part","part":9,"text":"x","reason":"no such part"}',
        'explode'                    => '{"decision":"explode","text":"x","reason":"not a decision"}',
        'no reason'                  => '{"decision":"end","text":""}',
        'not json'                   => 'end the goal, I think',
    );
    my $llm = scripted_llm(sub {
        my ($req) = @_;
        my $sys = $req->{messages}[0]{content} // '';
        my $user = $req->{messages}[1]{content} // '';
        return '{}' unless $sys =~ /A person in the goal's conversation has written to you/;
        my ($msg) = $user =~ /\nThe message, from [^\n]*:\n(.*)\z/s;
        return $reading{$msg // ''} // '{}';
    });
    worker($ctx, 'w1', task_timeout => 60,
           env => { IOA_LLM_BASE_URL => $llm->{url}, IOA_LLM_MAX_ATTEMPTS => 1 });

    my $gid = launch(goal => 'Count the words in "a b c".', team_member_names => [qw(Counter Shouter)]);
    ok drive(agents => $ag, how => { Counter => 'hold' }, until => sub { @Held }),
       'Counter has its task' or diag worker_logs($ctx);
    ok say_all($ctx, $gid, 'Conclude with a cost table', 'Stop using source A, use B',
               'part nine, please', 'explode', 'no reason', 'not json'),
       'six messages decided' or diag worker_logs($ctx);
    is state_of($gid), 'running', 'none of them ended the goal';
    my @d = person_decisions($gid);
    is_deeply $d[0], { decision => 'add_work', by => 'llm', sender => 'user',
                       message => 'Conclude with a cost table', part => undef,
                       text => 'shout a cost table', reason => 'a table before the end' },
        'add_work: the model\'s text, quoting the message';
    is_deeply $d[1], { decision => 'change_part', by => 'llm', sender => 'user',
                       message => 'Stop using source A, use B', part => 1,
                       text => 'Count the words in "a b c" from source B',
                       reason => 'source B instead of A' },
        'change_part: the part and its new text';
    is_deeply [ map { "$_->{decision} $_->{by} $_->{message}" } @d[2 .. 5] ],
        [ 'add_work rule part nine, please', 'add_work rule explode',
          'add_work rule no reason', 'add_work rule not json' ],
        'a part that does not exist, an unknown decision, a missing reason, no JSON: work, by the rule';
    like worker_log($ctx, 'w1'), qr/the model's reading of user's message is unusable; it is work/,
        'the log says so';
    my ($rq) = grep { ($_->{messages}[1]{content} // '') =~ /\nStop using source A, use B\z/ }
               scripted_requests($llm);
    like $rq->{messages}[1]{content}, qr/^Goal: Count the words in "a b c"\.\n\nIts parts:\n1\. Count the words in "a b c"\n/,
        'the prompt shows the goal and its parts';
    my $format = JSON::PP->new->encode($rq->{response_format} // {});
    like $format, qr/"json_schema".*"change_part"/, 'the answer is asked for as a JSON Schema';

    release();
    ok drive(agents => $ag, until => sub { state_of($gid) eq 'concluded' }),
       'concluded' or diag worker_logs($ctx);
    my $m = meta($gid);
    isnt $m->{ended}, 'person', 'not ended by the person';
    my ($dec) = decisions(room($m->{comm_id}));
    like $dec->{ioa_decision}{reason},
        qr/^user asked: "Conclude with a cost table"; user asked to change part 1: "Stop using source A, use B"; /,
        'the review quotes them';
    my @parts = map { $_->{text} } @{ JSON::PP->new->decode(fsm($gid)->{parts}) };
    is $parts[1], 'shout a cost table', 'the work is a part';
    is $parts[2], 'Count the words in "a b c" from source B', 'so is the changed part, in place of part 1';
    my @assign = grep { $_->{type} == 6 } room($m->{comm_id});
    is $assign[1]{tasks}{Shouter}{task_desc}, 'shout a cost table', 'round 2 hands the work out';

    # the model ends it: at once, quoting the message
    for my $words ('We are done here, thanks', 'Stop, that is enough.') {
        my $g = launch(goal => 'Count the words in "d e f".', team_member_names => [qw(Counter)]);
        ok drive(agents => $ag, how => { Counter => 'silent' },
                 until => sub { grep { $_->{type} == 6 } room(meta($g)->{comm_id} // 'none') }),
           'assigned' or diag worker_logs($ctx);
        ok say_all($ctx, $g, $words), 'decided';
        ok wait_until(sub { state_of($g) eq 'concluded' }, 10), 'concluded'
            or diag worker_logs($ctx);
        is meta($g)->{ended}, 'person', 'ended: person';
        like meta($g)->{conclusion}, qr/^Concluded when asked to \(user: \Q$words\E\)\./,
            'the conclusion quotes it';
        my ($e) = person_decisions($g);
        is "$e->{decision} $e->{by} $e->{message}", "end llm $words", 'the model\'s end, quoted';
    }

    # the command is no question for the model
    my $g = launch(goal => 'Count the words in "g h".', team_member_names => [qw(Counter)]);
    ok drive(agents => $ag, how => { Counter => 'silent' },
             until => sub { grep { $_->{type} == 6 } room(meta($g)->{comm_id} // 'none') }),
       'assigned' or diag worker_logs($ctx);
    ok say_all($ctx, $g, '/stop'), 'decided';
    ok wait_until(sub { state_of($g) eq 'concluded' }, 10), 'concluded' or diag worker_logs($ctx);
    my ($e) = person_decisions($g);
    is "$e->{decision} $e->{by}", 'end command', 'by the command';
    ok !grep({ ($_->{messages}[1]{content} // '') =~ m{\n/stop\z} } scripted_requests($llm)),
       'the model was not asked';
    is_deeply stop_workers(), { w1 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 3: the person's words in the goal's room are decided the same way
--- http_config
    ioa_redis 127.0.0.1:$TEST_NGINX_REDIS_PORT;
--- config
    location / { ioa_api; }
--- ioa_scenario
    fresh($ctx);
    @Held = ();
    my $ag = demo_agents($ctx);
    my $ann = IoaTest::Agent->connect($ctx, 'Ann');
    ok $ann->ok, 'Ann is connected' or diag $ann->error;
    my $llm = scripted_llm(sub {
        my ($req) = @_;
        return '{}' unless ($req->{messages}[0]{content} // '') =~ /has written to you/;
        return ($req->{messages}[1]{content} // '') =~ /\nThat will do\z/
               ? '{"decision":"end","text":"","reason":"she is done"}' : '{}';
    });

    # no model: a stop-like sentence is work, the command ends it
    worker($ctx, 'w1', task_timeout => 60);
    my $g1 = launch(goal => 'Count the words in "a b c".', _person => 'Ann');
    ok drive(agents => $ag, how => { Counter => 'hold' }, until => sub { @Held }),
       'Counter has its task' or diag worker_logs($ctx);
    my $c1 = meta($g1)->{comm_id};
    $ann->post(envelope(comm_id => $c1, sender => 'Ann', drop => ['type'],
                        content => 'Stop using source A, use B'));
    ok wait_until(sub { person_decisions($g1) >= 1 }, 10), 'decided' or diag worker_logs($ctx);
    my ($d) = person_decisions($g1);
    is "$d->{decision} $d->{by} $d->{sender} $d->{message}", 'add_work rule Ann Stop using source A, use B',
        'work, quoted';
    is state_of($g1), 'running', 'the goal goes on';
    is fsm($g1)->{said}, '', 'nothing is left undecided';
    ok say_all($ctx, $g1, 'Also shout "hi"'), 'her inbox is read after her room'
        or diag worker_logs($ctx);
    is((person_decisions($g1))[1]{message}, 'Also shout "hi"', '... and decided');
    $ann->post(envelope(comm_id => $c1, sender => 'Ann', drop => ['type'], content => 'stop'));
    ok wait_until(sub { state_of($g1) eq 'concluded' }, 10), 'the command concluded it'
        or diag worker_logs($ctx);
    is meta($g1)->{ended}, 'person', 'ended: person';
    release();
    stop_workers();

    # a model: its reading of her words
    worker($ctx, 'w2', task_timeout => 60,
           env => { IOA_LLM_BASE_URL => $llm->{url}, IOA_LLM_MAX_ATTEMPTS => 1 });
    @Held = ();
    my $g2 = launch(goal => 'Count the words in "d e f".', _person => 'Ann',
                    team_member_names => [qw(Counter)]);
    ok drive(agents => $ag, how => { Counter => 'hold' }, until => sub { @Held }),
       'Counter has its task' or diag worker_logs($ctx);
    my $c2 = meta($g2)->{comm_id};
    $ann->post(envelope(comm_id => $c2, sender => 'Ann', drop => ['type'], content => 'That will do'));
    ok wait_until(sub { state_of($g2) eq 'concluded' }, 10), 'the model\'s end concluded it'
        or diag worker_logs($ctx);
    ($d) = person_decisions($g2);
    is "$d->{decision} $d->{by} $d->{reason}", 'end llm she is done', 'by the model, with its reason';
    like meta($g2)->{conclusion}, qr/^Concluded when asked to \(Ann: That will do\)\./, 'quoted';
    release();
    is_deeply stop_workers(), { w2 => 0 }, 'the worker exits 0';
--- no_error_log
[alert]
[crit]
[emerg]
