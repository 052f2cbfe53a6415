package telegram

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

func TestFirstPartyPluginConforms(t *testing.T) {
	conformance.RequirePass(t, Run(context.Background(), wasmbuild.MustBuild(t, "../../plugins/telegram"), Options{}))
}

// The suite must be able to fail: the echo plugin is no Telegram adapter.
func TestOtherPlatformFails(t *testing.T) {
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "../../plugins/echo"), Options{})
	if rep.Passed() {
		t.Fatalf("echo passed the Telegram profile:\n%s", rep.String())
	}
}

// A naive adapter (testdata/naive) makes the classic mistakes; each must fail its check.
func TestNaiveAdapterFails(t *testing.T) {
	// Short waits: the naive adapter makes checks wait for what never comes.
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "testdata/naive"), Options{Timeout: 3 * time.Second})
	conformance.RequireFail(t, rep, []string{"load (manifest, configure)"},
		"poll: restart, no loss or replay",       // offset in instance memory
		"inbound: topics and thread traps",       // every message_thread_id echoed
		"inbound: mention gating",                // every group message a turn
		"send: UTF-16 limit respected",           // code points counted
		"send: 429 mapped to retry_after",        // retried inside send
		"webhook: secret enforced",               // no secret check
		"egress: messages posted only from send", // acknowledges commands from poll
		// The old ambiguous-answer mapping and timeouts longer than the call deadline.
		"send: ambiguous answers never resent",      // 5xx, reset, unreadable 200: retryable
		"send: slow answer typed, no crash",         // no answer in time: retryable, a resend duplicates
		"configure: slow getMe accepts the profile", // 30 s getMe at configure: rejected
		"inbound: bots, edits, service, migration",  // migration service messages dropped
	)
}

// Every shipped update has its expectations and is valid JSON; a sample that a broken adapter
// answers wrongly is reported with its file name.
func TestShippedSamples(t *testing.T) {
	samples, err := conformance.LoadSamples(sampleFiles, "samples", sampleWants)
	if err != nil || len(samples) != len(sampleWants) {
		t.Fatalf("%d samples: %v", len(samples), err)
	}
	for _, s := range samples {
		if !json.Valid(s.Body) {
			t.Errorf("%s is not JSON", s.Name)
		}
	}
	forum := samples[slices.IndexFunc(samples, func(s conformance.Sample) bool { return s.Name == "forum_topic.json" })]
	wrong := &abi.WebhookResult{Response: abi.HTTPResponse{Status: 200}, Events: []abi.InboundEvent{{ID: "update:1",
		Source: abi.Source{ChatType: abi.ChatGroup, ChatID: "-1002233445566", UserID: "580193422"}, Text: "status of the deploy?", Mentioned: true}}}
	if err := conformance.CheckSample(forum, wrong); err == nil || !strings.Contains(err.Error(), "forum_topic.json: event 0 has chat_type \"group\", want \"forum\"") ||
		!strings.Contains(err.Error(), "thread_id") {
		t.Errorf("a topic message mapped as plain group chatter: %v", err)
	}
}
