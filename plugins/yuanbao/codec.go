package main

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file is the Yuanbao wire codec: each binary WebSocket frame is one protobuf ConnMsg
// {head = 1: Head, data = 2: bytes}, and data holds a business message (AuthBindReq, a push, a
// send request…). The messages are written by hand over protowire, the wire-format layer of
// google.golang.org/protobuf, instead of generated code. Generated code builds for wasip1, but
// it brings protobuf-go's reflection-based runtime into the plugin (a trivial plugin grows from
// 3.7 MB to 7.2 MB of Wasm, and every instance initialises that runtime), while the plugin needs a
// dozen small messages; the hand-written codec is also faster (BenchmarkDecodePush,
// BenchmarkEncodeSend). Field numbers are those of the Python adapter's codec;
// conformance/yuanbaotest/ybpb/yuanbao.proto describes the same messages for protoc, and the
// tests check this codec byte for byte against the generated one.
//
// Decoding follows protobuf's rules: fields may come in any order, unknown fields and fields of
// an unexpected wire type are skipped, the last value of a repeated scalar wins, and a string
// that is not valid UTF-8 has its bad bytes replaced.

// Head.cmd_type values.
const (
	cmdRequest  = 0
	cmdResponse = 1
	cmdPush     = 2
	cmdPushAck  = 3
)

// Connection-layer commands and modules.
const (
	cmdAuthBind   = "auth-bind"
	cmdPing       = "ping"
	moduleConn    = "conn_access"
	moduleBot     = "yuanbao_openclaw_proxy"
	cmdSendC2C    = "send_c2c_message"
	cmdSendGroup  = "send_group_message"
	cmdPrivateHB  = "send_private_heartbeat"
	cmdGroupHB    = "send_group_heartbeat"
	heartbeatRun  = 1 // RUNNING: the bot is preparing an answer
	heartbeatDone = 2 // FINISH
)

// head is ConnMsg.Head.
type head struct {
	CmdType uint32 // 1
	Cmd     string // 2
	SeqNo   uint32 // 3
	MsgID   string // 4
	Module  string // 5
	NeedAck bool   // 6
	Status  int32  // 10
}

// frame is one ConnMsg.
type frame struct {
	Head head
	Data []byte
}

// errTruncated reports a message that ends inside a field.
var errTruncated = errors.New("truncated protobuf message")

// --- encoding ---

// enc appends fields in field-number order, leaving out zero values as proto3 does.
type enc []byte

func (e *enc) str(n protowire.Number, s string) {
	if s != "" {
		*e = protowire.AppendTag(*e, n, protowire.BytesType)
		*e = protowire.AppendString(*e, s)
	}
}

func (e *enc) raw(n protowire.Number, b []byte) {
	if len(b) > 0 {
		*e = protowire.AppendTag(*e, n, protowire.BytesType)
		*e = protowire.AppendBytes(*e, b)
	}
}

// msg writes an embedded message, even an empty one (it is then present but empty).
func (e *enc) msg(n protowire.Number, b []byte) {
	*e = protowire.AppendTag(*e, n, protowire.BytesType)
	*e = protowire.AppendBytes(*e, b)
}

func (e *enc) uint(n protowire.Number, v uint64) {
	if v != 0 {
		*e = protowire.AppendTag(*e, n, protowire.VarintType)
		*e = protowire.AppendVarint(*e, v)
	}
}

// int32 writes a signed int32 as protobuf does: negative values sign-extended to 64 bits.
func (e *enc) int32(n protowire.Number, v int32) { e.uint(n, uint64(int64(v))) }

func (e *enc) bool(n protowire.Number, v bool) {
	if v {
		e.uint(n, 1)
	}
}

func (h *head) marshal() []byte {
	var e enc
	e.uint(1, uint64(h.CmdType))
	e.str(2, h.Cmd)
	e.uint(3, uint64(h.SeqNo))
	e.str(4, h.MsgID)
	e.str(5, h.Module)
	e.bool(6, h.NeedAck)
	e.int32(10, h.Status)
	return e
}

// marshal encodes the frame as a ConnMsg.
func (f *frame) marshal() []byte {
	var e enc
	e.msg(1, f.Head.marshal())
	e.raw(2, f.Data)
	return e
}

// authBind is AuthBindReq.
type authBind struct {
	BizID      string // 1
	UID        string // 2.1
	Source     string // 2.2
	Token      string // 2.3
	AppVersion string // 3.1
	OS         string // 3.2
	InstanceID string // 3.10
	BotVersion string // 3.24
	EnvName    string // 5
}

func (a *authBind) marshal() []byte {
	var info, dev, e enc
	info.str(1, a.UID)
	info.str(2, a.Source)
	info.str(3, a.Token)
	dev.str(1, a.AppVersion)
	dev.str(2, a.OS)
	dev.str(10, a.InstanceID)
	dev.str(24, a.BotVersion)
	e.str(1, a.BizID)
	e.msg(2, info)
	e.msg(3, dev)
	e.str(5, a.EnvName)
	return e
}

// element is one MsgBodyElement: a TIM element type and its content.
type element struct {
	Type    string  // 1, e.g. "TIMTextElem"
	Content content // 2
}

// content is MsgContent, the fields the plugin reads or writes.
type content struct {
	Text     string            // 1
	UUID     string            // 2
	Data     string            // 4 (TIMCustomElem: JSON)
	Desc     string            // 5
	Ext      string            // 6
	Sound    string            // 7
	Images   []imageInfo       // 8
	URL      string            // 10
	FileSize uint64            // 11
	FileName string            // 12
	ExtMap   map[string]string // 999
}

type imageInfo struct {
	Type, Size, Width, Height uint64
	URL                       string
}

func (c *content) marshal() []byte {
	var e enc
	e.str(1, c.Text)
	e.str(2, c.UUID)
	e.str(4, c.Data)
	e.str(5, c.Desc)
	e.str(6, c.Ext)
	e.str(7, c.Sound)
	for _, im := range c.Images {
		var m enc
		m.uint(1, im.Type)
		m.uint(2, im.Size)
		m.uint(3, im.Width)
		m.uint(4, im.Height)
		m.str(5, im.URL)
		e.msg(8, m)
	}
	e.str(10, c.URL)
	e.uint(11, c.FileSize)
	e.str(12, c.FileName)
	for _, k := range sortedKeys(c.ExtMap) {
		var m enc
		m.str(1, k)
		m.str(2, c.ExtMap[k])
		e.msg(999, m)
	}
	return e
}

func (el *element) marshal() []byte {
	var e enc
	e.str(1, el.Type)
	e.msg(2, el.Content.marshal())
	return e
}

// textBody is a message body of one text element.
func textBody(text string) []element {
	return []element{{Type: "TIMTextElem", Content: content{Text: text}}}
}

// sendC2C is SendC2CMessageReq.
type sendC2C struct {
	MsgID, To, From string // 1, 2, 3
	Random          uint32 // 4
	Body            []element
	GroupCode       string // 6
}

func (s *sendC2C) marshal() []byte {
	var e enc
	e.str(1, s.MsgID)
	e.str(2, s.To)
	e.str(3, s.From)
	e.uint(4, uint64(s.Random))
	for i := range s.Body {
		e.msg(5, s.Body[i].marshal())
	}
	e.str(6, s.GroupCode)
	return e
}

// sendGroup is SendGroupMessageReq.
type sendGroup struct {
	MsgID, GroupCode, From, To, Random string // 1, 2, 3, 4, 5
	Body                               []element
	RefMsgID                           string // 7: the quoted message
}

func (s *sendGroup) marshal() []byte {
	var e enc
	e.str(1, s.MsgID)
	e.str(2, s.GroupCode)
	e.str(3, s.From)
	e.str(4, s.To)
	e.str(5, s.Random)
	for i := range s.Body {
		e.msg(6, s.Body[i].marshal())
	}
	e.str(7, s.RefMsgID)
	return e
}

// privateHeartbeat is SendPrivateHeartbeatReq; groupHeartbeat is SendGroupHeartbeatReq.
func privateHeartbeat(from, to string, hb uint32) []byte {
	var e enc
	e.str(1, from)
	e.str(2, to)
	e.uint(3, uint64(hb))
	return e
}

func groupHeartbeat(from, groupCode string, sendTimeMs int64, hb uint32) []byte {
	var e enc
	e.str(1, from)
	e.str(3, groupCode)
	e.uint(4, uint64(sendTimeMs))
	e.uint(5, uint64(hb))
	return e
}

// --- decoding ---

// field is one decoded field: its number and type, and its value (Varint for VarintType and
// the fixed types, Bytes for BytesType).
type field struct {
	Num    protowire.Number
	Type   protowire.Type
	Varint uint64
	Bytes  []byte
}

// fields calls fn for each field of the message b, in wire order. Groups are skipped.
func fields(b []byte, fn func(f field)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("field tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		f := field{Num: num, Type: typ}
		switch typ {
		case protowire.VarintType:
			f.Varint, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			f.Varint = uint64(v)
		case protowire.Fixed64Type:
			f.Varint, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			f.Bytes, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.StartGroupType {
			fn(f)
		}
	}
	return nil
}

// str reads a string field, replacing invalid UTF-8.
func (f field) str() string {
	if f.Type != protowire.BytesType {
		return ""
	}
	if utf8.Valid(f.Bytes) {
		return string(f.Bytes)
	}
	return strings.ToValidUTF8(string(f.Bytes), "\uFFFD")
}

// isVarint reports a varint-typed field (the only encoding of the integer fields used here).
func (f field) isVarint() bool { return f.Type == protowire.VarintType }

func (f field) isBytes() bool { return f.Type == protowire.BytesType }

// parseFrame decodes a ConnMsg.
func parseFrame(b []byte) (*frame, error) {
	fr := &frame{}
	var headErr error
	err := fields(b, func(f field) {
		switch {
		case f.Num == 1 && f.isBytes():
			fr.Head, headErr = parseHead(f.Bytes)
		case f.Num == 2 && f.isBytes():
			fr.Data = f.Bytes
		}
	})
	if err == nil {
		err = headErr
	}
	if err != nil {
		return nil, fmt.Errorf("ConnMsg: %w", err)
	}
	return fr, nil
}

func parseHead(b []byte) (head, error) {
	var h head
	err := fields(b, func(f field) {
		switch {
		case f.Num == 1 && f.isVarint():
			h.CmdType = uint32(f.Varint)
		case f.Num == 2:
			h.Cmd = f.str()
		case f.Num == 3 && f.isVarint():
			h.SeqNo = uint32(f.Varint)
		case f.Num == 4:
			h.MsgID = f.str()
		case f.Num == 5:
			h.Module = f.str()
		case f.Num == 6 && f.isVarint():
			h.NeedAck = f.Varint != 0
		case f.Num == 10 && f.isVarint():
			h.Status = int32(f.Varint)
		}
	})
	if err != nil {
		return head{}, fmt.Errorf("head: %w", err)
	}
	return h, nil
}

// reply is the common shape of the replies the plugin reads: AuthBindRsp {code = 1,
// message = 2, connect_id = 3}, and the send replies {code = 1, message = 2}.
type reply struct {
	Code      int32
	Message   string
	ConnectID string
}

func parseReply(b []byte) (reply, error) {
	var r reply
	err := fields(b, func(f field) {
		switch {
		case f.Num == 1 && f.isVarint():
			r.Code = int32(f.Varint)
		case f.Num == 2:
			r.Message = f.str()
		case f.Num == 3:
			r.ConnectID = f.str()
		}
	})
	return r, err
}

// recallRef names a recalled message: ImMsgSeq {msg_seq = 1, msg_id = 2}.
type recallRef struct {
	Seq   uint64
	MsgID string
}

// push is an inbound push (InboundMessagePush), from protobuf or JSON.
type push struct {
	Callback         string      // 1: callback_command (recalls)
	From             string      // 2: from_account
	To               string      // 3: to_account
	Nick             string      // 4: sender_nickname
	GroupID          string      // 5
	GroupCode        string      // 6: the group, as chats are addressed
	GroupName        string      // 7
	Seq              uint64      // 8: msg_seq
	Random           uint64      // 9
	Time             uint64      // 10: msg_time, unix seconds
	MsgKey           string      // 11
	MsgID            string      // 12
	Body             []element   // 13
	CloudCustomData  string      // 14: JSON; a quote lives here
	OwnerID          string      // 16: bot_owner_id
	Recalls          []recallRef // 17: recall_msg_seq_list
	PrivateFromGroup string      // 19: private_from_group_code
	TraceID          string      // 20.1: log_ext.trace_id
}

// parsePush decodes an InboundMessagePush.
func parsePush(b []byte) (*push, error) {
	p := &push{}
	var sub error
	keep := func(err error) {
		if err != nil && sub == nil {
			sub = err
		}
	}
	err := fields(b, func(f field) {
		switch f.Num {
		case 1:
			p.Callback = f.str()
		case 2:
			p.From = f.str()
		case 3:
			p.To = f.str()
		case 4:
			p.Nick = f.str()
		case 5:
			p.GroupID = f.str()
		case 6:
			p.GroupCode = f.str()
		case 7:
			p.GroupName = f.str()
		case 8:
			if f.isVarint() {
				p.Seq = f.Varint
			}
		case 9:
			if f.isVarint() {
				p.Random = f.Varint
			}
		case 10:
			if f.isVarint() {
				p.Time = f.Varint
			}
		case 11:
			p.MsgKey = f.str()
		case 12:
			p.MsgID = f.str()
		case 13:
			if f.isBytes() {
				el, err := parseElement(f.Bytes)
				keep(err)
				p.Body = append(p.Body, el)
			}
		case 14:
			p.CloudCustomData = f.str()
		case 16:
			p.OwnerID = f.str()
		case 17:
			if f.isBytes() {
				var r recallRef
				keep(fields(f.Bytes, func(g field) {
					switch {
					case g.Num == 1 && g.isVarint():
						r.Seq = g.Varint
					case g.Num == 2:
						r.MsgID = g.str()
					}
				}))
				p.Recalls = append(p.Recalls, r)
			}
		case 19:
			p.PrivateFromGroup = f.str()
		case 20:
			if f.isBytes() {
				keep(fields(f.Bytes, func(g field) {
					if g.Num == 1 {
						p.TraceID = g.str()
					}
				}))
			}
		}
	})
	if err == nil {
		err = sub
	}
	if err != nil {
		return nil, fmt.Errorf("InboundMessagePush: %w", err)
	}
	return p, nil
}

func parseElement(b []byte) (element, error) {
	var el element
	var sub error
	err := fields(b, func(f field) {
		switch {
		case f.Num == 1:
			el.Type = f.str()
		case f.Num == 2 && f.isBytes():
			el.Content, sub = parseContent(f.Bytes)
		}
	})
	if err == nil {
		err = sub
	}
	return el, err
}

func parseContent(b []byte) (content, error) {
	var c content
	var sub error
	err := fields(b, func(f field) {
		switch f.Num {
		case 1:
			c.Text = f.str()
		case 2:
			c.UUID = f.str()
		case 4:
			c.Data = f.str()
		case 5:
			c.Desc = f.str()
		case 6:
			c.Ext = f.str()
		case 7:
			c.Sound = f.str()
		case 8:
			if f.isBytes() {
				var im imageInfo
				if err := fields(f.Bytes, func(g field) {
					switch {
					case g.Num == 1 && g.isVarint():
						im.Type = g.Varint
					case g.Num == 2 && g.isVarint():
						im.Size = g.Varint
					case g.Num == 3 && g.isVarint():
						im.Width = g.Varint
					case g.Num == 4 && g.isVarint():
						im.Height = g.Varint
					case g.Num == 5:
						im.URL = g.str()
					}
				}); err != nil && sub == nil {
					sub = err
				}
				c.Images = append(c.Images, im)
			}
		case 10:
			c.URL = f.str()
		case 11:
			if f.isVarint() {
				c.FileSize = f.Varint
			}
		case 12:
			c.FileName = f.str()
		case 999:
			if f.isBytes() {
				var k, v string
				if err := fields(f.Bytes, func(g field) {
					switch g.Num {
					case 1:
						k = g.str()
					case 2:
						v = g.str()
					}
				}); err != nil && sub == nil {
					sub = err
				}
				if c.ExtMap == nil {
					c.ExtMap = map[string]string{}
				}
				c.ExtMap[k] = v
			}
		}
	})
	if err == nil {
		err = sub
	}
	return c, err
}
