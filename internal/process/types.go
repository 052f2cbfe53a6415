package process

import (
	"errors"
	"strconv"
	"time"

	"github.com/hermes-host/hermes-host/internal/session"
)

// State is where a process is in its life.
type State string

// States of a process. Starting is only ever seen in a checkpoint written just before the
// process is started; every other state is set after.
const (
	StateStarting    State = "starting"     // checkpointed, not yet started (crash window only)
	StateRunning     State = "running"      // started and not yet seen to end
	StateExited      State = "exited"       // ended on its own; ExitCode may be unknown (nil)
	StateKilled      State = "killed"       // ended after the registry signalled it (Reason says why)
	StateLost        State = "lost"         // vanished while the host was down, or its host stopped; exit status unknown
	StateFailedStart State = "failed_start" // could not be started (Reason holds the error)
)

// States are all the states, for reports that list every one.
var States = []State{StateStarting, StateRunning, StateExited, StateKilled, StateLost, StateFailedStart}

// Final reports whether s is an end state.
func (s State) Final() bool { return s != StateStarting && s != StateRunning }

// Reasons recorded with an end state (Info.Reason, Event.Reason). Kill reasons are whatever the
// caller of Kill passed; these are the ones the registry itself uses.
const (
	ReasonExit          = "exit"           // exited on its own, status observed by the host
	ReasonExitWhileDown = "exit_host_down" // exited while the host was down; status from its exit file
	ReasonExitUnknown   = "exit_unknown"   // a re-adopted process ended; its exit status was not recorded
	ReasonSignal        = "signal"         // terminated by a signal the registry did not send
	ReasonGone          = "pid_gone"       // lost: the pid was gone when the host restarted
	ReasonRecycled      = "pid_reused"     // lost: the pid belonged to another process (start time differs)
	ReasonSpawnCrash    = "host_down_during_spawn"
	ReasonKill          = "process.kill" // the default reason of Kill
	ReasonMaxAge        = "max_age"      // killed because it outlived its maximum age
	// ReasonHostLost: lost because the host running it stopped (its lease expired) and another
	// host took its work over; the process may have gone on running, its outcome is unknown. If
	// the host comes back and knows the real end, that end replaces the lost record (see
	// "Takeover by another host" in takeover.go).
	ReasonHostLost = "host_lost"
)

// Info is a snapshot of one process, as the registry and its checkpoint know it.
type Info struct {
	ID         string        `json:"id"` // proc_ + 12 hex digits
	Command    string        `json:"command"`
	Dir        string        `json:"dir,omitempty"`
	PID        int           `json:"pid,omitempty"`
	StartTicks uint64        `json:"start_ticks,omitempty"` // kernel start time of PID (PID-reuse guard)
	State      State         `json:"state"`
	ExitCode   *int          `json:"exit_code,omitempty"` // nil while running or when unknown
	Signal     string        `json:"signal,omitempty"`    // e.g. SIGTERM when a signal ended it
	Reason     string        `json:"reason,omitempty"`    // Reason* values or a kill reason
	Stamp      session.Stamp `json:"stamp"`
	StartedAt  time.Time     `json:"started_at"`
	EndedAt    time.Time     `json:"ended_at,omitzero"`
	MaxAge     time.Duration `json:"max_age,omitempty"` // 0: never killed for age

	NotifyOnComplete bool     `json:"notify_on_complete,omitempty"`
	WatchPatterns    []string `json:"watch_patterns,omitempty"`
	WatchDisabled    bool     `json:"watch_disabled,omitempty"`
	WatchMatches     int      `json:"watch_matches,omitempty"` // matches delivered so far
	OutputChars      int      `json:"output_chars,omitempty"`  // size of the completion tail
	OutputBytes      int64    `json:"output_bytes"`            // bytes of output produced so far

	// Consumed is set once the agent has seen the result (Wait, Log after the end, Kill): the
	// completion event is then suppressed.
	Consumed bool `json:"consumed,omitempty"`
	// Adopted is set when this host re-adopted the process after a restart (it is not our child).
	Adopted bool `json:"adopted,omitempty"`

	Gen   int64  `json:"gen"`             // checkpoint generation of this snapshot
	Owner string `json:"owner,omitempty"` // writer identity "pid:starttime" of the host that wrote it
	// Host is the instance id (lease.InstanceID) of the host that runs the process when several
	// hosts share the database; "" on a single host. When a host stops and another takes its work
	// over, the survivor records the process as lost under its own id: writes of the host that
	// stopped, made on the strength of owning the row, then no longer match (see upsertRow).
	Host string `json:"host,omitempty"`

	// Notice is the delivery state of the completion event, filled by List: "", pending, claimed,
	// done, suppressed; NoticeOutcome is what the delivery layer recorded (e.g. "delivered",
	// "dropped: session_reset").
	Notice        string `json:"notice,omitempty"`
	NoticeOutcome string `json:"notice_outcome,omitempty"`
	// Correction and CorrectionOutcome are the same for the correction of a "lost" notice (an
	// EventCorrection), filled by List when there is one.
	Correction        string `json:"correction,omitempty"`
	CorrectionOutcome string `json:"correction_outcome,omitempty"`
}

// Age is how long the process has existed at now (until its end, if it ended).
func (i Info) Age(now time.Time) time.Duration {
	if !i.EndedAt.IsZero() {
		return i.EndedAt.Sub(i.StartedAt)
	}
	return now.Sub(i.StartedAt)
}

// ExitStatus is the exit status as people read it: "0", "143 (SIGTERM)", "?" when the process
// ended with its status unknown, "-" while it runs.
func (i Info) ExitStatus() string {
	exit := "-"
	switch {
	case i.ExitCode != nil:
		exit = strconv.Itoa(*i.ExitCode)
	case i.State.Final():
		exit = "?"
	}
	if i.Signal != "" {
		exit += " (" + i.Signal + ")"
	}
	return exit
}

// EventKind names what an event reports.
type EventKind string

// Kinds of event the registry emits.
const (
	EventCompletion      EventKind = "completion"              // the process ended (once per process)
	EventCorrection      EventKind = "correction"              // the real end of a process whose delivered completion said "lost" (host_lost); at most once
	EventWatchMatch      EventKind = "watch_match"             // a watch pattern matched a line
	EventWatchDisabled   EventKind = "watch_disabled"          // per-process watch limits hit; notify-on-complete takes over
	EventOverflowTripped EventKind = "watch_overflow_tripped"  // global watch breaker tripped: matches are dropped
	EventOverflowRelease EventKind = "watch_overflow_released" // global watch breaker released
)

// Event is one thing the delivery layer may turn into a notification. It carries the spawning
// session's stamp so the delivery layer can apply the stale checks.
type Event struct {
	Seq       int64         `json:"seq"` // queue position, unique; set when read from the queue
	Kind      EventKind     `json:"kind"`
	ProcID    string        `json:"proc_id"`
	Command   string        `json:"command"`
	Stamp     session.Stamp `json:"stamp"`
	StartedAt time.Time     `json:"started_at"`
	At        time.Time     `json:"at"` // when the event was produced

	// Completion fields.
	State    State  `json:"state,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"` // nil: exit status unknown
	Signal   string `json:"signal,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Notify is the process's notify_on_complete at the end (true also when watching was
	// disabled and notify took over). The delivery layer decides by mode what a completion
	// without Notify becomes.
	Notify bool `json:"notify,omitempty"`

	// Output is the line-safe tail: the last output for a completion, the lines up to the match
	// for a watch match. OutputCut is set when it starts with TruncationMarker.
	Output    string `json:"output,omitempty"`
	OutputCut bool   `json:"output_cut,omitempty"`

	// Watch fields.
	Pattern    string `json:"pattern,omitempty"`
	Suppressed int    `json:"suppressed,omitempty"` // matches suppressed since the previous delivered one
	Message    string `json:"message,omitempty"`    // human text of watch_disabled / overflow events, and of a host_lost completion
}

// Errors returned by the registry and the event queue.
var (
	ErrNotFound   = errors.New("process: no such process")
	ErrTooMany    = errors.New("process: too many running processes")
	ErrClosed     = errors.New("process: registry closed")
	ErrNotRunning = errors.New("process: not running")
	// ErrCorrupt means a checkpoint row could not be decoded (its stamp or watch patterns).
	ErrCorrupt = errors.New("process: corrupt checkpoint")
	// ErrClaimLost means the claim token no longer holds the event: its lease expired and it was
	// claimed again, or it was already acknowledged.
	ErrClaimLost = errors.New("process: event claim lost")
	// ErrSuppressed means the agent consumed the result (Wait, Log, Kill) after the event was
	// claimed: do not deliver it.
	ErrSuppressed = errors.New("process: event suppressed (result consumed by the agent)")
	// ErrTakenOver means a checkpoint was not written because another host recorded the process
	// since this host last wrote it (and not as lost by a takeover, which this host reconciles).
	ErrTakenOver = errors.New("process: the checkpoint was recorded by another host meanwhile")
)
