package telegram

import (
	"bytes"
	"context"
	"testing"

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
