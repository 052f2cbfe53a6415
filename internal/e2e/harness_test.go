package e2e

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/hermes-host/hermes-host/internal/e2e/e2etest"
)

// firstParty are the first-party plugins a default installation serves.
var firstParty = e2etest.FirstParty

// waitingTests is how many of the package's t.Parallel tests run at once unless -parallel says
// otherwise: they mostly wait (on back-offs, storms, slow platforms, other hosts' leases), so more
// of them than there are cores fit (doc.go).
const waitingTests = 4

// TestMain removes the binary built for the tests once they are done.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		flag.Set("test.parallel", strconv.Itoa(max(waitingTests, runtime.GOMAXPROCS(0))))
	}
	code := m.Run()
	e2etest.Cleanup()
	os.Exit(code)
}

// hostBinary builds the hermes-host and hermes-conformance binaries once per test run.
func hostBinary(tb testing.TB) string { return e2etest.Binary(tb) }

// buildHost returns the hermes-host binary and a fresh plugins directory holding the
// first-party plugins (each test gets its own directory, since tests add and replace plugins).
func buildHost(tb testing.TB) (bin, plugins string) {
	tb.Helper()
	return hostBinary(tb), e2etest.Plugins(tb)
}

// serve runs `hermes-host serve` and returns the host once it logs that it is serving (plugins
// loaded, listeners open): its public and admin listeners' addresses and its pid are the host's,
// never the package's (tests run hosts side by side). It is killed when the test ends. Hosts use
// the compilation cache HERMES_COMPILATION_CACHE names when it is set (e2etest.Host.Start).
func serve(tb testing.TB, bin, plugins, dataDir string, extra ...string) *e2etest.Host {
	tb.Helper()
	return e2etest.MustServe(tb, bin, plugins, dataDir, extra...)
}

// startServe is serve for a test that needs only the public listener's address and a stop.
func startServe(tb testing.TB, bin, plugins, dataDir string, extra ...string) (addr string, stop func()) {
	tb.Helper()
	h := serve(tb, bin, plugins, dataDir, extra...)
	return h.Addr, h.Stop
}

// adminRequest calls the admin listener with the token the host wrote into its data directory,
// decodes a JSON answer into v (a *string gets the raw body; nil: ignored) and returns the status.
func adminRequest(tb testing.TB, method, admin, data, path, body string, v any) int {
	tb.Helper()
	return e2etest.AdminRequest(tb, method, admin, data, path, body, v)
}
