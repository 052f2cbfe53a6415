//go:build !wasip1

package main

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	mt "github.com/hermes-host/hermes-host/conformance/matrixtest"
	"github.com/hermes-host/hermes-host/sdk/sdktest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

const ann = "@ann:hermes.test"

func ev(id, sender string, content map[string]any) rawEvent {
	b, _ := json.Marshal(content)
	return rawEvent{EventID: id, Type: "m.room.message", Sender: sender, Content: b, TS: 1}
}

func text(body string, extra ...any) map[string]any {
	c := map[string]any{"msgtype": "m.text", "body": body}
	for i := 0; i+1 < len(extra); i += 2 {
		c[extra[i].(string)] = extra[i+1]
	}
	return c
}

func TestMapEvent(t *testing.T) {
	me := identity{UserID: "@hermes:hermes.test", DisplayName: "Hermes"}
	own := map[string]bool{"$mine": true}
	followed := map[string]bool{"!g $root": true}
	o := mapOptions{Me: me, RequireMention: true, ReplyInThread: true, FollowThreads: true,
		Followed: func(room, thread string) bool { return followed[room+" "+thread] },
		Own:      func(id string) bool { return own[id] }}
	group, dm := roomInfo{Members: 3, Name: "Ops"}, roomInfo{Members: 2}
	mentions := func(ids ...string) map[string]any { return map[string]any{"user_ids": ids} }
	thread := func(root string) map[string]any {
		return map[string]any{"rel_type": "m.thread", "event_id": root, "is_falling_back": true,
			"m.in_reply_to": map[string]any{"event_id": root}}
	}
	cases := []struct {
		name              string
		info              roomInfo
		ev                rawEvent
		kind, thread, why string
		mentioned         bool
		text              string
		skip              bool
	}{
		{name: "chatter", info: group, ev: ev("$1", ann, text("hello all", "m.mentions", map[string]any{})), kind: abi.EventObserve},
		{name: "m.mentions names the bot", info: group, ev: ev("$2", ann, text("Hermes: help", "m.mentions", mentions(me.UserID))),
			kind: abi.EventMessage, thread: "$2", mentioned: true, text: "help"},
		{name: "m.mentions names another: the body does not count", info: group,
			ev: ev("$3", ann, text("Hermes is great", "m.mentions", mentions("@bob:hermes.test"))), kind: abi.EventObserve},
		{name: "no m.mentions: display name in the body", info: group, ev: ev("$4", ann, text("hey hermes, status?")),
			kind: abi.EventMessage, thread: "$4", mentioned: true},
		{name: "no m.mentions: MXID in the body", info: group, ev: ev("$5", ann, text("@hermes:hermes.test status")),
			kind: abi.EventMessage, thread: "$5", mentioned: true, text: "status"},
		{name: "no m.mentions: a longer word is no mention", info: group, ev: ev("$6", ann, text("hermeses are gods")), kind: abi.EventObserve},
		{name: "followed thread", info: group, ev: ev("$7", ann, text("more", "m.relates_to", thread("$root"))),
			kind: abi.EventMessage, thread: "$root", why: abi.AddressedThread},
		{name: "unfollowed thread", info: group, ev: ev("$8", ann, text("more", "m.relates_to", thread("$other"))), kind: abi.EventObserve, thread: "$other"},
		{name: "reply to the bot", info: group, ev: ev("$9", ann, text("why?", "m.relates_to",
			map[string]any{"m.in_reply_to": map[string]any{"event_id": "$mine"}})), kind: abi.EventMessage, thread: "$9", why: abi.AddressedReply},
		{name: "!new is /new, a command", info: group, ev: ev("$10", ann, text("!new")), kind: abi.EventMessage, thread: "$10",
			why: abi.AddressedCommand, text: "/new"},
		{name: "DM", info: dm, ev: ev("$11", ann, text("hi")), kind: abi.EventMessage},
		{name: "DM thread", info: dm, ev: ev("$12", ann, text("hi", "m.relates_to", thread("$t"))), kind: abi.EventMessage, thread: "$t"},
		{name: "own message", info: group, ev: ev("$13", me.UserID, text("I said")), skip: true},
		{name: "notice", info: group, ev: ev("$14", ann, map[string]any{"msgtype": "m.notice", "body": "bot output"}), skip: true},
		{name: "edit", info: group, ev: ev("$15", ann, map[string]any{"msgtype": "m.text", "body": "* fixed",
			"m.new_content": map[string]any{"body": "fixed"}, "m.relates_to": map[string]any{"rel_type": "m.replace", "event_id": "$1"}}),
			kind: abi.EventObserve, text: "(edited) fixed"},
		{name: "malformed content", info: group, ev: rawEvent{EventID: "$16", Type: "m.room.message", Sender: ann,
			Content: json.RawMessage(`{"body": 42}`)}, skip: true},
		{name: "encrypted", info: group, ev: rawEvent{EventID: "$17", Type: "m.room.encrypted", Sender: ann, Content: json.RawMessage(`{}`)}, skip: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := mapEvent("!g", c.info, c.ev, o)
			if c.skip {
				if m.Event != nil {
					t.Fatalf("mapped to %+v, want skipped", m.Event)
				}
				return
			}
			e := m.Event
			if e == nil {
				t.Fatalf("skipped: %s", m.Skip)
			}
			if e.Kind != c.kind || e.Source.ThreadID != c.thread || e.Addressed != c.why || e.Mentioned != c.mentioned || e.ID != c.ev.EventID {
				t.Fatalf("got kind %q thread %q addressed %q mentioned %v id %q", e.Kind, e.Source.ThreadID, e.Addressed, e.Mentioned, e.ID)
			}
			if c.text != "" && e.Text != c.text {
				t.Fatalf("text %q, want %q", e.Text, c.text)
			}
		})
	}
	redact := mapEvent("!g", group, rawEvent{EventID: "$r", Type: "m.room.redaction", Sender: ann, Redacts: "$2", Content: json.RawMessage(`{}`)}, o)
	if redact.Event == nil || redact.Event.Kind != abi.EventRedact || redact.Event.Source.MessageID != "$2" {
		t.Fatalf("redaction: %+v", redact)
	}
}

func TestConfigProblems(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Homeserver: "https://m.example.org"}, "access_token is required"},
		{Config{Homeserver: "ftp://m.example.org", AccessToken: "t"}, "not an http(s) base URL"},
		{Config{Homeserver: "https://m.example.org/_matrix", AccessToken: "t"}, "not an http(s) base URL"},
		{Config{Homeserver: "https://m.example.org", AccessToken: "t", UserID: "hermes"}, "not a Matrix user id"},
		{Config{Homeserver: "https://m.example.org", AccessToken: "t", UserID: "@hermes:example.org"}, ""},
	} {
		got := strings.Join(c.cfg.problems(), "; ")
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%+v: problems %q, want %q", c.cfg, got, c.want)
		}
	}
}

func TestTxnSafe(t *testing.T) {
	if got := txnSafe("dlv_4f.2"); got != "dlv_4f.2" {
		t.Fatalf("txnSafe kept nothing of a plain id: %q", got)
	}
	if got := txnSafe("a/b c"); strings.ContainsAny(got, "/ ") || got == txnSafe("a/bc") {
		t.Fatalf("txnSafe(a/b c) = %q", got)
	}
}

// newHost runs the plugin natively or as Wasm against the fake, which stands in for the declared
// host (its egress scopes apply), without a dispatcher: poll returns its events.
func newHost(t *testing.T, mode string, hs *mt.Server, state *sdktest.State) sdktest.Host {
	t.Helper()
	u, _ := url.Parse(hs.URL())
	o := sdktest.Options{Profiles: map[string]any{"main": map[string]any{"homeserver": hs.URL(), "access_token": mt.DefaultBotToken}},
		EgressAlias: map[string]string{u.Host: DefaultHost}, State: state}
	if mode == "native" {
		return sdktest.Native(t, o)
	}
	return sdktest.Wasm(t, wasmbuild.MustBuild(t, "."), o)
}

func each(t *testing.T, f func(t *testing.T, mode string)) {
	for _, mode := range []string{"native", "wasm"} {
		t.Run(mode, func(t *testing.T) { f(t, mode) })
	}
}

// On a host without hermes_dispatch the events are returned, and the since token of the batch
// is committed only at the start of the next poll (the host calls it after recording): the
// sync after the batch asks from the batch's next_batch, and nothing comes twice.
func TestReturnedBatchCommittedAtNextPoll(t *testing.T) {
	each(t, func(t *testing.T, mode string) {
		hs := mt.New(t)
		hs.AddUser(ann, "Ann")
		room := hs.CreateRoom("Ops", ann)
		state := sdktest.NewState(t)
		said := room.Say(ann, mt.Message{Body: "hello"})
		var batch mt.Request
		t.Run("first", func(t *testing.T) {
			h := newHost(t, mode, hs, state)
			if _, err := h.Poll("main", 0); err != nil { // the first sync: learns the room
				t.Fatal(err)
			}
			said = room.Say(ann, mt.Message{Body: "hello"})
			res, err := h.Poll("main", time.Second)
			if err != nil || len(res.Events) != 1 || res.Events[0].ID != said.ID {
				t.Fatalf("poll: %+v %v", res, err)
			}
			syncs := hs.Requests(mt.EndpointSync)
			batch = syncs[len(syncs)-1]
		})
		// A restart here (the host recorded the batch, then stopped): the next poll commits.
		t.Run("restart", func(t *testing.T) {
			h := newHost(t, mode, hs, state)
			res, err := h.Poll("main", time.Second)
			if err != nil || len(res.Events) != 0 {
				t.Fatalf("poll after the batch: %+v %v (replayed)", res, err)
			}
			syncs := hs.Requests(mt.EndpointSync)
			if last := syncs[len(syncs)-1]; last.Since == batch.Since || last.Since == "" {
				t.Fatalf("the sync after the batch asked since %q, the batch's since %q: want the batch's next_batch", last.Since, batch.Since)
			}
		})
	})
}

// A send into a room that turned encryption on is refused, and the room gets one notice (an
// m.notice, with a fixed transaction id) however many sends come.
func TestEncryptedRoomOneNotice(t *testing.T) {
	hs := mt.New(t)
	hs.AddUser(ann, "Ann")
	room := hs.CreateRoom("Secret", ann, "@bob:hermes.test")
	h := newHost(t, "native", hs, nil)
	h.Poll("main", 0)
	room.Encrypt(ann)
	if _, err := h.Poll("main", time.Second); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		res, err := h.Send("main", abi.OutboundMessage{ChatID: room.ID, Text: "secret output", DeliveryID: "dlv_" + string(rune('a'+i))})
		if err != nil || res.Error == nil || res.Error.Kind != abi.SendPermanent || res.Error.Code != "encrypted_room" {
			t.Fatalf("send %d: %+v %v", i, res, err)
		}
	}
	msgs := room.BotMessages()
	if len(msgs) != 1 || msgs[0].Body() != E2EENotice || msgs[0].Content["msgtype"] != "m.notice" {
		t.Fatalf("room holds %d bot messages: %+v", len(msgs), msgs)
	}
}
