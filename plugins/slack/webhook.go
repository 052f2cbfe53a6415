package main

import (
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Headers of Slack's retries.
const (
	headerRetryNum    = "X-Slack-Retry-Num"
	headerRetryReason = "X-Slack-Retry-Reason"
	headerNoRetry     = "X-Slack-No-Retry"
)

// webhook receives one Events API request on POST /hooks/slack/{profile}. It verifies the
// signature (401 otherwise), answers url_verification with the challenge, and maps an
// event_callback to at most one event, which the host records durably before it writes the 200:
// the acknowledgement Slack waits 3 s for never waits on the agent, and Slack's retries of the
// same event carry the same id, which the host deduplicates. It makes no Web API request.
func webhook(c *sdk.Context, req *abi.WebhookRequest) (*abi.WebhookResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if req.Method != "POST" {
		return answer(405, "method not allowed"), nil
	}
	if cfg.SigningSecret == "" {
		return answer(403, "events are refused: this profile has no signing_secret"), nil
	}
	now, err := c.Now()
	if err != nil {
		now = time.Now()
	}
	if err := verify(req.Headers, req.Body, cfg.SigningSecret, now); err != nil {
		c.Log(abi.LevelWarn, "webhook: request refused", "reason", err.Error())
		return answer(401, "invalid request: "+err.Error()), nil
	}
	if isInteractivity(req.Headers) {
		return interactivity(c, req.Body), nil
	}
	env, err := parseEnvelope(req.Body)
	if err != nil {
		c.Log(abi.LevelWarn, "webhook: malformed payload refused", "error", err.Error())
		return noRetry(answer(400, "malformed payload")), nil
	}
	switch env.Type {
	case "url_verification":
		return answer(200, env.Challenge), nil
	case "event_callback":
	case "app_rate_limited":
		c.Log(abi.LevelWarn, "Slack is dropping this app's events: over 30,000 a workspace an hour", "team_id", env.TeamID)
		return answer(200, ""), nil
	default:
		c.Log(abi.LevelInfo, "webhook: payload type not handled", "type", env.Type)
		return answer(200, ""), nil
	}
	if n, ok := header(req.Headers, headerRetryNum); ok {
		reason, _ := header(req.Headers, headerRetryReason)
		c.Log(abi.LevelDebug, "webhook: Slack retry (deduplicated by the host)", "event_id", env.EventID, "retry", n, "reason", reason)
	}
	ev, err := inbound(c, cfg, env)
	if err != nil {
		c.Log(abi.LevelWarn, "webhook: malformed event refused", "event_id", env.EventID, "error", err.Error())
		return noRetry(answer(400, "malformed event")), nil
	}
	res := answer(200, "")
	if ev != nil {
		res.Events = []abi.InboundEvent{*ev}
	}
	return res, nil
}

// interactivity answers a verified interactivity request (the Interactivity Request URL is
// the Events one, /hooks/slack/{profile}; the form body tells them apart): a button press
// becomes a callback event, which the host records before it writes the 200 Slack waits 3 s
// for. Anything else is acknowledged without an event.
func interactivity(c *sdk.Context, body []byte) *abi.WebhookResult {
	raw, err := formPayload(body)
	if err != nil {
		c.Log(abi.LevelWarn, "interactivity: malformed request refused", "error", err.Error())
		return answer(400, "malformed interactivity request")
	}
	events, skip, err := mapInteraction(raw)
	if err != nil {
		c.Log(abi.LevelWarn, "interactivity: malformed payload refused", "error", err.Error())
		return answer(400, "malformed interactivity payload")
	}
	if skip != "" {
		c.Log(abi.LevelDebug, "interactivity: skipped", "reason", skip)
	}
	res := answer(200, "")
	res.Events = events
	return res
}

// inbound maps an event_callback for the profile (HTTP or Socket Mode) and remembers a thread
// the bot was mentioned in. It returns nil for an event that is skipped.
func inbound(c *sdk.Context, cfg *Config, env *envelope) (*abi.InboundEvent, error) {
	o := mapOptions{BotUserID: cfg.BotUserID, RequireMention: cfg.requireMention(), ReplyInThread: cfg.replyInThread(),
		FreeResponse: cfg.freeResponse}
	if cfg.followThreads() {
		o.Followed = func(team, channel, thread string) bool { return followed(c, team, channel, thread) }
	}
	if o.BotUserID == "" && env.botUser("") == "" {
		if id, ok := cachedIdentity(c, cfg.tokenFor(env.TeamID)); ok {
			o.BotUserID = id.UserID
		}
	}
	m, err := mapCallback(env, o)
	if err != nil {
		return nil, err
	}
	if m.Follow != nil && cfg.followThreads() {
		if err := follow(c, *m.Follow); err != nil {
			c.Log(abi.LevelWarn, "cannot remember the thread; replies there will need a mention", "error", err.Error())
		}
	}
	if m.Event == nil {
		c.Log(abi.LevelDebug, "event skipped", "event_id", env.EventID, "reason", m.Skip)
	}
	return m.Event, nil
}

// answer is a webhook reply without events.
func answer(status int, text string) *abi.WebhookResult {
	return &abi.WebhookResult{Response: abi.HTTPResponse{
		Status: status, Headers: map[string][]string{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte(text),
	}}
}

// noRetry asks Slack not to retry a request that will never read better.
func noRetry(res *abi.WebhookResult) *abi.WebhookResult {
	res.Response.Headers[headerNoRetry] = []string{"1"}
	return res
}
