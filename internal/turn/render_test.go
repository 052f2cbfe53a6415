package turn

import (
	"strings"
	"testing"

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

func TestSyntheticTextIsParsedByTheBuiltinSummary(t *testing.T) {
	three := 3
	text := syntheticText(process.Event{Kind: process.EventCompletion, ProcID: "proc_ee", Command: "make", ExitCode: &three, Output: "boom"})
	if !strings.Contains(text, "proc_ee exited with exit code 3") || !strings.Contains(text, "Output:\nboom") {
		t.Fatalf("synthetic text %q", text)
	}
	batch := batchText([]string{text, text})
	if !strings.HasPrefix(batch, "[IMPORTANT: 2 background processes completed") {
		t.Fatalf("batch %q", batch)
	}
}
