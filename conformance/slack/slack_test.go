package slack

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

func TestFirstPartyPluginConforms(t *testing.T) {
	conformance.RequirePass(t, Run(context.Background(), wasmbuild.MustBuild(t, "../../plugins/slack"), Options{}))
}

// A naive adapter (testdata/naive) makes the classic mistakes; each must fail its check.
func TestNaiveAdapterFails(t *testing.T) {
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "testdata/naive"), Options{Timeout: 5 * time.Second})
	conformance.RequireFail(t, rep, []string{"load (manifest, configure)"},
		"webhook: forged requests refused",       // no signature check
		"webhook: retries are one event",         // every X-Slack-Retry-Num dropped
		"inbound: message + app_mention once",    // event_id as the event's id
		"inbound: workspace in the scope",        // no team id in the source
		"inbound: threads and mention gating",    // every channel message a turn, no threads
		"inbound: own messages skipped",          // bot_id not checked
		"send: into the thread",                  // thread_ts dropped
		"send: long text split, not cut",         // 40,000+ characters in one post
		"send: 429 mapped to Retry-After",        // no retry_after_ms
		"send: not executed is retryable",        // a 503 retried inside send
		"send: lost answer is uncertain",         // 5xx retried inside send
		"send: timeout under the deadline",       // a 30 s HTTP timeout under a 10 s deadline
		"socket: ack after the host records",     // acknowledged on receipt
		"socket: reconnect, no duplicates",       // envelope_id as the event's id
		"egress: messages posted only from send", // acknowledges mentions from webhook
	)
}

// Every shipped request has its expectations and is valid JSON.
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
}
