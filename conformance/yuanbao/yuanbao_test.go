package yuanbao

import (
	"context"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

func TestFirstPartyPluginConforms(t *testing.T) {
	conformance.RequirePass(t, Run(context.Background(), wasmbuild.MustBuild(t, "../../plugins/yuanbao"), Options{}))
}

// A naive adapter (testdata/naive) makes the classic mistakes; each must fail its check.
func TestNaiveAdapterFails(t *testing.T) {
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "testdata/naive"), Options{Timeout: 5 * time.Second})
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
