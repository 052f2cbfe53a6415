package turn

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/process"
)

func TestNoticeTextModes(t *testing.T) {
	zero, three := 0, 3
	ok := process.Event{Kind: process.EventCompletion, ProcID: "proc_aa", Command: "make build", ExitCode: &zero, Output: "\x1b[32mbuilt\x1b[0m\n"}
	bad := process.Event{Kind: process.EventCompletion, ProcID: "proc_bb", Command: "make test", ExitCode: &three, Output: "FAIL x\n"}
	lost := process.Event{Kind: process.EventCompletion, ProcID: "proc_cc", Command: "sleep 9", State: process.StateLost}
	match := process.Event{Kind: process.EventWatchMatch, ProcID: "proc_dd", Pattern: "ERROR", Output: "ERROR disk full", Suppressed: 2}
	for _, c := range []struct {
		ev         process.Event
		mode, want string // want "" means nothing is sent
		absent     []string
	}{
		{ok, ModeConcise, "✅ Done.", []string{"proc_aa", "make build", "built"}},
		{bad, ModeConcise, "❌ That job hit a problem (exit 3):\nFAIL x", []string{"proc_bb", "make test"}},
		{lost, ModeConcise, "exit status unknown", nil},
		{ok, ModeError, "", nil},
		{bad, ModeError, "exit 3", nil},
		{ok, ModeOff, "", nil},
		{match, ModeOff, "", nil},
		{ok, ModeAll, "Background job proc_aa completed normally (exit code 0).\n$ make build\nbuilt", []string{"\x1b["}},
		{bad, ModeResult, "$ make test\nFAIL x", nil},
		{match, ModeConcise, `printed a line matching "ERROR" (2 more matches were held back)`, nil},
	} {
		got := noticeText(c.ev, c.mode)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s/%s: %q, want %q", c.ev.ProcID, c.mode, got, c.want)
		}
		for _, a := range c.absent {
			if strings.Contains(got, a) {
				t.Errorf("%s/%s: %q shows %q", c.ev.ProcID, c.mode, got, a)
			}
		}
	}
}

// A process event reaches the agents as data: every field the registry records, the output
// without terminal escapes, the matched line of a watch match; the kinds and the host-lost reason
// are the registry's own values.
func TestNoticeOfCarriesTheEvent(t *testing.T) {
	three := 3
	n := noticeOf(process.Event{Kind: process.EventCompletion, ProcID: "proc_ee", Command: "make", State: process.StateKilled,
		ExitCode: &three, Signal: "SIGTERM", Reason: "process.kill", Output: "\x1b[31mboom\x1b[0m\n", OutputCut: true})
	want := agent.Notice{Kind: agent.NoticeCompletion, ProcID: "proc_ee", Command: "make", State: agent.StateKilled,
		ExitCode: &three, Signal: "SIGTERM", Reason: "process.kill", Output: "boom", OutputCut: true}
	if !reflect.DeepEqual(n, want) {
		t.Fatalf("notice %+v\nwant %+v", n, want)
	}
	m := noticeOf(process.Event{Kind: process.EventWatchMatch, ProcID: "proc_w", Pattern: "ERROR", Suppressed: 2,
		Output: "start\nERROR one\nmore\nERROR disk full\n"})
	if m.Kind != agent.NoticeWatchMatch || m.Pattern != "ERROR" || m.Line != "ERROR disk full" || m.Suppressed != 2 {
		t.Fatalf("watch notice %+v", m)
	}
	for _, k := range []process.EventKind{process.EventCompletion, process.EventCorrection, process.EventWatchMatch,
		process.EventWatchDisabled, process.EventOverflowTripped, process.EventOverflowRelease} {
		switch agent.NoticeKind(k) {
		case agent.NoticeCompletion, agent.NoticeCorrection, agent.NoticeWatchMatch, agent.NoticeWatchDisabled,
			agent.NoticeWatchPaused, agent.NoticeWatchResumed:
		default:
			t.Errorf("event kind %q has no notice kind", k)
		}
	}
	if agent.ReasonHostLost != process.ReasonHostLost {
		t.Error("agent.ReasonHostLost is not the registry's")
	}
}

// A process lost because its host went down, and the correction of that notice once the real end
// is known, in every mode: the lost notice never says the job failed or was stopped (its outcome
// is unknown), and the correction says it corrects the earlier notice; concise mode shows neither
// the command nor the process id.
func TestNoticeTextHostLostAndCorrection(t *testing.T) {
	zero, three := 0, 3
	lost := process.Event{Kind: process.EventCompletion, ProcID: "proc_ff", Command: "sleep 9", State: process.StateLost,
		Reason: process.ReasonHostLost, Message: "the host running it (h1) stopped; its outcome is unknown"}
	fixed := process.Event{Kind: process.EventCorrection, ProcID: "proc_ff", Command: "sleep 9", State: process.StateExited,
		ExitCode: &zero, Output: "done\n"}
	failed := fixed
	failed.ExitCode, failed.Output = &three, "FAIL y\n"
	for _, c := range []struct {
		ev         process.Event
		mode, want string
		absent     []string
	}{
		{lost, ModeConcise, "I lost track of that job: the host running it went down, so its outcome is unknown", []string{"proc_ff", "sleep 9", "problem"}},
		{lost, ModeError, "outcome is unknown", nil},
		{lost, ModeAll, "Background job proc_ff was lost: the host running it went down, so its outcome is unknown.\n$ sleep 9", []string{"stopped"}},
		{fixed, ModeConcise, "↩️ Correction: the job I said I had lost track of in fact finished fine.", []string{"proc_ff", "sleep 9"}},
		{fixed, ModeError, "in fact finished fine", nil}, // the error mode showed the lost notice: it hears the correction
		{failed, ModeConcise, "in fact failed (exit 3):\nFAIL y", []string{"proc_ff"}},
		{failed, ModeAll, "↩️ Correction: the background job I reported as lost (proc_ff) exited with exit code 3.\n$ sleep 9\nFAIL y", nil},
		{fixed, ModeOff, "", nil},
	} {
		got := noticeText(c.ev, c.mode)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s/%s: %q, want %q", c.ev.Kind, c.mode, got, c.want)
		}
		for _, a := range c.absent {
			if strings.Contains(got, a) {
				t.Errorf("%s/%s: %q shows %q", c.ev.Kind, c.mode, got, a)
			}
		}
	}
	// A notification turn gets the same as data; the builtin summary of the lost one does not
	// call the job stopped, and that of the correction gives the real end.
	if n := noticeOf(lost); !strings.Contains(n.Headline(), "proc_ff was lost: the host running it went down") {
		t.Fatalf("headline %q", n.Headline())
	} else if s := agent.Summarize([]agent.Notice{n}); strings.Contains(s, "stopped") || !strings.Contains(s, "unknown") {
		t.Fatalf("builtin summary of the lost notice: %q", s)
	}
	if n := noticeOf(failed); !strings.Contains(n.Headline(), "Correction: background process proc_ff, reported earlier as lost, exited with exit code 3") {
		t.Fatalf("headline %q", n.Headline())
	} else if s := agent.Summarize([]agent.Notice{n}); !strings.Contains(s, "exit 3") || !strings.Contains(s, "Correction") {
		t.Fatalf("builtin summary of the correction: %q", s)
	}
}
