// Command probe is a test plugin that exercises host functions on request: its send export
// reads a command from the message text and reports what the host answered. It also exports a
// raw no-op function for call-path benchmarks.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

var spins int

// version is replaced by tests that build a second version of the probe (hot reload); name and
// platform by tests that need a second plugin claiming a platform.
var (
	version  = "1"
	name     = "probe"
	platform = "probe"
)

// startSpin, set by a test (-X main.startSpin=300ms), makes the guest's runtime start slow: the
// package's init spins that long before registering, inside the instance's first call.
var startSpin = ""

func init() {
	if d, err := time.ParseDuration(startSpin); err == nil {
		for t0 := time.Now(); time.Since(t0) < d; {
			spins++
		}
	}
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{
			Name: name, Version: version, Kind: abi.KindPlatform, Platform: platform,
			Capabilities: []string{abi.CapWebhook, abi.CapPoll},
			MessageLimit: abi.MessageLimit{Max: 1000, Unit: abi.UnitByte},
			Egress:       []string{"127.0.0.1"},
			ConfigSchema: json.RawMessage(`{"type":"object","properties":{"token":{"type":"string","secret":true}},"required":["token"]}`),
		},
		Configure: func(c *sdk.Context) ([]string, error) {
			var cfg struct{ Token string }
			c.DecodeConfig(&cfg)
			if cfg.Token == "bad" {
				return []string{"token is revoked"}, nil
			}
			return nil, nil
		},
		Webhook: func(c *sdk.Context, req *abi.WebhookRequest) (*abi.WebhookResult, error) {
			switch string(req.Body) { // misbehaviours the host must contain
			case "crash":
				fmt.Fprintln(os.Stderr, "probe stderr: internal detail /srv/secret")
				select {} // the Go runtime dies: "fatal error: all goroutines are asleep"
			case "error":
				return nil, errors.New("internal detail: /srv/secret/path")
			case "status":
				return &abi.WebhookResult{Response: abi.HTTPResponse{Status: 700, Body: []byte("odd")}}, nil
			case "headers":
				return &abi.WebhookResult{Response: abi.HTTPResponse{Status: 202, Body: []byte("ok"), Headers: map[string][]string{
					"content-type": {"text/plain"}, "Set-Cookie": {"s=1"}, "Access-Control-Allow-Origin": {"*"},
					"Location": {"https://evil.example/"}, "Retry-After": {"3"}}}}, nil
			}
			return &abi.WebhookResult{
				Response: abi.HTTPResponse{Status: 200, Body: []byte("probe " + version + " " + c.Profile)},
				Events:   []abi.InboundEvent{{ID: "w:" + string(req.Body), Source: abi.Source{ChatType: abi.ChatDM, ChatID: "1"}, Text: string(req.Body)}},
			}, nil
		},
		Poll: poll,
		Send: send,
	})
}

// poll reports the status stored under the kv key "status" ("state: message"), if any, and
// asks to be polled again in a minute.
func poll(c *sdk.Context, req *abi.PollRequest) (*abi.PollResult, error) {
	res := &abi.PollResult{BackoffMs: 60000}
	v, found, err := c.KVGet("status")
	if err != nil {
		return nil, err
	}
	if found && len(v) > 0 {
		state, msg, _ := strings.Cut(string(v), ": ")
		res.Status = &abi.ProfileStatus{State: state, Message: msg}
	}
	return res, nil
}

func main() {}

//go:wasmexport noop
func noop() int32 { return 0 }

// send runs the command in msg.Text and answers with the outcome as the message id.
func send(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
	cmd, arg, _ := strings.Cut(msg.Text, " ")
	var out any
	var err error
	switch cmd {
	case "version":
		out = version
	case "profile":
		var cfg struct{ Token string }
		c.DecodeConfig(&cfg)
		out = c.Profile + ":" + cfg.Token
	case "http":
		var r *abi.HTTPResponse
		r, err = c.HTTP(&abi.HTTPRequest{URL: arg})
		if err == nil {
			out = string(r.Body)
		}
	case "kvset":
		k, v, _ := strings.Cut(arg, "=")
		err = c.KVSet(k, []byte(v))
	case "kvget":
		var v []byte
		var found bool
		v, found, err = c.KVGet(arg)
		out = map[string]any{"found": found, "value": string(v)}
	case "resolve":
		out, err = c.ResolveSession(abi.Source{Platform: "telegram", Profile: "other", ChatType: abi.ChatDM, ChatID: arg})
	case "dispatch":
		out, err = c.Dispatch(abi.InboundEvent{ID: arg, Source: abi.Source{ChatType: abi.ChatDM, ChatID: "9"}, Text: "hi"})
	case "sendto":
		out, err = c.SendTo(&abi.HostSendRequest{Target: abi.Source{Platform: "probe", ChatID: "1"}, Text: "x"})
	case "deadline": // what the SDK was told: the time left, in whole seconds
		out = time.Until(c.Deadline).Round(time.Second).Seconds()
	case "clock":
		var t time.Time
		t, err = c.Now()
		out = t.UnixMilli()
	case "wsecho":
		var id string
		id, err = c.WSOpen(&abi.WSOpenRequest{URL: arg})
		if err == nil {
			err = c.WSSend(id, abi.WSFrame{Data: []byte("ping")})
		}
		if err == nil {
			var r *abi.WSRecvReply
			r, err = c.WSRecv(id, 5*time.Second, 1)
			if err == nil && len(r.Frames) > 0 {
				out = string(r.Frames[0].Data)
			}
			c.WSClose(id, 1000, "done")
		}
	case "log":
		c.Log(abi.LevelInfo, arg, "k", "v")
	case "sleep":
		d, perr := time.ParseDuration(arg)
		if perr != nil {
			return nil, abi.Errorf(abi.CodeBadRequest, "sleep: %v", perr)
		}
		time.Sleep(d)
		out = "slept " + arg
	case "panic":
		panic("probe was asked to panic")
	case "spin": // a platform that never answers, as far as the host can tell
		for {
			spins++
		}
	default:
		return nil, abi.Errorf(abi.CodeBadRequest, "unknown probe command %q", cmd)
	}
	if err != nil {
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Code: abi.CodeOf(err), Message: err.Error()}}, nil
	}
	b, _ := json.Marshal(out)
	return &abi.SendResult{MessageIDs: []string{string(b)}}, nil
}
