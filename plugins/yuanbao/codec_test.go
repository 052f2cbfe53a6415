//go:build !wasip1

package main

import (
	"bytes"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/hermes-host/hermes-host/conformance/yuanbaotest/ybpb"
)

// The plugin's hand-written codec is cross-checked against the protobuf-go runtime with the
// messages generated from conformance/yuanbaotest/ybpb/yuanbao.proto: what the plugin encodes
// must be byte for byte what protobuf-go encodes (deterministically) for the same message, and
// what protobuf-go encodes the plugin must decode to the same values.

var deterministic = proto.MarshalOptions{Deterministic: true}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := deterministic.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEncodingMatchesProtobuf(t *testing.T) {
	body := []element{
		{Type: "TIMTextElem", Content: content{Text: "héllo"}},
		{Type: "TIMCustomElem", Content: content{Data: `{"elem_type":1002}`, ExtMap: map[string]string{"b": "2", "a": "1"}}},
		{Type: "TIMImageElem", Content: content{Images: []imageInfo{{Type: 1, Size: 10, Width: 3, Height: 4, URL: "u"}}, FileSize: 9, FileName: "f"}},
	}
	pbBody := []*ybpb.MsgBodyElement{
		{MsgType: "TIMTextElem", MsgContent: &ybpb.MsgContent{Text: "héllo"}},
		{MsgType: "TIMCustomElem", MsgContent: &ybpb.MsgContent{Data: `{"elem_type":1002}`, ExtMap: map[string]string{"a": "1", "b": "2"}}},
		{MsgType: "TIMImageElem", MsgContent: &ybpb.MsgContent{ImageInfoArray: []*ybpb.ImageInfo{{Type: 1, Size: 10, Width: 3, Height: 4, Url: "u"}},
			FileSize: 9, FileName: "f"}},
	}
	cases := []struct {
		name string
		ours []byte
		pb   proto.Message
	}{
		{"head with negative status", (&head{CmdType: cmdResponse, Cmd: "ping", SeqNo: 7, MsgID: "m", Module: "conn_access", NeedAck: true, Status: -3}).marshal(),
			&ybpb.Head{CmdType: 1, Cmd: "ping", SeqNo: 7, MsgId: "m", Module: "conn_access", NeedAck: true, Status: -3}},
		{"empty head", (&head{}).marshal(), &ybpb.Head{}},
		{"ping frame", (&frame{Head: head{Cmd: "ping", MsgID: "p1", Module: moduleConn}}).marshal(),
			&ybpb.ConnMsg{Head: &ybpb.Head{Cmd: "ping", MsgId: "p1", Module: moduleConn}}},
		{"auth bind", (&authBind{BizID: "ybBot", UID: "bot", Source: "bot", Token: "t", AppVersion: "1", OS: "os", InstanceID: "17", BotVersion: "2", EnvName: "e"}).marshal(),
			&ybpb.AuthBindReq{BizId: "ybBot", AuthInfo: &ybpb.AuthInfo{Uid: "bot", Source: "bot", Token: "t"},
				DeviceInfo: &ybpb.DeviceInfo{AppVersion: "1", AppOperationSystem: "os", InstanceId: "17", BotVersion: "2"}, EnvName: "e"}},
		{"send c2c", (&sendC2C{MsgID: "c2c_1", To: "u", From: "bot", Random: 4000000000, Body: body, GroupCode: "g"}).marshal(),
			&ybpb.SendC2CMessageReq{MsgId: "c2c_1", ToAccount: "u", FromAccount: "bot", MsgRandom: 4000000000, MsgBody: pbBody, GroupCode: "g"}},
		{"send group", (&sendGroup{MsgID: "grp_1", GroupCode: "g", From: "bot", To: "u", Random: "r", Body: body, RefMsgID: "q"}).marshal(),
			&ybpb.SendGroupMessageReq{MsgId: "grp_1", GroupCode: "g", FromAccount: "bot", ToAccount: "u", Random: "r", MsgBody: pbBody, RefMsgId: "q"}},
		{"private heartbeat", privateHeartbeat("bot", "u", heartbeatRun), &ybpb.SendPrivateHeartbeatReq{FromAccount: "bot", ToAccount: "u", Heartbeat: 1}},
		{"group heartbeat", groupHeartbeat("bot", "g", 1764403200123, heartbeatDone),
			&ybpb.SendGroupHeartbeatReq{FromAccount: "bot", GroupCode: "g", SendTime: 1764403200123, Heartbeat: 2}},
	}
	for _, c := range cases {
		if want := mustMarshal(t, c.pb); !bytes.Equal(c.ours, want) {
			t.Errorf("%s:\n ours     %x\n protobuf %x", c.name, c.ours, want)
		}
	}
}

func TestDecodingMatchesProtobuf(t *testing.T) {
	pb := &ybpb.InboundMessagePush{
		CallbackCommand: "cb", FromAccount: "u", ToAccount: "bot", SenderNickname: "Ann", GroupId: "gid", GroupCode: "g",
		GroupName: "G", MsgSeq: 4294967295, MsgRandom: 5, MsgTime: 1764403200, MsgKey: "k", MsgId: "m",
		MsgBody: []*ybpb.MsgBodyElement{
			{MsgType: "TIMTextElem", MsgContent: &ybpb.MsgContent{Text: "hi"}},
			{MsgType: "TIMFileElem", MsgContent: &ybpb.MsgContent{Url: "https://x/?resourceId=r", FileSize: 12, FileName: "a.pdf", Uuid: "uu",
				Desc: "d", Ext: "e", Sound: "s", ExtMap: map[string]string{"k": "v"},
				ImageInfoArray: []*ybpb.ImageInfo{{Type: 1, Size: 2, Width: 3, Height: 4, Url: "i"}}}},
		},
		CloudCustomData: `{"quote":{}}`, EventTime: 9, BotOwnerId: "o",
		RecallMsgSeqList: []*ybpb.ImMsgSeq{{MsgSeq: 1 << 40, MsgId: "r1"}, {MsgSeq: 2}},
		ClawMsgType:      3, PrivateFromGroupCode: "pg", LogExt: &ybpb.LogInfoExt{TraceId: "tr"},
	}
	got, err := parsePush(mustMarshal(t, pb))
	if err != nil {
		t.Fatal(err)
	}
	want := &push{Callback: "cb", From: "u", To: "bot", Nick: "Ann", GroupID: "gid", GroupCode: "g", GroupName: "G",
		Seq: 4294967295, Random: 5, Time: 1764403200, MsgKey: "k", MsgID: "m",
		Body: []element{
			{Type: "TIMTextElem", Content: content{Text: "hi"}},
			{Type: "TIMFileElem", Content: content{URL: "https://x/?resourceId=r", FileSize: 12, FileName: "a.pdf", UUID: "uu", Desc: "d",
				Ext: "e", Sound: "s", ExtMap: map[string]string{"k": "v"}, Images: []imageInfo{{Type: 1, Size: 2, Width: 3, Height: 4, URL: "i"}}}},
		},
		CloudCustomData: `{"quote":{}}`, OwnerID: "o", Recalls: []recallRef{{Seq: 1 << 40, MsgID: "r1"}, {Seq: 2}},
		PrivateFromGroup: "pg", TraceID: "tr"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("push:\n got  %+v\n want %+v", got, want)
	}

	fr, err := parseFrame(mustMarshal(t, &ybpb.ConnMsg{Head: &ybpb.Head{CmdType: 2, Cmd: "c", SeqNo: 1, MsgId: "m", Module: "mod", NeedAck: true, Status: -1},
		Data: []byte{1, 2}}))
	if err != nil || fr.Head != (head{CmdType: 2, Cmd: "c", SeqNo: 1, MsgID: "m", Module: "mod", NeedAck: true, Status: -1}) || !bytes.Equal(fr.Data, []byte{1, 2}) {
		t.Fatalf("frame %+v %v", fr, err)
	}
	rep, err := parseReply(mustMarshal(t, &ybpb.AuthBindRsp{Code: -7, Message: "no", ConnectId: "c1"}))
	if err != nil || rep != (reply{Code: -7, Message: "no", ConnectID: "c1"}) {
		t.Fatalf("auth reply %+v %v", rep, err)
	}
	rep, err = parseReply(mustMarshal(t, &ybpb.SendMessageRsp{Code: 3, Message: "busy"}))
	if err != nil || rep != (reply{Code: 3, Message: "busy"}) {
		t.Fatalf("send reply %+v %v", rep, err)
	}
}

func TestDecodingToleratesWhatProtobufAllows(t *testing.T) {
	// Unknown fields and fields out of order are fine; a field of the wrong wire type is skipped;
	// invalid UTF-8 is replaced; a truncated message is an error.
	unknown := append(mustMarshal(t, &ybpb.Head{MsgId: "m"}), 0xa8, 0x1f, 0x01) // field 501, varint 1
	if h, err := parseHead(unknown); err != nil || h.MsgID != "m" {
		t.Fatalf("unknown field: %+v %v", h, err)
	}
	reordered := append(mustMarshal(t, &ybpb.Head{Module: "mod"}), mustMarshal(t, &ybpb.Head{CmdType: 2})...)
	if h, err := parseHead(reordered); err != nil || h.Module != "mod" || h.CmdType != 2 {
		t.Fatalf("reordered: %+v %v", h, err)
	}
	wrongType := []byte{0x0a, 0x01, 'x'} // cmd_type (1) as a string
	if h, err := parseHead(wrongType); err != nil || h.CmdType != 0 {
		t.Fatalf("wrong type: %+v %v", h, err)
	}
	badUTF8 := []byte{0x12, 0x02, 0xff, 'a'} // cmd = "\xffa"
	if h, err := parseHead(badUTF8); err != nil || h.Cmd != "\uFFFDa" {
		t.Fatalf("bad UTF-8: %+v %v", h, err)
	}
	full := mustMarshal(t, &ybpb.ConnMsg{Head: &ybpb.Head{MsgId: "abcdef"}, Data: []byte("xyz")})
	headField := 2 + len(mustMarshal(t, &ybpb.Head{MsgId: "abcdef"})) // a cut after it is a whole message without data
	for n := 1; n < len(full); n++ {
		if _, err := parseFrame(full[:n]); err == nil && n != headField {
			t.Fatalf("truncated at %d of %d bytes: no error", n, len(full))
		}
	}
}

// benchPush is a typical group message push: a mention, a text, a quote.
func benchPush(b *testing.B) []byte {
	return mustMarshal(b, &ybpb.ConnMsg{Head: &ybpb.Head{CmdType: 2, Cmd: "inbound_message_push", MsgId: "msg-1", Module: moduleBot, NeedAck: true},
		Data: mustMarshal(b, &ybpb.InboundMessagePush{FromAccount: "u_ann", SenderNickname: "Ann", GroupCode: "g_team", GroupName: "Team",
			MsgSeq: 42, MsgTime: 1764403200, MsgId: "msg-1", BotOwnerId: "owner",
			CloudCustomData: `{"quote":{"id":"msg-0","desc":"earlier","sender_nickname":"Bob"}}`,
			MsgBody: []*ybpb.MsgBodyElement{
				{MsgType: "TIMCustomElem", MsgContent: &ybpb.MsgContent{Data: `{"elem_type":1002,"text":"@Hermes","user_id":"bot_1001"}`}},
				{MsgType: "TIMTextElem", MsgContent: &ybpb.MsgContent{Text: " could you check the build log and tell me what failed?"}},
			}})})
}

// BenchmarkDecodePush compares the hand-written decoder with protobuf-go (generated code) on the
// same frame: ConnMsg, then the push inside it.
func BenchmarkDecodePush(b *testing.B) {
	raw := benchPush(b)
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			fr, err := parseFrame(raw)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := parsePush(fr.Data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protobuf-go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m ybpb.ConnMsg
			var p ybpb.InboundMessagePush
			if err := proto.Unmarshal(raw, &m); err != nil {
				b.Fatal(err)
			}
			if err := proto.Unmarshal(m.Data, &p); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncodeSend compares encoding a group send request and its frame.
func BenchmarkEncodeSend(b *testing.B) {
	text := "The build failed in step 3: the linker ran out of memory. Retrying with -j2 should do."
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req := sendGroup{MsgID: "grp_1", GroupCode: "g_team", From: "bot_1001", Random: "12345", Body: textBody(text), RefMsgID: "msg-1"}
			f := frame{Head: head{Cmd: cmdSendGroup, MsgID: "grp_1", Module: moduleBot}, Data: req.marshal()}
			_ = f.marshal()
		}
	})
	b.Run("protobuf-go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req := &ybpb.SendGroupMessageReq{MsgId: "grp_1", GroupCode: "g_team", FromAccount: "bot_1001", Random: "12345", RefMsgId: "msg-1",
				MsgBody: []*ybpb.MsgBodyElement{{MsgType: "TIMTextElem", MsgContent: &ybpb.MsgContent{Text: text}}}}
			data, _ := proto.Marshal(req)
			proto.Marshal(&ybpb.ConnMsg{Head: &ybpb.Head{Cmd: cmdSendGroup, MsgId: "grp_1", Module: moduleBot}, Data: data})
		}
	})
}
