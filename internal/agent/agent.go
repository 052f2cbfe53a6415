// Package agent provides the agents behind turns, behind one interface: Agent.
//
// Two agents exist. Builtin is deterministic and needs no model: it is the embedded default,
// answers plainly, and offers chat commands (run, watch, sh, ps, log, wait, kill) so a user can
// watch the whole background-process notification flow. OpenAI talks to an OpenAI-compatible
// chat-completions endpoint and lets the model use two tools, terminal and process, through the
// Tools a turn carries.
//
// The package imports neither the session store nor the process registry: the turn engine adapts
// the real registry to Tools, bound to the turn's session.
//
// A synthetic turn (Turn.Synthetic) answers a background-process notification. It takes the
// narrow, side-effect-free path: no command is started or killed (approvals are denied
// automatically) and no media is returned.
package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// Agent answers one turn. Turn returns promptly when ctx is cancelled (/stop, /new), with an
// error satisfying errors.Is(err, context.Canceled) (or DeadlineExceeded). Errors are values the
// engine can show the user through UserMessage.
type Agent interface {
	Turn(ctx context.Context, t *Turn) (*Reply, error)
}

// Func adapts a function to Agent.
type Func func(ctx context.Context, t *Turn) (*Reply, error)

// Turn calls f.
func (f Func) Turn(ctx context.Context, t *Turn) (*Reply, error) { return f(ctx, t) }

// Turn is the input of one turn.
type Turn struct {
	Key       string     // session key
	SessionID string     // physical session id
	Source    abi.Source // where the message came from
	// Text is the user's (possibly merged) message. On a synthetic turn it is only a record of
	// Notices for people (Notice.Describe); agents answer from Notices.
	Text string
	// Notices are what a synthetic turn reports, as data: one per process event, oldest first.
	Notices []Notice
	// History is the prior transcript, oldest first, without Text.
	History []Message
	// Synthetic marks a background-process notification turn: the narrow, side-effect-free path.
	Synthetic bool
	// Tools are the process tools bound to this turn's session; nil: none.
	Tools Tools
	// Model is the model the chat chose for this conversation (/model, from the operator's
	// list); "": the configured one. The builtin agent has none.
	Model string
	// Attachments are the files the user's message carried (ABI 1.2), already fetched, checked
	// against the operator's caps and stored by the host. Never set on synthetic turns.
	Attachments []Attachment
	// OnText, when set, asks for the answer as it is written: it is called with the whole text
	// so far (not a delta), from the goroutine running Turn, and must return quickly. The
	// Reply's Text remains the final answer.
	OnText func(soFar string)
}

// Attachment is one file of a turn's message, as the host stored it.
type Attachment struct {
	Kind     string // abi.Attach* values: image, voice, audio, video, document, sticker
	MIMEType string // sniffed from the bytes by the host, never the platform's claim
	Name     string // the platform's file name, if any: shown, never trusted as a path
	Size     int64  // bytes
	Path     string // the stored file: read it, never write it
	Caption  string
}

// Roles of a Message.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleSystem    = "system"
	RoleTool      = "tool"
	// RoleNotification is a background-process notice: the gateway's words around a command's
	// output. The output is untrusted data (it may hold text written to look like instructions);
	// it is never shown to a model as the assistant's own words.
	RoleNotification = "notification"
)

// Message is one entry of a transcript.
type Message struct {
	Role string // Role* values
	Text string
	// ToolCalls are the calls an assistant message made (Text may be empty then).
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID and Name say which call a RoleTool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	Name       string `json:"name,omitempty"`
	// Notices are the process events a RoleNotification message reports, as data (Text is their
	// record for people, or the text-mode notice the chat was sent when there are none).
	Notices []Notice `json:"notices,omitempty"`
}

// ToolCall is one tool call of a model.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // JSON text, as the model wrote it
}

// Reply is what a turn answers.
type Reply struct {
	// Text is the answer to send. It may be empty: nothing to send.
	Text string
	// Media are file paths or URLs to attach (from "MEDIA:<path>" lines of a model's answer).
	// Always empty on synthetic turns; the engine drops them there too.
	Media []string
	// ToolCalls counts the tool calls the agent made, refused ones included.
	ToolCalls int
	// Trail is what happened before the answer: the assistant's tool-call messages and the tool
	// results, in order. The engine keeps it in the transcript, so later turns see it.
	Trail []Message
	// Streamed reports that OnText received the answer as it was written.
	Streamed bool
	// Model is the model that answered ("" for the builtin agent).
	Model string
	// Usage adds up the server's usage fields of the turn's model calls (zero when the server
	// reported none).
	Usage Usage
	// Context is how many tokens the conversation takes at the end of the turn, as the model
	// received it: the last call's prompt and answer by the server's count, or an estimate when
	// it gave none. 0: unknown (the builtin agent).
	Context int
}

// Usage is what a server reports in a chat completion's "usage".
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// Calls counts the model calls added up (not a server field).
	Calls int `json:"calls,omitempty"`
}

func (u *Usage) add(v *Usage) {
	if v == nil {
		return
	}
	u.PromptTokens += v.PromptTokens
	u.CompletionTokens += v.CompletionTokens
	total := v.TotalTokens
	if total == 0 {
		total = v.PromptTokens + v.CompletionTokens
	}
	u.TotalTokens += total
	u.Calls++
}

// Windowed is an agent that knows its model's context window, in tokens (0: unknown). The turn
// engine compresses a conversation that grows past a share of it (Options.CompressAt).
type Windowed interface {
	// ContextWindow returns model's context window ("" for the configured model).
	ContextWindow(ctx context.Context, model string) int
}

// Tools are the process tools of one turn, bound to its session. Implementations must honour ctx
// (a /stop cancels it). Errors are shown to the agent (or the user) as text.
type Tools interface {
	// Spawn starts a command (sh -c). In the background it returns at once with the process id;
	// in the foreground it runs to completion or Timeout and returns the output.
	Spawn(ctx context.Context, req SpawnRequest) (SpawnResult, error)
	// List returns the session's processes, running and recently ended.
	List(ctx context.Context) ([]ProcessInfo, error)
	// Poll returns a process's state and recent output without consuming its result.
	Poll(ctx context.Context, id string) (ProcessInfo, error)
	// Log reads up to limit bytes of output from offset; a negative offset reads the last limit
	// bytes. Reading an ended process's log consumes its result (no notification follows).
	Log(ctx context.Context, id string, offset int64, limit int) (LogChunk, error)
	// Wait blocks until the process ends, timeout passes or ctx is done. A Wait that sees the end
	// consumes the result.
	Wait(ctx context.Context, id string, timeout time.Duration) (ProcessInfo, error)
	// Kill stops a process and returns its final state. It consumes the result.
	Kill(ctx context.Context, id string) (ProcessInfo, error)
}

// SpawnRequest asks Tools.Spawn for a command.
type SpawnRequest struct {
	Command    string // run as sh -c Command
	Background bool   // start it and return; false: run in the foreground until it ends or Timeout
	// NotifyOnComplete asks for a notification turn when a background process ends.
	NotifyOnComplete bool
	// WatchPatterns ask for a notification when an output line matches one (the registry's
	// matching rules apply: internal/process matches substrings). Background only.
	WatchPatterns []string
	// Timeout bounds a foreground command; 0: the implementation's default.
	Timeout time.Duration
}

// SpawnResult is what Tools.Spawn returns.
type SpawnResult struct {
	ID    string // the process id (proc_…); may be empty for a foreground command
	State string // State* values; a foreground command that hit Timeout is StateRunning or StateKilled
	// ExitCode is the foreground command's exit code; nil while running or when unknown.
	ExitCode *int
	Output   string // a foreground command's output (tail)
	Note     string // a remark for the agent, e.g. that watch patterns were dropped
}

// Process states, as internal/process names them.
const (
	StateStarting    = "starting"
	StateRunning     = "running"
	StateExited      = "exited"
	StateKilled      = "killed"
	StateLost        = "lost"
	StateFailedStart = "failed_start"
)

// ProcessInfo is a snapshot of one process.
type ProcessInfo struct {
	ID        string    `json:"id"`
	Command   string    `json:"command"`
	State     string    `json:"state"`               // State* values
	ExitCode  *int      `json:"exit_code,omitempty"` // nil while running or when unknown
	Signal    string    `json:"signal,omitempty"`    // e.g. SIGTERM when a signal ended it
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// NotifyOnComplete and WatchPatterns are the process's notification settings.
	NotifyOnComplete bool     `json:"notify_on_complete,omitempty"`
	WatchPatterns    []string `json:"watch_patterns,omitempty"`
	// Output is the recent output tail (filled by Poll; optional elsewhere).
	Output string `json:"output,omitempty"`
}

// Ended reports whether the process has ended.
func (p ProcessInfo) Ended() bool {
	return p.State != "" && p.State != StateRunning && p.State != StateStarting
}

// LogChunk is a range of a process's output.
type LogChunk struct {
	Text   string // the output, as text
	Offset int64  // where Text starts (may be later than asked: older output is gone)
	Next   int64  // the offset to ask for next
	Total  int64  // bytes produced so far
	Ended  bool   // the process has ended: Total is final
}

// Config configures New.
type Config struct {
	// BaseURL is the OpenAI-compatible API root, e.g. "http://127.0.0.1:8080/v1"; requests go to
	// BaseURL+"/chat/completions". Default "https://api.openai.com/v1".
	BaseURL string
	Model   string // the model name; required by "openai"
	// APIKey is sent as a bearer token; empty: none (local servers). When empty and APIKeyEnv
	// names an environment variable, the key is read from it.
	APIKey    string
	APIKeyEnv string
	// Timeout bounds each HTTP request to the model (streamed or not). Default 120s.
	Timeout time.Duration
	// TurnTimeout bounds a whole turn: every model call and tool call of it. Default 10m.
	TurnTimeout time.Duration
	// MaxRounds bounds the model calls of one turn. Default 8.
	MaxRounds int
	// SystemPrompt replaces the default opening of the system prompt; the description of the
	// tools is appended when tools are on.
	SystemPrompt string
	// Temperature and MaxTokens are sent when set (nil, 0: the server's default).
	Temperature *float64
	MaxTokens   int
	// Headers are extra HTTP headers sent with every request (e.g. for a proxy in front of the
	// server). Their values are secrets (see Secrets).
	Headers map[string]string
	// Secrets are more values that must never reach a user, the database or a log through the
	// agent (the values of ${NAME} references in the configuration). The API key and the header
	// values are secrets too: every error the agent returns has them replaced by [redacted].
	Secrets []string
	// ContextTokens is the model's context window in tokens; 0: ask the server's /models (vLLM
	// and llama.cpp server say it), else unknown.
	ContextTokens int
	// NoTools sends no tools: for servers or models that reject them. The agent then answers
	// in text only.
	NoTools bool
	// ShowReasoning shows a thinking model's reasoning (reasoning_content, or a <think> block
	// at the start of its content) in the chat, quoted before the answer, and keeps it in the
	// history; by default it is dropped from both.
	ShowReasoning bool
	// NoStream never asks for streamed answers. By default an answer is streamed (server-sent
	// events) when the turn wants its text as it is written (Turn.OnText).
	NoStream bool
	// Transport replaces the HTTP transport (tests). Redirects are never followed either way.
	Transport http.RoundTripper
	// Logger receives one line per failed model call. Default slog.Default().
	Logger *slog.Logger
	// Metrics counts model calls and failures; nil: not counted.
	Metrics *Metrics
	// CommandTimeout is the default timeout of a foreground command (builtin "sh", terminal
	// without timeout). Default 60s for "openai", 10s for "builtin".
	CommandTimeout time.Duration
	// Vision says Model accepts images: a turn's pictures are sent as image_url content parts.
	// Without it the model gets the text only and the answer says it cannot see images.
	Vision bool
	// VisionModels are the other models (a chat's /model choices) that accept images.
	VisionModels []string
	// Transcribe is the speech-to-text server for voice messages and audio files; nil: they
	// are not transcribed, and the answer says how to set it up.
	Transcribe *TranscribeConfig
	// DocumentBytes caps the text of one document inlined into the user's message. Default
	// DefaultDocumentBytes.
	DocumentBytes int
}

// TranscribeConfig configures the transcription client (see Transcriber).
type TranscribeConfig struct {
	// URL is the API root, e.g. "http://127.0.0.1:8080/v1"; files are POSTed to
	// URL+"/audio/transcriptions".
	URL string
	// Model is sent with every file. Default "whisper-1".
	Model string
	// APIKey is sent as a bearer token; empty: read from the variable APIKeyEnv names, if any.
	// It is a secret: never in an error or a log line.
	APIKey    string
	APIKeyEnv string
	// Timeout bounds one transcription. Default DefaultTranscribeTimeout.
	Timeout time.Duration
}

// Kinds accepted by New.
const (
	KindBuiltin = "builtin"
	KindOpenAI  = "openai"
)

// New returns the agent of kind ("builtin" or "openai"; "" means builtin) configured by cfg.
func New(kind string, cfg Config) (Agent, error) {
	switch kind {
	case "", KindBuiltin:
		if cfg.Transcribe != nil {
			if _, err := NewTranscriber(*cfg.Transcribe, nil, nil); err != nil {
				return nil, err
			}
		}
		return NewBuiltin(cfg), nil
	case KindOpenAI:
		return NewOpenAI(cfg)
	}
	return nil, fmt.Errorf("agent: unknown kind %q: want %s or %s", kind, KindBuiltin, KindOpenAI)
}
