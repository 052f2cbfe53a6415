package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/internal/e2e/e2etest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
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
	matrix := wasmbuild.MustBuild(t, filepath.Join(e2etest.Root(t), "plugins", "matrix"))
	if code, out := exit(matrix, "--platform", "matrix"); code != 0 || !strings.Contains(out, "send: transaction id from the delivery id") {
		t.Fatalf("matrix.wasm --platform matrix: exit %d\n%s", code, out)
	}
	if code, out := exit(echo, "--platform", "nope"); code != 2 || !strings.Contains(out, `no conformance profile for platform "nope"`) {
		t.Fatalf("unknown platform: exit %d\n%s", code, out)
	}
	if code, out := exit(filepath.Join(plugins, "missing.wasm")); code != 1 {
		t.Fatalf("missing file: exit %d\n%s", code, out)
	}
	// The author's own webhook request: the plugin whose webhook breaks only on a real update
	// passes its normal/webhook check (it refuses the suite's {}) and fails on the sample.
	dir := t.TempDir()
	wrong := filepath.Join(dir, "wrong.wasm")
	wasmbuild.CopyTo(t, "../../conformance/testdata/wrong", wrong)
	sample := filepath.Join(dir, "update.json")
	os.WriteFile(sample, []byte(`{"id":"1","chat_id":"1","text":"hi"}`), 0o600)
	if code, out := exit(wrong, "--webhook-sample", sample, "--webhook-header", "X-Sig: abc"); code != 1 ||
		!strings.Contains(out, "normal/webhook-sample update.json") || !strings.Contains(out, "/response/status") {
		t.Fatalf("wrong.wasm --webhook-sample: exit %d\n%s", code, out)
	}
	echoSample := filepath.Join(dir, "echo.json")
	os.WriteFile(echoSample, []byte(`{"id":"m1","chat_id":"42","text":"hello"}`), 0o600)
	cfg := filepath.Join(dir, "echo-cfg.json")
	os.WriteFile(cfg, []byte(`{"outbox_url":"http://127.0.0.1:1/"}`), 0o600)
	if code, out := exit(echo, "--config", cfg, "--webhook-sample", echoSample); code != 0 {
		t.Fatalf("echo.wasm --webhook-sample: exit %d\n%s", code, out)
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

	// The plugin's own log lines, at --log-level (info by default; warn hides an info line).
	probe := filepath.Join(dir, "probe.wasm")
	wasmbuild.CopyTo(t, "../plugin/testdata/probe", probe)
	logReq := filepath.Join(dir, "log.json")
	os.WriteFile(logReq, []byte(`{"message": {"chat_id": "1", "text": "log hello-from-the-plugin"}}`), 0o600)
	if out, err := exec.Command(bin, "call", probe, "send", "--input", logReq).CombinedOutput(); err != nil || !strings.Contains(string(out), "hello-from-the-plugin") {
		t.Fatalf("the plugin's info line at the default level: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "call", probe, "send", "--input", logReq, "--log-level", "warn").CombinedOutput(); err != nil || strings.Contains(string(out), "level=INFO") {
		t.Fatalf("an info line at --log-level warn: %v\n%s", err, out)
	}
	// A webhook body given raw (--body), encoded for the author: the probe's event carries it.
	body := filepath.Join(dir, "update.json")
	os.WriteFile(body, []byte(`{"update_id": 7}`), 0o600)
	if out, err := exec.Command(bin, "call", probe, "webhook", "--body", body).CombinedOutput(); err != nil || !strings.Contains(string(out), `"text": "{\"update_id\": 7}"`) {
		t.Fatalf("webhook --body: %v\n%s", err, out)
	}
	// Invalid results exit 1 with the reason: a status outside 100-599, a send that is not JSON.
	wrong := filepath.Join(dir, "wrong.wasm")
	wasmbuild.CopyTo(t, "../../conformance/testdata/wrong", wrong)
	for export, want := range map[string]string{"webhook": "not a valid WebhookResult", "send": "not JSON"} {
		cmd := exec.Command(bin, "call", wrong, export, "--input", "-")
		cmd.Stdin = strings.NewReader(`{"body": {"id": "1"}, "message": {"chat_id": "1", "text": "x"}}`)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), want) {
			t.Errorf("call wrong.wasm %s: %v (want exit 1, %q)\n%s", export, err, want, out)
		}
	}
}
