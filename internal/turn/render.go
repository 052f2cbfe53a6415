package turn

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/process"
)

// Notification modes for processes without notify_on_complete (ARCHITECTURE §4, text mode).
const (
	ModeConcise = "concise" // one short line: done, or the failure with the output tail
	ModeAll     = "all"     // header and output for every completion and match
	ModeResult  = "result"  // the final result with output
	ModeError   = "error"   // failures only
	ModeOff     = "off"     // nothing
)

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

func stripANSI(s string) string { return ansi.ReplaceAllString(s, "") }

// noticeOf is a process event as the agents receive it: data (agent.Notice), never text they
// would have to read back. The output loses its terminal escapes; a watch match names the line
// that matched (the last line of its output holding the pattern).
func noticeOf(ev process.Event) agent.Notice {
	n := agent.Notice{Kind: agent.NoticeKind(ev.Kind), ProcID: ev.ProcID, Command: ev.Command, State: string(ev.State),
		ExitCode: ev.ExitCode, Signal: ev.Signal, Reason: ev.Reason, Output: strings.TrimSpace(stripANSI(ev.Output)),
		OutputCut: ev.OutputCut, Pattern: ev.Pattern, Suppressed: ev.Suppressed, Message: ev.Message}
	if ev.Kind == process.EventWatchMatch {
		lines := strings.Split(n.Output, "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			if strings.Contains(lines[i], ev.Pattern) {
				n.Line = lines[i]
				break
			}
		}
	}
	return n
}

// noticeText is the text-mode message for an event, or "" when the mode says nothing. The
// command and the process id are never shown in concise mode.
func noticeText(ev process.Event, mode string) string {
	failed := ev.ExitCode == nil || *ev.ExitCode != 0
	tail := tailLines(stripANSI(ev.Output), 20, 1500)
	switch ev.Kind {
	case process.EventCompletion:
		switch mode {
		case ModeOff:
			return ""
		case ModeError:
			if !failed {
				return ""
			}
		}
		if mode == ModeConcise || mode == ModeError {
			if !failed {
				return "✅ Done."
			}
			msg := "❌ That job hit a problem"
			switch {
			case ev.ExitCode != nil:
				msg += fmt.Sprintf(" (exit %d)", *ev.ExitCode)
			case ev.Reason == process.ReasonHostLost:
				msg = "❓ I lost track of that job: the host running it went down, so its outcome is unknown"
			default:
				msg += " (it ended while the host was down; exit status unknown)"
			}
			if tail != "" {
				msg += ":\n" + tail
			}
			return msg
		}
		head := fmt.Sprintf("Background job %s %s.\n$ %s", ev.ProcID, noticeOf(ev).Ending(), ev.Command)
		if tail != "" {
			head += "\n" + tail
		}
		return head
	case process.EventCorrection:
		// The earlier notice said the job was lost; whatever the mode showed of it, the user
		// hears what really became of it, once (off shows nothing, as for any completion).
		switch mode {
		case ModeOff:
			return ""
		case ModeConcise, ModeError:
			msg := "↩️ Correction: the job I said I had lost track of "
			switch {
			case !failed:
				return msg + "in fact finished fine."
			case ev.ExitCode != nil:
				msg += fmt.Sprintf("in fact failed (exit %d)", *ev.ExitCode)
			default:
				msg += "ended; its exit status is unknown"
			}
			if tail != "" {
				msg += ":\n" + tail
			}
			return msg
		}
		head := fmt.Sprintf("↩️ Correction: the background job I reported as lost (%s) %s.\n$ %s", ev.ProcID, noticeOf(ev).Ending(), ev.Command)
		if tail != "" {
			head += "\n" + tail
		}
		return head
	case process.EventWatchMatch:
		if mode == ModeOff || mode == ModeError {
			return ""
		}
		msg := fmt.Sprintf("👀 Your background job printed a line matching %q", ev.Pattern)
		if ev.Suppressed > 0 {
			msg += fmt.Sprintf(" (%d more matches were held back)", ev.Suppressed)
		}
		if tail != "" {
			msg += ":\n" + tailLines(tail, 5, 500)
		}
		return msg
	default:
		if mode == ModeOff {
			return ""
		}
		return "ℹ️ " + ev.Message
	}
}

// tailLines keeps the last n lines and at most max bytes of s, cut on a line boundary.
func tailLines(s string, n, max int) string {
	s = strings.TrimRight(s, "\n ")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := strings.Join(lines, "\n")
	for len(out) > max {
		i := strings.IndexByte(out, '\n')
		if i < 0 {
			return "…" + out[len(out)-max:]
		}
		out = out[i+1:]
	}
	return out
}
