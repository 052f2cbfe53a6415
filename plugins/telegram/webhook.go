package main

import (
	"crypto/subtle"
	"strconv"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// SecretHeader carries the webhook's secret_token on every request Telegram makes.
const SecretHeader = "X-Telegram-Bot-Api-Secret-Token"

// webhook receives one update that Telegram pushed to POST /hooks/telegram/{profile}. Requests
// are accepted only with the profile's secret_token in SecretHeader (401 without it, 403 with
// another): without a configured secret every request is refused.
func webhook(c *sdk.Context, req *abi.WebhookRequest) (*abi.WebhookResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if req.Method != "POST" {
		return answer(405, "method not allowed"), nil
	}
	if cfg.SecretToken == "" {
		return answer(403, "webhooks are refused: this profile has no secret_token"), nil
	}
	got, sent := header(req.Headers, SecretHeader)
	switch {
	case !sent:
		return answer(401, "missing "+SecretHeader), nil
	case subtle.ConstantTimeCompare([]byte(got), []byte(cfg.SecretToken)) != 1:
		return answer(403, "wrong "+SecretHeader), nil
	}
	a := &api{c: c, cfg: cfg}
	me, err := a.me(newBudget(identityBudget))
	if err != nil {
		// Without the bot's identity mentions cannot be told apart: let Telegram retry later.
		c.Log(abi.LevelWarn, "webhook: cannot learn the bot's identity (getMe); answering 503", "error", a.scrub(err.Error()))
		return answer(503, "bot identity unavailable"), nil
	}
	id, ev, skip, err := parseUpdate(req.Body, mapOptions{Me: me, RequireMention: cfg.requireMention()})
	if q := callbackQueryID(req.Body); q != "" && id > 0 {
		// Acknowledged before the host records the press, which it does when this call
		// returns: a failed answer is only logged (see answerCallbacks).
		answerCallbacks(a, newBudget(answerTimeout+minRequest), []string{q})
	}
	switch {
	case err != nil && id == 0:
		c.Log(abi.LevelWarn, "webhook: malformed update refused", "error", err.Error())
		return answer(400, "malformed update"), nil
	case err != nil:
		// A readable update_id with an unreadable body: acknowledge it, or Telegram would
		// resend it until it gives up, and it will never read better.
		c.Log(abi.LevelWarn, "webhook: skipping a malformed update", "update_id", strconv.FormatInt(id, 10), "error", err.Error())
		return answer(200, "ok"), nil
	case ev == nil:
		c.Log(abi.LevelDebug, "webhook: skipping update", "update_id", strconv.FormatInt(id, 10), "reason", skip)
		return answer(200, "ok"), nil
	}
	res := answer(200, "ok")
	res.Events = []abi.InboundEvent{*ev}
	return res, nil
}

// answer is a webhook reply without events.
func answer(status int, text string) *abi.WebhookResult {
	return &abi.WebhookResult{Response: abi.HTTPResponse{
		Status: status, Headers: map[string][]string{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte(text),
	}}
}

// header returns the first value of the named header (case-insensitive) and whether it was sent.
func header(h map[string][]string, name string) (string, bool) {
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, name) {
			return v[0], true
		}
	}
	return "", false
}
