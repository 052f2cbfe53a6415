package main

import (
	"encoding/json"
	"errors"
	"mime"
	"net/url"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
)

// This file maps Slack's interactivity payloads (a button of the bot's message pressed) to
// callback events. Slack POSTs them to the app's Interactivity Request URL as a form whose
// payload field is the JSON, signed as events are; in Socket Mode they come as "interactive"
// frames carrying the same JSON. Like event.go it is pure, so it is unit-tested natively.

// interaction is the part of an interactivity payload the plugin reads.
type interaction struct {
	Type string `json:"type"` // "block_actions" for a button press
	Team struct {
		ID string `json:"id"`
	} `json:"team"`
	User struct {
		ID       string `json:"id"`
		Username string `json:"username"`
		Name     string `json:"name"`
		TeamID   string `json:"team_id"`
	} `json:"user"`
	Container struct {
		Type      string `json:"type"` // "message"
		MessageTS string `json:"message_ts"`
		ChannelID string `json:"channel_id"`
		ThreadTS  string `json:"thread_ts"`
	} `json:"container"`
	Channel struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"channel"`
	Message *struct {
		TS       string `json:"ts"`
		ThreadTS string `json:"thread_ts"`
	} `json:"message"`
	Actions []struct {
		Type     string `json:"type"` // "button"
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
		ActionTS string `json:"action_ts"`
	} `json:"actions"`
}

var errNoPayload = errors.New("not an interactivity request (no payload field)")

// isInteractivity reports whether a request to the webhook is an interactivity request: a form
// (application/x-www-form-urlencoded), where events are JSON.
func isInteractivity(headers map[string][]string) bool {
	ct, _ := header(headers, "Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "application/x-www-form-urlencoded"
}

// formPayload returns the payload field of an interactivity request's form body.
func formPayload(body []byte) ([]byte, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, err
	}
	p := form.Get("payload")
	if p == "" {
		return nil, errNoPayload
	}
	return []byte(p), nil
}

// mapInteraction turns an interactivity payload into callback events, one per button pressed
// (Slack sends one). err is set only for malformed input; a payload of another type (a shortcut,
// a modal's submission), or a button that is not one of ours, maps to no event.
func mapInteraction(raw []byte) ([]abi.InboundEvent, string, error) {
	var in interaction
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, "", err
	}
	if in.Type != "block_actions" {
		return nil, "interactivity type " + in.Type + " is not handled", nil
	}
	team := in.Team.ID
	if team == "" {
		team = in.User.TeamID
	}
	channel := in.Container.ChannelID
	if channel == "" {
		channel = in.Channel.ID
	}
	msgTS, thread := in.Container.MessageTS, in.Container.ThreadTS
	if in.Message != nil {
		if msgTS == "" {
			msgTS = in.Message.TS
		}
		if thread == "" {
			thread = in.Message.ThreadTS
		}
	}
	if thread == msgTS {
		thread = "" // the message is a thread's root: it is at the top level
	}
	if team == "" || channel == "" || in.User.ID == "" || msgTS == "" {
		return nil, "block_actions without team, channel, user or message", nil
	}
	src := abi.Source{ChatType: chatType(channel, ""), ChatID: channel, ThreadID: thread, UserID: in.User.ID,
		ScopeID: team, MessageID: msgTS, UserName: in.User.Username}
	if src.UserName == "" {
		src.UserName = in.User.Name
	}
	var out []abi.InboundEvent
	for _, a := range in.Actions {
		id := a.Value
		if id == "" {
			id = a.ActionID
		}
		if a.Type != "button" || !validButtonID(id) {
			continue
		}
		// A press is one event however often Slack or a client repeats it: its action_ts.
		key := a.ActionTS
		if key == "" {
			key = msgTS
		}
		out = append(out, abi.InboundEvent{
			ID:   "act:" + team + ":" + channel + ":" + msgTS + ":" + in.User.ID + ":" + key + ":" + id,
			Kind: abi.EventCallback, Source: src, CallbackID: id, UnixMs: tsMillis(a.ActionTS),
		})
	}
	if len(out) == 0 {
		return nil, "block_actions without a button of ours", nil
	}
	return out, "", nil
}

// validButtonID reports whether id is a button id as the ABI defines it: 1 to 64 bytes of
// [A-Za-z0-9:_-].
func validButtonID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	return strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_-") == ""
}
