package main

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Time budgets. The host stops a call at its deadline (call_timeout, 10 s by default; poll gets
// its wait on top) and counts that as a crash, so every export keeps its requests inside a
// budget with a margin: a request that would run past it is cut short by its own HTTP timeout
// and answered as a typed result.
const (
	sendBudget     = 6 * time.Second  // one send: at most a whoami and the PUT
	identityBudget = 4 * time.Second  // whoami and profile at configure
	pollSlack      = 5 * time.Second  // poll's budget beyond its long-poll wait
	syncMargin     = 3 * time.Second  // HTTP timeout beyond the sync's own timeout
	maxLongPoll    = 90 * time.Second // the host's egress allows a request 120 s at most
	minRequest     = 300 * time.Millisecond
)

// api calls the client-server API for one profile, with that profile's token only.
type api struct {
	c     *sdk.Context
	cfg   *Config
	until time.Time // every request of this call ends by then
}

func newAPI(c *sdk.Context, cfg *Config, budget time.Duration) *api {
	return &api{c: c, cfg: cfg, until: time.Now().Add(budget)}
}

// reply is an HTTP answer of the homeserver. Matrix is true when the body was a JSON object
// (an HTML page from a proxy is not).
type reply struct {
	Status     int
	Matrix     bool
	Body       []byte
	RetryAfter time.Duration // retry_after_ms, else Retry-After (0 when neither)

	Errcode      string `json:"errcode"`
	Error        string `json:"error"`
	RetryAfterMs int64  `json:"retry_after_ms"`
}

// matrixError is a refusal by the homeserver (or an answer that is not the API's).
type matrixError struct {
	what string
	r    *reply
}

func (e *matrixError) Error() string { return e.what + ": " + e.r.describe() }

// unauthorized reports whether the token was refused.
func (e *matrixError) unauthorized() bool {
	return e.r.Status == 401 || e.r.Errcode == "M_UNKNOWN_TOKEN" || e.r.Errcode == "M_MISSING_TOKEN"
}

func (r *reply) describe() string {
	switch {
	case r.Errcode != "":
		s := "HTTP " + strconv.Itoa(r.Status) + " " + r.Errcode
		if r.Error != "" {
			s += " (" + r.Error + ")"
		}
		return s
	case !r.Matrix:
		return "HTTP " + strconv.Itoa(r.Status) + " without a Matrix answer"
	}
	return "HTTP " + strconv.Itoa(r.Status)
}

// left is the time remaining in the call's budget.
func (a *api) left() time.Duration { return time.Until(a.until) }

// call makes one request to path (under the homeserver's base URL; segments already escaped)
// with body as JSON (nil: none), waiting at most want. A transport failure is an *abi.Error
// with the token scrubbed; any HTTP answer is a reply.
func (a *api) call(method, path string, query url.Values, body any, want time.Duration) (*reply, error) {
	timeout := min(want, a.left())
	if timeout < minRequest {
		return nil, abi.Errorf(abi.CodeTimeout, "%s %s: not sent, the call's time budget is spent", method, redactPath(path))
	}
	req := &abi.HTTPRequest{Method: method, URL: a.cfg.Homeserver + path,
		Headers:   map[string][]string{"Authorization": {"Bearer " + a.cfg.AccessToken}},
		TimeoutMs: timeout.Milliseconds(), MaxBytes: 8 << 20}
	if len(query) > 0 {
		req.URL += "?" + query.Encode()
	}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, abi.Errorf(abi.CodeInternal, "encode request: %v", err)
		}
		req.Body = b
		req.Headers["Content-Type"] = []string{"application/json"}
	}
	resp, err := a.c.HTTP(req)
	if err != nil {
		e := *abi.AsError(err)
		e.Message = a.scrub(e.Message)
		return nil, &e
	}
	r := &reply{Status: resp.Status, Body: resp.Body}
	var probe map[string]json.RawMessage
	if json.Unmarshal(resp.Body, &probe) == nil {
		r.Matrix = true
		json.Unmarshal(resp.Body, r)
	}
	if r.RetryAfterMs > 0 {
		r.RetryAfter = time.Duration(r.RetryAfterMs) * time.Millisecond
	} else if v := header(resp.Headers, "Retry-After"); v != "" {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 0 && n < 1<<31 {
			r.RetryAfter = time.Duration(n) * time.Second
		}
	}
	return r, nil
}

// do is call for requests whose answer must be a 200, decoded into out (nil: ignored).
func (a *api) do(method, path string, query url.Values, body, out any, want time.Duration) error {
	r, err := a.call(method, path, query, body, want)
	if err != nil {
		return err
	}
	if r.Status != 200 || !r.Matrix {
		return &matrixError{method + " " + redactPath(path), r}
	}
	if out != nil {
		if err := json.Unmarshal(r.Body, out); err != nil {
			return abi.Errorf(abi.CodeInternal, "%s %s: malformed answer: %v", method, redactPath(path), err)
		}
	}
	return nil
}

// whoami asks whose the token is.
func (a *api) whoami() (string, error) {
	var who struct {
		UserID string `json:"user_id"`
	}
	if err := a.do("GET", clientAPI+"/account/whoami", nil, nil, &who, 5*time.Second); err != nil {
		return "", err
	}
	if !validUserID(who.UserID) {
		return "", abi.Errorf(abi.CodeInternal, "whoami answered no user id")
	}
	return who.UserID, nil
}

// identity is who the bot is: its user id and the display name mentions in a body use.
type identity struct {
	UserID      string `json:"user_id"`
	DisplayName string `json:"display_name,omitempty"`
}

func (a *api) meKey() string { return "me:" + a.cfg.tokenKey() }

// me returns the bot's identity: the configuration's, else the cached one, else whoami (and
// the profile's display name, best effort), cached in the kv store.
func (a *api) me() (identity, error) {
	id := identity{UserID: a.cfg.UserID, DisplayName: a.cfg.DisplayName}
	if id.UserID != "" && id.DisplayName != "" {
		return id, nil
	}
	if raw, found, err := a.c.KVGet(a.meKey()); err == nil && found {
		var cached identity
		if json.Unmarshal(raw, &cached) == nil && cached.UserID != "" && (id.UserID == "" || id.UserID == cached.UserID) {
			if id.DisplayName == "" {
				id.DisplayName = cached.DisplayName
			}
			id.UserID = cached.UserID
			return id, nil
		}
	}
	if id.UserID == "" {
		who, err := a.whoami()
		if err != nil {
			return identity{}, err
		}
		id.UserID = who
	}
	if id.DisplayName == "" {
		var p struct {
			DisplayName string `json:"displayname"`
		}
		if err := a.do("GET", clientAPI+"/profile/"+url.PathEscape(id.UserID)+"/displayname", nil, nil, &p, 3*time.Second); err == nil {
			id.DisplayName = strings.TrimSpace(p.DisplayName)
		}
	}
	raw, _ := json.Marshal(id)
	a.c.KVSet(a.meKey(), raw)
	return id, nil
}

// scrub removes the token from text (egress errors may quote request details).
func (a *api) scrub(text string) string {
	if a.cfg.AccessToken == "" {
		return text
	}
	return strings.ReplaceAll(text, a.cfg.AccessToken, "<token>")
}

// redactPath keeps a path's API part for messages: room ids and transaction ids are not secret,
// but a log line needs only the endpoint.
func redactPath(p string) string {
	p = strings.TrimPrefix(p, clientAPI)
	if i := strings.Index(p, "/send/"); i >= 0 {
		return p[:i] + "/send"
	}
	return p
}

func header(h map[string][]string, name string) string {
	for k, vs := range h {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}
