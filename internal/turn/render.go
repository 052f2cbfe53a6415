package turn

import (
	"fmt"
	"regexp"
	"strings"

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

// syntheticText is what a notification turn receives as its input (the gateway's own words,
// never the user's): the process, how it ended, the command and the output tail.
func syntheticText(ev process.Event) string {
	var b strings.Builder
	switch ev.Kind {
	case process.EventCompletion:
		fmt.Fprintf(&b, "[IMPORTANT: Background process %s %s.\n", ev.ProcID, ending(ev))
	case process.EventCorrection:
		fmt.Fprintf(&b, "[IMPORTANT: Correction: background process %s, reported earlier as lost, %s.\n", ev.ProcID, ending(ev))
	case process.EventWatchMatch:
		fmt.Fprintf(&b, "[IMPORTANT: Background process %s matched watch pattern %q.\n", ev.ProcID, ev.Pattern)
	default:
		fmt.Fprintf(&b, "[IMPORTANT: Background process %s: %s.\n", ev.ProcID, strings.TrimSuffix(ev.Message, "."))
	}
	fmt.Fprintf(&b, "Command: %s\n", ev.Command)
	if out := strings.TrimSpace(stripANSI(ev.Output)); out != "" {
		fmt.Fprintf(&b, "Output:\n%s\n", out)
	}
	b.WriteString("]")
	return b.String()
}

// batchText merges several notifications of one conversation into one turn's input.
func batchText(texts []string) string {
	if len(texts) == 1 {
		return texts[0]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[IMPORTANT: %d background processes completed; send at most one consolidated user-facing response.]\n", len(texts))
	for i, t := range texts {
		if i == 10 {
			fmt.Fprintf(&b, "(%d more not shown)\n", len(texts)-10)
			break
		}
		if len(t) > 800 {
			t = t[:800] + "…"
		}
		fmt.Fprintf(&b, "%d. %s\n", i+1, strings.TrimPrefix(t, "[IMPORTANT: "))
	}
	return b.String()
}

// ending says how a completion's process ended. A notification turn's agent reads it (the
// builtin one by its words: "stopped" or "killed" would make a lost process one that was
// stopped), so a lost process's ending names neither.
func ending(ev process.Event) string {
	switch {
	case ev.ExitCode == nil && ev.State == process.StateLost && ev.Reason == process.ReasonHostLost:
		return "was lost: the host running it went down, so its outcome is unknown"
	case ev.ExitCode == nil && ev.State == process.StateLost:
		return "was lost while the host was down (exit status unknown)"
	case ev.ExitCode == nil:
		return "ended (exit status unknown)"
	case ev.Signal != "":
		return fmt.Sprintf("was terminated by %s (exit code %d)", ev.Signal, *ev.ExitCode)
	case *ev.ExitCode == 0:
		return "completed normally (exit code 0)"
	}
	return fmt.Sprintf("exited with exit code %d", *ev.ExitCode)
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
		head := fmt.Sprintf("Background job %s %s.\n$ %s", ev.ProcID, ending(ev), ev.Command)
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
		head := fmt.Sprintf("↩️ Correction: the background job I reported as lost (%s) %s.\n$ %s", ev.ProcID, ending(ev), ev.Command)
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
