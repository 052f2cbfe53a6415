package telegram

import (
	"context"
	"testing"
	"time"

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
