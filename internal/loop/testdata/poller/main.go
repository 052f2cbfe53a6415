// Command poller is a polling plugin for loop tests. Built with -X main.mode=crash its poll
// exits the instance (a crash); otherwise each poll returns one event, numbered by the poll.
// Built with -X main.mode=paced every other poll returns nothing and asks for a 20 ms pause,
// so a loop polls about 50 times a second instead of as fast as it can.
package main

import (
	"os"
	"strconv"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

var (
	mode  = "ok"
	polls int
)

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{Name: "poller", Version: mode, Kind: abi.KindPlatform, Platform: "poller",
			Capabilities: []string{abi.CapPoll}, MessageLimit: abi.MessageLimit{Max: 100, Unit: abi.UnitByte}},
		Poll: func(c *sdk.Context, req *abi.PollRequest) (*abi.PollResult, error) {
			if mode == "crash" {
				os.Exit(3)
			}
			polls++
			if mode == "paced" && polls%2 == 0 {
				return &abi.PollResult{BackoffMs: 20}, nil
			}
			return &abi.PollResult{BackoffMs: (50 * time.Millisecond).Milliseconds(), Events: []abi.InboundEvent{{
				ID: mode + strconv.Itoa(polls), Source: abi.Source{ChatType: abi.ChatDM, ChatID: "1"}, Text: "hi"}}}, nil
		},
		Send: func(*sdk.Context, *abi.OutboundMessage) (*abi.SendResult, error) { return &abi.SendResult{}, nil },
	})
}

func main() {}
