// Command naive is a Slack adapter with the mistakes real adapters made (see the regression
// checklist of the platform research): it does not verify signatures, it drops every request
// carrying X-Slack-Retry-Num, it uses event_id (or envelope_id) as the event's id so that
// message + app_mention become two turns, it leaves the workspace out of the source, it makes
// every channel message a turn without threads, it answers its own messages, it drops thread_ts
// when sending, it escapes text but never splits it, it retries 5xx inside send, its HTTP
// timeout (30 s) exceeds its call deadline, in Socket Mode it acknowledges frames on receipt,
// and it acknowledges mentions by posting from webhook, outside send. The conformance profile's
// tests run against it to show that each mistake fails a check.
package main

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

type config struct {
	BotToken string `json:"bot_token"`
	AppToken string `json:"app_token"`
	Mode     string `json:"mode"`
	APIBase  string `json:"api_base"`
}

type payload struct {
	Type      string `json:"type"`
	Challenge string `json:"challenge"`
	EventID   string `json:"event_id"`
	Event     struct {
		Type        string `json:"type"`
		User        string `json:"user"`
		Text        string `json:"text"`
		TS          string `json:"ts"`
		Channel     string `json:"channel"`
		ChannelType string `json:"channel_type"`
	} `json:"event"`
}

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{Name: "slack", Version: "0.0.1", Kind: abi.KindPlatform, Platform: "slack",
			Capabilities: []string{abi.CapWebhook, abi.CapPoll, abi.CapThreads},
			MessageLimit: abi.MessageLimit{Max: 40000, Unit: abi.UnitCodePoint}, Egress: []string{"slack.com"}},
		Webhook: webhook,
		Poll:    poll,
		Send:    send,
	})
}

func main() {}

func cfg(c *sdk.Context) config {
	var cf config
	c.DecodeConfig(&cf)
	return cf
}

func event(p payload, id string) (abi.InboundEvent, bool) {
	e := p.Event
	if (e.Type != "message" && e.Type != "app_mention") || e.Text == "" {
		return abi.InboundEvent{}, false
	}
	ev := abi.InboundEvent{ID: id, Kind: abi.EventMessage, Text: e.Text,
		Source: abi.Source{ChatType: abi.ChatGroup, ChatID: e.Channel, UserID: e.User, MessageID: e.TS, ScopeID: "slack"}}
	if e.ChannelType == "im" {
		ev.Source.ChatType = abi.ChatDM
	}
	return ev, true
}

func webhook(c *sdk.Context, req *abi.WebhookRequest) (*abi.WebhookResult, error) {
	res := &abi.WebhookResult{Response: abi.HTTPResponse{Status: 200}}
	for k := range req.Headers {
		if strings.EqualFold(k, "X-Slack-Retry-Num") {
			return res, nil // the mistake: retries "are duplicates"
		}
	}
	var p payload
	json.Unmarshal(req.Body, &p)
	if p.Type == "url_verification" {
		res.Response.Body = []byte(p.Challenge)
		return res, nil
	}
	if ev, ok := event(p, p.EventID); ok {
		res.Events = append(res.Events, ev)
		if p.Event.Type == "app_mention" {
			// The mistake: acknowledge a mention at once, outside send (and its boundary).
			call(c, "chat.postMessage", cfg(c).BotToken, map[string]string{"channel": p.Event.Channel, "text": "👀 on it"})
		}
	}
	return res, nil
}

func call(c *sdk.Context, method, token string, params any) (int, []byte, error) {
	body, _ := json.Marshal(params)
	resp, err := c.HTTP(&abi.HTTPRequest{Method: "POST", URL: cfg(c).APIBase + "/" + method, Body: body, TimeoutMs: 30000,
		Headers: map[string][]string{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + token}}})
	if err != nil {
		return 0, nil, err
	}
	return resp.Status, resp.Body, nil
}

func send(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
	for attempt := 0; ; attempt++ {
		text := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(msg.Text) // escaped, never split
		status, body, err := call(c, "chat.postMessage", cfg(c).BotToken, map[string]string{"channel": msg.ChatID, "text": text})
		switch {
		case (err != nil || status >= 500) && attempt < 1:
			continue // the mistake: a 5xx "did not post"
		case err != nil || status >= 500:
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Message: "failed"}}, nil
		case status == 429:
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Message: "rate limited"}}, nil
		}
		var r struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
			TS    string `json:"ts"`
		}
		json.Unmarshal(body, &r)
		if !r.OK {
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Code: r.Error, Message: r.Error}}, nil
		}
		return &abi.SendResult{MessageIDs: []string{r.TS}}, nil
	}
}

var conn string // the mistake, again: in instance memory

func poll(c *sdk.Context, req *abi.PollRequest) (*abi.PollResult, error) {
	cf := cfg(c)
	if cf.Mode != "socket" {
		return &abi.PollResult{BackoffMs: 600000}, nil
	}
	if conn == "" {
		_, body, err := call(c, "apps.connections.open", cf.AppToken, struct{}{})
		var r struct {
			URL string `json:"url"`
		}
		if err != nil || json.Unmarshal(body, &r) != nil || r.URL == "" {
			return &abi.PollResult{BackoffMs: 1000}, nil
		}
		if conn, err = c.WSOpen(&abi.WSOpenRequest{URL: r.URL}); err != nil {
			return &abi.PollResult{BackoffMs: 1000}, nil
		}
	}
	rr, err := c.WSRecv(conn, 500*time.Millisecond, 16)
	if err != nil {
		conn = ""
		return &abi.PollResult{}, nil
	}
	out := &abi.PollResult{}
	if rr.Closed {
		defer func() { conn = "" }()
	}
	for _, f := range rr.Frames {
		var fr struct {
			Type       string          `json:"type"`
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		json.Unmarshal(f.Data, &fr)
		if fr.EnvelopeID != "" {
			ack, _ := json.Marshal(map[string]string{"envelope_id": fr.EnvelopeID})
			c.WSSend(conn, abi.WSFrame{Data: ack}) // the mistake: before the host recorded it
		}
		if fr.Type == "disconnect" {
			conn = ""
		}
		var p payload
		if json.Unmarshal(fr.Payload, &p) == nil {
			if ev, ok := event(p, fr.EnvelopeID); ok {
				out.Events = append(out.Events, ev)
			}
		}
	}
	return out, nil
}
