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
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "testdata/wrong"), Options{})
	got := map[string]Result{}
	for _, r := range rep.Results {
		got[r.Name] = r
	}
	for name, want := range map[string]string{
		"normal/send":    "not JSON",
		"normal/webhook": "/response/status",
		"normal/poll":    "chat_type",
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
