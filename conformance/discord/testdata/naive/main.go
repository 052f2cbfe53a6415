// Command naive is a Discord adapter with the classic mistakes, for the conformance profile's
// own tests: each mistake must fail its check. It connects and reads MESSAGE_CREATE (so the
// suite gets that far), but IDENTIFYs without the message content intent, keeps its connection
// in instance memory and IDENTIFYs anew after every drop, op 7 or missed ACK (never RESUME), never
// notices a zombied connection, heartbeats with d: null, takes the sequence number for the event
// id and commits it on receipt (an event the host failed to record is lost), answers every guild
// message (no mention gating, no threads), answers its own messages, shows "typing" from poll
// (behind the host's boundary and ledger), declares no egress scopes, accepts any token, and in
// send ignores the thread, sends no allowed_mentions (so @everyone pings), retries 5xx and lost
// answers itself (a duplicate in the chat), answers 429 without retry_after, knows no bucket and
// waits 30 s for an answer under a 10 s call deadline.
package main

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{Name: "naive_discord", Version: "0.1.0", Kind: abi.KindPlatform, Platform: "discord",
			Capabilities: []string{abi.CapPoll, abi.CapThreads}, MessageLimit: abi.MessageLimit{Max: 2000, Unit: abi.UnitCodePoint},
			Egress: []string{"discord.com", "*.discord.gg"}},
		Poll: poll,
		Send: send,
	})
}

func main() {}

type config struct {
	BotToken   string `json:"bot_token"`
	APIBase    string `json:"api_base"`
	GatewayURL string `json:"gateway_url"`
}

// gw is a connection, in instance memory (mistake).
type gw struct {
	conn     string
	seq      int64
	interval time.Duration
	beatAt   time.Time
}

var conns = map[string]*gw{}

func poll(c *sdk.Context, req *abi.PollRequest) (*abi.PollResult, error) {
	var cfg config
	c.DecodeConfig(&cfg)
	g := conns[c.Profile]
	if g == nil {
		id, err := c.WSOpen(&abi.WSOpenRequest{URL: cfg.GatewayURL + "?v=10&encoding=json", TimeoutMs: 5000})
		if err != nil {
			return &abi.PollResult{BackoffMs: 500}, nil
		}
		g = &gw{conn: id}
		r, err := c.WSRecv(id, 5*time.Second, 1)
		if err != nil || len(r.Frames) == 0 {
			return &abi.PollResult{BackoffMs: 500}, nil
		}
		var hello struct {
			D struct {
				HeartbeatInterval int64 `json:"heartbeat_interval"`
			} `json:"d"`
		}
		json.Unmarshal(r.Frames[0].Data, &hello)
		g.interval, g.beatAt = time.Duration(hello.D.HeartbeatInterval)*time.Millisecond, time.Now()
		// Mistake: no message content intent; and always IDENTIFY.
		write(c, id, 2, map[string]any{"token": cfg.BotToken, "intents": 1<<9 | 1<<12, "properties": map[string]string{"os": "wasip1"}})
		conns[c.Profile] = g
	}
	deadline := time.Now().Add(time.Duration(req.WaitMs) * time.Millisecond)
	for time.Now().Before(deadline) {
		if g.interval > 0 && time.Since(g.beatAt) >= g.interval {
			write(c, g.conn, 1, nil) // mistake: d is always null; and no ACK is awaited
			g.beatAt = time.Now()
		}
		r, err := c.WSRecv(g.conn, min(time.Until(deadline), 200*time.Millisecond), 16)
		if err != nil {
			delete(conns, c.Profile)
			return &abi.PollResult{}, nil
		}
		for _, f := range r.Frames {
			var fr struct {
				Op int             `json:"op"`
				S  *int64          `json:"s"`
				T  string          `json:"t"`
				D  json.RawMessage `json:"d"`
			}
			if json.Unmarshal(f.Data, &fr) != nil {
				continue
			}
			if fr.S != nil {
				g.seq = *fr.S // mistake: committed on receipt
			}
			switch {
			case fr.Op == 7 || fr.Op == 9:
				c.WSClose(g.conn, 1000, "bye") // mistake: 1000 ends the session; IDENTIFY next
				delete(conns, c.Profile)
				return &abi.PollResult{}, nil
			case fr.Op == 0 && fr.T == "MESSAGE_CREATE":
				var m struct {
					ID        string `json:"id"`
					ChannelID string `json:"channel_id"`
					GuildID   string `json:"guild_id"`
					Content   string `json:"content"`
					Author    struct {
						ID string `json:"id"`
					} `json:"author"`
				}
				json.Unmarshal(fr.D, &m)
				ev := abi.InboundEvent{ID: "seq:" + strconv.FormatInt(g.seq, 10), Kind: abi.EventMessage, Text: m.Content,
					Source: abi.Source{ChatType: abi.ChatGroup, ChatID: m.ChannelID, UserID: m.Author.ID, MessageID: m.ID}}
				if m.GuildID == "" {
					ev.Source.ChatType = abi.ChatDM
				}
				c.Dispatch(ev) // mistake: an error is ignored, the sequence already moved on
				// Mistake: "typing" from poll.
				c.HTTP(&abi.HTTPRequest{Method: "POST", URL: cfg.APIBase + "/channels/" + m.ChannelID + "/typing",
					Headers: map[string][]string{"Authorization": {"Bot " + cfg.BotToken}}})
			}
		}
		if r.Closed {
			delete(conns, c.Profile)
			return &abi.PollResult{}, nil
		}
	}
	return &abi.PollResult{}, nil
}

func write(c *sdk.Context, conn string, op int, d any) {
	raw, _ := json.Marshal(map[string]any{"op": op, "d": d})
	c.WSSend(conn, abi.WSFrame{Data: raw})
}

func send(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
	var cfg config
	c.DecodeConfig(&cfg)
	url := cfg.APIBase + "/channels/" + msg.ChatID + "/messages" // mistake: the thread is ignored
	if msg.EditMessageID != "" {
		url += "/" + msg.EditMessageID
	}
	body, _ := json.Marshal(map[string]any{"content": msg.Text}) // mistake: no allowed_mentions
	method := "POST"
	if msg.EditMessageID != "" {
		method = "PATCH"
	}
	for try := 0; try < 3; try++ { // mistake: retries inside send
		resp, err := c.HTTP(&abi.HTTPRequest{Method: method, URL: url, Body: body, TimeoutMs: 30000,
			Headers: map[string][]string{"Authorization": {"Bot " + cfg.BotToken}, "Content-Type": {"application/json"}}})
		if err != nil || resp.Status >= 500 {
			continue
		}
		switch {
		case resp.Status == 429:
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Code: "rate_limited", Message: "429"}}, nil
		case resp.Status >= 300:
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Code: "refused", Message: string(resp.Body)}}, nil
		}
		var m struct {
			ID string `json:"id"`
		}
		json.Unmarshal(resp.Body, &m)
		return &abi.SendResult{MessageIDs: []string{m.ID}}, nil
	}
	return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Code: "failed", Message: "gave up"}}, nil
}
