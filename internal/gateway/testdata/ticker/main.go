// Command ticker is a test scheduler plugin: on each tick it sends its configured text into its
// configured chat through the host (hermes_send), once per "round" value, and records the
// outcome in kv so tests can read what the host answered.
package main

import (
	"encoding/json"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

type config struct {
	Platform string `json:"platform"`
	ChatID   string `json:"chat_id"`
	Text     string `json:"text"`
	Seed     string `json:"seed"`
	Pin      string `json:"pin_session_id"`
	Round    string `json:"round"`
}

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{Name: "ticker", Version: "1", Kind: abi.KindScheduler,
			ConfigSchema: json.RawMessage(`{"type":"object","properties":{"chat_id":{"type":"string"}},"required":["chat_id"]}`)},
		Tick: tick,
	})
}

func main() {}

func tick(c *sdk.Context, req *abi.TickRequest) (*abi.TickResult, error) {
	var cfg config
	if err := c.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	done := "done:" + cfg.Round
	if _, found, err := c.KVGet(done); err != nil || found {
		return &abi.TickResult{NextTickMs: 100}, err
	}
	reply, err := c.SendTo(&abi.HostSendRequest{
		Target: abi.Source{Platform: cfg.Platform, ChatType: abi.ChatDM, ChatID: cfg.ChatID},
		Text:   cfg.Text, Seed: cfg.Seed, PinSessionID: cfg.Pin,
	})
	outcome := map[string]any{"reply": reply, "error": abi.AsError(err)}
	b, _ := json.Marshal(outcome)
	if err := c.KVSet(done, b); err != nil {
		return nil, err
	}
	return &abi.TickResult{NextTickMs: 100}, nil
}
