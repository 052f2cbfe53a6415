package agent

import (
	"fmt"
	"strings"
)

// The texts of Summarize. The summary is one of the first lines, then, when the notification
// carries output, SummaryOutputHeader and its last lines.
const (
	SummarySuccess        = "Your background job finished successfully."
	SummaryFailed         = "Your background job failed (exit %d)."
	SummaryStopped        = "Your background job was stopped."
	SummaryStoppedBy      = "Your background job was stopped (%s)."
	SummaryUnknownExit    = "Your background job ended, but its exit status is unknown."
	SummaryHostLost       = "I lost track of your background job: the host running it went down, so its outcome is unknown."
	SummaryCorrection     = "Correction: your background job, which I reported as lost, %s."
	SummaryWatchMatch     = "Your background job printed a line matching %q."
	SummaryWatchMatchAny  = "Your background job printed a line you were watching for."
	SummaryWatchDisabled  = "Your background job matched its watch pattern too often, so I stopped watching it; I'll tell you when it finishes."
	SummaryBatch          = "%d background jobs finished: %d succeeded, %d did not."
	SummaryBatchMixed     = "%d updates about your background jobs:"
	SummaryUpdate         = "Update about your background jobs:"
	SummaryOutputHeader   = "Last lines of output:"
	SummaryFullOutputHint = "(Full output: log %s)"
	summaryTailLines      = 5
	summaryBatchTailLines = 2
	summaryTailLineChars  = 200
	summaryUpdateLines    = 3
)

// Summarize writes the summary of notices for people: what happened to each job and the last
// lines of its output. It is the builtin agent's answer to a notification turn, and what the
// chat gets when the model cannot write one. It reads the notices' fields; no text is parsed.
func Summarize(ns []Notice) string {
	switch len(ns) {
	case 0:
		return SummaryUpdate
	case 1:
		return summarizeOne(ns[0])
	}
	return summarizeBatch(ns)
}

// summarizeText is the summary of a notification turn that carries text only (no Notices):
// its first lines, quoted.
func summarizeText(text string) string {
	lines := nonEmpty(strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n"))
	if len(lines) > summaryUpdateLines {
		lines = lines[:summaryUpdateLines]
	}
	for i, l := range lines {
		lines[i] = clip(strings.TrimSpace(l), summaryTailLineChars)
	}
	if len(lines) == 0 {
		return SummaryUpdate
	}
	return SummaryUpdate + "\n" + strings.Join(lines, "\n")
}

// outcome says what became of an ended job, as a predicate for people.
func outcome(n Notice) string {
	switch {
	case n.Succeeded():
		return "finished successfully"
	case n.Signal != "":
		return "was stopped (" + n.Signal + ")"
	case n.ExitCode != nil:
		return fmt.Sprintf("failed (exit %d)", *n.ExitCode)
	case n.State == StateKilled:
		return "was stopped"
	}
	return "ended, but its exit status is unknown"
}

func summarizeOne(n Notice) string {
	var b strings.Builder
	switch {
	case n.Kind == NoticeWatchDisabled:
		b.WriteString(SummaryWatchDisabled)
	case n.Kind == NoticeWatchMatch && n.Pattern != "":
		fmt.Fprintf(&b, SummaryWatchMatch, n.Pattern)
	case n.Kind == NoticeWatchMatch:
		b.WriteString(SummaryWatchMatchAny)
	case n.Kind == NoticeCorrection:
		fmt.Fprintf(&b, SummaryCorrection, outcome(n))
	case !n.Ended():
		return summarizeText(n.Headline())
	case n.Lost() && n.Reason == ReasonHostLost:
		b.WriteString(SummaryHostLost)
	case n.Succeeded():
		b.WriteString(SummarySuccess)
	case n.Signal != "":
		fmt.Fprintf(&b, SummaryStoppedBy, n.Signal)
	case n.ExitCode != nil:
		fmt.Fprintf(&b, SummaryFailed, *n.ExitCode)
	case n.State == StateKilled:
		b.WriteString(SummaryStopped)
	default:
		b.WriteString(SummaryUnknownExit)
	}
	if tail := lastLines(n.Output, summaryTailLines); tail != "" {
		b.WriteString("\n" + SummaryOutputHeader + "\n" + tail)
	}
	if n.ProcID != "" {
		b.WriteString("\n" + fmt.Sprintf(SummaryFullOutputHint, n.ProcID))
	}
	return b.String()
}

func summarizeBatch(ns []Notice) string {
	ok, other := 0, 0
	for _, n := range ns {
		switch {
		case !n.Ended():
			other++
		case n.Succeeded():
			ok++
		}
	}
	var b strings.Builder
	if other > 0 {
		fmt.Fprintf(&b, SummaryBatchMixed, len(ns))
	} else {
		fmt.Fprintf(&b, SummaryBatch, len(ns), ok, len(ns)-ok)
	}
	for _, n := range ns {
		b.WriteString("\n- ")
		if n.ProcID != "" {
			b.WriteString(n.ProcID + ": ")
		}
		switch n.Kind {
		case NoticeWatchMatch:
			b.WriteString("printed a watched line")
		case NoticeWatchDisabled:
			b.WriteString("matched too often; watching stopped")
		case NoticeWatchPaused:
			b.WriteString("watch notifications paused")
		case NoticeWatchResumed:
			b.WriteString("watch notifications resumed")
		case NoticeCorrection:
			b.WriteString("(correction: reported lost earlier) " + outcome(n))
		default:
			if n.Lost() && n.Reason == ReasonHostLost {
				b.WriteString("lost with its host; outcome unknown")
			} else {
				b.WriteString(outcome(n))
			}
		}
		// Each job's result stays visible in a batch: its last lines, indented under it.
		if tail := lastLines(n.Output, summaryBatchTailLines); tail != "" {
			b.WriteString("\n  " + SummaryOutputHeader + "\n  " + strings.ReplaceAll(tail, "\n", "\n  "))
		}
	}
	return b.String()
}

// lastLines returns the last n non-empty lines of s, each clipped.
func lastLines(s string, n int) string {
	lines := nonEmpty(strings.Split(s, "\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		lines[i] = clip(l, summaryTailLineChars)
	}
	return strings.Join(lines, "\n")
}

func nonEmpty(lines []string) []string {
	var out []string
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			out = append(out, strings.TrimRight(l, " \t\r"))
		}
	}
	return out
}

// clip cuts s to at most n runes, marking the cut with "…".
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
