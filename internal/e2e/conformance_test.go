package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/conformance/echotest"
)

// `hermes-host conformance` runs the separate hermes-conformance binary and passes its exit
// status on: 0 for a conforming plugin, 1 for a failing one, 2 for a usage error.
func TestConformanceCommand(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
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
	if code, out := exit(filepath.Join(plugins, "slack.wasm"), "--platform", "slack"); code != 0 || !strings.Contains(out, "webhook: forged requests refused") {
		t.Fatalf("slack.wasm --platform slack: exit %d\n%s", code, out)
	}
	if code, out := exit(echo, "--platform", "nope"); code != 2 || !strings.Contains(out, `no conformance profile for platform "nope"`) {
		t.Fatalf("unknown platform: exit %d\n%s", code, out)
	}
	if code, out := exit(filepath.Join(plugins, "missing.wasm")); code != 1 {
		t.Fatalf("missing file: exit %d\n%s", code, out)
	}
}

// `hermes-host call` runs one export against the real host functions: describe prints the
// manifest; send reaches the loopback platform granted with --allow-host.
func TestCallCommand(t *testing.T) {
	bin, plugins := buildHost(t)
	echo := filepath.Join(plugins, "echo.wasm")
	fake := echotest.New()
	defer fake.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cfg.json")
	req := filepath.Join(dir, "req.json")
	os.WriteFile(cfg, []byte(`{"outbox_url": "`+fake.URL()+`/outbox"}`), 0o600)
	os.WriteFile(req, []byte(`{"message": {"chat_id": "42", "text": "hello from call"}}`), 0o600)

	out, err := exec.Command(bin, "call", echo, "describe").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"platform": "echo"`) {
		t.Fatalf("describe: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "call", echo, "send", "--config", cfg, "--input", req, "--allow-host", "127.0.0.1").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "message_ids") || fake.Count("hello from call") != 1 {
		t.Fatalf("send: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "call", echo, "nope").CombinedOutput(); err == nil {
		t.Fatalf("an unknown export succeeded:\n%s", out)
	}
}
