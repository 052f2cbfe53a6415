package main

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
)

// FuzzParseFrame feeds arbitrary bytes to the frame decoder and, for what decodes, to the push
// decoder (protobuf or JSON) and the mapping to events (seed corpus in
// testdata/fuzz/FuzzParseFrame: pushes of every kind, replies, truncated and empty frames). It
// must never panic; a decoded head must survive re-encoding; every event must be well formed.
func FuzzParseFrame(f *testing.F) {
	f.Add([]byte{})
	f.Add((&frame{Head: head{CmdType: cmdPush, Cmd: "inbound_message_push", MsgID: "m", NeedAck: true},
		Data: []byte(`{"from_account":"u","msg_id":"m","msg_body":[{"msg_type":"TIMTextElem","msg_content":{"text":"hi"}}]}`)}).marshal())
	f.Fuzz(func(t *testing.T, raw []byte) {
		fr, err := parseFrame(raw)
		if err != nil {
			return
		}
		again, err := parseFrame((&frame{Head: fr.Head, Data: fr.Data}).marshal())
		if err != nil || again.Head != fr.Head || string(again.Data) != string(fr.Data) {
			t.Fatalf("head %+v did not survive re-encoding: %+v %v", fr.Head, again, err)
		}
		parseReply(fr.Data)
		p, err := decodePush(fr.Data)
		if err != nil {
			return
		}
		m := mapPush(p, mapOptions{BotID: "bot_1001"})
		if ev := m.Event; ev != nil {
			switch {
			case ev.ID != "" && !strings.HasPrefix(ev.ID, "msg:"):
				t.Fatalf("event id %q", ev.ID)
			case ev.Kind != abi.EventMessage && ev.Kind != abi.EventObserve:
				t.Fatalf("kind %q", ev.Kind)
			case ev.Source.ChatType != abi.ChatDM && ev.Source.ChatType != abi.ChatGroup:
				t.Fatalf("chat type %q", ev.Source.ChatType)
			case ev.Source.ChatID == "" || ev.Source.UserID == "":
				t.Fatalf("chat %q user %q", ev.Source.ChatID, ev.Source.UserID)
			case ev.Source.UserID == "bot_1001":
				t.Fatal("the bot's own message became an event")
			case !utf8.ValidString(ev.Text):
				t.Fatalf("invalid UTF-8 text %q", ev.Text)
			case ev.Source.ChatType == abi.ChatDM && ev.Kind != abi.EventMessage:
				t.Fatal("a private message was only observed")
			}
		}
		for _, r := range m.Recalls {
			if r.MsgID == "" && r.Seq == 0 {
				t.Fatalf("recall without id or sequence: %+v", r)
			}
		}
		if m.Event == nil && len(m.Recalls) == 0 && m.Skip == "" && p.Callback == "" {
			t.Fatalf("push neither mapped nor skipped: %+v", p)
		}
	})
}
