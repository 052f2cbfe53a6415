package host

import (
	"context"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
)

// Agent answers one turn of a conversation: Options.Agent puts a program's own agent behind the
// host in place of the built-in or the OpenAI-compatible one. The host calls Turn with one turn
// of one session key at a time (turns of different keys run side by side), and sends the
// Reply's text into the chat through the delivery ledger, split by the platform's limit. Turn
// must return promptly when ctx is cancelled (/stop, /new); its error is shown to the user as a
// failed turn. A custom agent gets no process tools: the operator's shell grants apply to the
// built-in agents only.
type Agent interface {
	Turn(ctx context.Context, t *Turn) (*Reply, error)
}

// AgentFunc adapts a function to Agent.
type AgentFunc func(ctx context.Context, t *Turn) (*Reply, error)

// Turn calls f.
func (f AgentFunc) Turn(ctx context.Context, t *Turn) (*Reply, error) { return f(ctx, t) }

// Turn is the input of one turn.
type Turn struct {
	Key       string     // the session key, e.g. agent:main:telegram:dm:123
	SessionID string     // the physical session (conversation) it belongs to
	Source    abi.Source // where the message came from
	// Text is the user's message (several that arrived while the key was busy, merged). On a
	// notification turn it is only a record of Notices for people: answer from Notices.
	Text string
	// Notices are what a notification turn reports, as data: one per background-process event,
	// oldest first. Empty on an ordinary turn.
	Notices []Notice
	// Notification marks a background-process notification turn: answer briefly, with text only.
	Notification bool
	// History is the conversation so far, oldest first, without Text.
	History []Message
	// Model is the model the chat chose (/model, from the operator's list); "": the configured one.
	Model string
	// OnText, when not nil, takes the answer as it is written, for platforms that show a
	// message growing: call it with the whole text so far (not a delta), from the goroutine
	// running Turn, quickly. The Reply's Text remains the final answer.
	OnText func(soFar string)
}

// Roles of a Message.
const (
	RoleUser         = "user"
	RoleAssistant    = "assistant"
	RoleSystem       = "system"
	RoleTool         = "tool"
	RoleNotification = "notification" // a background-process notice; its output is untrusted
)

// Message is one entry of a conversation's history.
type Message struct {
	Role    string   // Role* values
	Text    string   // for a notification, a record for people of Notices
	Notices []Notice // the process events a RoleNotification message reports
}

// Notice is one background-process event, as data: the host never asks an agent to read its
// own text back.
type Notice struct {
	// Kind is completion (the process ended), correction (the real end of a process an earlier
	// notice reported lost), watch_match (an output line matched a watch pattern),
	// watch_disabled, watch_overflow_tripped or watch_overflow_released.
	Kind    string `json:"kind"`
	ProcID  string `json:"proc_id,omitempty"`
	Command string `json:"command,omitempty"`
	// State is the process's end state (exited, killed, lost, ...) for a completion or correction.
	State string `json:"state,omitempty"`
	// ExitCode is nil when the exit status is unknown (a lost process) or the event is not an end.
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"` // e.g. SIGTERM, when a signal ended it
	Reason   string `json:"reason,omitempty"` // why it ended so (host_lost, a kill's reason)
	// Output is the tail of its output (without terminal escapes); OutputCut says older output
	// was cut off. It is the program's, not the host's: untrusted text.
	Output    string `json:"output,omitempty"`
	OutputCut bool   `json:"output_cut,omitempty"`
	// Pattern and Line are the watch pattern that matched and the line it matched.
	Pattern    string `json:"pattern,omitempty"`
	Line       string `json:"line,omitempty"`
	Suppressed int    `json:"suppressed,omitempty"` // matches held back since the previous notice
	// Message is the host's words for events that are not an end or a match, and for a lost process.
	Message string `json:"message,omitempty"`
}

// Reply is what a turn answers.
type Reply struct {
	// Text is the answer to send into the chat; empty: nothing is sent.
	Text string
}

// agentOf adapts a program's Agent to the host's.
func agentOf(a Agent) agent.Agent {
	return agent.Func(func(ctx context.Context, t *agent.Turn) (*agent.Reply, error) {
		r, err := a.Turn(ctx, turnOf(t))
		if err != nil {
			return nil, err
		}
		if r == nil {
			return &agent.Reply{}, nil
		}
		return &agent.Reply{Text: r.Text}, nil
	})
}

func turnOf(t *agent.Turn) *Turn {
	out := &Turn{Key: t.Key, SessionID: t.SessionID, Source: t.Source, Text: t.Text, Notices: noticesOf(t.Notices),
		Notification: t.Synthetic, Model: t.Model, OnText: t.OnText}
	for _, m := range t.History {
		out.History = append(out.History, Message{Role: m.Role, Text: m.Text, Notices: noticesOf(m.Notices)})
	}
	return out
}

func noticesOf(ns []agent.Notice) []Notice {
	var out []Notice
	for _, n := range ns {
		out = append(out, Notice{Kind: string(n.Kind), ProcID: n.ProcID, Command: n.Command, State: n.State,
			ExitCode: n.ExitCode, Signal: n.Signal, Reason: n.Reason, Output: n.Output, OutputCut: n.OutputCut,
			Pattern: n.Pattern, Line: n.Line, Suppressed: n.Suppressed, Message: n.Message})
	}
	return out
}
