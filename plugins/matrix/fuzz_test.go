//go:build !wasip1

package main

import (
	"encoding/json"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
)

// FuzzMapEvent: whatever a homeserver sends as a timeline event, mapping never panics, and an
// event it makes is well-formed: the Matrix event id as its id, the room as its chat, a valid
// kind, the bot never its sender.
func FuzzMapEvent(f *testing.F) {
	for _, seed := range []string{
		`{"event_id":"$1","type":"m.room.message","sender":"@ann:x","content":{"msgtype":"m.text","body":"Hermes: hi","m.mentions":{"user_ids":["@hermes:x"]}}}`,
		`{"event_id":"$2","type":"m.room.message","sender":"@ann:x","content":{"msgtype":"m.text","body":"in thread","m.relates_to":{"rel_type":"m.thread","event_id":"$1","is_falling_back":true,"m.in_reply_to":{"event_id":"$1"}}}}`,
		`{"event_id":"$3","type":"m.room.message","sender":"@hermes:x","content":{"msgtype":"m.text","body":"mine"}}`,
		`{"event_id":"$4","type":"m.room.message","sender":"@ann:x","content":{"msgtype":"m.text","body":"* x","m.new_content":{"body":"x"},"m.relates_to":{"rel_type":"m.replace","event_id":"$1"}}}`,
		`{"event_id":"$5","type":"m.room.redaction","sender":"@ann:x","redacts":"$1","content":{}}`,
		`{"event_id":"$6","type":"m.room.message","sender":"@ann:x","content":{"msgtype":"m.text","body":null,"m.mentions":"all"}}`,
		`{"event_id":"$7","type":"m.room.message","sender":"@ann:x","content":"not an object"}`,
		`{"event_id":"$8","type":"m.room.message","sender":"@ann:x","content":{"msgtype":"m.emote","body":"!new"}}`,
	} {
		f.Add([]byte(seed), 3)
	}
	me := identity{UserID: "@hermes:x", DisplayName: "Hermes"}
	f.Fuzz(func(t *testing.T, raw []byte, members int) {
		var ev rawEvent
		if json.Unmarshal(raw, &ev) != nil {
			return
		}
		o := mapOptions{Me: me, RequireMention: true, ReplyInThread: true, FollowThreads: true,
			Followed: func(string, string) bool { return true }, Own: func(string) bool { return false }}
		m := mapEvent("!r:x", roomInfo{Members: members}, ev, o)
		if m.Event == nil {
			if m.Skip == "" {
				t.Fatal("skipped without a reason")
			}
			return
		}
		e := m.Event
		switch {
		case e.ID != ev.EventID || e.ID == "":
			t.Fatalf("id %q for event %q", e.ID, ev.EventID)
		case e.Source.ChatID != "!r:x" || e.Source.ChatType == "":
			t.Fatalf("source %+v", e.Source)
		case e.Source.UserID == me.UserID:
			t.Fatal("the bot's own event mapped")
		case e.Kind != abi.EventMessage && e.Kind != abi.EventObserve && e.Kind != abi.EventRedact:
			t.Fatalf("kind %q", e.Kind)
		case e.Kind == abi.EventMessage && e.Text == "":
			t.Fatal("a message without text")
		}
	})
}
