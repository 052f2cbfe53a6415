package main

import (
	"encoding/json"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
)

const (
	botID   = "1000000000000000001"
	annID   = "3000000000000000001"
	guildID = "2000000000000000001"
	chanID  = "5000000000000000001"
	thread  = "5000000000000000002"
)

func msgJSON(t *testing.T, m map[string]any) []byte {
	t.Helper()
	base := map[string]any{"id": "7000000000000000001", "channel_id": chanID, "guild_id": guildID, "type": 0,
		"author": map[string]any{"id": annID, "username": "ann"}, "content": "hello", "mentions": []any{}}
	for k, v := range m {
		if v == nil {
			delete(base, k)
		} else {
			base[k] = v
		}
	}
	raw, _ := json.Marshal(base)
	return raw
}

func TestMapMessage(t *testing.T) {
	asThread := channelInfo{Type: 11, Parent: chanID}
	followed := func(id string) bool { return id == thread }
	mentionOfBot := []any{map[string]any{"id": botID, "username": "hermes", "bot": true}}
	for _, c := range []struct {
		name      string
		msg       map[string]any
		opt       mapOptions
		skip      bool
		kind      string
		chatType  string
		chat, thr string
		addressed string
		mentioned bool
		text      string
		follow    string
	}{
		{name: "chatter is observed", kind: abi.EventObserve, chatType: abi.ChatGroup, chat: chanID, text: "hello"},
		{name: "mention", msg: map[string]any{"content": "<@" + botID + "> help me", "mentions": mentionOfBot},
			kind: abi.EventMessage, chatType: abi.ChatGroup, chat: chanID, mentioned: true, text: "help me"},
		{name: "nickname mention", msg: map[string]any{"content": "<@!" + botID + ">, help"},
			kind: abi.EventMessage, chatType: abi.ChatGroup, chat: chanID, mentioned: true, text: "help"},
		{name: "mention in a thread is followed", msg: map[string]any{"channel_id": thread, "content": "<@" + botID + "> hi", "mentions": mentionOfBot},
			opt: mapOptions{Channel: asThread}, kind: abi.EventMessage, chatType: abi.ChatGroup, chat: chanID, thr: thread,
			mentioned: true, text: "hi", follow: thread},
		{name: "followed thread", msg: map[string]any{"channel_id": thread}, opt: mapOptions{Channel: asThread, Followed: followed},
			kind: abi.EventMessage, chatType: abi.ChatGroup, chat: chanID, thr: thread, addressed: abi.AddressedThread, text: "hello"},
		{name: "unfollowed thread is observed", msg: map[string]any{"channel_id": thread}, opt: mapOptions{Channel: asThread},
			kind: abi.EventObserve, chatType: abi.ChatGroup, chat: chanID, thr: thread, text: "hello"},
		{name: "reply to the bot", msg: map[string]any{"type": 19, "message_reference": map[string]any{"message_id": "42"},
			"referenced_message": map[string]any{"id": "42", "author": map[string]any{"id": botID}}},
			kind: abi.EventMessage, chatType: abi.ChatGroup, chat: chanID, addressed: abi.AddressedReply, text: "hello"},
		{name: "command", msg: map[string]any{"content": "!new"}, kind: abi.EventMessage, chatType: abi.ChatGroup, chat: chanID,
			addressed: abi.AddressedCommand, text: "/new"},
		{name: "free response channel", opt: mapOptions{FreeResponse: func(c string) bool { return c == chanID }},
			kind: abi.EventMessage, chatType: abi.ChatGroup, chat: chanID, addressed: abi.AddressedFreeResponse, text: "hello"},
		{name: "DM", msg: map[string]any{"guild_id": nil}, kind: abi.EventMessage, chatType: abi.ChatDM, chat: chanID, text: "hello"},
		{name: "mentions of others read as names", msg: map[string]any{"guild_id": nil, "content": "ask <@9> in <#8> about <@&7>",
			"mentions": []any{map[string]any{"id": "9", "username": "bob", "global_name": "Bob"}}},
			kind: abi.EventMessage, chatType: abi.ChatDM, chat: chanID, text: "ask @Bob in #8 about @role:7"},
		{name: "attachment", msg: map[string]any{"guild_id": nil, "content": "", "attachments": []any{map[string]any{"filename": "a.png"}}},
			kind: abi.EventMessage, chatType: abi.ChatDM, chat: chanID, text: "[file: a.png]"},
		{name: "own message", msg: map[string]any{"author": map[string]any{"id": botID, "bot": true}}, skip: true},
		{name: "another bot", msg: map[string]any{"author": map[string]any{"id": "99", "bot": true}}, skip: true},
		{name: "webhook", msg: map[string]any{"webhook_id": "5"}, skip: true},
		{name: "system message", msg: map[string]any{"type": 7}, skip: true},
		{name: "empty", msg: map[string]any{"content": "  "}, skip: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.opt
			o.BotID, o.RequireMention = botID, true
			m, err := mapMessage(msgJSON(t, c.msg), o)
			if err != nil {
				t.Fatal(err)
			}
			if c.skip {
				if m.Event != nil {
					t.Fatalf("want skipped, got %+v", m.Event)
				}
				return
			}
			e := m.Event
			if e == nil {
				t.Fatalf("skipped: %s", m.Skip)
			}
			if e.ID != "msg:7000000000000000001" || e.Kind != c.kind || e.Source.ChatType != c.chatType || e.Source.ChatID != c.chat ||
				e.Source.ThreadID != c.thr || e.Addressed != c.addressed || e.Mentioned != c.mentioned || e.Text != c.text ||
				m.Follow != c.follow || e.Source.MessageID != "7000000000000000001" || e.Source.UserID != annID {
				t.Fatalf("got %+v (follow %q)", e, m.Follow)
			}
			if (c.chatType == abi.ChatGroup) != (e.Source.ScopeID == guildID) {
				t.Fatalf("scope %q", e.Source.ScopeID)
			}
			if e.UnixMs <= 1420070400000 {
				t.Fatalf("unix_ms %d", e.UnixMs)
			}
		})
	}
}

func TestMapMessageWithoutMentionRule(t *testing.T) {
	m, err := mapMessage(msgJSON(t, nil), mapOptions{BotID: botID})
	if err != nil || m.Event == nil || m.Event.Kind != abi.EventMessage || m.Event.Addressed != abi.AddressedFreeResponse {
		t.Fatalf("%+v %v", m.Event, err)
	}
}

func TestMapDeletion(t *testing.T) {
	m, err := mapDeletion([]byte(`{"id": "77", "channel_id": "`+thread+`", "guild_id": "`+guildID+`"}`),
		mapOptions{Channel: channelInfo{Type: 11, Parent: chanID}})
	if err != nil || m.Event == nil || m.Event.Kind != abi.EventRedact || m.Event.Source.MessageID != "77" ||
		m.Event.Source.ChatID != chanID || m.Event.Source.ThreadID != thread {
		t.Fatalf("%+v %v", m.Event, err)
	}
}

// FuzzMapMessage: no input makes mapping panic, and every event it makes is valid.
func FuzzMapMessage(f *testing.F) {
	for _, s := range []string{`{}`, `null`, `[]`, `{"id":"1","channel_id":"2","author":{"id":"3"},"content":"<@<@!>>"}`,
		`{"id":"1","channel_id":"2","guild_id":"4","author":{"id":"3"},"content":"!new","type":19,"referenced_message":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := mapMessage(raw, mapOptions{BotID: botID, RequireMention: true})
		if err != nil || m.Event == nil {
			return
		}
		e := m.Event
		if e.ID == "" || e.Source.ChatID == "" || e.Source.ChatType == "" || e.Kind == "" {
			t.Fatalf("invalid event %+v", e)
		}
	})
}
