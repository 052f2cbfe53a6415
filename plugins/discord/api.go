package main

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Time budgets. A call into the plugin has a deadline (the host's call_timeout, 10 s by
// default); the plugin's own HTTP timeouts stay under it, so a slow Discord makes a request
// time out (and the plugin answer) instead of the host stopping the instance mid-send.
const (
	httpTimeout = 8 * time.Second
	callBudget  = 8 * time.Second
)

// userAgent is what Discord asks bots to send: DiscordBot (url, version).
const userAgent = "DiscordBot (https://github.com/hermes-host/hermes-host, " + Version + ")"

// api calls Discord's REST API for one profile.
type api struct {
	c        *sdk.Context
	cfg      *Config
	deadline time.Time
}

func newAPI(c *sdk.Context, cfg *Config) *api {
	return &api{c: c, cfg: cfg, deadline: time.Now().Add(callBudget)}
}

// reply is a REST answer. JSON is false when the body was not Discord's JSON (an HTML error
// page from the front end, a body cut short).
type reply struct {
	Status  int
	Headers map[string][]string
	Body    []byte
	JSON    bool

	// Discord's error body: {"code": 50013, "message": "Missing Permissions"}, and a 429's
	// {"message": …, "retry_after": 1.5, "global": false}.
	Code       int     `json:"code"`
	Message    string  `json:"message"`
	RetryAfter float64 `json:"retry_after"`
	Global     bool    `json:"global"`
}

// call makes one REST request. A transport failure (the host's io, timeout, uncertain,
// denied…) is returned as an *abi.Error; any HTTP answer is a reply.
func (a *api) call(method, path string, params any) (*reply, error) {
	left := time.Until(a.deadline)
	if left < 100*time.Millisecond {
		return nil, abi.Errorf(abi.CodeTimeout, "%s %s: the call's time budget is spent; not sent", method, path)
	}
	req := &abi.HTTPRequest{
		Method:    method,
		URL:       a.cfg.APIBase + path,
		Headers:   map[string][]string{"Authorization": {"Bot " + a.cfg.BotToken}, "User-Agent": {userAgent}},
		TimeoutMs: min(left, httpTimeout).Milliseconds(),
		MaxBytes:  1 << 20,
	}
	if params != nil {
		body, err := json.Marshal(params)
		if err != nil {
			return nil, abi.Errorf(abi.CodeInternal, "encode parameters: %v", err)
		}
		req.Body = body
		req.Headers["Content-Type"] = []string{"application/json"}
	}
	resp, err := a.c.HTTP(req)
	if err != nil {
		e := *abi.AsError(err)
		e.Message = a.cfg.scrub(e.Message)
		return nil, &e
	}
	r := &reply{Status: resp.Status, Headers: resp.Headers, Body: resp.Body}
	var probe map[string]json.RawMessage
	if json.Unmarshal(resp.Body, &probe) == nil {
		r.JSON = true
		json.Unmarshal(resp.Body, r)
	}
	return r, nil
}

// ok reports a 2xx answer.
func (r *reply) ok() bool { return r.Status >= 200 && r.Status < 300 }

// describe summarises a failed reply for logs and error messages.
func (r *reply) describe() string {
	s := "HTTP " + strconv.Itoa(r.Status)
	switch {
	case r.JSON && r.Message != "":
		s += ": " + r.Message
		if r.Code != 0 {
			s += " (code " + strconv.Itoa(r.Code) + ")"
		}
	case !r.JSON:
		s += " without a Discord answer"
	}
	return s
}

// header returns the first value of name (case-insensitive).
func header(h map[string][]string, name string) (string, bool) {
	for k, vs := range h {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0], true
		}
	}
	return "", false
}

// seconds reads a header holding seconds (a float, as Discord writes X-RateLimit-Reset-After).
func seconds(h map[string][]string, name string) (time.Duration, bool) {
	v, ok := header(h, name)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f < 0 || f > 1e6 || math.IsNaN(f) {
		return 0, false
	}
	return time.Duration(math.Ceil(f*1000)) * time.Millisecond, true
}

// retryAfter is how long a 429 asks to wait: the body's retry_after, else Retry-After, else
// X-RateLimit-Reset-After, else a default.
func (r *reply) retryAfter() time.Duration {
	if r.JSON && r.RetryAfter > 0 && r.RetryAfter < 1e6 {
		return time.Duration(math.Ceil(r.RetryAfter*1000)) * time.Millisecond
	}
	if d, ok := seconds(r.Headers, "Retry-After"); ok && d > 0 {
		return d
	}
	if d, ok := seconds(r.Headers, "X-RateLimit-Reset-After"); ok && d > 0 {
		return d
	}
	return defaultRetryAfter
}

// global reports a 429 of the global limit, which holds every route.
func (r *reply) global() bool {
	if r.JSON && r.Global {
		return true
	}
	if v, ok := header(r.Headers, "X-RateLimit-Global"); ok && strings.EqualFold(v, "true") {
		return true
	}
	v, _ := header(r.Headers, "X-RateLimit-Scope")
	return v == "global"
}

// botUser is GET /users/@me.
type botUser struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	Bot      bool   `json:"bot"`
}
