package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
)

const botID = "bot_1001"

var opts = mapOptions{BotID: botID}

func text(s string) element { return element{Type: "TIMTextElem", Content: content{Text: s}} }

func mention(user, shown string) element {
	return element{Type: "TIMCustomElem", Content: content{Data: `{"elem_type":1002,"text":"` + shown + `","user_id":"` + user + `"}`}}
}

func TestMapMessages(t *testing.T) {
	cases := []struct {
		name string
		p    push
		want abi.InboundEvent // ID, Kind, Text, ReplyTo, Mentioned, Source.ChatType/ChatID/UserID/MessageID
		skip string
	}{
		{name: "dm", p: push{From: "u1", Nick: "Ann", MsgID: "m1", Time: 10, Body: []element{text("hello")}},
			want: abi.InboundEvent{ID: "msg:m1", Mentioned: true, Kind: abi.EventMessage, Text: "hello",
				Source: abi.Source{ChatType: abi.ChatDM, ChatID: "u1", UserID: "u1", MessageID: "m1"}}},
		{name: "group chatter is observed", p: push{From: "u1", GroupCode: "g1", MsgID: "m2", Body: []element{text("just chatting")}},
			want: abi.InboundEvent{ID: "msg:m2", Kind: abi.EventObserve, Text: "just chatting",
				Source: abi.Source{ChatType: abi.ChatGroup, ChatID: "g1", UserID: "u1", MessageID: "m2"}}},
		{name: "a mention of the bot is a turn, without the mention", p: push{From: "u1", GroupCode: "g1", MsgID: "m3",
			Body: []element{mention(botID, "@Hermes"), text(" are you there?")}},
			want: abi.InboundEvent{ID: "msg:m3", Mentioned: true, Kind: abi.EventMessage, Text: "are you there?",
				Source: abi.Source{ChatType: abi.ChatGroup, ChatID: "g1", UserID: "u1", MessageID: "m3"}}},
		{name: "a mention of someone else is chatter", p: push{From: "u1", GroupCode: "g1", MsgID: "m4",
			Body: []element{mention("u2", "@Bob"), text(" lunch?")}},
			want: abi.InboundEvent{ID: "msg:m4", Kind: abi.EventObserve, Text: "@Bob  lunch?",
				Source: abi.Source{ChatType: abi.ChatGroup, ChatID: "g1", UserID: "u1", MessageID: "m4"}}},
		{name: "the owner's command needs no mention", p: push{From: "own", OwnerID: "own", GroupCode: "g1", MsgID: "m5",
			Body: []element{text("／new")}},
			want: abi.InboundEvent{ID: "msg:m5", Mentioned: true, Kind: abi.EventMessage, Text: "/new",
				Source: abi.Source{ChatType: abi.ChatGroup, ChatID: "g1", UserID: "own", MessageID: "m5"}}},
		{name: "someone else's command does", p: push{From: "u1", OwnerID: "own", GroupCode: "g1", MsgID: "m6", Body: []element{text("/new")}},
			want: abi.InboundEvent{ID: "msg:m6", Kind: abi.EventObserve, Text: "/new",
				Source: abi.Source{ChatType: abi.ChatGroup, ChatID: "g1", UserID: "u1", MessageID: "m6"}}},
		{name: "quote", p: push{From: "u1", MsgID: "m7", Body: []element{text("and this?")},
			CloudCustomData: `{"quote":{"id":"m1","desc":"hello","sender_nickname":"Ann"}}`},
			want: abi.InboundEvent{ID: "msg:m7", Mentioned: true, Kind: abi.EventMessage, Text: "[quoting Ann: hello]\nand this?", ReplyTo: "m1",
				Source: abi.Source{ChatType: abi.ChatDM, ChatID: "u1", UserID: "u1", MessageID: "m7"}}},
		{name: "media and cards", p: push{From: "u1", MsgKey: "k8", Body: []element{{Type: "TIMImageElem"}, {Type: "TIMFileElem",
			Content: content{FileName: "a.pdf"}}, {Type: "TIMFaceElem", Content: content{Data: `{"name":"smile"}`}},
			{Type: "TIMCustomElem", Content: content{Data: `{"elem_type":1010,"title":"T","link":"https://l"}`}}, {Type: "TIMLocationElem"}}},
			want: abi.InboundEvent{ID: "msg:k8", Mentioned: true, Kind: abi.EventMessage, Text: "[image] [file: a.pdf] [emoji: smile] [share card: T | https://l] [TIMLocationElem]",
				Source: abi.Source{ChatType: abi.ChatDM, ChatID: "u1", UserID: "u1", MessageID: "k8"}}},
		{name: "self echo", p: push{From: botID, MsgID: "m9", Body: []element{text("my own answer")}}, skip: "own"},
		{name: "no sender", p: push{MsgID: "m10", Body: []element{text("x")}}, skip: "from_account"},
		{name: "empty", p: push{From: "u1", MsgID: "m11"}, skip: "content"},
	}
	for _, c := range cases {
		m := mapPush(&c.p, opts)
		if c.skip != "" {
			if m.Event != nil || !strings.Contains(m.Skip, c.skip) {
				t.Errorf("%s: want a skip (%s), got %+v", c.name, c.skip, m)
			}
			continue
		}
		ev := m.Event
		if ev == nil {
			t.Errorf("%s: skipped: %s", c.name, m.Skip)
			continue
		}
		got := abi.InboundEvent{ID: ev.ID, Mentioned: ev.Mentioned, Kind: ev.Kind, Text: ev.Text, ReplyTo: ev.ReplyTo, Source: abi.Source{
			ChatType: ev.Source.ChatType, ChatID: ev.Source.ChatID, UserID: ev.Source.UserID, MessageID: ev.Source.MessageID}}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got  %+v\n want %+v", c.name, got, c.want)
		}
	}
}

func TestMapRecalls(t *testing.T) {
	m := mapPush(&push{Callback: callbackGroupRecall, GroupCode: "g1", From: "u1",
		Recalls: []recallRef{{MsgID: "m1"}, {Seq: 7}, {}}}, opts)
	want := []recallTarget{{ChatType: abi.ChatGroup, ChatID: "g1", UserID: "u1", MsgID: "m1"}, {ChatType: abi.ChatGroup, ChatID: "g1", UserID: "u1", Seq: 7}}
	if m.Event != nil || len(m.Recalls) != 2 || m.Recalls[0] != want[0] || m.Recalls[1] != want[1] {
		t.Fatalf("group recall: %+v", m)
	}
	m = mapPush(&push{Callback: callbackC2CRecall, From: "u1", MsgID: "m2", Seq: 3}, opts)
	if len(m.Recalls) != 1 || m.Recalls[0] != (recallTarget{ChatType: abi.ChatDM, ChatID: "u1", UserID: "u1", MsgID: "m2", Seq: 3}) {
		t.Fatalf("c2c recall: %+v", m)
	}
}

func TestJSONPushes(t *testing.T) {
	snake := `{"from_account":"u1","group_code":"g1","msg_id":"m1","msg_seq":5,"sender_nickname":"Ann",
	  "msg_body":[{"msg_type":"TIMCustomElem","msg_content":{"data":"{\"elem_type\":1002,\"text\":\"@H\",\"user_id\":\"bot_1001\"}"}},
	              {"msg_type":"TIMTextElem","msg_content":{"text":"hi"}}],
	  "cloud_custom_data":"{\"quote\":{\"id\":\"m0\"}}"}`
	tim := `{"From_Account":"u1","GroupId":"g1","MsgKey":"m1","MsgSeq":"5","MsgBody":[
	  {"MsgType":"TIMCustomElem","MsgContent":{"Data":{"elem_type":1002,"text":"@H","user_id":"bot_1001"}}},
	  {"MsgType":"TIMTextElem","MsgContent":"{\"Text\":\"hi\"}"}],"CloudCustomData":"{\"quote\":{\"id\":\"m0\"}}"}`
	for name, raw := range map[string]string{"snake_case": snake, "Tencent IM": tim} {
		p, err := decodePush([]byte(raw))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m := mapPush(p, opts)
		if ev := m.Event; ev == nil || ev.ID != "msg:m1" || ev.Kind != abi.EventMessage || ev.Text != "hi" || ev.ReplyTo != "m0" ||
			ev.Source.ChatType != abi.ChatGroup || ev.Source.ChatID != "g1" || m.Seq != 5 {
			t.Fatalf("%s: %+v", name, m)
		}
	}
	recall, err := decodePush([]byte(`{"callback_command":"Group.CallbackAfterRecallMsg","group_code":"g1","recall_msg_seq_list":[{"msg_seq":5,"msg_id":"m1"}]}`))
	if err != nil || len(recall.Recalls) != 1 || recall.Recalls[0].MsgID != "m1" || recall.Recalls[0].Seq != 5 {
		t.Fatalf("JSON recall: %+v %v", recall, err)
	}
	if _, err := decodePush([]byte(`{"unrelated":true}`)); err == nil {
		t.Fatal("a JSON object that is no push decoded")
	}
}
