package matrix

import (
	"context"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

func TestFirstPartyPluginConforms(t *testing.T) {
	conformance.RequirePass(t, Run(context.Background(), wasmbuild.MustBuild(t, "../../plugins/matrix"), Options{}))
}

// The suite must be able to fail: the echo plugin is no Matrix adapter.
func TestOtherPlatformFails(t *testing.T) {
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "../../plugins/echo"), Options{})
	if rep.Passed() {
		t.Fatalf("echo passed the Matrix profile:\n%s", rep.String())
	}
}

// A naive adapter (testdata/naive) makes the classic mistakes; each must fail its check.
func TestNaiveAdapterFails(t *testing.T) {
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "testdata/naive"), Options{Timeout: 5 * time.Second})
	conformance.RequireFail(t, rep, []string{"load (manifest, configure)"},
		"configure: rejected token refused",                 // no configure: every token accepted
		"poll: history before the first sync not answered",  // the first sync's timeline answered
		"poll: since advanced only after the host recorded", // since advanced before the host recorded
		"poll: restart, no loss or replay",                  // since in instance memory
		"poll: sync gap filled",                             // limited timelines taken as whole
		"poll: invitations joined, history skipped",         // never joins
		"poll: expired token stops the profile",             // M_UNKNOWN_TOKEN: a failed call, every poll
		"inbound: rooms, threads and mentions",              // every message a turn, no threads
		"inbound: reply to the bot is addressed",            // m.in_reply_to not read
		"inbound: own messages skipped",                     // its own messages are turns
		"send: into the thread",                             // no m.thread relation
		"send: never pings (m.mentions empty)",              // no m.mentions: @room pings the room
		"send: transaction id from the delivery id",         // a fresh txn id per attempt
		"send: lost answer retried once",                    // a 5xx after the effect retried with a new txn id
		"send: 429 mapped to retry_after_ms",                // no retry_after_ms
		"send: refusals typed",                              // every non-200 retryable
		"send: slow answer typed, no crash",                 // 30 s HTTP timeout under a 10 s deadline
		"send: encrypted room refused with one notice",      // plaintext into an encrypted room
		"egress: messages posted only from send",            // acknowledges messages from poll
	)
}
