package slacktest

import (
	"encoding/json"
	"time"

	"github.com/hermes-host/hermes-host/conformance/fakeclock"
)

// Clock tells the fake what time it is (message timestamps, signatures, rate limits).
type Clock = fakeclock.Source

// RealClock is the wall clock.
type RealClock = fakeclock.Real

// Event is an inner event of the Events API, as Slack serializes it (the fields the fake uses).
// Message events (type "message") and app_mention share the message fields.
type Event struct {
	Type         string `json:"type"`
	Subtype      string `json:"subtype,omitempty"`
	User         string `json:"user,omitempty"`
	BotID        string `json:"bot_id,omitempty"`
	AppID        string `json:"app_id,omitempty"`
	Text         string `json:"text,omitempty"`
	TS           string `json:"ts,omitempty"`
	ThreadTS     string `json:"thread_ts,omitempty"`
	ParentUserID string `json:"parent_user_id,omitempty"`
	Channel      string `json:"channel,omitempty"`
	ChannelType  string `json:"channel_type,omitempty"` // channel, group, im, mpim
	Team         string `json:"team,omitempty"`
	ClientMsgID  string `json:"client_msg_id,omitempty"`
	EventTS      string `json:"event_ts,omitempty"`
	Hidden       bool   `json:"hidden,omitempty"`

	// message_changed and message_deleted
	Message         *Event `json:"message,omitempty"`
	PreviousMessage *Event `json:"previous_message,omitempty"`
	DeletedTS       string `json:"deleted_ts,omitempty"`

	// file_share messages
	Files  []EventFile `json:"files,omitempty"`
	Upload bool        `json:"upload,omitempty"`

	// assistant_thread_started and assistant_thread_context_changed
	AssistantThread *AssistantThread `json:"assistant_thread,omitempty"`
}

// AssistantThread is the payload of assistant_thread_started: the DM channel and thread of the
// assistant conversation, and the channel the user was looking at when they opened it.
type AssistantThread struct {
	UserID    string                 `json:"user_id"`
	Context   AssistantThreadContext `json:"context"`
	ChannelID string                 `json:"channel_id"`
	ThreadTS  string                 `json:"thread_ts"`
}

// AssistantThreadContext is where the user was when they opened an assistant thread.
type AssistantThreadContext struct {
	ChannelID    string `json:"channel_id,omitempty"`
	TeamID       string `json:"team_id,omitempty"`
	EnterpriseID string `json:"enterprise_id,omitempty"`
}

// Authorization names the installation an event is delivered for (the bot user of a team).
type Authorization struct {
	EnterpriseID        *string `json:"enterprise_id"`
	TeamID              string  `json:"team_id"`
	UserID              string  `json:"user_id"`
	IsBot               bool    `json:"is_bot"`
	IsEnterpriseInstall bool    `json:"is_enterprise_install"`
}

// Envelope is the event_callback wrapper Slack POSTs to a Request URL (and carries as the
// payload of a Socket Mode events_api frame).
type Envelope struct {
	Token              string          `json:"token"`
	TeamID             string          `json:"team_id"`
	ContextTeamID      string          `json:"context_team_id,omitempty"`
	APIAppID           string          `json:"api_app_id"`
	Event              Event           `json:"event"`
	Type               string          `json:"type"` // "event_callback"
	EventID            string          `json:"event_id"`
	EventTime          int64           `json:"event_time"`
	Authorizations     []Authorization `json:"authorizations"`
	IsExtSharedChannel bool            `json:"is_ext_shared_channel"`
	EventContext       string          `json:"event_context,omitempty"`
}

// URLVerification is the challenge Slack sends when a Request URL is set.
type URLVerification struct {
	Token     string `json:"token"`
	Challenge string `json:"challenge"`
	Type      string `json:"type"` // "url_verification"
}

// Message is a message in a channel of the fake: a user's (injected) or a bot's (posted).
type Message struct {
	Team     string
	Channel  string
	TS       string
	ThreadTS string // "" for a top-level message
	User     string // the author's user id (the bot user for bot posts)
	BotID    string // set for bot posts
	Text     string // as stored (after Slack's truncation)
	// Truncated reports a text cut at MaxTextLength characters.
	Truncated bool
	// System marks a message nobody can reply to in a thread (a channel rename, a join).
	System bool
	// Token is the token a bot post was made with.
	Token string
	// Edits are earlier texts replaced by chat.update, oldest first.
	Edits []string
	// Blocks is the message's Block Kit blocks as posted (JSON; "" for none).
	Blocks string
	// Files are the ids of the files shared in the message.
	Files []string
	Time  time.Time
}

// Request is one Web API request as the fake received it.
type Request struct {
	Method string            // e.g. "chat.postMessage"
	Token  string            // from the Authorization header, or the token parameter
	Params map[string]string // query, form or JSON parameters (JSON non-strings as JSON text)
	Header map[string][]string
	Body   []byte
	Time   time.Time
	// Status is the HTTP status answered (0 while in flight, or when the connection was cut).
	Status int
	// Error is the Slack error code answered with ok:false ("" on success).
	Error string
	// Fault describes the injected fault the request took, if any.
	Fault string
}

// Status is an assistant thread status set with assistant.threads.setStatus.
type Status struct {
	Team, Channel, ThreadTS, Status string
	LoadingMessages                 []string
	Time                            time.Time
}

// Delivery is one attempt to deliver an event to the Request URL.
type Delivery struct {
	EventID string
	Attempt int    // 0 for the first, then X-Slack-Retry-Num
	Reason  string // X-Slack-Retry-Reason of a retry
	Status  int    // the receiver's HTTP status; 0 when it did not answer in time or at all
	Err     string // transport failure or ack timeout
	NoRetry bool   // the receiver answered with X-Slack-No-Retry: 1
	Body    string // the start of the receiver's answer
	Time    time.Time
	Took    time.Duration
}

// OK reports whether the receiver acknowledged the event (2xx in time).
func (d Delivery) OK() bool { return d.Status >= 200 && d.Status < 300 && d.Err == "" }

// apiResponse is the Web API's envelope; method results are merged into it.
type apiResponse map[string]any

func ok(fields apiResponse) apiResponse {
	out := apiResponse{"ok": true}
	for k, v := range fields {
		out[k] = v
	}
	return out
}

func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
