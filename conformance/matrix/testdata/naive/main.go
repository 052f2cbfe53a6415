// Command naive is a Matrix adapter with the mistakes bots commonly make: it keeps the since
// token in instance memory (lost on restart) and advances it before the host recorded the
// batch, answers the history of its first sync, ignores limited timelines, treats every message
// as a turn (no threads, its own messages included), sends without m.mentions (so "@room" in
// process output pings the room), with a fresh transaction id per attempt and a 5xx taken as
// retryable (so the host's retry posts twice), without the thread relation, 429 without
// retry_after_ms, a 30 s HTTP timeout under a 10 s deadline, plaintext into encrypted rooms, and
// it acknowledges every message from poll, outside send. The profile's tests run against it to
// show that each mistake fails a check.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

type config struct {
	Homeserver  string `json:"homeserver"`
	AccessToken string `json:"access_token"`
}

var since string // the mistake: instance memory

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{Name: "matrix", Version: "0.0.1", Kind: abi.KindPlatform, Platform: "matrix",
			Capabilities: []string{abi.CapPoll, abi.CapThreads},
			MessageLimit: abi.MessageLimit{Max: 16000, Unit: abi.UnitByte}, Egress: []string{"matrix-client.matrix.org"}},
		Poll: poll,
		Send: send,
	})
}

func main() {}

func cfg(c *sdk.Context) config {
	var cf config
	c.DecodeConfig(&cf)
	return cf
}

func do(c *sdk.Context, method, path string, body any, timeoutMs int64) (*abi.HTTPResponse, error) {
	cf := cfg(c)
	req := &abi.HTTPRequest{Method: method, URL: cf.Homeserver + path, TimeoutMs: timeoutMs,
		Headers: map[string][]string{"Authorization": {"Bearer " + cf.AccessToken}}}
	if body != nil {
		req.Body, _ = json.Marshal(body)
	}
	return c.HTTP(req)
}

func poll(c *sdk.Context, req *abi.PollRequest) (*abi.PollResult, error) {
	path := "/_matrix/client/v3/sync?timeout=1000"
	if since != "" {
		path += "&since=" + url.QueryEscape(since)
	}
	resp, err := do(c, "GET", path, nil, 30000)
	if err != nil {
		return nil, err
	}
	if resp.Status != 200 {
		return nil, abi.Errorf(abi.CodeIO, "sync: HTTP %d", resp.Status)
	}
	var res struct {
		NextBatch string `json:"next_batch"`
		Rooms     struct {
			Join map[string]struct {
				Timeline struct {
					Events []struct {
						ID      string `json:"event_id"`
						Type    string `json:"type"`
						Sender  string `json:"sender"`
						Content struct {
							Body string `json:"body"`
						} `json:"content"`
					} `json:"events"`
				} `json:"timeline"`
			} `json:"join"`
		} `json:"rooms"`
	}
	json.Unmarshal(resp.Body, &res)
	since = res.NextBatch
	var out []abi.InboundEvent
	for room, j := range res.Rooms.Join {
		for _, e := range j.Timeline.Events {
			if e.Type != "m.room.message" {
				continue
			}
			out = append(out, abi.InboundEvent{ID: e.ID, Kind: abi.EventMessage, Text: e.Content.Body,
				Mentioned: strings.Contains(strings.ToLower(e.Content.Body), "hermes"),
				Source:    abi.Source{ChatType: abi.ChatGroup, ChatID: room, UserID: e.Sender, MessageID: e.ID}})
			do(c, "PUT", "/_matrix/client/v3/rooms/"+url.PathEscape(room)+"/send/m.room.message/ack"+random(),
				map[string]any{"msgtype": "m.notice", "body": "👀"}, 5000)
		}
	}
	return &abi.PollResult{Events: out}, nil
}

func send(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
	resp, err := do(c, "PUT", "/_matrix/client/v3/rooms/"+url.PathEscape(msg.ChatID)+"/send/m.room.message/"+random(),
		map[string]any{"msgtype": "m.text", "body": msg.Text}, 30000)
	if err != nil {
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Code: abi.CodeOf(err), Message: err.Error()}}, nil
	}
	if resp.Status != 200 {
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Code: "http", Message: "retry later"}}, nil
	}
	var ok struct {
		EventID string `json:"event_id"`
	}
	json.Unmarshal(resp.Body, &ok)
	return &abi.SendResult{MessageIDs: []string{ok.EventID}}, nil
}

func random() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}
