package telegram

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

func TestFirstPartyPluginConforms(t *testing.T) {
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "../../plugins/telegram"), Options{})
	var out bytes.Buffer
	rep.Write(&out)
	if !rep.Passed() {
		t.Fatalf("telegram conformance failed:\n%s", out.String())
	}
	t.Log(out.String())
}

// The suite must be able to fail: the echo plugin is no Telegram adapter.
func TestOtherPlatformFails(t *testing.T) {
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "../../plugins/echo"), Options{})
	var out bytes.Buffer
	rep.Write(&out)
	if rep.Passed() {
		t.Fatalf("echo passed the Telegram profile:\n%s", out.String())
	}
}

// A naive adapter (testdata/naive) makes the classic mistakes; each must fail its check.
func TestNaiveAdapterFails(t *testing.T) {
	// Short waits: the naive adapter makes checks wait for what never comes.
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "testdata/naive"), Options{Timeout: 3 * time.Second})
	var out bytes.Buffer
	rep.Write(&out)
	failed := map[string]bool{}
	for _, r := range rep.Results {
		failed[r.Name] = !r.Passed
	}
	for _, name := range []string{
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
	} {
		if !failed[name] {
			t.Errorf("check %q did not fail", name)
		}
	}
	if failed["load (manifest, configure)"] {
		t.Errorf("the naive adapter should load")
	}
	t.Log(out.String())
}
