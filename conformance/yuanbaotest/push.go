package yuanbaotest

import (
	"context"
	"encoding/json"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-host/hermes-host/conformance/yuanbaotest/ybpb"
)

// Recall callbacks.
const (
	CallbackGroupRecall = "Group.CallbackAfterRecallMsg"
	CallbackC2CRecall   = "C2C.CallbackAfterMsgWithDraw"
)

// User is a Yuanbao account that writes to the bot.
type User struct {
	ID, Nick string
}

// Group is a group chat.
type Group struct {
	Code, Name string
}

// Push is an inbound push the fake sends to the bot.
type Push struct {
	MsgID   string
	Seq     uint32
	Msg     *ybpb.InboundMessagePush
	NeedAck bool
	JSON    bool // data is JSON (snake_case), not protobuf
	TIMJSON bool // data is JSON in Tencent IM's PascalCase
	Drop    int  // DropAfterPush or DropDuringPush, once

	// guarded by the server's mutex
	Deliveries  int // times written to a connection
	Acks        int // PushAcks received
	deliveredTo *wsConn
}

// PushOption adjusts a push.
type PushOption func(*Push)

// NoAck sends the push without need_ack.
func NoAck() PushOption { return func(p *Push) { p.NeedAck = false } }

// AsJSON sends the push as a JSON object (snake_case keys) instead of protobuf.
func AsJSON() PushOption { return func(p *Push) { p.JSON = true } }

// AsTIMJSON sends the push as JSON with Tencent IM's PascalCase keys (From_Account, GroupId,
// MsgBody, MsgKey, CloudCustomData).
func AsTIMJSON() PushOption { return func(p *Push) { p.TIMJSON = true } }

// Quoting makes the message quote another (cloud_custom_data).
func Quoting(id, desc, nick string) PushOption {
	return func(p *Push) {
		b, _ := json.Marshal(map[string]any{"quote": map[string]string{"id": id, "desc": desc, "sender_nickname": nick}})
		p.Msg.CloudCustomData = string(b)
	}
}

// DropWhilePushing drops the socket after writing the push (DropAfterPush) or in the middle of
// writing it (DropDuringPush), the first time it is written. For DropDuringPush to put bytes on
// the wire the push must be larger than the connection's write buffer (4 KiB): use a long text.
func DropWhilePushing(mode int) PushOption { return func(p *Push) { p.Drop = mode } }

// Text is a text element.
func Text(s string) *ybpb.MsgBodyElement {
	return &ybpb.MsgBodyElement{MsgType: "TIMTextElem", MsgContent: &ybpb.MsgContent{Text: s}}
}

// Mention is a 1002 mention element of userID, shown as text.
func Mention(userID, text string) *ybpb.MsgBodyElement {
	b, _ := json.Marshal(map[string]any{"elem_type": 1002, "text": text, "user_id": userID})
	return &ybpb.MsgBodyElement{MsgType: "TIMCustomElem", MsgContent: &ybpb.MsgContent{Data: string(b)}}
}

// Image is an image element.
func Image(url string) *ybpb.MsgBodyElement {
	return &ybpb.MsgBodyElement{MsgType: "TIMImageElem", MsgContent: &ybpb.MsgContent{
		ImageInfoArray: []*ybpb.ImageInfo{{Type: 1, Url: url}, {Type: 2, Url: url}}}}
}

// DM pushes a private message from a user to the bot.
func (b *Bot) DM(from User, text string, opts ...PushOption) *Push {
	return b.Push(&ybpb.InboundMessagePush{FromAccount: from.ID, ToAccount: b.botID, SenderNickname: from.Nick,
		MsgBody: []*ybpb.MsgBodyElement{Text(text)}, BotOwnerId: b.owner}, opts...)
}

// GroupText pushes a group message that does not mention the bot.
func (b *Bot) GroupText(g Group, from User, text string, opts ...PushOption) *Push {
	return b.Push(&ybpb.InboundMessagePush{FromAccount: from.ID, SenderNickname: from.Nick, GroupCode: g.Code,
		GroupId: g.Code, GroupName: g.Name, MsgBody: []*ybpb.MsgBodyElement{Text(text)}, BotOwnerId: b.owner}, opts...)
}

// GroupMention pushes a group message that mentions the bot, then says text.
func (b *Bot) GroupMention(g Group, from User, text string, opts ...PushOption) *Push {
	return b.Push(&ybpb.InboundMessagePush{FromAccount: from.ID, SenderNickname: from.Nick, GroupCode: g.Code,
		GroupId: g.Code, GroupName: g.Name, BotOwnerId: b.owner,
		MsgBody: []*ybpb.MsgBodyElement{Mention(b.botID, "@Hermes"), Text(" " + text)}}, opts...)
}

// RecallGroup pushes the recall of group messages.
func (b *Bot) RecallGroup(g Group, by User, msgIDs ...string) *Push {
	p := &ybpb.InboundMessagePush{CallbackCommand: CallbackGroupRecall, FromAccount: by.ID, GroupCode: g.Code, GroupId: g.Code}
	for _, id := range msgIDs {
		p.RecallMsgSeqList = append(p.RecallMsgSeqList, &ybpb.ImMsgSeq{MsgId: id})
	}
	return b.Push(p)
}

// RecallDM pushes the withdrawal of a private message.
func (b *Bot) RecallDM(from User, msgID string) *Push {
	return b.Push(&ybpb.InboundMessagePush{CallbackCommand: CallbackC2CRecall, FromAccount: from.ID, ToAccount: b.botID, MsgId: msgID})
}

// Push sends any push to the bot: at once if it has a bound connection, otherwise after its next
// bind. Without a msg_id one is assigned. Pushes need an acknowledgement unless NoAck is given.
func (b *Bot) Push(m *ybpb.InboundMessagePush, opts ...PushOption) *Push {
	s := b.s
	if m.MsgId == "" && m.CallbackCommand == "" {
		m.MsgId = s.nextMsgID()
	}
	if m.MsgTime == 0 {
		m.MsgTime = uint32(s.clock().Unix())
	}
	p := &Push{MsgID: m.MsgId, Msg: m, NeedAck: true}
	if p.MsgID == "" {
		p.MsgID = s.nextMsgID() // a recall callback: the push's own id, not a message's
	}
	for _, o := range opts {
		o(p)
	}
	s.mu.Lock()
	s.msgs++
	p.Seq = uint32(s.msgs)
	if m.MsgSeq == 0 && m.CallbackCommand == "" {
		m.MsgSeq = p.Seq
	}
	b.pushes = append(b.pushes, p)
	s.mu.Unlock()
	b.deliver()
	return p
}

// Pushes returns the pushes sent so far.
func (b *Bot) Pushes() []Push {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	out := make([]Push, len(b.pushes))
	for i, p := range b.pushes {
		out[i] = *p
	}
	return out
}

// Acked reports how many PushAcks the push got.
func (b *Bot) Acked(p *Push) int {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return p.Acks
}

// deliver writes to the bound connection the pushes never delivered, and those that needed an
// acknowledgement and have none.
func (b *Bot) deliver() {
	s := b.s
	s.mu.Lock()
	c := b.conn
	var due []*Push
	if c != nil {
		for _, p := range b.pushes {
			if p.Deliveries == 0 || (p.NeedAck && p.Acks == 0 && p.deliveredTo != c) {
				p.Deliveries++
				p.deliveredTo = c
				due = append(due, p)
			}
		}
	}
	s.mu.Unlock()
	for _, p := range due {
		data, h := p.encode()
		drop := p.Drop
		p.Drop = 0
		if drop == 0 {
			c.write(h, data)
			continue
		}
		frame, _ := proto.Marshal(&ybpb.ConnMsg{Head: h, Data: data})
		if drop == DropDuringPush {
			ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
			c.wmu.Lock()
			if w, err := c.c.Writer(ctx, websocket.MessageBinary); err == nil {
				w.Write(frame[:len(frame)/2]) // a non-final fragment; never finished
			}
			c.wmu.Unlock()
			cancel()
		} else {
			c.write(h, data)
		}
		b.Drop()
		return
	}
}

func (p *Push) encode() ([]byte, *ybpb.Head) {
	h := &ybpb.Head{CmdType: uint32(ybpb.CmdType_PUSH), Cmd: CmdPush, MsgId: p.MsgID, Module: ModuleBot, NeedAck: p.NeedAck}
	switch {
	case p.JSON:
		return jsonPush(p.Msg, false), h
	case p.TIMJSON:
		return jsonPush(p.Msg, true), h
	}
	data, _ := proto.Marshal(p.Msg)
	return data, h
}

// jsonPush writes a push as JSON, in the bot proxy's snake_case or Tencent IM's PascalCase.
func jsonPush(m *ybpb.InboundMessagePush, tim bool) []byte {
	key := func(snake, pascal string) string {
		if tim {
			return pascal
		}
		return snake
	}
	out := map[string]any{}
	set := func(snake, pascal string, v any) {
		switch x := v.(type) {
		case string:
			if x == "" {
				return
			}
		case uint32:
			if x == 0 {
				return
			}
		}
		out[key(snake, pascal)] = v
	}
	set("callback_command", "CallbackCommand", m.GetCallbackCommand())
	set("from_account", "From_Account", m.GetFromAccount())
	set("to_account", "To_Account", m.GetToAccount())
	set("sender_nickname", "SenderNickname", m.GetSenderNickname())
	set("group_code", "GroupId", m.GetGroupCode())
	set("group_name", "GroupName", m.GetGroupName())
	set("msg_seq", "MsgSeq", m.GetMsgSeq())
	set("msg_time", "MsgTime", m.GetMsgTime())
	set("msg_id", "MsgKey", m.GetMsgId())
	set("cloud_custom_data", "CloudCustomData", m.GetCloudCustomData())
	set("bot_owner_id", "BotOwnerId", m.GetBotOwnerId())
	var body []map[string]any
	for _, el := range m.GetMsgBody() {
		c := el.GetMsgContent()
		content := map[string]any{}
		if c.GetText() != "" {
			content[key("text", "Text")] = c.GetText()
		}
		if c.GetData() != "" {
			content[key("data", "Data")] = c.GetData()
		}
		body = append(body, map[string]any{key("msg_type", "MsgType"): el.GetMsgType(), key("msg_content", "MsgContent"): content})
	}
	if len(body) > 0 {
		out[key("msg_body", "MsgBody")] = body
	}
	var recalls []map[string]any
	for _, r := range m.GetRecallMsgSeqList() {
		recalls = append(recalls, map[string]any{"msg_seq": r.GetMsgSeq(), "msg_id": r.GetMsgId()})
	}
	if len(recalls) > 0 {
		out["recall_msg_seq_list"] = recalls
	}
	b, _ := json.Marshal(out)
	return b
}
