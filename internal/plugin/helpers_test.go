package plugin

import (
	"testing"

	extism "github.com/extism/go-sdk"
	"github.com/prometheus/client_golang/prometheus"
)

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

// newRuntimeFns returns the host functions of a runtime with an empty Env, so a bare Extism
// plugin can link the probe's imports.
func newRuntimeFns(tb testing.TB) []extism.HostFunction {
	r, err := New(Config{Dir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	return r.fns
}
