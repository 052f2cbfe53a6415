package conformance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

func TestFirstPartyPluginsConform(t *testing.T) {
	for _, dir := range []string{"../plugins/echo", "../plugins/telegram", "../plugins/cron"} {
		t.Run(dir, func(t *testing.T) {
			RequirePass(t, Run(context.Background(), wasmbuild.MustBuild(t, dir), Options{}))
		})
	}
}

func TestHostilePluginsFail(t *testing.T) {
	const hostile = "../internal/plugin/testdata/hostile/"
	for name, want := range map[string]string{
		"panicky":   "panic: panicky: describe",
		"wrongabi":  "ABI 2.0",
		"noexports": `missing required export "describe"`,
		"loop":      "trapped: plugin loop crashed in send (deadline)",
	} {
		t.Run(name, func(t *testing.T) {
			rep := Run(context.Background(), wasmbuild.MustBuild(t, hostile+name), Options{CallTimeout: 2 * time.Second})
			if rep.Passed() {
				t.Fatalf("hostile plugin passed:\n%s", rep.String())
			}
			if !strings.Contains(rep.String(), want) || !strings.Contains(rep.String(), "FAIL") {
				t.Fatalf("report does not say %q:\n%s", want, rep.String())
			}
		})
	}
}

// A plugin that never traps but answers wrongly in normal operation fails the normal-path
// checks, each with the reason.
func TestWrongAnswersFailTheNormalPath(t *testing.T) {
	sample := WebhookSample{Name: "update.json", Body: []byte(`{"id":"1","chat_id":"1","text":"hi"}`)}
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "testdata/wrong"), Options{WebhookSamples: []WebhookSample{sample}})
	got := map[string]Result{}
	for _, r := range rep.Results {
		got[r.Name] = r
	}
	// The suite's own webhook request is refused (a valid answer); the sample finds the status.
	if r := got["normal/webhook"]; !r.Passed {
		t.Errorf("normal/webhook: %+v", r)
	}
	for name, want := range map[string]string{
		"normal/send":                       "not JSON",
		"normal/webhook-sample update.json": "/response/status",
		"normal/poll":                       "chat_type",
	} {
		r, ok := got[name]
		if !ok || r.Passed || !strings.Contains(r.Detail, want) {
			t.Errorf("%s: %+v; want a failure saying %q", name, r, want)
		}
	}
	for _, name := range []string{"normal/describe", "normal/configure", "send/empty", "webhook/malformed", "poll/no-profile"} {
		if r := got[name]; !r.Passed {
			t.Errorf("%s failed: %s", name, r.Detail)
		}
	}
	if rep.Passed() {
		t.Fatal("the wrong plugin passed")
	}
}

// A webhook sample the echo plugin accepts passes; one it refuses, or given to a plugin without
// webhooks, fails with the reason.
func TestWebhookSamples(t *testing.T) {
	echo := wasmbuild.MustBuild(t, "../plugins/echo")
	good := WebhookSample{Name: "good", Body: []byte(`{"id":"m1","chat_id":"42","user_id":"ada","text":"hello"}`)}
	bad := WebhookSample{Name: "bad", Body: []byte(`{"id":"m2","text":"no chat"}`)}
	rep := Run(context.Background(), echo, Options{Config: []byte(`{"outbox_url":"http://127.0.0.1:1/"}`), WebhookSamples: []WebhookSample{good, bad}})
	got := map[string]Result{}
	for _, r := range rep.Results {
		got[r.Name] = r
	}
	if r := got["normal/webhook-sample good"]; !r.Passed {
		t.Errorf("the good sample: %+v", r)
	}
	if r := got["normal/webhook-sample bad"]; r.Passed || !strings.Contains(r.Detail, "refused: status 400") {
		t.Errorf("the refused sample: %+v", r)
	}
}
