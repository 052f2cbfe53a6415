// Command naive is a Yuanbao adapter with the classic mistakes, for the conformance profile's
// own tests: each mistake must fail its check. It signs correctly and reads pushes (so the suite
// gets that far), but keeps its connection in instance memory (a reload binds again), answers
// every group message (no mention gating), acknowledges pushes before the host records them,
// never pings, reconnects at once after any close (the permanent codes included), acknowledges
// slash commands itself from poll (behind the host's boundary and ledger), and reports a send as
// delivered as soon as it is written (a late answer looks like a success).
package main

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{Name: "naive_yuanbao", Version: "0.1.0", Kind: abi.KindPlatform, Platform: "yuanbao",
			Capabilities: []string{abi.CapPoll}, MessageLimit: abi.MessageLimit{Max: 4000, Unit: abi.UnitCodePoint}},
		Poll: poll,
		Send: send,
	})
}

func main() {}

type config struct {
	AppID     string `json:"app_id"`
	AppSecret string `json:"app_secret"`
	APIDomain string `json:"api_domain"`
	WSURL     string `json:"ws_url"`
}

// Mistake: per-profile state in instance memory.
var conns = map[string]string{}

var botIDs = map[string]string{}

func str(b []byte, n protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func frame(cmdType uint64, cmd, msgID, module string, data []byte) []byte {
	var h []byte
	if cmdType != 0 {
		h = protowire.AppendTag(h, 1, protowire.VarintType)
		h = protowire.AppendVarint(h, cmdType)
	}
	h = str(h, 2, cmd)
	h = str(h, 4, msgID)
	h = str(h, 5, module)
	var f []byte
	f = protowire.AppendTag(f, 1, protowire.BytesType)
	f = protowire.AppendBytes(f, h)
	if len(data) > 0 {
		f = protowire.AppendTag(f, 2, protowire.BytesType)
		f = protowire.AppendBytes(f, data)
	}
	return f
}

// fields returns the first value of each bytes field and every value of repeated field rep.
func fields(b []byte, rep protowire.Number) (map[protowire.Number][]byte, map[protowire.Number]uint64, [][]byte) {
	bs, vs := map[protowire.Number][]byte{}, map[protowire.Number]uint64{}
	var reps [][]byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return bs, vs, reps
			}
			if num == rep {
				reps = append(reps, v)
			} else if _, ok := bs[num]; !ok {
				bs[num] = v
			}
			b = b[n:]
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return bs, vs, reps
			}
			vs[num] = v
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return bs, vs, reps
			}
			b = b[n:]
		}
	}
	return bs, vs, reps
}

func connect(c *sdk.Context, cfg *config) (string, error) {
	now, _ := c.Now()
	var nb [16]byte
	rand.Read(nb[:])
	nonce, ts := hex.EncodeToString(nb[:]), now.In(time.FixedZone("", 8*3600)).Format("2006-01-02T15:04:05-07:00")
	m := hmac.New(sha256.New, []byte(cfg.AppSecret))
	m.Write([]byte(nonce + ts + cfg.AppID + cfg.AppSecret))
	body, _ := json.Marshal(map[string]string{"app_key": cfg.AppID, "nonce": nonce, "timestamp": ts, "signature": hex.EncodeToString(m.Sum(nil))})
	resp, err := c.HTTP(&abi.HTTPRequest{Method: "POST", URL: cfg.APIDomain + "/api/v5/robotLogic/sign-token", Body: body,
		Headers: map[string][]string{"Content-Type": {"application/json"}, "X-Instance-Id": {"17"}}})
	if err != nil {
		return "", err
	}
	var ans struct {
		Data struct{ Token, BotID string } `json:"data"`
	}
	json.Unmarshal(resp.Body, &ans)
	var tok struct {
		Data struct {
			Token string `json:"token"`
			BotID string `json:"bot_id"`
		} `json:"data"`
	}
	json.Unmarshal(resp.Body, &tok)
	id, err := c.WSOpen(&abi.WSOpenRequest{URL: cfg.WSURL})
	if err != nil {
		return "", err
	}
	var auth, dev, req []byte
	auth = str(str(str(auth, 1, tok.Data.BotID), 2, "bot"), 3, tok.Data.Token)
	dev = str(dev, 10, "17")
	req = str(req, 1, "ybBot")
	req = protowire.AppendTag(req, 2, protowire.BytesType)
	req = protowire.AppendBytes(req, auth)
	req = protowire.AppendTag(req, 3, protowire.BytesType)
	req = protowire.AppendBytes(req, dev)
	c.WSSend(id, abi.WSFrame{Binary: true, Data: frame(0, "auth-bind", "auth", "conn_access", req)})
	r, err := c.WSRecv(id, 5*time.Second, 1)
	if err != nil || len(r.Frames) == 0 {
		return "", abi.Errorf(abi.CodeIO, "no AUTH_BIND answer")
	}
	botIDs[c.Profile] = tok.Data.BotID
	return id, nil
}

func poll(c *sdk.Context, req *abi.PollRequest) (*abi.PollResult, error) {
	var cfg config
	c.DecodeConfig(&cfg)
	conn := conns[c.Profile]
	if conn == "" {
		id, err := connect(c, &cfg)
		if err != nil {
			return &abi.PollResult{BackoffMs: 500}, nil
		}
		conns[c.Profile], conn = id, id
	}
	r, err := c.WSRecv(conn, time.Duration(req.WaitMs)*time.Millisecond, 16)
	if err != nil {
		conns[c.Profile] = "" // Mistake: reconnects at once, whatever the close code was.
		return &abi.PollResult{}, nil
	}
	out := &abi.PollResult{}
	for _, f := range r.Frames {
		bs, vs, _ := fields(f.Data, 0)
		hb, hv, _ := fields(bs[1], 0)
		if hv[1] != 2 {
			continue
		}
		// Mistake: acknowledged before the host has recorded the event.
		c.WSSend(conn, abi.WSFrame{Binary: true, Data: frame(3, string(hb[2]), string(hb[4]), string(hb[5]), nil)})
		_ = vs
		pb, _, body := fields(bs[2], 13)
		text := ""
		for _, el := range body {
			eb, _, _ := fields(el, 0)
			cb, _, _ := fields(eb[2], 0)
			text += string(cb[1])
		}
		from, groupCode, msgID := string(pb[2]), string(pb[6]), string(pb[12])
		if string(pb[1]) != "" || from == botIDs[c.Profile] {
			continue
		}
		src := abi.Source{ChatType: abi.ChatDM, ChatID: from, UserID: from, MessageID: msgID}
		if groupCode != "" {
			src.ChatType, src.ChatID = abi.ChatGroup, groupCode
		}
		// Mistake: every group message is a turn.
		out.Events = append(out.Events, abi.InboundEvent{ID: "msg:" + msgID, Kind: abi.EventMessage, Source: src, Text: text})
		if len(text) > 0 && text[0] == '/' {
			// Mistake: a command is acknowledged from poll, not through the host's send.
			writeMessage(c, conn, src.ChatType, src.ChatID, "👍 "+text)
		}
	}
	if r.Closed {
		conns[c.Profile] = ""
	}
	return out, nil
}

func send(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
	conn := conns[c.Profile]
	if conn == "" {
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Message: "not connected"}}, nil
	}
	if err := writeMessage(c, conn, msg.ChatType, msg.ChatID, msg.Text); err != nil {
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Message: err.Error()}}, nil
	}
	// Mistake: written is not answered.
	return &abi.SendResult{MessageIDs: []string{"naive"}}, nil
}

// writeMessage writes a send_c2c_message or send_group_message request.
func writeMessage(c *sdk.Context, conn, chatType, chatID, text string) error {
	var el, content, req []byte
	content = str(content, 1, text)
	el = str(el, 1, "TIMTextElem")
	el = protowire.AppendTag(el, 2, protowire.BytesType)
	el = protowire.AppendBytes(el, content)
	cmd := "send_c2c_message"
	if chatType == abi.ChatGroup {
		cmd = "send_group_message"
		req = str(str(str(req, 1, "grp_x"), 2, chatID), 3, botIDs[c.Profile])
		req = protowire.AppendTag(req, 6, protowire.BytesType)
	} else {
		req = str(str(str(req, 1, "c2c_x"), 2, chatID), 3, botIDs[c.Profile])
		req = protowire.AppendTag(req, 5, protowire.BytesType)
	}
	req = protowire.AppendBytes(req, el)
	return c.WSSend(conn, abi.WSFrame{Binary: true, Data: frame(0, cmd, "naive", "yuanbao_openclaw_proxy", req)})
}
