package conformance

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

func TestFirstPartyPluginsConform(t *testing.T) {
	for _, dir := range []string{"../plugins/echo", "../plugins/telegram"} {
		t.Run(dir, func(t *testing.T) {
			rep := Run(context.Background(), wasmbuild.MustBuild(t, dir), Options{})
			var out bytes.Buffer
			rep.Write(&out)
			if !rep.Passed() {
				t.Fatalf("conformance failed:\n%s", out.String())
			}
			t.Log(out.String())
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
			var out bytes.Buffer
			rep.Write(&out)
			if rep.Passed() {
				t.Fatalf("hostile plugin passed:\n%s", out.String())
			}
			if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "FAIL") {
				t.Fatalf("report does not say %q:\n%s", want, out.String())
			}
		})
	}
}
