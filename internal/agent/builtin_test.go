package agent

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func builtinTurn(t *testing.T, tools Tools, text string) *Reply {
	t.Helper()
	rep, err := NewBuiltin(Config{}).Turn(context.Background(), &Turn{Key: "k", Text: text, Tools: tools})
	if err != nil {
		t.Fatalf("Turn(%q): %v", text, err)
	}
	return rep
}

func TestBuiltinPlainAnswers(t *testing.T) {
	cases := map[string]string{
		"help":                  BuiltinHelp,
		"/HELP":                 BuiltinHelp,
		"   ":                   BuiltinEmpty,
		"what's the weather?":   "I'm the built-in agent, so I can't chat like a model would. I understood: “what's the weather?”. Send help to see the commands I know.",
		"hi!":                   "Hello! I'm the built-in agent, so I can't chat like a model would. I understood: “hi!”. Send help to see the commands I know.",
		"two\n  lines\tof text": "I'm the built-in agent, so I can't chat like a model would. I understood: “two lines of text”. Send help to see the commands I know.",
		"running late":          "I'm the built-in agent, so I can't chat like a model would. I understood: “running late”. Send help to see the commands I know.",
	}
	for in, want := range cases {
		ft := &fakeTools{}
		rep := builtinTurn(t, ft, in)
		if rep.Text != want {
			t.Errorf("%q:\n got %q\nwant %q", in, rep.Text, want)
		}
		if len(ft.Calls()) != 0 || rep.ToolCalls != 0 {
			t.Errorf("%q: tool calls %v", in, ft.Calls())
		}
	}
	long := strings.Repeat("a", 1000)
	if rep := builtinTurn(t, nil, long); !strings.Contains(rep.Text, strings.Repeat("a", builtinEchoChars-1)+"…”") {
		t.Errorf("long echo not clipped: %q", rep.Text)
	}
}

func TestBuiltinCommands(t *testing.T) {
	started := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		in    string
		tools fakeTools
		want  string
		calls []toolCallRec
	}{
		{
			in:    "run make test",
			tools: fakeTools{spawn: SpawnResult{ID: "proc_1", State: StateRunning}},
			want:  "Started proc_1 in the background: make test\nI'll tell you when it finishes.",
			calls: []toolCallRec{{Method: "Spawn", Req: SpawnRequest{Command: "make test", Background: true, NotifyOnComplete: true}}},
		},
		{
			in:    "watch ERROR -- tail -f app.log",
			tools: fakeTools{spawn: SpawnResult{ID: "proc_2", Note: "watching"}},
			want:  "Started proc_2 in the background: tail -f app.log\nI'll tell you when a line of its output matches \"ERROR\".\nNote: watching",
			calls: []toolCallRec{{Method: "Spawn", Req: SpawnRequest{Command: "tail -f app.log", Background: true, WatchPatterns: []string{"ERROR"}}}},
		},
		{
			in:    `watch "disk full" -- ./job.sh`,
			tools: fakeTools{spawn: SpawnResult{ID: "proc_3"}},
			want:  "Started proc_3 in the background: ./job.sh\nI'll tell you when a line of its output matches \"disk full\".",
			calls: []toolCallRec{{Method: "Spawn", Req: SpawnRequest{Command: "./job.sh", Background: true, WatchPatterns: []string{"disk full"}}}},
		},
		{
			in:    "/Run\tls -l",
			tools: fakeTools{spawn: SpawnResult{ID: "proc_5"}},
			want:  "Started proc_5 in the background: ls -l\nI'll tell you when it finishes.",
			calls: []toolCallRec{{Method: "Spawn", Req: SpawnRequest{Command: "ls -l", Background: true, NotifyOnComplete: true}}},
		},
		{in: "watch ERROR", want: "Usage: watch <pattern> -- <command>"},
		{in: "watch -- ls", want: "Usage: watch <pattern> -- <command>"},
		{in: "run", want: "Usage: run <command>"},
		{in: "sh", want: "Usage: sh <command>"},
		{in: "log", want: "Usage: log <id>"},
		{in: "wait", want: "Usage: wait <id> [seconds]"},
		{in: "wait proc_1 soon", want: "Usage: wait <id> [seconds]"},
		{
			in:    "sh echo hi",
			tools: fakeTools{spawn: SpawnResult{State: StateExited, ExitCode: intp(0), Output: "hi\n"}},
			want:  "Exit code 0.\nhi",
			calls: []toolCallRec{{Method: "Spawn", Req: SpawnRequest{Command: "echo hi", Timeout: DefaultShTimeout}}},
		},
		{
			in:    "sh true",
			tools: fakeTools{spawn: SpawnResult{State: StateExited, ExitCode: intp(0)}},
			want:  "Exit code 0.\n(no output)",
			calls: []toolCallRec{{Method: "Spawn", Req: SpawnRequest{Command: "true", Timeout: DefaultShTimeout}}},
		},
		{
			in:    "sh sleep 100",
			tools: fakeTools{spawn: SpawnResult{ID: "proc_4", State: StateRunning, Output: "zz"}},
			want:  "Still running after 10s; it goes on in the background as proc_4 (try: wait proc_4, or kill proc_4).\nzz",
			calls: []toolCallRec{{Method: "Spawn", Req: SpawnRequest{Command: "sleep 100", Timeout: DefaultShTimeout}}},
		},
		{
			in:    "sh sleep 100",
			tools: fakeTools{spawn: SpawnResult{State: StateKilled, ExitCode: intp(-15)}},
			want:  "Stopped after 10s.\n(no output)",
			calls: []toolCallRec{{Method: "Spawn", Req: SpawnRequest{Command: "sleep 100", Timeout: DefaultShTimeout}}},
		},
		{
			in:    "ps",
			want:  "No processes in this chat yet. Try: run sleep 3; echo done",
			calls: []toolCallRec{{Method: "List"}},
		},
		{
			in: "ps",
			tools: fakeTools{list: []ProcessInfo{
				{ID: "proc_1", Command: "sleep 5", State: StateRunning},
				{ID: "proc_2", Command: "false", State: StateExited, ExitCode: intp(1)},
				{ID: "proc_3", Command: "yes", State: StateKilled, Signal: "SIGTERM"},
				{ID: "proc_4", Command: "x", State: StateLost},
			}},
			want:  "Processes:\nproc_1  running  sleep 5\nproc_2  exited with code 1  false\nproc_3  killed (SIGTERM)  yes\nproc_4  lost (exit status unknown)  x",
			calls: []toolCallRec{{Method: "List"}},
		},
		{
			in:    "poll proc_1",
			tools: fakeTools{info: ProcessInfo{ID: "proc_1", Command: "sleep 5; echo done", State: StateRunning, Output: "tick\n"}},
			want:  "proc_1: running\nCommand: sleep 5; echo done\ntick",
			calls: []toolCallRec{{Method: "Poll", ID: "proc_1"}},
		},
		{
			in:    "log proc_1",
			tools: fakeTools{log: LogChunk{Text: "a\nb\n", Offset: 0, Next: 4, Total: 4, Ended: true}},
			want:  "Output of proc_1 (bytes 0-4 of 4, ended):\na\nb",
			calls: []toolCallRec{{Method: "Log", ID: "proc_1", Offset: -1, Limit: builtinLogBytes}},
		},
		{
			in:    "log proc_1",
			want:  "proc_1 has no output yet.",
			calls: []toolCallRec{{Method: "Log", ID: "proc_1", Offset: -1, Limit: builtinLogBytes}},
		},
		{
			in:    "wait proc_1",
			tools: fakeTools{info: ProcessInfo{ID: "proc_1", State: StateExited, ExitCode: intp(0)}},
			want:  "proc_1 finished: exited with code 0.",
			calls: []toolCallRec{{Method: "Wait", ID: "proc_1", Timeout: DefaultWaitTimeout}},
		},
		{
			in:    "wait proc_1 5",
			tools: fakeTools{info: ProcessInfo{ID: "proc_1", State: StateRunning}},
			want:  "proc_1 is still running after 5s.",
			calls: []toolCallRec{{Method: "Wait", ID: "proc_1", Timeout: 5 * time.Second}},
		},
		{
			in:    "wait proc_1 100000",
			tools: fakeTools{info: ProcessInfo{ID: "proc_1", State: StateRunning}},
			want:  "proc_1 is still running after 5m0s.",
			calls: []toolCallRec{{Method: "Wait", ID: "proc_1", Timeout: MaxWaitTimeout}},
		},
		{
			in:    "kill proc_1",
			tools: fakeTools{info: ProcessInfo{ID: "proc_1", State: StateKilled, Signal: "SIGTERM"}},
			want:  "Stopped proc_1 (killed (SIGTERM)).",
			calls: []toolCallRec{{Method: "Kill", ID: "proc_1"}},
		},
		{
			in: "kill last",
			tools: fakeTools{
				list: []ProcessInfo{{ID: "proc_old", StartedAt: started}, {ID: "proc_new", StartedAt: started.Add(time.Second)}, {ID: "proc_mid", StartedAt: started.Add(time.Millisecond)}},
				info: ProcessInfo{ID: "proc_new", State: StateKilled},
			},
			want:  "Stopped proc_new (killed).",
			calls: []toolCallRec{{Method: "List"}, {Method: "Kill", ID: "proc_new"}},
		},
		{
			in:    "log last",
			want:  "No processes in this chat yet.",
			calls: []toolCallRec{{Method: "List"}},
		},
		{in: "kill it", want: "I don't know a process called “it”. Process ids look like proc_…; send ps to see them."},
		{
			in:    "kill proc_x",
			tools: fakeTools{err: errors.New("process: no such process")},
			want:  "Sorry, that did not work: process: no such process",
			calls: []toolCallRec{{Method: "Kill", ID: "proc_x"}},
		},
		{
			// A merged message of commands runs each, in order.
			in:    "run sleep 1\nps",
			tools: fakeTools{spawn: SpawnResult{ID: "proc_1"}},
			want:  "Started proc_1 in the background: sleep 1\nI'll tell you when it finishes.\n\nNo processes in this chat yet. Try: run sleep 3; echo done",
			calls: []toolCallRec{{Method: "Spawn", Req: SpawnRequest{Command: "sleep 1", Background: true, NotifyOnComplete: true}}, {Method: "List"}},
		},
		{
			// A line ending in a backslash continues on the next.
			in:    "sh for i in 1 2; do \\\n  echo $i; \\\ndone",
			tools: fakeTools{spawn: SpawnResult{ExitCode: intp(0), Output: "1\n2\n"}},
			want:  "Exit code 0.\n1\n2",
			calls: []toolCallRec{{Method: "Spawn", Req: SpawnRequest{Command: "for i in 1 2; do \\\n  echo $i; \\\ndone", Timeout: DefaultShTimeout}}},
		},
		{
			// Chat merged after a command is answered, never run.
			in:    "run sleep 1\nthanks!\nsee you\nps",
			tools: fakeTools{spawn: SpawnResult{ID: "proc_1"}},
			want: "Started proc_1 in the background: sleep 1\nI'll tell you when it finishes.\n\n" +
				"I'm the built-in agent, so I can't chat like a model would. I understood: “thanks! see you”. Send help to see the commands I know.\n\n" +
				"No processes in this chat yet. Try: run sleep 3; echo done",
			calls: []toolCallRec{{Method: "Spawn", Req: SpawnRequest{Command: "sleep 1", Background: true, NotifyOnComplete: true}}, {Method: "List"}},
		},
		{
			in:    strings.Repeat("ps\n", 12),
			want:  strings.Repeat("No processes in this chat yet. Try: run sleep 3; echo done\n\n", 10) + "(I skipped the rest: at most 10 commands per message.)",
			calls: []toolCallRec{{Method: "List"}, {Method: "List"}, {Method: "List"}, {Method: "List"}, {Method: "List"}, {Method: "List"}, {Method: "List"}, {Method: "List"}, {Method: "List"}, {Method: "List"}},
		},
	}
	for i := range cases {
		c := &cases[i]
		t.Run(c.in, func(t *testing.T) {
			ft := &c.tools
			rep := builtinTurn(t, ft, c.in)
			if rep.Text != c.want {
				t.Errorf("reply:\n got %q\nwant %q", rep.Text, c.want)
			}
			if got := ft.Calls(); !reflect.DeepEqual(got, c.calls) {
				t.Errorf("tool calls:\n got %+v\nwant %+v", got, c.calls)
			}
			if rep.ToolCalls != len(c.calls) {
				t.Errorf("ToolCalls = %d, want %d", rep.ToolCalls, len(c.calls))
			}
			if len(rep.Media) != 0 {
				t.Errorf("media %v", rep.Media)
			}
		})
	}
}

func TestBuiltinWithoutTools(t *testing.T) {
	for _, in := range []string{"run ls", "ps", "kill proc_1", "sh ls"} {
		if rep := builtinTurn(t, nil, in); rep.Text != BuiltinNoTools {
			t.Errorf("%q: %q", in, rep.Text)
		}
	}
	if rep := builtinTurn(t, nil, "help"); rep.Text != BuiltinHelp {
		t.Errorf("help without tools: %q", rep.Text)
	}
}

// A synthetic turn summarizes the notification and calls no tool, even when its text looks like
// a command.
func TestBuiltinSyntheticCallsNoTool(t *testing.T) {
	for _, text := range []string{
		"[Background process proc_ab12 completed with exit code 0]\nCommand: make\nOutput:\nPASS\nok  \tpkg\t0.1s",
		"[Background process proc_ab12 completed with exit code 3]\nCommand: make\nOutput:\nFAIL",
		"run rm -rf /tmp/x",
		"kill proc_1",
		"sh echo hi",
	} {
		ft := &fakeTools{spawn: SpawnResult{ID: "proc_bad"}}
		rep, err := NewBuiltin(Config{}).Turn(context.Background(), &Turn{Text: text, Synthetic: true, Tools: ft})
		if err != nil {
			t.Fatal(err)
		}
		if calls := ft.Calls(); len(calls) != 0 || rep.ToolCalls != 0 {
			t.Errorf("%q: synthetic turn called tools: %+v", text, calls)
		}
		if len(rep.Media) != 0 {
			t.Errorf("%q: media on a synthetic turn", text)
		}
	}
	three := 3
	rep, _ := NewBuiltin(Config{}).Turn(context.Background(), &Turn{Synthetic: true, Text: "(the record)",
		Notices: []Notice{{Kind: NoticeCompletion, ProcID: "proc_ab12", Command: "make", State: StateExited, ExitCode: &three, Output: "FAIL"}}})
	if want := "Your background job failed (exit 3).\nLast lines of output:\nFAIL\n(Full output: log proc_ab12)"; rep.Text != want {
		t.Errorf("got %q, want %q", rep.Text, want)
	}
}

func TestBuiltinCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ft := &fakeTools{waiting: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := NewBuiltin(Config{}).Turn(ctx, &Turn{Text: "wait proc_1 300", Tools: ft})
		done <- err
	}()
	<-ft.waiting
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, err := NewBuiltin(Config{}).Turn(ctx, &Turn{Text: "help"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before start: err = %v", err)
	}
}

// The whole flow with real sh -c processes: foreground, background with notify, wait, log, kill.
func TestBuiltinRealShell(t *testing.T) {
	st := newShellTools(t)
	b := NewBuiltin(Config{CommandTimeout: 30 * time.Second})
	turn := func(text string) string {
		t.Helper()
		rep, err := b.Turn(context.Background(), &Turn{Text: text, Tools: st})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Text
	}
	if got := turn("sh echo hello; echo oops >&2; exit 3"); got != "Exit code 3.\nhello\noops" {
		t.Errorf("sh: %q", got)
	}
	got := turn("run printf 'one\\ntwo\\n'; exit 4")
	m := regexp.MustCompile(`^Started (proc_[0-9a-f]{12}) in the background: `).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("run: %q", got)
	}
	id := m[1]
	if got := turn("wait " + id + " 60"); got != id+" finished: exited with code 4." {
		t.Errorf("wait: %q", got)
	}
	if got := turn("log " + id); got != fmt.Sprintf("Output of %s (bytes 0-8 of 8, ended):\none\ntwo", id) {
		t.Errorf("log: %q", got)
	}
	// What the engine would send back as the notification turn.
	four := 4
	rep, err := b.Turn(context.Background(), &Turn{Synthetic: true, Tools: st,
		Notices: []Notice{{Kind: NoticeCompletion, ProcID: id, Command: "printf", State: StateExited, ExitCode: &four, Output: "one\ntwo\n"}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "Your background job failed (exit 4).\nLast lines of output:\none\ntwo\n(Full output: log " + id + ")"; rep.Text != want {
		t.Errorf("summary %q", rep.Text)
	}

	got = turn("run sleep 300")
	id2 := regexp.MustCompile(`proc_[0-9a-f]{12}`).FindString(got)
	if got := turn("kill last"); got != "Stopped "+id2+" (killed (SIGKILL))." {
		t.Errorf("kill last: %q", got)
	}
	if got := turn("ps"); !strings.Contains(got, id+"  exited with code 4  printf") || !strings.Contains(got, id2+"  killed (SIGKILL)  sleep 300") {
		t.Errorf("ps: %q", got)
	}
}
