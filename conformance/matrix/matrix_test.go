package matrix

import (
	"context"
	"testing"

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
