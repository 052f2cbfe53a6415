package agent

import (
	"fmt"
	"strings"
)

// NoticeKind says what a Notice reports. The values are internal/process's event kinds.
type NoticeKind string

// Kinds of Notice.
const (
	NoticeCompletion    NoticeKind = "completion"              // the process ended
	NoticeCorrection    NoticeKind = "correction"              // the real end of a process an earlier notice reported lost
	NoticeWatchMatch    NoticeKind = "watch_match"             // an output line matched a watch pattern
	NoticeWatchDisabled NoticeKind = "watch_disabled"          // too many matches: watching stopped, the completion will be reported
	NoticeWatchPaused   NoticeKind = "watch_overflow_tripped"  // the host-wide watch breaker tripped: matches are dropped for a while
	NoticeWatchResumed  NoticeKind = "watch_overflow_released" // the breaker released
)

// Reasons a Notice's process ended as it did (Notice.Reason), where the agent's words depend on
// them; others are passed through.
const (
	ReasonHostLost = "host_lost" // lost because the host running it stopped; its outcome is unknown
)

// Notice is one background-process event, as the turn engine hands it to an agent: data, never
// text for the agent to read back. Each agent renders it at its edge: the builtin agent (and the
// fallback when the model fails) into a summary for people (Summarize), the OpenAI agent into a
// user-role message fenced as untrusted program output, the ledger's records into Describe.
type Notice struct {
	Kind    NoticeKind `json:"kind"`
	ProcID  string     `json:"proc_id,omitempty"`
	Command string     `json:"command,omitempty"`
	// State is the process's end state (State* values) for a completion or a correction.
	State string `json:"state,omitempty"`
	// ExitCode is nil when the exit status is unknown (a lost process) or not an end.
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"` // e.g. SIGTERM when a signal ended it
	Reason   string `json:"reason,omitempty"` // why it ended so (ReasonHostLost, a kill reason)
	// Output is the tail of its output (without terminal escapes); OutputCut says older output
	// was cut off. For a watch match it ends with the matching line.
	Output    string `json:"output,omitempty"`
	OutputCut bool   `json:"output_cut,omitempty"`
	// Pattern and Line are the watch pattern that matched and the line it matched.
	Pattern    string `json:"pattern,omitempty"`
	Line       string `json:"line,omitempty"`
	Suppressed int    `json:"suppressed,omitempty"` // matches held back since the previous notice
	// Message is the registry's own words for the events that are not an end or a match (watch
	// disabled, the breaker), and for a lost process.
	Message string `json:"message,omitempty"`
}

// Ended reports whether n reports a process's end (a completion or a correction).
func (n Notice) Ended() bool { return n.Kind == NoticeCompletion || n.Kind == NoticeCorrection }

// Succeeded reports whether n reports a process that ended with exit code 0.
func (n Notice) Succeeded() bool {
	return n.Ended() && n.ExitCode != nil && *n.ExitCode == 0 && n.Signal == ""
}

// Lost reports whether n's process was lost with its outcome unknown.
func (n Notice) Lost() bool { return n.Ended() && n.ExitCode == nil && n.State == StateLost }

// Ending says how n's process ended, as a predicate: "completed normally (exit code 0)". A lost
// process's ending says neither "stopped" nor "failed": its outcome is unknown.
func (n Notice) Ending() string {
	switch {
	case n.ExitCode == nil && n.State == StateLost && n.Reason == ReasonHostLost:
		return "was lost: the host running it went down, so its outcome is unknown"
	case n.ExitCode == nil && n.State == StateLost:
		return "was lost while the host was down (exit status unknown)"
	case n.ExitCode == nil && n.Signal != "":
		return "was terminated by " + n.Signal
	case n.ExitCode == nil && n.State == StateKilled:
		return "was killed"
	case n.ExitCode == nil:
		return "ended (exit status unknown)"
	case n.Signal != "":
		return fmt.Sprintf("was terminated by %s (exit code %d)", n.Signal, *n.ExitCode)
	case *n.ExitCode == 0:
		return "completed normally (exit code 0)"
	}
	return fmt.Sprintf("exited with exit code %d", *n.ExitCode)
}

// Headline is one sentence saying what n reports, without its output.
func (n Notice) Headline() string {
	switch n.Kind {
	case NoticeCompletion:
		return fmt.Sprintf("Background process %s %s.", n.ProcID, n.Ending())
	case NoticeCorrection:
		return fmt.Sprintf("Correction: background process %s, reported earlier as lost, %s.", n.ProcID, n.Ending())
	case NoticeWatchMatch:
		s := fmt.Sprintf("Background process %s printed a line matching watch pattern %q.", n.ProcID, n.Pattern)
		if n.Suppressed > 0 {
			s += fmt.Sprintf(" (%d more matches were held back.)", n.Suppressed)
		}
		return s
	}
	msg := strings.TrimSuffix(strings.TrimSpace(n.Message), ".")
	if n.ProcID == "" {
		return msg + "."
	}
	return fmt.Sprintf("Background process %s: %s.", n.ProcID, msg)
}

// Describe renders n for the records people read (a dropped notification in the ledger, the
// inbox, the transcript): the headline, the command and the output.
func (n Notice) Describe() string {
	var b strings.Builder
	b.WriteString(n.Headline())
	if n.Command != "" {
		b.WriteString("\nCommand: " + n.Command)
	}
	if out := strings.TrimSpace(n.Output); out != "" {
		b.WriteString("\nOutput:\n" + out)
	}
	return b.String()
}

// DescribeAll renders notices as Describe does, one after another.
func DescribeAll(ns []Notice) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = n.Describe()
	}
	return strings.Join(parts, "\n\n")
}
