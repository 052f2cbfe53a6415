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
