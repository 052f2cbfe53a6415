// Command naive is a Telegram adapter with the mistakes real adapters made (see the regression
// checklist of the platform research): its offset lives in instance memory, it echoes every
// message_thread_id, it starts a turn for every group message and drops service messages (a
// group's migration too), it counts length in code points, it retries a 429 itself, it accepts
// webhooks without checking the secret, and it has the old ambiguous-answer mapping: its HTTP
// timeout (30 s) outlives the host's call deadline, at configure (getMe) as at send, and a 5xx,
// a reset or a 200 it cannot read are all "retryable", so the host posts the message twice. The
// conformance profile's tests run against it to show that each of those mistakes fails a check.
package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

type config struct {
	Token   string `json:"token"`
	APIBase string `json:"api_base"`
}

type message struct {
	MessageID int64 `json:"message_id"`
	ThreadID  int64 `json:"message_thread_id"`
	From      *struct {
		ID int64 `json:"id"`
	} `json:"from"`
	Chat struct {
		ID   int64  `json:"id"`
		Type string `json:"type"`
	} `json:"chat"`
	Text string `json:"text"`
}

type update struct {
	UpdateID int64    `json:"update_id"`
	Message  *message `json:"message"`
}

var offset int64 // the mistake: not in the kv store

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{Name: "telegram", Version: "0.0.1", Kind: abi.KindPlatform, Platform: "telegram",
			Capabilities: []string{abi.CapPoll, abi.CapWebhook, abi.CapThreads, abi.CapReplies},
			MessageLimit: abi.MessageLimit{Max: 4096, Unit: abi.UnitUTF16}, Egress: []string{"api.telegram.org"}},
		Configure: configure,
		Poll:      poll,
		Webhook:   webhook,
		Send:      send,
	})
}

// configure asks Telegram who the bot is, with a timeout longer than the call deadline.
func configure(c *sdk.Context) ([]string, error) {
	if status, _, err := call(c, "getMe", struct{}{}); err != nil || status != 200 {
		return []string{"getMe failed"}, nil
	}
	return nil, nil
}

func main() {}

func call(c *sdk.Context, method string, params any) (int, json.RawMessage, error) {
	var cfg config
	if err := c.DecodeConfig(&cfg); err != nil {
		return 0, nil, err
	}
	body, _ := json.Marshal(params)
	resp, err := c.HTTP(&abi.HTTPRequest{Method: "POST", URL: cfg.APIBase + "/bot" + cfg.Token + "/" + method,
		Headers: map[string][]string{"Content-Type": {"application/json"}}, Body: body, TimeoutMs: 30000})
	if err != nil {
		return 0, nil, err
	}
	var env struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(resp.Body, &env); err != nil {
		return 0, nil, err // the old mapping: an unreadable answer is a failure to retry
	}
	return resp.Status, env.Result, nil
}

func event(u update) (abi.InboundEvent, bool) {
	m := u.Message
	if m == nil {
		return abi.InboundEvent{}, false
	}
	ev := abi.InboundEvent{ID: "update:" + strconv.FormatInt(u.UpdateID, 10), Kind: abi.EventMessage, Text: m.Text,
		Source: abi.Source{ChatType: abi.ChatGroup, ChatID: strconv.FormatInt(m.Chat.ID, 10), MessageID: strconv.FormatInt(m.MessageID, 10)}}
	if m.Chat.Type == "private" {
		ev.Source.ChatType = abi.ChatDM
	}
	if m.ThreadID != 0 {
		ev.Source.ChatType, ev.Source.ThreadID = abi.ChatForum, strconv.FormatInt(m.ThreadID, 10)
	}
	return ev, m.Text != ""
}

func poll(c *sdk.Context, req *abi.PollRequest) (*abi.PollResult, error) {
	status, result, err := call(c, "getUpdates", map[string]any{"offset": offset, "timeout": req.WaitMs / 1000})
	if err != nil || status != 200 {
		return &abi.PollResult{BackoffMs: 1000}, nil
	}
	var us []update
	json.Unmarshal(result, &us)
	out := &abi.PollResult{}
	for _, u := range us {
		offset = max(offset, u.UpdateID+1)
		if ev, ok := event(u); ok {
			out.Events = append(out.Events, ev)
			if strings.HasPrefix(ev.Text, "/") {
				// The mistake: acknowledging a command from poll, straight into the chat,
				// outside the host's guarded send.
				call(c, "sendMessage", map[string]any{"chat_id": ev.Source.ChatID, "text": "👋 on it"})
			}
		}
	}
	return out, nil
}

func webhook(c *sdk.Context, req *abi.WebhookRequest) (*abi.WebhookResult, error) {
	var u update
	json.Unmarshal(req.Body, &u)
	res := &abi.WebhookResult{Response: abi.HTTPResponse{Status: 200}}
	if ev, ok := event(u); ok {
		res.Events = append(res.Events, ev)
	}
	return res, nil
}

func send(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
	if utf8.RuneCountInString(msg.Text) > 4096 {
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Message: "too long"}}, nil
	}
	p := map[string]any{"chat_id": msg.ChatID, "text": msg.Text}
	if msg.ThreadID != "" {
		p["message_thread_id"] = msg.ThreadID
	}
	for attempt := 0; ; attempt++ {
		status, result, err := call(c, "sendMessage", p)
		switch {
		case err != nil || status >= 500:
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Message: "failed"}}, nil
		case status == 429 && attempt < 1:
			continue // the mistake: retrying inside send
		case status != 200:
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Message: "refused"}}, nil
		}
		var m message
		json.Unmarshal(result, &m)
		return &abi.SendResult{MessageIDs: []string{strconv.FormatInt(m.MessageID, 10)}}, nil
	}
}
