package e2e

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `hermes-host conformance` runs the separate hermes-conformance binary and passes its exit
// status on: 0 for a conforming plugin, 1 for a failing one, 2 for a usage error.
func TestConformanceCommand(t *testing.T) {
	bin, plugins := buildHost(t)
	exit := func(args ...string) (int, string) {
		out, err := exec.Command(bin, append([]string{"conformance"}, args...)...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	echo := filepath.Join(plugins, "echo.wasm")
	if code, out := exit(echo); code != 0 || !strings.Contains(out, "PASS") {
		t.Fatalf("echo.wasm: exit %d\n%s", code, out)
	}
	if code, out := exit(echo, "--platform", "nope"); code != 2 || !strings.Contains(out, `no conformance profile for platform "nope"`) {
		t.Fatalf("unknown platform: exit %d\n%s", code, out)
	}
	if code, out := exit(filepath.Join(plugins, "missing.wasm")); code != 1 {
		t.Fatalf("missing file: exit %d\n%s", code, out)
	}
}
