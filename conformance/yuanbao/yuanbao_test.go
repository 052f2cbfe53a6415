package yuanbao

import (
	"context"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// The two runs are independent (each its own fake, host environment and plugin), so they go
// side by side: most of a run is waiting for the fake and the plugin's back-offs.
func TestFirstPartyPluginConforms(t *testing.T) {
	t.Parallel()
	conformance.RequirePass(t, Run(context.Background(), wasmbuild.MustBuild(t, "../../plugins/yuanbao"),
		// The suite's default timeout, under the harness's load; the run's compilation cache.
		Options{Timeout: testdeadline.Scale(20 * time.Second), CacheDir: wasmbuild.CompilationCacheDir(t)}))
}

// A naive adapter (testdata/naive) makes the classic mistakes; each must fail its check.
func TestNaiveAdapterFails(t *testing.T) {
	t.Parallel()
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "testdata/naive"), Options{Timeout: testdeadline.Scale(5 * time.Second), CacheDir: wasmbuild.CompilationCacheDir(t)})
	conformance.RequireFail(t, rep, []string{"connect: sign-token, AUTH_BIND first"},
		"inbound: DM, gating, owner, quote",       // every group message a turn
		"inbound: ack after recording",            // acknowledged at once
		"send: late answer uncertain",             // written is not answered
		"reconnect: back-off, cached token",       // at once, and signs every time
		"ping: two missed pongs",                  // never pings
		"close: permanent codes stop",             // reconnects after 4013
		"reload: same connection",                 // connection in instance memory
		"configure: wrong secret refused",         // no configure
		"egress: messages written only from send", // commands acknowledged from poll
	)
}
