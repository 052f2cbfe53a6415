package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// api calls Bot API methods for one profile, with that profile's token only.
type api struct {
	c   *sdk.Context
	cfg *Config
}

// reply is a Bot API answer. Envelope is false when the body was not a JSON envelope (an HTML
// error page from the front end, a truncated body).
type reply struct {
	Status      int
	Envelope    bool
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	ErrorCode   int             `json:"error_code"`
	Description string          `json:"description"`
	Parameters  struct {
		MigrateToChatID int64 `json:"migrate_to_chat_id"`
		RetryAfter      int64 `json:"retry_after"`
	} `json:"parameters"`
}

// Time budgets. The host stops a call at its deadline (call_timeout, 10 s by default; poll gets
// its wait on top) and counts that as a crash, so every export keeps all of its Bot API
// requests inside a budget with a margin for what else the call spends: waiting for an
// instance, host functions, kv writes. A request that would run past the budget is cut short by
// its own HTTP timeout and answered as a typed result (uncertain, retryable, a back-off).
const (
	// sendBudget bounds one send (a sendMessage and its retry without message_thread_id). The
	// host's deadline also runs while a call waits for a free instance (until the runtime passes
	// the remaining deadline to the guest), so the margin is wide: 6 s under the default
	// deadline, about one round of other slow sends. Telegram answers in well under a second.
	sendBudget = 4 * time.Second
	// identityBudget bounds getMe in configure and webhook: a slow Telegram accepts the
	// profile (poll learns the identity later), and a webhook answers 503 (Telegram retries).
	identityBudget = 4 * time.Second
	// pollSlack is poll's budget beyond its long-poll wait (the host allows the wait plus
	// call_timeout): 5 s of margin.
	pollSlack = 5 * time.Second
	// minRequest is the least time worth starting a request with.
	minRequest = 500 * time.Millisecond
)

// budget is the time left for an export's Bot API requests.
type budget struct{ until time.Time }

func newBudget(d time.Duration) budget { return budget{until: time.Now().Add(d)} }

// left is the time remaining.
func (b budget) left() time.Duration { return time.Until(b.until) }

// timeout is the HTTP timeout for a request that wants up to d: d, or what is left if less.
// ok is false when too little is left to start one.
func (b budget) timeout(d time.Duration) (time.Duration, bool) {
	t := min(d, b.left())
	return t, t >= minRequest
}

// errNoTime reports a request not started because its export's budget was spent.
func errNoTime(method string) error {
	return abi.Errorf(abi.CodeTimeout, "%s: not sent, the call's time budget is spent", method)
}

// call POSTs params as JSON to method. A transport failure (the host's io, timeout, denied…) is
// returned as an *abi.Error with the token scrubbed from its message; any HTTP answer is a
// reply.
func (a *api) call(method string, params any, timeout time.Duration) (*reply, error) {
	body, err := json.Marshal(params)
	if err != nil {
		return nil, abi.Errorf(abi.CodeInternal, "%s: encode parameters: %v", method, err)
	}
	return a.post(method, "application/json", body, timeout)
}

// post POSTs a ready body of contentType to method; see call.
func (a *api) post(method, contentType string, body []byte, timeout time.Duration) (*reply, error) {
	resp, err := a.c.HTTP(&abi.HTTPRequest{
		Method:    "POST",
		URL:       a.cfg.APIBase + "/bot" + a.cfg.Token + "/" + method,
		Headers:   map[string][]string{"Content-Type": {contentType}},
		Body:      body,
		TimeoutMs: timeout.Milliseconds(),
	})
	if err != nil {
		e := *abi.AsError(err)
		e.Message = a.scrub(e.Message)
		return nil, &e
	}
	r := &reply{Status: resp.Status}
	if json.Unmarshal(resp.Body, r) == nil && (r.OK || r.Description != "" || r.ErrorCode != 0) {
		r.Envelope = true
	}
	if r.OK && (!r.Envelope || resp.Status != 200) {
		r.OK = false
	}
	return r, nil
}

// scrub removes the token from text (the host's egress errors quote the URL, which holds it).
func (a *api) scrub(text string) string {
	if a.cfg.Token == "" {
		return text
	}
	return strings.ReplaceAll(text, a.cfg.Token, "<token>")
}

// describe summarises a failed reply for logs and error messages.
func (r *reply) describe() string {
	if r.Envelope && r.Description != "" {
		return r.Description
	}
	if !r.Envelope {
		return "HTTP " + strconv.Itoa(r.Status) + " without a Bot API answer"
	}
	return "HTTP " + strconv.Itoa(r.Status)
}

// retryAfter is how long Telegram asks to wait: parameters.retry_after, else the number after
// "retry after " in the description, in milliseconds (0 when neither is given). (A string
// search, not a regular expression: regexp and its Unicode tables were a tenth of the plugin's
// code, which the host validates at every start and keeps compiled in memory.)
func (r *reply) retryAfter() int64 {
	if r.Parameters.RetryAfter > 0 {
		return r.Parameters.RetryAfter * 1000
	}
	for rest := r.Description; ; {
		i := strings.Index(rest, "retry after ")
		if i < 0 {
			return 0
		}
		rest = rest[i+len("retry after "):]
		digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
		if digits == 0 {
			continue
		}
		if n, err := strconv.ParseInt(rest[:digits], 10, 64); err == nil && n < 1<<31 {
			return n * 1000
		}
		return 0
	}
}

// is reports whether the reply's description contains text (case-insensitive).
func (r *reply) is(text string) bool {
	return strings.Contains(strings.ToLower(r.Description), text)
}

// apiError is a Bot API refusal (or a body that is not a Bot API answer).
type apiError struct {
	method string
	r      *reply
}

func (e *apiError) Error() string { return e.method + ": " + e.r.describe() }

// unauthorized reports a refusal that means the token is wrong or revoked.
func (e *apiError) unauthorized() bool { return e.r.Status == 401 || e.r.Status == 404 }

// do calls method and decodes its result into out (which may be nil). The error is a transport
// *abi.Error or an *apiError.
func (a *api) do(method string, params any, timeout time.Duration, out any) error {
	r, err := a.call(method, params, timeout)
	if err != nil {
		return err
	}
	if !r.OK {
		return &apiError{method, r}
	}
	if out != nil {
		if err := json.Unmarshal(r.Result, out); err != nil {
			r.OK, r.Description = false, "malformed result: "+err.Error()
			return &apiError{method, r}
		}
	}
	return nil
}

// tokenBotID is the bot's user id as written in its token ("<id>:<secret>"), or 0.
func tokenBotID(token string) int64 {
	id, _, _ := strings.Cut(token, ":")
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// getMe asks Telegram who the bot is, within b, and caches the answer in the kv store under
// the token's key.
func (a *api) getMe(b budget) (identity, error) {
	timeout, ok := b.timeout(b.left())
	if !ok {
		return identity{}, errNoTime("getMe")
	}
	var me struct {
		identity
		CanReadAll bool `json:"can_read_all_group_messages"`
	}
	if err := a.do("getMe", struct{}{}, timeout, &me); err != nil {
		return identity{}, err
	}
	if me.Username == "" {
		return identity{}, abi.Errorf(abi.CodeInternal, "getMe answered without a username")
	}
	if !me.CanReadAll {
		// Said once per token: the answer is cached.
		a.c.Log(abi.LevelInfo, "the bot's privacy mode is on: in groups Telegram only sends it commands, replies to it "+
			"and service messages (disable it with @BotFather /setprivacy to observe all group chatter)", "bot", "@"+me.Username)
	}
	raw, _ := json.Marshal(me.identity)
	return me.identity, a.c.KVSet(a.meKey(), raw)
}

func (a *api) meKey() string { return "me:" + a.cfg.tokenKey() }

// me returns the bot's identity: the configured bot_username (with the id from the token), else
// the cached getMe answer, else a fresh getMe within b.
func (a *api) me(b budget) (identity, error) {
	if a.cfg.BotUsername != "" {
		return identity{ID: tokenBotID(a.cfg.Token), Username: a.cfg.BotUsername}, nil
	}
	raw, found, err := a.c.KVGet(a.meKey())
	if err != nil {
		return identity{}, err
	}
	var me identity
	if found && json.Unmarshal(raw, &me) == nil && me.Username != "" {
		return me, nil
	}
	return a.getMe(b)
}
