package sim

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// History is everything one run recorded: what the platform fakes hold, what the driver sent
// and when, what the database holds at the end, and what was observed while the run went on.
// The invariants are functions of a History alone, so they can be tested on histories written
// by hand (invariants_test.go) as well as on recorded ones.
type History struct {
	// Posts are the bot's messages as the platforms hold them, in the order each chat shows
	// them (edited messages in their original place, with their current text).
	Posts []Post
	// Inbound are the events the driver gave the platforms for the host, in the order sent.
	Inbound []Inbound
	// Rows are the delivery ledger's rows (deliveries).
	Rows []Row
	// Inbox are the turn inbox's rows (turn_inbox).
	Inbox []InboxRow
	// Processes are the background processes (processes), with their completion events.
	Processes []Proc
	// Sessions are the physical sessions (sessions).
	Sessions []Session
	// Refusals are the auth log's refusals (auth_log).
	Refusals []Refusal
	// ModelInputs are the user-visible texts of every request the model server received.
	ModelInputs []string
	// Polls are the getUpdates requests of each bot token the Telegram fake answered.
	Polls []Poll
	// CronRuns are the scheduled messages the cron plugin sent, and Clock the plugins' clock:
	// its start, its jumps, and its time when the history was collected (the clock runs with
	// the wall clock between jumps).
	CronRuns []CronRun
	Clock    []ClockMove
	// StoreFaults are the periods the store refused writes, and Health the /healthz answers
	// sampled meanwhile and after.
	StoreFaults []Span
	Health      []HealthSample
	// Hosts are the host processes of the run: when each was up.
	Hosts []HostLife
	// Outages are the periods a platform could not be reached (a reconnect storm).
	Outages []Outage
	// Interruptions counts the faults that may legitimately leave a parked poll at the Telegram
	// fake (a host killed or paused while it polled).
	Interruptions int
	// Secrets are the world's credentials (the model's API key, the bots' tokens and signing
	// secrets): none may ever reach a chat.
	Secrets []string
	// End is when the history was collected.
	End time.Time
}

// Post is one bot message at a platform.
type Post struct {
	Chat       string    // ChatKey of where it was posted
	ID         string    // the platform's message id (as the ledger records it)
	Text       string    // its text now (after edits)
	At         time.Time // when it was first posted
	DeliveryID string    // the ledger row id, where the platform carries it (echo)
}

// Inbound is one event the driver handed to a platform for the host.
type Inbound struct {
	Chat     string // ChatKey
	EventID  string // the id the plugin gives the event (the inbox's event_id)
	Nonce    string // the event's own identifier in its text
	Text     string
	Admitted bool // the sender is admitted by the access configuration
	Accepted bool // the platform saw the host take it (webhook 2xx, poll confirmed, push acked)
	At       time.Time
}

// Row is one delivery ledger row.
type Row struct {
	ID, Group  string
	Part       int
	Plugin     string
	Chat       string // ChatKey of its target
	Kind       string // reply, notification, scheduled, notice
	State      string // pending, sending, delivered, failed, dropped
	Reason     string
	MessageIDs []string
	SessionID  string // where it was delivered
	StampedID  string // the session of its stamp (guarded rows)
	Origin     string
	Text       string
	Edit       string // the message id it edits ("" for a new message)
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Uncertain reports whether the row's send may have reached the platform (outcome unknown).
func (r Row) Uncertain() bool {
	return r.State == "failed" && strings.Contains(r.Reason, "outcome unknown")
}

// Draft reports whether the row is a streamed draft (a message still being written).
func (r Row) Draft() bool { return strings.HasSuffix(r.Text, StreamSuffix) }

// InboxRow is one turn inbox row.
type InboxRow struct {
	ID, EventID string
	Kind        string // message, record, notification
	Chat        string
	Text        string
	State       string
	Outcome     string
	Updated     time.Time // when the row took its state (the receiving host's clock)
}

// Proc is one background process and its completion.
type Proc struct {
	ID        string
	Chat      string
	SessionID string // the session it was stamped with
	State     string // running, exited, killed, lost…
	ExitCode  *int
	Owner     string // the identity of the host process that ran it
	Printed   string // the token its command prints (from the command line), "" if none
	// Completion is the completion event's queue state ("" when there is none), Outcome its
	// recorded outcome and Output the tail it carries.
	Completion, Outcome, Output string
	// Correction is the same for the correction event of a completion that said "lost" (a
	// survivor took the host over, and the host came back and saw the real end): "" for none.
	Correction, CorrectionOutcome, CorrectionOutput string
}

// Session is one physical session.
type Session struct {
	ID, Key, Parent, CreatedBy, EndReason string
	Started                               time.Time
	Ended                                 time.Time // zero while live
}

// Refusal is one refused inbound event in the auth log.
type Refusal struct {
	EventID, Chat, Reason string
}

// Poll is one getUpdates request.
type Poll struct {
	Token  string
	At     time.Time
	Status int
	Desc   string // the error description of a non-2xx answer
}

// CronRun is one scheduled message's ledger row, by job.
type CronRun struct {
	Job     string
	Created time.Time
}

// ClockMove is the plugins' clock jumping from From to To at wall-clock time At.
type ClockMove struct {
	At, From, To time.Time
}

// Span is a period of real time.
type Span struct{ From, To time.Time }

// HealthSample is one /healthz answer.
type HealthSample struct {
	At     time.Time
	Status string // ok, degraded, unhealthy, or "" when the host did not answer
}

// HostLife is one host process: its identity in the database (its pid, which starts the
// writer identity "pid:starttime" of the processes it runs), when it started and when it died
// or was stopped (zero: still up at the end).
type HostLife struct {
	Host     int
	Identity string
	From, To time.Time
	Paused   []Span
}

// Outage is a period a platform's connection kept being cut.
type Outage struct {
	Platform string
	Span
}

// Violation is one broken promise, found in a history.
type Violation struct {
	Invariant string
	Detail    string
}

func (v Violation) String() string { return v.Invariant + ": " + v.Detail }

// ChatKey names a chat (and thread) the same way for platform posts and ledger targets.
func ChatKey(plugin, chat, thread string) string {
	if thread == "0" {
		thread = ""
	}
	return plugin + ":" + chat + "/" + thread
}

// StreamSuffix ends a streamed message that is still being written (internal/turn).
const StreamSuffix = " …"

// CompleteMarker is the first line of a streamed answer posted again in full because its draft
// was interrupted (the fix of issue 26, defect 1).
const CompleteMarker = "↪ The complete answer (the draft above was interrupted):"

// nonceRe matches the identifiers the driver writes into messages (Nonce) and the model and the
// processes echo back: N, four digits, x.
var nonceRe = regexp.MustCompile(`N[0-9]{4}x`)

// Nonce is the identifier of step i of a schedule.
func Nonce(i int) string { return fmt.Sprintf("N%04dx", i%10000) }

// nonces returns the identifiers in text, in order, without repeats.
func nonces(text string) []string {
	var out []string
	for _, n := range nonceRe.FindAllString(text, -1) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// answerNonces returns the identifiers text carries as an answer of the agent ("A:N0001x",
// "started:N0001x"), not as a process's output ("OUT-N0001x").
func answerNonces(text string) []string {
	var out []string
	for _, loc := range nonceRe.FindAllStringIndex(text, -1) {
		if loc[0] > 0 && text[loc[0]-1] == '-' {
			continue
		}
		if n := text[loc[0]:loc[1]]; !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// Stats sums up a history in one line: what the platforms got, what was accepted, what the
// ledger did.
func (h *History) Stats() string {
	posts := map[string]int{}
	for _, p := range h.Posts {
		platform, _, _ := strings.Cut(p.Chat, ":")
		posts[platform]++
	}
	accepted := 0
	for _, in := range h.Inbound {
		if in.Accepted {
			accepted++
		}
	}
	rows := map[string]int{}
	for _, r := range h.Rows {
		rows[r.State]++
		if r.Uncertain() {
			rows["uncertain"]++
		}
	}
	return fmt.Sprintf("inbound %d (accepted %d), posts %v, ledger %v, processes %d, sessions %d, model requests' texts %d",
		len(h.Inbound), accepted, posts, rows, len(h.Processes), len(h.Sessions), len(h.ModelInputs))
}
