package yuanbao

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

func TestFirstPartyPluginConforms(t *testing.T) {
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "../../plugins/yuanbao"), Options{})
	var out bytes.Buffer
	rep.Write(&out)
	if !rep.Passed() {
		t.Fatalf("yuanbao conformance failed:\n%s", out.String())
	}
	t.Log(out.String())
}

// A naive adapter (testdata/naive) makes the classic mistakes; each must fail its check.
func TestNaiveAdapterFails(t *testing.T) {
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "testdata/naive"), Options{Timeout: 5 * time.Second})
	var out bytes.Buffer
	rep.Write(&out)
	failed := map[string]bool{}
	for _, r := range rep.Results {
		failed[r.Name] = !r.Passed
	}
	for _, name := range []string{
		"inbound: DM, gating, owner, quote",       // every group message a turn
		"inbound: ack after recording",            // acknowledged at once
		"send: late answer uncertain",             // written is not answered
		"ping: two missed pongs",                  // never pings
		"close: permanent codes stop",             // reconnects after 4013
		"reload: same connection",                 // connection in instance memory
		"configure: wrong secret refused",         // no configure
		"egress: messages written only from send", // commands acknowledged from poll
	} {
		if !failed[name] {
			t.Errorf("check %q did not fail", name)
		}
	}
	if failed["connect: sign-token, AUTH_BIND first"] {
		t.Errorf("the naive adapter should connect")
	}
	t.Log(out.String())
}
