package yuanbaotest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-host/hermes-host/conformance/yuanbaotest/ybpb"
)

// Connection-layer names.
const (
	CmdAuthBind    = "auth-bind"
	CmdPing        = "ping"
	CmdSendC2C     = "send_c2c_message"
	CmdSendGroup   = "send_group_message"
	CmdPrivateHB   = "send_private_heartbeat"
	CmdGroupHB     = "send_group_heartbeat"
	CmdPush        = "inbound_message_push"
	ModuleConn     = "conn_access"
	ModuleBot      = "yuanbao_openclaw_proxy"
	InstanceID     = "17"
	BizID          = "ybBot"
	AuthCodeRefuse = 41001 // the fake's AuthBindRsp code for a refused bind
)

// Heartbeat values.
const (
	Running = 1
	Finish  = 2
)

// AuthMode is how the fake answers an AUTH_BIND.
type AuthMode int

const (
	AuthOK     AuthMode = iota // bind, answer with a connect_id
	AuthRefuse                 // answer code AuthCodeRefuse
	AuthSilent                 // never answer
)

// SendFault is a scripted answer to the next send_c2c_message / send_group_message.
type SendFault struct {
	Delay    time.Duration // answer this late (the message is posted at once)
	NoAnswer bool          // post the message, never answer
	Status   int32         // answer with head.status ≠ 0 (the message is refused, not posted)
	Code     int32         // answer with code ≠ 0 in the reply (refused, not posted)
	Drop     bool          // post the message, then drop the socket without answering
}

// Drop modes for a push.
const (
	DropAfterPush  = 1 // write the push whole, then drop the socket before any PushAck
	DropDuringPush = 2 // write the first half of the push (one fragment), then drop the socket
)

// Bot is one bot account of the fake.
type Bot struct {
	s                           *Server
	appID, secret, botID, owner string

	// guarded by s.mu
	tokens     map[string]time.Time
	signed     []time.Time // when sign-token issued this bot's recent tokens (the rate limit)
	conn       *wsConn     // the bound connection
	conns      []*wsConn
	binds      int
	authScript []AuthMode
	skipPongs  int
	sendFaults []SendFault
	pushes     []*Push
	sent       []Sent
	refused    []Sent
	heartbeats []Heartbeat
	requests   []Frame
}

func newBot(s *Server, appID, secret, botID, owner string) *Bot {
	return &Bot{s: s, appID: appID, secret: secret, botID: botID, owner: owner, tokens: map[string]time.Time{}}
}

// AppID, Secret, BotID and Owner are the bot's credentials and accounts.
func (b *Bot) AppID() string  { return b.appID }
func (b *Bot) Secret() string { return b.secret }
func (b *Bot) BotID() string  { return b.botID }
func (b *Bot) Owner() string  { return b.owner }

// Sent is a message a client sent through the gateway.
type Sent struct {
	Cmd      string // CmdSendC2C or CmdSendGroup
	ChatType string // "dm" or "group"
	ChatID   string // the recipient account or the group code
	From     string
	MsgID    string // the request's msg_id
	RefMsgID string // quoted message (groups)
	Text     string // the text elements, joined
	Body     []*ybpb.MsgBodyElement
	At       time.Time
}

// Heartbeat is a typing heartbeat a client sent.
type Heartbeat struct {
	ChatType, ChatID string
	Value            uint32 // Running or Finish
	At               time.Time
}

// Frame is a request the fake received, decoded.
type Frame struct {
	Conn int
	Head *ybpb.Head
	Data []byte
	At   time.Time
}

// ScriptAuth queues how the next AUTH_BINDs are answered (default AuthOK).
func (b *Bot) ScriptAuth(modes ...AuthMode) {
	b.s.mu.Lock()
	b.authScript = append(b.authScript, modes...)
	b.s.mu.Unlock()
}

// SkipPongs leaves the next n pings unanswered.
func (b *Bot) SkipPongs(n int) {
	b.s.mu.Lock()
	b.skipPongs += n
	b.s.mu.Unlock()
}

// FailSends queues answers for the next sends, in order.
func (b *Bot) FailSends(faults ...SendFault) {
	b.s.mu.Lock()
	b.sendFaults = append(b.sendFaults, faults...)
	b.s.mu.Unlock()
}

// Binds is how many AUTH_BINDs succeeded.
func (b *Bot) Binds() int {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.binds
}

// Connections is how many WebSocket connections presented this bot's token.
func (b *Bot) Connections() int {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return len(b.conns)
}

// Connected reports whether the bot has a bound connection.
func (b *Bot) Connected() bool {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.conn != nil
}

// Sent returns the messages posted into a chat ("dm" and an account, or "group" and a code;
// empty chatType: every chat).
func (b *Bot) Sent(chatType, chatID string) []Sent {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	var out []Sent
	for _, m := range b.sent {
		if chatType == "" || (m.ChatType == chatType && m.ChatID == chatID) {
			out = append(out, m)
		}
	}
	return out
}

// SentTexts returns the texts of Sent.
func (b *Bot) SentTexts(chatType, chatID string) []string {
	var out []string
	for _, m := range b.Sent(chatType, chatID) {
		out = append(out, m.Text)
	}
	return out
}

// Refused returns the sends the fake answered with a refusal (not posted).
func (b *Bot) Refused() []Sent {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return append([]Sent(nil), b.refused...)
}

// Heartbeats returns the typing heartbeats sent into a chat.
func (b *Bot) Heartbeats(chatType, chatID string) []Heartbeat {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	var out []Heartbeat
	for _, h := range b.heartbeats {
		if h.ChatType == chatType && h.ChatID == chatID {
			out = append(out, h)
		}
	}
	return out
}

// Requests returns the requests received with command cmd ("": all).
func (b *Bot) Requests(cmd string) []Frame {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	var out []Frame
	for _, f := range b.requests {
		if cmd == "" || f.Head.GetCmd() == cmd {
			out = append(out, f)
		}
	}
	return out
}

// Close closes the bot's bound connection with a close code (a permanent one, 4012…, or any
// other), as the gateway does. It reports whether there was a connection.
func (b *Bot) Close(code int, reason string) bool {
	b.s.mu.Lock()
	c := b.conn
	b.conn = nil
	b.s.mu.Unlock()
	if c == nil {
		return false
	}
	go c.c.Close(websocket.StatusCode(code), reason)
	return true
}

// Drop drops the bot's bound connection without a close frame.
func (b *Bot) Drop() bool {
	b.s.mu.Lock()
	c := b.conn
	b.conn = nil
	b.s.mu.Unlock()
	if c == nil {
		return false
	}
	c.c.CloseNow()
	return true
}

// wsConn is one client connection.
type wsConn struct {
	s   *Server
	id  int
	c   *websocket.Conn
	ctx context.Context
	bot *Bot // after a successful AUTH_BIND
	wmu sync.Mutex
}

func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	c.SetReadLimit(4 << 20)
	s.mu.Lock()
	s.conns++
	wc := &wsConn{s: s, id: s.conns, c: c, ctx: context.WithoutCancel(r.Context())}
	s.mu.Unlock()
	defer wc.gone()
	for {
		typ, data, err := c.Read(wc.ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageBinary {
			s.violation("conn %d: a text frame (%d bytes); the gateway speaks binary ConnMsg", wc.id, len(data))
			continue
		}
		var m ybpb.ConnMsg
		if err := proto.Unmarshal(data, &m); err != nil {
			s.violation("conn %d: undecodable ConnMsg: %v", wc.id, err)
			continue
		}
		wc.frame(&m)
	}
}

// gone unbinds a connection that ended.
func (wc *wsConn) gone() {
	s := wc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := wc.bot; b != nil && b.conn == wc {
		b.conn = nil
	}
}

func (wc *wsConn) write(h *ybpb.Head, data []byte) error {
	b, err := proto.Marshal(&ybpb.ConnMsg{Head: h, Data: data})
	if err != nil {
		return err
	}
	wc.wmu.Lock()
	defer wc.wmu.Unlock()
	ctx, cancel := context.WithTimeout(wc.ctx, 10*time.Second)
	defer cancel()
	return wc.c.Write(ctx, websocket.MessageBinary, b)
}

// respond answers a request with the same command, msg_id and module.
func (wc *wsConn) respond(req *ybpb.Head, status int32, msg proto.Message) error {
	var data []byte
	if msg != nil {
		data, _ = proto.Marshal(msg)
	}
	return wc.write(&ybpb.Head{CmdType: uint32(ybpb.CmdType_RESPONSE), Cmd: req.GetCmd(), SeqNo: req.GetSeqNo(),
		MsgId: req.GetMsgId(), Module: req.GetModule(), Status: status}, data)
}

func (wc *wsConn) frame(m *ybpb.ConnMsg) {
	s := wc.s
	h := m.GetHead()
	if h == nil {
		s.violation("conn %d: ConnMsg without a head", wc.id)
		return
	}
	now := s.clock()
	switch ybpb.CmdType(h.GetCmdType()) {
	case ybpb.CmdType_PUSH_ACK:
		s.mu.Lock()
		if b := wc.bot; b != nil {
			for _, p := range b.pushes {
				if p.MsgID == h.GetMsgId() {
					p.Acks++
				}
			}
		}
		s.mu.Unlock()
		return
	case ybpb.CmdType_REQUEST:
	default:
		s.violation("conn %d: unexpected cmd_type %d (%s)", wc.id, h.GetCmdType(), h.GetCmd())
		return
	}
	if h.GetCmd() == CmdAuthBind {
		wc.authBind(h, m.GetData())
		return
	}
	s.mu.Lock()
	b := wc.bot
	if b == nil {
		s.mu.Unlock()
		s.violation("conn %d: %s before AUTH_BIND", wc.id, h.GetCmd())
		return
	}
	b.requests = append(b.requests, Frame{Conn: wc.id, Head: h, Data: m.GetData(), At: now})
	switch h.GetCmd() {
	case CmdPing:
		skip := b.skipPongs > 0
		if skip {
			b.skipPongs--
		}
		s.mu.Unlock()
		if !skip {
			wc.respond(h, 0, nil)
		}
	case CmdSendC2C, CmdSendGroup:
		wc.sendMessage(b, h, m.GetData(), now) // unlocks
	case CmdPrivateHB, CmdGroupHB:
		hb := Heartbeat{At: now}
		if h.GetCmd() == CmdPrivateHB {
			var req ybpb.SendPrivateHeartbeatReq
			proto.Unmarshal(m.GetData(), &req)
			hb.ChatType, hb.ChatID, hb.Value = "dm", req.GetToAccount(), req.GetHeartbeat()
		} else {
			var req ybpb.SendGroupHeartbeatReq
			proto.Unmarshal(m.GetData(), &req)
			hb.ChatType, hb.ChatID, hb.Value = "group", req.GetGroupCode(), req.GetHeartbeat()
		}
		b.heartbeats = append(b.heartbeats, hb)
		s.mu.Unlock()
		wc.respond(h, 0, nil)
	default:
		s.mu.Unlock()
		wc.respond(h, 404, nil)
	}
}

func (wc *wsConn) authBind(h *ybpb.Head, data []byte) {
	s := wc.s
	var req ybpb.AuthBindReq
	if err := proto.Unmarshal(data, &req); err != nil {
		s.violation("conn %d: undecodable AuthBindReq: %v", wc.id, err)
		wc.respond(h, 0, &ybpb.AuthBindRsp{Code: AuthCodeRefuse, Message: "bad AuthBindReq"})
		return
	}
	now := s.clock()
	s.mu.Lock()
	var b *Bot
	for _, cand := range s.bots {
		if exp, ok := cand.tokens[req.GetAuthInfo().GetToken()]; ok && now.Before(exp) {
			b = cand
		}
	}
	if b == nil {
		s.mu.Unlock()
		wc.respond(h, 0, &ybpb.AuthBindRsp{Code: AuthCodeRefuse, Message: "token unknown or expired"})
		return
	}
	b.requests = append(b.requests, Frame{Conn: wc.id, Head: h, Data: data, At: now})
	if !containsConn(b.conns, wc) {
		b.conns = append(b.conns, wc)
	}
	var problems []string
	if req.GetAuthInfo().GetUid() != b.botID {
		problems = append(problems, fmt.Sprintf("uid %q is not the bot %q", req.GetAuthInfo().GetUid(), b.botID))
	}
	if req.GetBizId() != BizID || req.GetDeviceInfo().GetInstanceId() != InstanceID {
		problems = append(problems, fmt.Sprintf("biz_id %q instance_id %q", req.GetBizId(), req.GetDeviceInfo().GetInstanceId()))
	}
	mode := AuthOK
	if len(b.authScript) > 0 {
		mode, b.authScript = b.authScript[0], b.authScript[1:]
	}
	if len(problems) > 0 {
		mode = AuthRefuse
	}
	var old *wsConn
	if mode == AuthOK {
		old = b.conn
		b.conn, wc.bot = wc, b
		b.binds++
	}
	connectID := fmt.Sprintf("conn-%d", wc.id)
	s.mu.Unlock()
	switch mode {
	case AuthSilent:
		return
	case AuthRefuse:
		msg := "refused by the script"
		if len(problems) > 0 {
			msg = strings.Join(problems, "; ")
		}
		wc.respond(h, 0, &ybpb.AuthBindRsp{Code: AuthCodeRefuse, Message: msg})
		return
	}
	if old != nil && old != wc {
		go old.c.Close(4014, "instanceid conflict")
	}
	wc.respond(h, 0, &ybpb.AuthBindRsp{Code: 0, Message: "ok", ConnectId: connectID})
	b.deliver()
}

func containsConn(l []*wsConn, c *wsConn) bool {
	for _, x := range l {
		if x == c {
			return true
		}
	}
	return false
}

// sendMessage records a send and answers it as scripted. Called with s.mu held; unlocks it.
func (wc *wsConn) sendMessage(b *Bot, h *ybpb.Head, data []byte, now time.Time) {
	s := wc.s
	m := Sent{Cmd: h.GetCmd(), MsgID: h.GetMsgId(), At: now}
	if h.GetCmd() == CmdSendC2C {
		var req ybpb.SendC2CMessageReq
		if err := proto.Unmarshal(data, &req); err != nil {
			s.mu.Unlock()
			s.violation("conn %d: undecodable SendC2CMessageReq: %v", wc.id, err)
			wc.respond(h, 400, &ybpb.SendMessageRsp{Code: 400, Message: "bad request"})
			return
		}
		m.ChatType, m.ChatID, m.From, m.Body = "dm", req.GetToAccount(), req.GetFromAccount(), req.GetMsgBody()
	} else {
		var req ybpb.SendGroupMessageReq
		if err := proto.Unmarshal(data, &req); err != nil {
			s.mu.Unlock()
			s.violation("conn %d: undecodable SendGroupMessageReq: %v", wc.id, err)
			wc.respond(h, 400, &ybpb.SendMessageRsp{Code: 400, Message: "bad request"})
			return
		}
		m.ChatType, m.ChatID, m.From, m.Body, m.RefMsgID = "group", req.GetGroupCode(), req.GetFromAccount(), req.GetMsgBody(), req.GetRefMsgId()
	}
	var texts []string
	for _, el := range m.Body {
		if el.GetMsgType() == "TIMTextElem" {
			texts = append(texts, el.GetMsgContent().GetText())
		}
	}
	m.Text = strings.Join(texts, "")
	var f SendFault
	if len(b.sendFaults) > 0 {
		f, b.sendFaults = b.sendFaults[0], b.sendFaults[1:]
	}
	refused := f.Status != 0 || f.Code != 0 || m.ChatID == "" || m.From != b.botID || m.Text == ""
	if refused {
		b.refused = append(b.refused, m)
	} else {
		b.sent = append(b.sent, m)
	}
	s.mu.Unlock()
	switch {
	case f.Status != 0 || f.Code != 0:
		wc.respond(h, f.Status, &ybpb.SendMessageRsp{Code: f.Code, Message: "refused by the script"})
	case refused:
		wc.respond(h, 0, &ybpb.SendMessageRsp{Code: 40004, Message: "missing recipient, sender or text"})
	case f.NoAnswer:
	case f.Drop:
		wc.c.CloseNow()
	case f.Delay > 0:
		go func() {
			time.Sleep(f.Delay)
			wc.respond(h, 0, &ybpb.SendMessageRsp{})
		}()
	default:
		wc.respond(h, 0, &ybpb.SendMessageRsp{})
	}
}
