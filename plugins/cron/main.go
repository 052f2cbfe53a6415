// Command cron is hermes-host's scheduler plugin (cron.wasm): jobs that send a text, or the
// answer of an agent turn, into chats on a schedule.
//
// Jobs live in the plugin's kv store (one key per job, plus an index), or in the profile's
// configuration. Every tick runs the due jobs: a slot is claimed durably before anything is
// sent, so it is delivered at most once across restarts and kill -9. Delivery goes through the
// host (hermes_send): pinned to the conversation a job was created in, and optionally seeded
// into the target's session in the same critical section as the send. See README.md.
package main

import (
	"time"
	_ "time/tzdata" // the Wasm sandbox has no zoneinfo: time zones come with the plugin

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{
			Name: "cron", Version: "1.0.0", Kind: abi.KindScheduler,
			Description:  "Scheduled messages and agent turns: one-shots, intervals, cron expressions, natural forms",
			Capabilities: []string{abi.CapJobs},
			ConfigSchema: configSchema,
		},
		Configure: configure,
		Tick:      tick,
		Jobs:      jobs,
	})
}

func main() {}

func configure(c *sdk.Context) ([]string, error) {
	cfg, err := decodeConfig(c)
	if err != nil {
		return []string{err.Error()}, nil
	}
	now, err := c.Now()
	if err != nil {
		now = time.Now()
	}
	return cfg.problems(now), nil
}
