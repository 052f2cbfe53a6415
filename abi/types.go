package abi

import (
	"encoding/json"
	"strings"
)

// Manifest is what a plugin's describe export returns. The host validates it before any traffic.
type Manifest struct {
	Name         string       `json:"name"`                                           // [a-z0-9_-], unique in a host; routes /hooks/{name}/…
	Version      string       `json:"version"`                                        // the plugin's own version, free text (semver advised)
	Kind         string       `json:"kind" jsonschema:"enum=platform,enum=scheduler"` // KindPlatform or KindScheduler
	Platform     string       `json:"platform"`                                       // the platform name in session keys, e.g. "telegram"
	Description  string       `json:"description,omitempty"`
	Capabilities []string     `json:"capabilities"` // Cap* values
	MessageLimit MessageLimit `json:"message_limit"`
	Egress       []string     `json:"egress,omitempty"` // host patterns the plugin may reach from any export: "api.telegram.org", "*.slack.com"
	// EgressScopes are hosts the plugin may reach only from some exports, and for HTTP only with
	// some methods and paths (SPEC 5.4.1). A host listed here and not in Egress is reachable
	// only through its scopes.
	EgressScopes []EgressScope   `json:"egress_scopes,omitempty"`
	ConfigSchema json.RawMessage `json:"config_schema,omitempty"`
}

// EgressScope allows egress to Host (an egress pattern) from the listed exports, and for HTTP
// only with the listed methods and paths. Empty Methods or Paths allow any; Exports may not be
// empty. For WebSocket, Exports bound who may open a connection to Host and send frames on it.
type EgressScope struct {
	Name    string   `json:"name,omitempty"` // shown in refusals; default "host from exports"
	Host    string   `json:"host"`
	Exports []string `json:"exports"`           // export names: send, poll, webhook, configure, tick
	Methods []string `json:"methods,omitempty"` // HTTP methods, upper case
	Paths   []string `json:"paths,omitempty"`   // path patterns: "*" matches within one segment ("/bot*/sendMessage")
}

// Label is the scope's name, or a description of it.
func (s EgressScope) Label() string {
	if s.Name != "" {
		return s.Name
	}
	return s.Host + " from " + strings.Join(s.Exports, ",")
}

// Has reports whether the manifest declares capability c.
func (m Manifest) Has(c string) bool {
	for _, x := range m.Capabilities {
		if x == c {
			return true
		}
	}
	return false
}

// MessageLimit is the longest text the platform accepts in one message, and the unit it counts in.
// The host splits longer text into numbered parts before calling send.
type MessageLimit struct {
	Max  int    `json:"max"`
	Unit string `json:"unit" jsonschema:"enum=utf16,enum=codepoint,enum=byte,enum="` // UnitUTF16, UnitCodePoint or UnitByte; "" for a scheduler
}

// Chat types of a Source.
const (
	ChatDM      = "dm"
	ChatGroup   = "group"
	ChatChannel = "channel"
	ChatThread  = "thread"
	ChatForum   = "forum"
)

// Source says where a message came from or goes to. Platform and Profile are always forced by the
// host to the calling plugin's platform and the profile the call serves.
type Source struct {
	Platform  string `json:"platform,omitempty"`
	Profile   string `json:"profile,omitempty"`
	ChatType  string `json:"chat_type" jsonschema:"enum=dm,enum=group,enum=channel,enum=thread,enum=forum"`
	ChatID    string `json:"chat_id,omitempty"`
	ChatName  string `json:"chat_name,omitempty"`
	ThreadID  string `json:"thread_id,omitempty"`
	UserID    string `json:"user_id,omitempty"`
	UserName  string `json:"user_name,omitempty"`
	ScopeID   string `json:"scope_id,omitempty"`   // workspace / team (Slack)
	MessageID string `json:"message_id,omitempty"` // the platform's id of the message itself
}

// Kinds of inbound event.
const (
	EventMessage = "message" // a user message: becomes (part of) a turn
	EventObserve = "observe" // append to the transcript without a turn (unmentioned group chatter)
	EventRedact  = "redact"  // the message MessageID was recalled: redact it from the transcript
	EventSeed    = "seed"    // create the session for Source without a turn (assistant thread opened)
	// EventCallback: the user pressed a button of one of the bot's messages (capability
	// "buttons", ABI 1.2). CallbackID is the pressed button's id, Source.MessageID the message
	// that carried it, Source.UserID who pressed it.
	EventCallback = "callback"
)

// Reasons a plugin gives in InboundEvent.Addressed for a message that addresses the bot without
// mentioning it.
const (
	AddressedThread       = "thread"        // a reply in a thread the bot takes part in (it was mentioned there)
	AddressedFreeResponse = "free_response" // a channel (or profile) the operator set to answer without a mention
	AddressedCommand      = "command"       // one of the host's commands (/new, !new on Slack)
	AddressedReply        = "reply"         // a reply to one of the bot's own messages
)

// InboundEvent is one thing that happened on the platform, as returned by webhook and poll or
// passed to the dispatch host function.
type InboundEvent struct {
	// ID deduplicates the event durably, per plugin and profile: Telegram update_id, Yuanbao
	// msg_id; for Slack the message (team, channel, ts), since one message arrives as two
	// events. Empty means "do not deduplicate".
	ID string `json:"id,omitempty"`
	// Kind is one of the Event* values. A Go plugin may leave it empty: the event is encoded
	// with EventMessage (MarshalJSON). On the wire it is required and never empty; the host
	// still reads an empty or missing kind as EventMessage, for plugins built before that rule.
	Kind      string `json:"kind" jsonschema:"enum=message,enum=observe,enum=redact,enum=seed,enum=callback"`
	Source    Source `json:"source"`
	Text      string `json:"text,omitempty"`
	ReplyTo   string `json:"reply_to,omitempty"` // platform message id this message answers
	Mentioned bool   `json:"mentioned,omitempty"`
	// Addressed, when set, says why the plugin takes a message that does not mention the bot as
	// addressed to it all the same (Addressed* values: a thread the bot follows, a channel it
	// answers freely, a command, a reply to the bot). The operator's require_mention treats it as
	// a mention (ABI 1.1, additive).
	Addressed string `json:"addressed,omitempty"`
	UnixMs    int64  `json:"unix_ms,omitempty"`
	// MigrateFromChatID, when set, says that the chat Source.ChatID continues the chat named
	// here (a Telegram group upgraded to a supergroup gets a new id): the host keeps the new
	// chat in the old chat's conversations and re-addresses what it still owes the old chat.
	// Send it on the service message that announces the move, as an observe event.
	MigrateFromChatID string `json:"migrate_from_chat_id,omitempty"`
	// Attachments are the files the message carries (capability "attachments", ABI 1.2): a
	// photo, a voice note, a document. The host asks for each one's bytes through the fetch
	// export when a turn needs them; Text is the message's caption, if any.
	Attachments []Attachment `json:"attachments,omitempty"`
	// CallbackID is the id of the button pressed, on an EventCallback (ABI 1.2).
	CallbackID string `json:"callback_id,omitempty"`
}

// MarshalJSON encodes e with its Kind, EventMessage when e.Kind is empty: the schema requires
// a kind, and the zero value of the Go type means a message.
func (e InboundEvent) MarshalJSON() ([]byte, error) {
	type wire InboundEvent // the same fields, without this method
	if e.Kind == "" {
		e.Kind = EventMessage
	}
	return json.Marshal(wire(e))
}

// OutboundMessage is one message for the plugin to transmit.
type OutboundMessage struct {
	ChatType string `json:"chat_type,omitempty"`
	ChatID   string `json:"chat_id"`
	ThreadID string `json:"thread_id,omitempty"`
	UserID   string `json:"user_id,omitempty"`
	ScopeID  string `json:"scope_id,omitempty"`
	Text     string `json:"text,omitempty"`
	ReplyTo  string `json:"reply_to,omitempty"` // capability "replies"
	// EditMessageID, when set, asks to replace that message's text (capability "edit").
	EditMessageID string `json:"edit_message_id,omitempty"`
	// Action, when set, is a chat action instead of a message: "typing" (capability "typing").
	Action string `json:"action,omitempty"`
	// Part and Parts number a message the host split: part 1 of 3 and so on. Parts is 0 or 1 for
	// a message sent whole.
	Part  int `json:"part,omitempty"`
	Parts int `json:"parts,omitempty"`
	// DeliveryID is the host's ledger id for this message: stable across retries, so a plugin
	// may use it as an idempotency key where the platform supports one.
	DeliveryID string `json:"delivery_id,omitempty"`
	// Attachments are files to send (capability "attachments", ABI 1.2), each with its bytes in
	// Data; Text is then their caption. The host puts at most one attachment in a message, with
	// no Parts: a plugin may refuse more as permanent.
	Attachments []Attachment `json:"attachments,omitempty"`
	// Buttons, when set, are choices shown under the message (capability "buttons", ABI 1.2);
	// a press comes back as an EventCallback carrying the button's ID.
	Buttons []Button `json:"buttons,omitempty"`
}

// Kinds of Attachment (ABI 1.2).
const (
	AttachImage    = "image"    // a photo or picture
	AttachVoice    = "voice"    // a voice note recorded in the chat
	AttachAudio    = "audio"    // an audio file
	AttachVideo    = "video"    // a video or video note
	AttachDocument = "document" // any other file
	AttachSticker  = "sticker"  // a sticker (an image the platform renders small)
)

// Attachment is one file carried by a message (ABI 1.2). Everything in it but Data is what
// the platform claims: the host checks the size against its caps and sniffs the type from the
// bytes, never trusting Name or MIMEType.
type Attachment struct {
	Kind     string `json:"kind" jsonschema:"enum=image,enum=voice,enum=audio,enum=video,enum=document,enum=sticker"` // Attach* values
	MIMEType string `json:"mime_type,omitempty"`
	Name     string `json:"name,omitempty"`
	// Size is the file's size in bytes as the platform reports it; 0: unknown.
	Size int64 `json:"size,omitempty"`
	// Ref is the platform's reference to the file (a Telegram file_id, a Slack url_private),
	// opaque to the host, which passes it back in FetchRequest.
	Ref     string `json:"ref,omitempty"`
	Caption string `json:"caption,omitempty"`
	// Data holds the bytes (base64 in JSON): always on an outbound attachment; inbound, only
	// where the platform delivers them inline (then the host does not call fetch).
	Data []byte `json:"data,omitempty"`
}

// Button is one choice under an outbound message (ABI 1.2).
type Button struct {
	// ID comes back as InboundEvent.CallbackID when the button is pressed: at most 64 bytes of
	// [A-Za-z0-9:_-] (Telegram's callback_data limit).
	ID    string `json:"id"`
	Label string `json:"label"`
	// Style is ButtonPrimary, ButtonDanger or empty, a hint the platform may ignore.
	Style string `json:"style,omitempty" jsonschema:"enum=primary,enum=danger,enum="`
}

// Styles of Button.
const (
	ButtonPrimary = "primary"
	ButtonDanger  = "danger"
)

// FetchRequest asks a platform plugin for an attachment's bytes (export "fetch", capability
// "attachments", ABI 1.2). The plugin fetches them through its own egress, so only hosts its
// manifest declares for fetch are reachable.
type FetchRequest struct {
	Call
	Attachment Attachment `json:"attachment"`
	// MaxBytes is the most the host accepts: a plugin should stop reading past it and fail with
	// CodeTooLarge, rather than return a larger file the host will refuse.
	MaxBytes int64 `json:"max_bytes"`
}

// FetchResult is fetch's reply: the file's bytes and the type the platform gave them, if any.
// A failure is an export error (section 2.1): CodeTooLarge past MaxBytes, CodeNotFound for a
// file the platform no longer has, CodeIO for a network failure.
type FetchResult struct {
	Data     []byte `json:"data"`
	MIMEType string `json:"mime_type,omitempty"`
}

// Call carries what every export call except describe receives: the profile served and that
// profile's configuration for this plugin (secrets included: a plugin instance only ever sees the
// configuration of the profile it is serving).
type Call struct {
	Profile string          `json:"profile"`
	Config  json.RawMessage `json:"config,omitempty"`
	// DeadlineMs is how many milliseconds this call had left when the host made it: the host
	// stops the instance after that. Plugins keep every wait (an HTTP timeout, a WebSocket
	// receive) inside it, so they can report a typed failure instead of being killed. 0 means
	// unknown (an older host).
	DeadlineMs int64 `json:"deadline_ms,omitempty"`
}

// ConfigureRequest asks the plugin to validate a profile's configuration.
type ConfigureRequest struct {
	Call
}

// ConfigureResult is configure's reply. Problems, when not empty, reject the configuration.
type ConfigureResult struct {
	Problems []string `json:"problems,omitempty"`
}

// WebhookRequest is an inbound HTTP request routed to POST /hooks/{plugin}/{profile}.
type WebhookRequest struct {
	Call
	Method  string              `json:"method"`
	Path    string              `json:"path"`
	Query   string              `json:"query,omitempty"`
	Headers map[string][]string `json:"headers,omitempty"`
	Body    []byte              `json:"body,omitempty"` // base64 in JSON
}

// WebhookResult is webhook's reply: the HTTP answer to give, and the events found in the request.
// A request that fails verification is answered with a 4xx Response and no events; that is a
// successful call, not an error.
type WebhookResult struct {
	Response HTTPResponse   `json:"response"`
	Events   []InboundEvent `json:"events,omitempty"`
}

// PollRequest asks the plugin for new inbound events. The plugin may block (long poll) up to
// WaitMs through the host's HTTP or WebSocket functions.
type PollRequest struct {
	Call
	WaitMs int64 `json:"wait_ms"`
}

// PollResult is poll's reply. The host calls poll again at once when Events is not empty, and
// otherwise after BackoffMs (default: immediately, as the plugin is expected to long-poll).
type PollResult struct {
	Events    []InboundEvent `json:"events,omitempty"`
	BackoffMs int64          `json:"backoff_ms,omitempty"`
	// Status, when set, is the profile's condition as the plugin sees it (connected, reconnecting,
	// stopped for good), shown to the operator. Each poll's status replaces the previous one; a
	// poll without one clears it. ABI 1.1.
	Status *ProfileStatus `json:"status,omitempty"`
}

// States of a ProfileStatus.
const (
	StatusOK       = "ok"       // serving
	StatusDegraded = "degraded" // trying to recover by itself (reconnecting, backing off)
	StatusStopped  = "stopped"  // gave up: needs the operator (credentials revoked, kicked)
)

// ProfileStatus is a plugin's report on one profile (ABI 1.1).
type ProfileStatus struct {
	State   string `json:"state"` // StatusOK, StatusDegraded or StatusStopped
	Message string `json:"message,omitempty"`
}

// SendRequest asks the plugin to transmit one message.
type SendRequest struct {
	Call
	Message OutboundMessage `json:"message"`
}

// SendResult is send's reply: the platform's ids for what it accepted, or a typed SendError.
// A send that the platform refused is a successful call with Error set; an Extism-level error
// from send is treated as retryable with no information.
type SendResult struct {
	MessageIDs []string   `json:"message_ids,omitempty"`
	Error      *SendError `json:"error,omitempty"`
	// ThreadID, when set, is the thread the message actually went to, if not the one asked for
	// ("" for none: a topic that no longer exists, so the message went to the chat itself). The
	// host records it in place of the requested thread.
	ThreadID *string `json:"thread_id,omitempty"`
}

// Kinds of send failure.
const (
	SendRetryable = "retryable" // try again, after RetryAfterMs if set
	SendPermanent = "permanent" // do not try again
	// SendUncertain: the request reached the platform but its answer was lost; it may have been
	// accepted. The host records the outcome as unknown and does not retry (no duplicates).
	SendUncertain = "uncertain"
)

// SendNotConnected is the SendError code of a retryable failure that certainly sent nothing
// because the plugin has no connection to its platform right now (a socket that reconnects). The
// host does not count it as an attempt: the message waits for the connection, looking again
// after RetryAfterMs, for at most the operator's deliveries.undelivered_after.
const SendNotConnected = "not_connected"

// SendError is a typed send failure.
type SendError struct {
	Kind         string `json:"kind" jsonschema:"enum=retryable,enum=permanent,enum=uncertain"` // SendRetryable, SendPermanent or SendUncertain
	Code         string `json:"code,omitempty"`
	Message      string `json:"message"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
	// MigrateToChatID, when set, says the chat moved (a Telegram group became a supergroup): the
	// host re-addresses the message and future ones to this chat id.
	MigrateToChatID string `json:"migrate_to_chat_id,omitempty"`
	// Accepted lists parts of the message the platform did accept before failing, so a retry
	// never repeats them.
	Accepted []string `json:"accepted,omitempty"`
}

func (e *SendError) Error() string { return e.Kind + " send failure: " + e.Message }

// TickRequest wakes a scheduler plugin.
type TickRequest struct {
	Call
	UnixMs int64 `json:"unix_ms"`
	// Interrupted says how the previous tick of this profile in this host process ended, when it
	// did not return: "deadline" (it ran past its call deadline and was stopped), "trap" or "exit"
	// (the instance crashed). Empty after a host start and after a tick that returned, so a run a
	// scheduler finds claimed but unfinished while it is empty was cut short by the host stopping
	// (ABI 1.1; older hosts never set it).
	Interrupted string `json:"interrupted,omitempty"`
}

// TickResult is tick's reply: when to be woken next (0: the host's default interval).
type TickResult struct {
	NextTickMs int64 `json:"next_tick_ms,omitempty"`
}

// HTTPResponse is an HTTP answer: the webhook's reply to the platform, or the result of egress.
type HTTPResponse struct {
	Status  int                 `json:"status" jsonschema:"minimum=100,maximum=599"`
	Headers map[string][]string `json:"headers,omitempty"`
	Body    []byte              `json:"body,omitempty"`
}

// --- host function messages ---

// Log levels.
const (
	LevelDebug = "debug"
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"
)

// LogRequest writes one structured log line attributed to the plugin and profile.
type LogRequest struct {
	Level   string            `json:"level" jsonschema:"enum=debug,enum=info,enum=warn,enum=error"`
	Message string            `json:"message"`
	Attrs   map[string]string `json:"attrs,omitempty"`
}

// ClockReply is the host's clock: the authoritative time for a plugin (tests may fake it). The
// WASI clock is the real wall clock, but only hermes_clock follows the host's.
type ClockReply struct {
	UnixMs int64 `json:"unix_ms"`
}

// KVGetRequest reads a key of the plugin's durable store for the calling profile.
type KVGetRequest struct {
	Key string `json:"key"`
}

// KVGetReply is the value, if found.
type KVGetReply struct {
	Found bool   `json:"found"`
	Value []byte `json:"value,omitempty"`
}

// KVSetRequest writes a key (values are capped by the host; see SPEC.md).
type KVSetRequest struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

// KVDeleteRequest deletes a key; deleting an absent key is not an error.
type KVDeleteRequest struct {
	Key string `json:"key"`
}

// HTTPRequest is an egress request. The URL's host must match the manifest's Egress patterns and
// the operator's configuration. TimeoutMs and MaxBytes are capped by the host's limits.
type HTTPRequest struct {
	Method    string              `json:"method"`
	URL       string              `json:"url"`
	Headers   map[string][]string `json:"headers,omitempty"`
	Body      []byte              `json:"body,omitempty"`
	TimeoutMs int64               `json:"timeout_ms,omitempty"`
	MaxBytes  int64               `json:"max_bytes,omitempty"`
}

// WSOpenRequest opens a WebSocket connection owned by the host. The connection belongs to the
// plugin and profile, not to the instance: any instance of the plugin may use it.
type WSOpenRequest struct {
	URL          string              `json:"url"`
	Headers      map[string][]string `json:"headers,omitempty"`
	Subprotocols []string            `json:"subprotocols,omitempty"`
	TimeoutMs    int64               `json:"timeout_ms,omitempty"`
}

// WSOpenReply names the opened connection.
type WSOpenReply struct {
	Conn string `json:"conn"`
}

// WSFrame is one WebSocket message.
type WSFrame struct {
	Binary bool   `json:"binary,omitempty"`
	Data   []byte `json:"data"`
}

// WSSendRequest sends one frame.
type WSSendRequest struct {
	Conn  string  `json:"conn"`
	Frame WSFrame `json:"frame"`
}

// WSRecvRequest waits up to TimeoutMs for frames and returns at most MaxFrames of them (default 1).
type WSRecvRequest struct {
	Conn      string `json:"conn"`
	TimeoutMs int64  `json:"timeout_ms,omitempty"`
	MaxFrames int    `json:"max_frames,omitempty"`
}

// WSRecvReply carries the frames received. Closed reports that the peer closed the connection
// (after the frames listed); the connection id is then forgotten.
type WSRecvReply struct {
	Frames      []WSFrame `json:"frames,omitempty"`
	Closed      bool      `json:"closed,omitempty"`
	CloseCode   int       `json:"close_code,omitempty"`
	CloseReason string    `json:"close_reason,omitempty"`
}

// WSCloseRequest closes a connection.
type WSCloseRequest struct {
	Conn   string `json:"conn"`
	Code   int    `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// SessionRequest resolves (gets or creates) the session for a source.
type SessionRequest struct {
	Source Source `json:"source"`
}

// SessionRef names a key's current physical session.
type SessionRef struct {
	Key        string `json:"key"`
	SessionID  string `json:"session_id"`
	Generation int64  `json:"generation"`
}

// Roles a plugin may give the messages it writes into a transcript (ObserveRequest, SeedRequest).
const (
	RoleUser      = "user"      // what a person wrote (the default)
	RoleAssistant = "assistant" // what the bot itself said on the platform
)

// ObserveRequest appends a message to the source's transcript without starting a turn.
type ObserveRequest struct {
	Source Source `json:"source"`
	Role   string `json:"role,omitempty" jsonschema:"enum=,enum=user,enum=assistant"` // RoleUser (default) or RoleAssistant
	Text   string `json:"text"`
}

// RedactRequest removes a recalled message (Source.MessageID) from the transcript.
type RedactRequest struct {
	Source Source `json:"source"`
}

// RedactReply says whether a message was found and redacted.
type RedactReply struct {
	Redacted bool `json:"redacted"`
}

// SeedRequest creates the source's session if needed and optionally appends a seed message, in
// the same critical section.
type SeedRequest struct {
	Source Source `json:"source"`
	Role   string `json:"role,omitempty" jsonschema:"enum=,enum=user,enum=assistant"` // RoleUser (default) or RoleAssistant
	Text   string `json:"text,omitempty"`
}

// DispatchRequest hands one inbound event to the host, as if returned by webhook or poll.
type DispatchRequest struct {
	Event InboundEvent `json:"event"`
}

// DispatchReply reports what the host did with the event.
type DispatchReply struct {
	Duplicate bool       `json:"duplicate,omitempty"` // already seen: ignored
	Session   SessionRef `json:"session"`
}

// HostSendRequest is a scheduler's send into a chat. The host records it in the delivery ledger
// and transmits it through the platform plugin serving Target.Platform for the profile. With
// PinSessionID set, the message is delivered only if that session (or its compression
// continuation) still owns the chat; otherwise the reply is a CodeStale error. Seed, when set,
// seeds the target's session with that text in the same critical section as the send.
type HostSendRequest struct {
	Target       Source `json:"target"`
	Text         string `json:"text"`
	PinSessionID string `json:"pin_session_id,omitempty"`
	Seed         string `json:"seed,omitempty"`
	// DeliveryID, when set, asks about an earlier send of the caller's instead of sending: the
	// reply is that delivery's state now (still "pending", or its final outcome, as a send's
	// reply gives it). Give Target.Platform only, no chat id and no text, so a host without this
	// refuses the request (bad_request) rather than send anything (ABI 1.1).
	DeliveryID string `json:"delivery_id,omitempty"`
}

// HostSendReply reports the delivery's ledger id and state: "delivered", "failed" (Reason says
// why), or "pending" when the outcome was not final within the host's wait (the ledger keeps
// trying; DeliveryID finds it in the ledger).
type HostSendReply struct {
	DeliveryID string   `json:"delivery_id"`
	State      string   `json:"state"`
	MessageIDs []string `json:"message_ids,omitempty"`
	Reason     string   `json:"reason,omitempty"` // ABI 1.1: why a delivery failed
}

// --- ABI 1.1: scheduler jobs and agent turns ---

// Operations of the jobs export (JobsRequest.Op).
const (
	JobsList   = "list"    // the jobs in scope
	JobsAdd    = "add"     // create JobsRequest.Job
	JobsRemove = "remove"  // delete job ID
	JobsPause  = "pause"   // stop running job ID until resumed
	JobsResume = "resume"  // run job ID again from its next slot (missed slots are not caught up)
	JobsRunNow = "run_now" // run job ID once at the next tick, outside its schedule
)

// JobsRequest asks a scheduler plugin to list or change its jobs (export "jobs", capability
// "jobs"). The host calls it for the operator (CLI, admin API, with no Scope) and for chat users
// (/cron, scoped to their chat). The host never runs a tick and a jobs call other than list for
// the same profile at once, nor two such jobs calls.
type JobsRequest struct {
	Call
	Op  string   `json:"op"`
	ID  string   `json:"id,omitempty"`  // remove, pause, resume, run_now
	Job *JobSpec `json:"job,omitempty"` // add
	// Scope, when set, limits the call to jobs created in that chat (same platform and chat_id):
	// a chat user sees and changes only their chat's jobs. Nil: every job (the operator).
	Scope *Source `json:"scope,omitempty"`
	// ScopeSessionID is the scope chat's current session. Resume re-pins a pinned job to it:
	// resuming from the chat attaches the job to the conversation the user is in now.
	ScopeSessionID string `json:"scope_session_id,omitempty"`
	// By says who asks, for the job's record: "operator", or "<platform>:<user_id>".
	By string `json:"by,omitempty"`
	// Platforms are the platforms a platform plugin serves for the profile, the ones a job's
	// targets can reach (hermes_send answers not_found for any other): a scheduler refuses an add
	// whose targets name another. Absent (an older host): unknown, nothing refused for it; an
	// empty list: none is served (ABI 1.1).
	Platforms *[]string `json:"platforms,omitempty"`
}

// JobSpec is a job as a user writes it. The plugin interprets Schedule and Deliver (the
// first-party cron plugin's syntax is in plugins/cron/README.md) and answers bad_request for what
// it cannot parse, with a message the user can act on.
type JobSpec struct {
	Name     string `json:"name,omitempty"`
	Schedule string `json:"schedule"`
	// Text is sent as is; Prompt instead runs an agent turn (hermes_agent) and sends its answer.
	// Exactly one of them is set.
	Text   string `json:"text,omitempty"`
	Prompt string `json:"prompt,omitempty"`
	// Deliver lists targets; empty means "origin" when Origin is set.
	Deliver  []string `json:"deliver,omitempty"`
	TimeZone string   `json:"timezone,omitempty"` // IANA name; empty: the profile's
	// CatchUp says what happens to slots missed while the host was down: "once" runs the job
	// once for the latest of them, "skip" waits for the next slot. Empty: the profile's.
	CatchUp string `json:"catch_up,omitempty"`
	// Pin delivers to the origin chat only while OriginSessionID (or its compression
	// continuation) owns it: after /new the run is recorded as stale instead. Nil: pinned when
	// the job was created from a chat.
	Pin *bool `json:"pin,omitempty"`
	// Seed appends the delivered text to the target's session, so a reply continues from it.
	Seed bool `json:"seed,omitempty"`
	// Origin is the chat the job was created from, and OriginSessionID that chat's session at
	// the time; the host sets both for jobs created from a chat.
	Origin          *Source `json:"origin,omitempty"`
	OriginSessionID string  `json:"origin_session_id,omitempty"`
}

// Job is a job and its state, as the scheduler reports it.
type Job struct {
	ID string `json:"id"`
	JobSpec
	CreatedBy    string `json:"created_by,omitempty"` // JobsRequest.By, or "config"
	CreatedMs    int64  `json:"created_ms,omitempty"`
	State        string `json:"state"` // "scheduled", "paused", "completed"; "running" while a run is claimed
	PausedReason string `json:"paused_reason,omitempty"`
	// Display is the schedule as the plugin understood it (a cron expression, an interval, a
	// time with its zone).
	Display   string `json:"display,omitempty"`
	NextRunMs int64  `json:"next_run_ms,omitempty"`
	LastRunMs int64  `json:"last_run_ms,omitempty"`
	// LastStatus is the outcome of the last run: "ok", "silent" (the output asked not to be
	// sent), "pending" (handed to the ledger, not final yet), "error" (no output), "delivery_failed",
	// "stale" (the pinned conversation ended), "interrupted" (the host stopped mid-run; not
	// repeated), "missed" (skipped after downtime).
	LastStatus    string `json:"last_status,omitempty"`
	LastError     string `json:"last_error,omitempty"`
	FailureStreak int    `json:"failure_streak,omitempty"`
	Runs          int    `json:"runs,omitempty"`
}

// JobsResult is the jobs export's reply: the jobs listed, or the job the operation changed.
type JobsResult struct {
	Jobs []Job `json:"jobs"`
}

// AgentRequest asks the host for one agent turn with Prompt (hermes_agent; scheduler plugins).
// The turn has no history and no tools: it cannot start processes. It runs within the calling
// export's deadline.
type AgentRequest struct {
	Prompt string `json:"prompt"`
	// Source is the chat the answer is for, given to the agent as context (Platform required
	// when set; the profile is forced to the caller's).
	Source *Source `json:"source,omitempty"`
	Name   string  `json:"name,omitempty"` // what asks (a job's name), for the host's log
}

// AgentReply is the agent's answer (it may be empty).
type AgentReply struct {
	Text string `json:"text"`
}
