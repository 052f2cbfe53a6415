package yuanbaotest

import (
	"encoding/hex"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/hermes-host/hermes-host/conformance/yuanbaotest/ybpb"
)

// TestGoldenBytes checks the fake's schema (ybpb/yuanbao.proto) against the field table of the
// Yuanbao gateway (ConnMsg{head=1, data=2}; Head{cmd_type=1, cmd=2, seq_no=3, msg_id=4,
// module=5, need_ack=6, status=10}; AuthBindReq{biz_id=1, auth_info=2{uid=1, source=2,
// token=3}, device_info=3{app_version=1, app_operation_system=2, instance_id=10,
// bot_version=24}, env_name=5}; InboundMessagePush…; SendC2CMessageReq…; heartbeats…). The
// expected bytes are written out by hand from that table (tag = field<<3 | wire type), so a wrong
// field number in the schema, the fake or the plugin's codec (checked against this schema in
// its own tests) shows up here.
func TestGoldenBytes(t *testing.T) {
	cases := []struct {
		name string
		msg  proto.Message
		hex  string // spaces separate fields for reading
	}{
		{"Head", &ybpb.Head{CmdType: 2, Cmd: "ping", SeqNo: 3, MsgId: "m", Module: "x", NeedAck: true, Status: -1},
			"0802 120470696e67 1803 22016d 2a0178 3001 50ffffffffffffffffff01"},
		{"ConnMsg", &ybpb.ConnMsg{Head: &ybpb.Head{CmdType: 1}, Data: []byte{0xaa}},
			"0a020801 1201aa"},
		{"AuthBindReq", &ybpb.AuthBindReq{BizId: "ybBot", AuthInfo: &ybpb.AuthInfo{Uid: "b", Source: "s", Token: "t"},
			DeviceInfo: &ybpb.DeviceInfo{AppVersion: "1", AppOperationSystem: "o", InstanceId: "17", BotVersion: "v"}, EnvName: "e"},
			"0a057962426f74 1209 0a0162 120173 1a0174 1a0e 0a0131 12016f 52023137 c2010176 2a0165"},
		{"AuthBindRsp", &ybpb.AuthBindRsp{Code: 5, Message: "m", ConnectId: "c"}, "0805 12016d 1a0163"},
		{"InboundMessagePush", &ybpb.InboundMessagePush{CallbackCommand: "c", FromAccount: "f", ToAccount: "t", SenderNickname: "n",
			GroupId: "i", GroupCode: "g", GroupName: "N", MsgSeq: 8, MsgRandom: 9, MsgTime: 10, MsgKey: "k", MsgId: "m",
			MsgBody: []*ybpb.MsgBodyElement{{MsgType: "T", MsgContent: &ybpb.MsgContent{Text: "x"}}}, CloudCustomData: "q", EventTime: 15,
			BotOwnerId: "o", RecallMsgSeqList: []*ybpb.ImMsgSeq{{MsgSeq: 1, MsgId: "r"}}, ClawMsgType: 18, PrivateFromGroupCode: "p",
			LogExt: &ybpb.LogInfoExt{TraceId: "z"}},
			"0a0163 120166 1a0174 22016e 2a0169 320167 3a014e 4008 4809 500a 5a016b 62016d 6a08 0a0154 1203 0a0178 720171 780f" +
				" 8201016f 8a0105 0801 120172 9001 12 9a010170 a20103 0a017a"},
		{"MsgContent", &ybpb.MsgContent{Text: "a", Uuid: "u", ImageFormat: 3, Data: "d", Desc: "e", Ext: "x", Sound: "s",
			ImageInfoArray: []*ybpb.ImageInfo{{Type: 1, Size: 2, Width: 3, Height: 4, Url: "l"}}, Index: 9, Url: "r", FileSize: 11,
			FileName: "f", ExtMap: map[string]string{"k": "v"}},
			"0a0161 120175 1803 220164 2a0165 320178 3a0173 420b 0801 1002 1803 2004 2a016c 4809 520172 580b 620166 ba3e06 0a016b 120176"},
		{"SendC2CMessageReq", &ybpb.SendC2CMessageReq{MsgId: "m", ToAccount: "t", FromAccount: "f", MsgRandom: 4,
			MsgBody: []*ybpb.MsgBodyElement{{MsgType: "T"}}, GroupCode: "g", MsgSeq: 7, LogExt: &ybpb.LogInfoExt{TraceId: "z"}},
			"0a016d 120174 1a0166 2004 2a03 0a0154 320167 3807 4203 0a017a"},
		{"SendGroupMessageReq", &ybpb.SendGroupMessageReq{MsgId: "m", GroupCode: "g", FromAccount: "f", ToAccount: "t", Random: "r",
			MsgBody: []*ybpb.MsgBodyElement{{MsgType: "T"}}, RefMsgId: "q", MsgSeq: 8, LogExt: &ybpb.LogInfoExt{TraceId: "z"}},
			"0a016d 120167 1a0166 220174 2a0172 3203 0a0154 3a0171 4008 4a03 0a017a"},
		{"SendPrivateHeartbeatReq", &ybpb.SendPrivateHeartbeatReq{FromAccount: "f", ToAccount: "t", Heartbeat: Running},
			"0a0166 120174 1801"},
		{"SendGroupHeartbeatReq", &ybpb.SendGroupHeartbeatReq{FromAccount: "f", GroupCode: "g", SendTime: 300, Heartbeat: Finish},
			"0a0166 1a0167 20ac02 2802"},
	}
	for _, c := range cases {
		got, err := proto.MarshalOptions{Deterministic: true}.Marshal(c.msg)
		if err != nil {
			t.Fatal(err)
		}
		want, err := hex.DecodeString(strings.ReplaceAll(c.hex, " ", ""))
		if err != nil {
			t.Fatalf("%s: bad golden hex: %v", c.name, err)
		}
		if hex.EncodeToString(got) != hex.EncodeToString(want) {
			t.Errorf("%s:\n got  %x\n want %x", c.name, got, want)
		}
	}
}
