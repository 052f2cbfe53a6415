package agent

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The builtin agent's texts for a notification turn. The summary is one of the first lines,
// then, when the notification carries output, SummaryOutputHeader and its last lines.
const (
	SummarySuccess         = "Your background job finished successfully."
	SummaryFailed          = "Your background job failed (exit %d)."
	SummaryStopped         = "Your background job was stopped."
	SummaryStoppedBy       = "Your background job was stopped (%s)."
	SummaryUnknownExit     = "Your background job ended, but its exit status is unknown."
	SummaryWatchMatch      = "Your background job printed a line matching %q."
	SummaryWatchMatchAny   = "Your background job printed a line you were watching for."
	SummaryWatchDisabled   = "Your background job matched its watch pattern too often, so I stopped watching it; I'll tell you when it finishes."
	SummaryBatch           = "%d background jobs finished: %d succeeded, %d did not."
	SummaryBatchMixed      = "%d updates about your background jobs:"
	SummaryUpdate          = "Update about your background jobs:"
	SummaryOutputHeader    = "Last lines of output:"
	SummaryFullOutputHint  = "(Full output: log %s)"
	summaryTailLines       = 5
	summaryBatchTailLines  = 2
	summaryTailLineChars   = 200
	summaryUpdateLines     = 3
	notificationFooterMark = "[INTERNAL NOTIFICATION"
	truncationMarker       = "[… output truncated …]"
)

var (
	reProcHeader  = regexp.MustCompile(`(?i)\bprocess\s+(proc_[0-9a-z]+)`)
	reProcID      = regexp.MustCompile(`\bproc_[0-9a-zA-Z]+`)
	reProcItem    = regexp.MustCompile(`(?i)^\s*(?:\d+[.)]|[-*•])\s.*?\b(proc_[0-9a-z]+)`)
	reExitCode    = regexp.MustCompile(`(?i)exit(?:ed with)? (?:code|status)[ :=]*(-?\d+)`)
	reSignal      = regexp.MustCompile(`\b(SIG[A-Z0-9]+)\b`)
	reStopped     = regexp.MustCompile(`(?i)\b(killed|terminated|stopped|interrupted)\b`)
	reUnknown     = regexp.MustCompile(`(?i)\b(unknown|lost)\b`)
	reWatch       = regexp.MustCompile(`(?i)watch[ _-]?pattern|watch_match|\bmatched\b`)
	reWatchOff    = regexp.MustCompile(`(?i)watch(?:ing|[ _-]?patterns?)?\s*(?:was |were |are |is )?disabled|watch_disabled`)
	reOverflow    = regexp.MustCompile(`(?i)watch[ _-]?notifications? (?:are |were )?(?:paused|resumed)|watch_overflow`)
	rePattern     = regexp.MustCompile(`(?i)pattern[s]?\s*[:=]?\s*["“'` + "`" + `]([^"”'` + "`" + `\n]*)["”'` + "`" + `]`)
	reBatch       = regexp.MustCompile(`(?i)\b(\d+) background processes\b`)
	reOtherPrefix = regexp.MustCompile(`(?i)^background process\s*(?:proc_[0-9a-z]+)?\s*:\s*`)
	reOutputLine  = regexp.MustCompile(`(?i)^\s*output\s*:\s*(.*)$`)
)

// notice is what one notification (or one item of a batch) says.
type notice struct {
	id       string
	exitCode *int
	signal   string
	stopped  bool
	unknown  bool
	watch    bool
	watchOff bool
	overflow bool // the global watch breaker tripped or released: not about one job
	pattern  string
	header   []string // the lines before Output:
	output   string
}

func (n notice) succeeded() bool { return n.exitCode != nil && *n.exitCode == 0 && !n.watch }

// summarize writes the builtin agent's user-facing summary of a notification text. It only reads
// the text: no tool is involved.
func summarize(text string) string {
	text = cleanNotification(text)
	items := splitNotices(text)
	if len(items) > 1 {
		return summarizeBatch(items)
	}
	n := parseNotice(text)
	if m := reBatch.FindStringSubmatch(text); m != nil && n.id == "" {
		// A batch header with items we could not tell apart.
		return summarizeOther(n)
	}
	var b strings.Builder
	switch {
	case n.overflow:
		return summarizeOther(n)
	case n.watchOff:
		b.WriteString(SummaryWatchDisabled)
	case n.watch && n.pattern != "":
		fmt.Fprintf(&b, SummaryWatchMatch, n.pattern)
	case n.watch:
		b.WriteString(SummaryWatchMatchAny)
	case n.exitCode != nil && *n.exitCode == 0:
		b.WriteString(SummarySuccess)
	case n.exitCode != nil && !n.stopped:
		fmt.Fprintf(&b, SummaryFailed, *n.exitCode)
	case n.stopped && n.signal != "":
		fmt.Fprintf(&b, SummaryStoppedBy, n.signal)
	case n.stopped:
		b.WriteString(SummaryStopped)
	case n.exitCode != nil:
		fmt.Fprintf(&b, SummaryFailed, *n.exitCode)
	case n.unknown && n.id != "":
		b.WriteString(SummaryUnknownExit)
	default:
		return summarizeOther(n)
	}
	if tail := lastLines(n.output, summaryTailLines); tail != "" {
		b.WriteString("\n" + SummaryOutputHeader + "\n" + tail)
	}
	if n.id != "" {
		b.WriteString("\n" + fmt.Sprintf(SummaryFullOutputHint, n.id))
	}
	return b.String()
}

func summarizeBatch(items []notice) string {
	ok, other := 0, 0
	for _, n := range items {
		switch {
		case n.watch || n.watchOff || n.overflow:
			other++
		case n.succeeded():
			ok++
		}
	}
	var b strings.Builder
	if other > 0 {
		fmt.Fprintf(&b, SummaryBatchMixed, len(items))
	} else {
		fmt.Fprintf(&b, SummaryBatch, len(items), ok, len(items)-ok)
	}
	for _, n := range items {
		b.WriteString("\n- " + n.id + ": ")
		switch {
		case n.watch:
			b.WriteString("printed a watched line")
		case n.watchOff:
			b.WriteString("matched too often; watching stopped")
		case n.overflow:
			b.WriteString("watch notifications paused")
		case n.exitCode != nil && *n.exitCode == 0:
			b.WriteString("finished successfully")
		case n.exitCode != nil && !n.stopped:
			fmt.Fprintf(&b, "failed (exit %d)", *n.exitCode)
		case n.stopped:
			b.WriteString("was stopped")
		default:
			b.WriteString("ended (exit status unknown)")
		}
		// Each job's result stays visible in a batch: its last lines, indented under it.
		// (An item of the engine's batch ends with the "]" that closes its "[IMPORTANT: …".)
		out := strings.TrimSuffix(strings.TrimRight(n.output, "\n"), "]")
		if tail := lastLines(out, summaryBatchTailLines); tail != "" {
			b.WriteString("\n  " + SummaryOutputHeader + "\n  " + strings.ReplaceAll(tail, "\n", "\n  "))
		}
	}
	return b.String()
}

// summarizeOther quotes the first lines of a notification we cannot classify, without its
// command line and the host's "IMPORTANT:" and "Background process <id>:" prefixes.
func summarizeOther(n notice) string {
	var lines []string
	for _, l := range nonEmpty(n.header) {
		l = strings.TrimSpace(strings.Trim(l, "[] "))
		if strings.HasPrefix(strings.ToLower(l), "command:") {
			continue
		}
		l = strings.TrimSpace(strings.TrimPrefix(l, "IMPORTANT:"))
		l = strings.TrimSpace(reOtherPrefix.ReplaceAllString(l, ""))
		if l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		lines = nonEmpty(strings.Split(n.output, "\n"))
	}
	if len(lines) > summaryUpdateLines {
		lines = lines[:summaryUpdateLines]
	}
	for i, l := range lines {
		lines[i] = clip(l, summaryTailLineChars)
	}
	if len(lines) == 0 {
		return SummaryUpdate
	}
	return SummaryUpdate + "\n" + strings.Join(lines, "\n")
}

// cleanNotification drops the host's internal-notification footer and an outer [ … ] wrapper.
func cleanNotification(text string) string {
	text = strings.ReplaceAll(text, "\r\n", "\n")
	var keep []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), notificationFooterMark) {
			continue
		}
		keep = append(keep, l)
	}
	text = strings.TrimSpace(strings.Join(keep, "\n"))
	first, _, _ := strings.Cut(text, "\n")
	if strings.HasPrefix(first, "[") && !strings.Contains(first, "]") && strings.HasSuffix(text, "]") {
		text = strings.TrimSpace(text[1 : len(text)-1])
	}
	return text
}

// splitNotices splits a batch into its items: each starts at a line naming a proc_ id. It
// returns nil when fewer than two distinct ids head items.
func splitNotices(text string) []notice {
	lines := strings.Split(text, "\n")
	var starts []int
	seen := map[string]bool{}
	inOutput := false
	for i, l := range lines {
		id := ""
		if m := reProcItem.FindStringSubmatch(l); m != nil {
			id = m[1]
		} else if m := reProcHeader.FindStringSubmatch(l); m != nil && !inOutput {
			id = m[1]
		}
		if id != "" && !seen[id] {
			seen[id] = true
			starts = append(starts, i)
			inOutput = false
			continue
		}
		if reOutputLine.MatchString(l) {
			inOutput = true
		}
	}
	if len(starts) < 2 {
		return nil
	}
	items := make([]notice, 0, len(starts))
	for k, s := range starts {
		e := len(lines)
		if k+1 < len(starts) {
			e = starts[k+1]
		}
		items = append(items, parseNotice(strings.Join(lines[s:e], "\n")))
	}
	return items
}

// parseNotice reads one notification: the header (lines before "Output:") says what happened,
// the rest is output.
func parseNotice(text string) notice {
	var n notice
	lines := strings.Split(text, "\n")
	var out []string
	for i, l := range lines {
		if m := reOutputLine.FindStringSubmatch(l); m != nil {
			if m[1] != "" {
				out = append(out, m[1])
			}
			out = append(out, lines[i+1:]...)
			break
		}
		n.header = append(n.header, l)
	}
	head := strings.Join(n.header, "\n")
	// The command line says nothing about the outcome: keep it out of the matching.
	var judge []string
	for _, l := range n.header {
		if !strings.HasPrefix(strings.ToLower(strings.TrimSpace(l)), "command:") {
			judge = append(judge, l)
		}
	}
	j := strings.Join(judge, "\n")
	if m := reProcHeader.FindStringSubmatch(head); m != nil {
		n.id = m[1]
	} else if m := reProcID.FindString(head); m != "" {
		n.id = m
	}
	if m := reExitCode.FindStringSubmatch(j); m != nil {
		if c, err := strconv.Atoi(m[1]); err == nil {
			n.exitCode = &c
		}
	}
	if m := reSignal.FindStringSubmatch(j); m != nil {
		n.signal = m[1]
	}
	n.stopped = reStopped.MatchString(j) || n.signal != ""
	n.unknown = reUnknown.MatchString(j)
	n.watchOff = reWatchOff.MatchString(j)
	n.overflow = reOverflow.MatchString(j)
	n.watch = !n.watchOff && !n.overflow && reWatch.MatchString(j)
	if m := rePattern.FindStringSubmatch(j); m != nil {
		n.pattern = m[1]
	}
	var kept []string
	for _, l := range out {
		if strings.TrimSpace(l) == truncationMarker {
			continue
		}
		kept = append(kept, l)
	}
	n.output = strings.TrimRight(strings.Join(kept, "\n"), "\n \t")
	return n
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
