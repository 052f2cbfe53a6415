package discord

import (
	"context"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// The two runs are independent (each its own fake, host environment and plugin), so they go
// side by side: most of a run is waiting for the fake and the plugin.
func TestFirstPartyPluginConforms(t *testing.T) {
	t.Parallel()
	conformance.RequirePass(t, Run(context.Background(), wasmbuild.MustBuild(t, "../../plugins/discord"),
		Options{Timeout: testdeadline.Scale(20 * time.Second), CacheDir: wasmbuild.CompilationCacheDir(t)}))
}

// A naive adapter (testdata/naive) makes the classic mistakes; each must fail its check.
func TestNaiveAdapterFails(t *testing.T) {
	t.Parallel()
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "testdata/naive"),
		Options{Timeout: testdeadline.Scale(5 * time.Second), CacheDir: wasmbuild.CompilationCacheDir(t)})
	conformance.RequireFail(t, rep, []string{"load (manifest, configure)"},
		"configure: wrong token refused",              // no configure
		"gateway: identify with intents",              // no message content intent
		"inbound: mentions, replies, threads, DMs",    // every message a turn, no threads
		"inbound: own and bots' messages skipped",     // answers itself
		"gateway: heartbeats",                         // d: null
		"gateway: seq committed after recording",      // committed on receipt
		"gateway: drop resumes, none lost or doubled", // IDENTIFY after a drop
		"gateway: zombie closed and resumed",          // ACKs not awaited
		"gateway: op 7 resumes",                       // closes with 1000 and IDENTIFYs
		"send: into the thread, as a reply",           // thread ignored
		"send: nothing in the text pings",             // no allowed_mentions
		"send: 429 mapped to retry_after",             // no retry_after_ms
		"send: exhausted bucket not hit",              // no bucket
		"send: lost answer is uncertain",              // retried inside send
		"send: timeout under the deadline",            // a 30 s timeout under 10 s
		"egress: messages posted only from send",      // typing from poll
	)
}
