package yuanbaotest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-host/hermes-host/conformance/yuanbaotest/ybpb"
)

// A minimal client, written straight from the protocol description, drives the fake: these
// tests check the fake on its own, independently of the plugin.

type signAnswer struct {
	Code int    `json:"code"`
	Msg  string `json:"msg"`
	Data struct {
		Token    string `json:"token"`
		BotID    string `json:"bot_id"`
		Duration int64  `json:"duration"`
	} `json:"data"`
}

func sign(t *testing.T, s *Server, appKey, secret string, at time.Time) signAnswer {
	t.Helper()
	var n [16]byte
	rand.Read(n[:])
	nonce, ts := hex.EncodeToString(n[:]), at.In(Beijing).Format(TimestampLayout)
	body, _ := json.Marshal(map[string]string{"app_key": appKey, "nonce": nonce, "timestamp": ts, "signature": Signature(nonce, ts, appKey, secret)})
	resp, err := http.Post(s.URL()+SignPath, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a signAnswer
	json.NewDecoder(resp.Body).Decode(&a)
	if resp.StatusCode != 200 {
		a.Code = -resp.StatusCode
	}
	return a
}

type client struct {
	t *testing.T
	c *websocket.Conn
}

func dial(t *testing.T, s *Server) *client {
	t.Helper()
	c, _, err := websocket.Dial(context.Background(), s.WSURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return &client{t: t, c: c}
}

func (c *client) send(h *ybpb.Head, m proto.Message) {
	c.t.Helper()
	var data []byte
	if m != nil {
		data, _ = proto.Marshal(m)
	}
	b, _ := proto.Marshal(&ybpb.ConnMsg{Head: h, Data: data})
	if err := c.c.Write(context.Background(), websocket.MessageBinary, b); err != nil {
		c.t.Fatal(err)
	}
}

// read returns the next frame, or the close error.
func (c *client) read(timeout time.Duration) (*ybpb.ConnMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, b, err := c.c.Read(ctx)
	if err != nil {
		return nil, err
	}
	var m ybpb.ConnMsg
	if err := proto.Unmarshal(b, &m); err != nil {
		c.t.Fatal(err)
	}
	return &m, nil
}

func (c *client) mustRead() *ybpb.ConnMsg {
	c.t.Helper()
	m, err := c.read(5 * time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	return m
}

func (c *client) bind(token, uid string) *ybpb.AuthBindRsp {
	c.t.Helper()
	c.send(&ybpb.Head{Cmd: CmdAuthBind, MsgId: "a1", Module: ModuleConn}, &ybpb.AuthBindReq{BizId: BizID,
		AuthInfo: &ybpb.AuthInfo{Uid: uid, Source: "bot", Token: token}, DeviceInfo: &ybpb.DeviceInfo{InstanceId: InstanceID}})
	m := c.mustRead()
	var rsp ybpb.AuthBindRsp
	proto.Unmarshal(m.Data, &rsp)
	if m.Head.GetCmd() != CmdAuthBind || m.Head.GetMsgId() != "a1" || m.Head.GetCmdType() != uint32(ybpb.CmdType_RESPONSE) {
		c.t.Fatalf("auth answer %+v", m.Head)
	}
	return &rsp
}

func TestSignToken(t *testing.T) {
	now := time.Now()
	s := New(t, WithClock(func() time.Time { return now }))
	b := s.Bot()
	if a := sign(t, s, b.AppID(), b.Secret(), now); a.Code != 0 || a.Data.Token == "" || a.Data.BotID != b.BotID() || a.Data.Duration != 3600 {
		t.Fatalf("sign %+v", a)
	}
	for name, c := range map[string]struct {
		key, secret string
		at          time.Time
		code        int
	}{
		"wrong secret":  {b.AppID(), "nope", now, CodeBadSignature},
		"unknown app":   {"other", b.Secret(), now, CodeUnknownApp},
		"clock skewed":  {b.AppID(), b.Secret(), now.Add(-6 * time.Minute), CodeBadTimestamp},
		"within 5 mins": {b.AppID(), b.Secret(), now.Add(4 * time.Minute), 0},
	} {
		if a := sign(t, s, c.key, c.secret, c.at); a.Code != c.code {
			t.Errorf("%s: code %d (%s), want %d", name, a.Code, a.Msg, c.code)
		}
	}
	// A UTC timestamp is refused: sign-token wants Beijing time.
	nonce, ts := "00112233445566778899aabbccddeeff", now.UTC().Format(time.RFC3339)
	body, _ := json.Marshal(map[string]string{"app_key": b.AppID(), "nonce": nonce, "timestamp": ts, "signature": Signature(nonce, ts, b.AppID(), b.Secret())})
	resp, _ := http.Post(s.URL()+SignPath, "application/json", bytes.NewReader(body))
	var a signAnswer
	json.NewDecoder(resp.Body).Decode(&a)
	resp.Body.Close()
	if a.Code != CodeBadTimestamp {
		t.Fatalf("UTC timestamp: %+v", a)
	}
	s.FailSign(SignFault{Code: RetryCode, Msg: "busy"}, SignFault{Status: 502})
	if a := sign(t, s, b.AppID(), b.Secret(), now); a.Code != RetryCode {
		t.Fatalf("scripted 10099: %+v", a)
	}
	if a := sign(t, s, b.AppID(), b.Secret(), now); a.Code != -502 {
		t.Fatalf("scripted 502: %+v", a)
	}
	if n := len(s.SignRequests()); n != 8 {
		t.Fatalf("%d sign requests recorded", n)
	}
}

// sign-token issues at most the limit's tokens per app_key in a rolling window; a request beyond
// it is answered HTTP 429 with CodeRateLimited and issues nothing; refused requests do not
// count; the window rolls on with the fake's clock.
func TestSignTokenRateLimit(t *testing.T) {
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := New(t, WithClock(clock), WithSignLimit(3, time.Minute))
	b := s.Bot()
	if a := sign(t, s, b.AppID(), "wrong", clock()); a.Code != CodeBadSignature {
		t.Fatalf("wrong secret: %+v", a)
	}
	for i := 0; i < 3; i++ {
		if a := sign(t, s, b.AppID(), b.Secret(), clock()); a.Code != 0 {
			t.Fatalf("token %d: %+v", i+1, a)
		}
		mu.Lock()
		now = now.Add(10 * time.Second)
		mu.Unlock()
	}
	if a := sign(t, s, b.AppID(), b.Secret(), clock()); a.Code != -http.StatusTooManyRequests {
		t.Fatalf("a fourth token within a minute: %+v", a)
	}
	reqs := s.SignRequests()
	if last := reqs[len(reqs)-1]; last.Status != http.StatusTooManyRequests || last.Code != CodeRateLimited || last.Token != "" {
		t.Fatalf("the refused request recorded as %+v", last)
	}
	// A minute after the first token, one more is allowed, and only one.
	mu.Lock()
	now = now.Add(31 * time.Second)
	mu.Unlock()
	if a := sign(t, s, b.AppID(), b.Secret(), clock()); a.Code != 0 {
		t.Fatalf("after the window moved: %+v", a)
	}
	if a := sign(t, s, b.AppID(), b.Secret(), clock()); a.Code != -http.StatusTooManyRequests {
		t.Fatalf("over the limit again: %+v", a)
	}
	// The default: DefaultSignLimit per DefaultSignWindow.
	d := New(t)
	for i := 0; i < DefaultSignLimit; i++ {
		if a := sign(t, d, d.Bot().AppID(), d.Bot().Secret(), time.Now()); a.Code != 0 {
			t.Fatalf("default limit, token %d: %+v", i+1, a)
		}
	}
	if a := sign(t, d, d.Bot().AppID(), d.Bot().Secret(), time.Now()); a.Code != -http.StatusTooManyRequests {
		t.Fatalf("default limit exceeded: %+v", a)
	}
}

func TestGatewaySession(t *testing.T) {
	s := New(t)
	b := s.Bot()
	tok := sign(t, s, b.AppID(), b.Secret(), time.Now()).Data.Token
	c := dial(t, s)
	// Requests before AUTH_BIND are not served.
	c.send(&ybpb.Head{Cmd: CmdPing, MsgId: "p0", Module: ModuleConn}, nil)
	if rsp := c.bind(tok, b.BotID()); rsp.Code != 0 || rsp.ConnectId == "" {
		t.Fatalf("bind %+v", rsp)
	}
	if v := s.Violations(); len(v) != 1 {
		t.Fatalf("violations %q", v)
	}
	// ping → pong with the same msg_id; a skipped pong is not answered.
	c.send(&ybpb.Head{Cmd: CmdPing, MsgId: "p1", Module: ModuleConn}, nil)
	if m := c.mustRead(); m.Head.GetCmd() != CmdPing || m.Head.GetMsgId() != "p1" {
		t.Fatalf("pong %+v", m.Head)
	}
	b.SkipPongs(1)
	c.send(&ybpb.Head{Cmd: CmdPing, MsgId: "p2", Module: ModuleConn}, nil)
	c.send(&ybpb.Head{Cmd: CmdPing, MsgId: "p3", Module: ModuleConn}, nil)
	if m := c.mustRead(); m.Head.GetMsgId() != "p3" {
		t.Fatalf("a skipped pong was answered: %+v", m.Head)
	}
	// A push needing an ack; acknowledged, it is not delivered again after a new bind.
	p := b.DM(User{ID: "u1"}, "hi")
	m := c.mustRead()
	var in ybpb.InboundMessagePush
	proto.Unmarshal(m.Data, &in)
	if !m.Head.GetNeedAck() || m.Head.GetMsgId() != p.MsgID || in.GetMsgBody()[0].GetMsgContent().GetText() != "hi" || in.GetFromAccount() != "u1" {
		t.Fatalf("push %+v %+v", m.Head, &in)
	}
	c.send(&ybpb.Head{CmdType: uint32(ybpb.CmdType_PUSH_ACK), Cmd: m.Head.GetCmd(), MsgId: p.MsgID, Module: m.Head.GetModule()}, nil)
	unacked := b.DM(User{ID: "u1"}, "again")
	c.mustRead()
	s.Wait(5*time.Second, func() bool { return b.Acked(p) == 1 })
	// Sends are answered with their msg_id; a scripted refusal carries a status.
	c.send(&ybpb.Head{Cmd: CmdSendC2C, MsgId: "c2c_1", Module: ModuleBot}, &ybpb.SendC2CMessageReq{MsgId: "c2c_1", ToAccount: "u1",
		FromAccount: b.BotID(), MsgBody: []*ybpb.MsgBodyElement{Text("hello")}})
	if m := c.mustRead(); m.Head.GetMsgId() != "c2c_1" || m.Head.GetStatus() != 0 {
		t.Fatalf("send answer %+v", m.Head)
	}
	b.FailSends(SendFault{Status: 9})
	c.send(&ybpb.Head{Cmd: CmdSendGroup, MsgId: "grp_1", Module: ModuleBot}, &ybpb.SendGroupMessageReq{MsgId: "grp_1", GroupCode: "g",
		FromAccount: b.BotID(), MsgBody: []*ybpb.MsgBodyElement{Text("no")}})
	if m := c.mustRead(); m.Head.GetMsgId() != "grp_1" || m.Head.GetStatus() != 9 {
		t.Fatalf("refused send %+v", m.Head)
	}
	if got := b.SentTexts("dm", "u1"); len(got) != 1 || got[0] != "hello" || len(b.Refused()) != 1 {
		t.Fatalf("sent %q refused %d", got, len(b.Refused()))
	}
	c.send(&ybpb.Head{Cmd: CmdGroupHB, MsgId: "hb", Module: ModuleBot}, &ybpb.SendGroupHeartbeatReq{FromAccount: b.BotID(), GroupCode: "g", Heartbeat: Running})
	c.mustRead()
	if hb := b.Heartbeats("group", "g"); len(hb) != 1 || hb[0].Value != Running {
		t.Fatalf("heartbeats %+v", hb)
	}

	// A second connection binding the bot closes the first with 4014; the unacknowledged push
	// is delivered again on the new one.
	c2 := dial(t, s)
	if rsp := c2.bind(tok, b.BotID()); rsp.Code != 0 {
		t.Fatal(rsp)
	}
	if m := c2.mustRead(); m.Head.GetMsgId() != unacked.MsgID {
		t.Fatalf("redelivered %+v", m.Head)
	}
	if _, err := c.read(5 * time.Second); websocket.CloseStatus(err) != 4014 {
		t.Fatalf("the first connection: %v", err)
	}
	// The gateway closes with a permanent code.
	b.Close(4013, "bot disabled")
	if _, err := c2.read(5 * time.Second); websocket.CloseStatus(err) != 4013 {
		t.Fatalf("close: %v", err)
	}
	if b.Binds() != 2 || b.Connected() {
		t.Fatalf("binds %d connected %v", b.Binds(), b.Connected())
	}
}

func TestAuthBindScript(t *testing.T) {
	s := New(t)
	b := s.Bot()
	tok := sign(t, s, b.AppID(), b.Secret(), time.Now()).Data.Token
	b.ScriptAuth(AuthRefuse, AuthSilent)
	if rsp := dial(t, s).bind(tok, b.BotID()); rsp.Code != AuthCodeRefuse {
		t.Fatalf("scripted refusal %+v", rsp)
	}
	c := dial(t, s)
	c.send(&ybpb.Head{Cmd: CmdAuthBind, MsgId: "a1", Module: ModuleConn}, &ybpb.AuthBindReq{BizId: BizID,
		AuthInfo: &ybpb.AuthInfo{Uid: b.BotID(), Token: tok}, DeviceInfo: &ybpb.DeviceInfo{InstanceId: InstanceID}})
	if m, err := c.read(500 * time.Millisecond); err == nil { // (a read that times out closes the client's connection)
		t.Fatalf("silent bind answered: %+v", m.Head)
	}
	if rsp := dial(t, s).bind("forged", b.BotID()); rsp.Code != AuthCodeRefuse {
		t.Fatalf("unknown token %+v", rsp)
	}
	if rsp := dial(t, s).bind(tok, "someone_else"); rsp.Code != AuthCodeRefuse {
		t.Fatalf("wrong uid %+v", rsp)
	}
	if b.Binds() != 0 {
		t.Fatalf("binds %d", b.Binds())
	}
}
