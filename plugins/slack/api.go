package main

import (
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Time budgets. A call into the plugin has a deadline (the host's call_timeout, 10 s by
// default); the plugin's own HTTP timeouts stay under it, so a slow Slack makes a request time
// out (and the plugin answer) instead of the host killing the instance mid-send.
const (
	httpTimeout = 8 * time.Second // the most one request may take
	callBudget  = 8 * time.Second // the most all requests of one send or configure may take
)

// api calls Web API methods for one profile.
type api struct {
	c   *sdk.Context
	cfg *Config
	// deadline bounds every request of this call (see callBudget).
	deadline time.Time
}

func newAPI(c *sdk.Context, cfg *Config) *api {
	return &api{c: c, cfg: cfg, deadline: time.Now().Add(callBudget)}
}

// reply is a Web API answer. JSON is false when the body was not a Web API answer (an HTML error
// page, a body cut short).
type reply struct {
	Status     int
	JSON       bool
	RetryAfter time.Duration // Retry-After, on any status (0 when absent or malformed)
	Body       []byte

	OK               bool   `json:"ok"`
	Error            string `json:"error"`
	ResponseMetadata struct {
		Messages []string `json:"messages"`
	} `json:"response_metadata"`
}

// call POSTs params as JSON to method with token. A transport failure (the host's io, timeout,
// uncertain, denied...) is returned as an *abi.Error; any HTTP answer is a reply.
func (a *api) call(method, token string, params any) (*reply, error) {
	body, err := json.Marshal(params)
	if err != nil {
		return nil, abi.Errorf(abi.CodeInternal, "%s: encode parameters: %v", method, err)
	}
	return a.post(method, token, "application/json; charset=utf-8", body)
}

// callForm is call with form parameters, for the methods that read only forms
// (files.getUploadURLExternal, files.completeUploadExternal).
func (a *api) callForm(method, token string, params url.Values) (*reply, error) {
	return a.post(method, token, "application/x-www-form-urlencoded", []byte(params.Encode()))
}

// post POSTs body to method with token.
func (a *api) post(method, token, contentType string, body []byte) (*reply, error) {
	left := time.Until(a.deadline)
	if left < 100*time.Millisecond {
		return nil, abi.Errorf(abi.CodeTimeout, "%s: the call's time budget is spent; not sent", method)
	}
	resp, err := a.c.HTTP(&abi.HTTPRequest{
		Method: "POST",
		URL:    a.cfg.APIBase + "/" + method,
		Headers: map[string][]string{
			"Content-Type":  {contentType},
			"Authorization": {"Bearer " + token},
		},
		Body:      body,
		TimeoutMs: min(left, httpTimeout).Milliseconds(),
		MaxBytes:  1 << 20,
	})
	if err != nil {
		e := *abi.AsError(err)
		e.Message = scrub(e.Message, token)
		return nil, &e
	}
	r := &reply{Status: resp.Status, Body: resp.Body}
	if json.Unmarshal(resp.Body, r) == nil && (r.OK || r.Error != "") {
		r.JSON = true
	}
	if r.OK && (!r.JSON || resp.Status != 200) {
		r.OK = false
	}
	// Slack sends Retry-After with a 429, and with an HTTP 200 {"ok":false,"error":"ratelimited"}
	// too ("refer to the Retry-After header"): it is read whatever the status.
	if v, ok := header(resp.Headers, "Retry-After"); ok {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 0 && n < 1<<31 {
			// "Retry-After: 0" is "now": a second, as slack-go's retry handler waits at least.
			r.RetryAfter = max(time.Duration(n)*time.Second, time.Second)
		}
	}
	return r, nil
}

// scrub removes a token from text (egress errors may quote request details).
func scrub(text, token string) string {
	if token == "" {
		return text
	}
	return strings.ReplaceAll(text, token, "<token>")
}

// describe summarises a failed reply for logs and error messages.
func (r *reply) describe() string {
	switch {
	case r.JSON && r.Error != "":
		s := r.Error
		if len(r.ResponseMetadata.Messages) > 0 {
			s += " (" + strings.Join(r.ResponseMetadata.Messages, "; ") + ")"
		}
		return s
	case r.Status == 429:
		return "HTTP 429 rate limited"
	case !r.JSON:
		return "HTTP " + strconv.Itoa(r.Status) + " without a Web API answer"
	}
	return "HTTP " + strconv.Itoa(r.Status)
}

// apiError is a Web API refusal (or a body that is not a Web API answer).
type apiError struct {
	method string
	r      *reply
}

func (e *apiError) Error() string { return e.method + ": " + e.r.describe() }

// authErrors are the Web API errors that mean the token is wrong, revoked or unusable.
var authErrors = map[string]bool{"invalid_auth": true, "not_authed": true, "account_inactive": true,
	"token_revoked": true, "token_expired": true, "no_permission": true, "not_allowed_token_type": true,
	"missing_scope": true, "team_access_not_granted": true}

// do calls method and decodes the whole answer into out (which may be nil). The error is a
// transport *abi.Error or an *apiError.
func (a *api) do(method, token string, params, out any) error {
	r, err := a.call(method, token, params)
	if err != nil {
		return err
	}
	if !r.OK {
		return &apiError{method, r}
	}
	if out != nil {
		if err := json.Unmarshal(r.Body, out); err != nil {
			r.OK, r.JSON, r.Error = false, false, "malformed answer: "+err.Error()
			return &apiError{method, r}
		}
	}
	return nil
}

// identity is what auth.test says about a bot token.
type identity struct {
	TeamID string `json:"team_id"`
	UserID string `json:"user_id"`
	BotID  string `json:"bot_id"`
}

func identityKey(token string) string { return "auth:" + keyOf(token) }

// authTest asks Slack whom token belongs to and caches the answer in the kv store.
func (a *api) authTest(token string) (identity, error) {
	var id identity
	if err := a.do("auth.test", token, struct{}{}, &id); err != nil {
		return identity{}, err
	}
	raw, _ := json.Marshal(id)
	return id, a.c.KVSet(identityKey(token), raw)
}

// cachedIdentity returns the cached auth.test answer for token, if any.
func cachedIdentity(c *sdk.Context, token string) (identity, bool) {
	raw, found, err := c.KVGet(identityKey(token))
	var id identity
	if err != nil || !found || json.Unmarshal(raw, &id) != nil {
		return identity{}, false
	}
	return id, true
}

// asAPIError is errors.As for *apiError.
func asAPIError(err error, target **apiError) bool { return errors.As(err, target) }

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func joinProblems(p []string) string { return strings.Join(p, "; ") }
