package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// firstParty are the first-party plugins a default installation serves.
var firstParty = []string{"cron", "echo", "slack", "telegram", "yuanbao"}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// TestMain removes the binary built for the tests once they are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// hostBinary builds the hermes-host and hermes-conformance binaries once per test run.
func hostBinary(tb testing.TB) string {
	tb.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "hermes-e2e-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "hermes-host")
		// hermes-conformance sits beside hermes-host, where `hermes-host conformance` looks for it.
		for _, cmd := range []string{"hermes-host", "hermes-conformance"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, cmd), "../../cmd/"+cmd).CombinedOutput()
			if err != nil {
				binErr = err
				tb.Logf("build %s: %s", cmd, out)
				return
			}
		}
	})
	if binErr != nil {
		tb.Fatalf("building hermes-host: %v", binErr)
	}
	return binPath
}

// buildHost returns the hermes-host binary and a fresh plugins directory holding the
// first-party plugins (each test gets its own directory, since tests add and replace plugins).
func buildHost(tb testing.TB) (bin, plugins string) {
	tb.Helper()
	bin = hostBinary(tb)
	plugins = filepath.Join(tb.TempDir(), "plugins")
	os.MkdirAll(plugins, 0o755)
	for _, name := range firstParty {
		wasmbuild.CopyTo(tb, "../../plugins/"+name, filepath.Join(plugins, name+".wasm"))
	}
	return bin, plugins
}

var (
	pidsMu    sync.Mutex
	servePIDs = map[int]bool{}
	lastPID   int
	lastAdmin string // the admin listener of the last host started
)

// startServe runs `hermes-host serve` and returns once it logs that it is serving (plugins
// loaded, listeners open) with the public listener's address; lastAdmin holds the admin
// listener's. The process is killed when the test ends.
func startServe(tb testing.TB, bin, plugins, dataDir string, extra ...string) (addr string, stop func()) {
	tb.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data-dir", dataDir, "--plugins", plugins}, extra...)
	cmd := exec.Command(bin, args...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait() }
	pidsMu.Lock()
	servePIDs[cmd.Process.Pid] = true
	lastPID = cmd.Process.Pid
	pidsMu.Unlock()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "msg=\"hermes-host serving\" addr="); i >= 0 {
			addr = strings.Fields(line[i+len("msg=\"hermes-host serving\" addr="):])[0]
			if j := strings.Index(line, " admin="); j >= 0 {
				pidsMu.Lock()
				lastAdmin = strings.Fields(line[j+len(" admin="):])[0]
				pidsMu.Unlock()
			}
			go func() {
				for sc.Scan() {
				}
			}()
			return addr, stop
		}
	}
	stop()
	tb.Fatal("serve exited before serving")
	return "", nil
}

// adminRequest calls the admin listener with the token the host wrote into its data directory,
// decodes a JSON answer into v (a *string gets the raw body; nil: ignored) and returns the status.
func adminRequest(tb testing.TB, method, admin, data, path, body string, v any) int {
	tb.Helper()
	token, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		tb.Fatal(err)
	}
	req, _ := http.NewRequest(method, "http://"+admin+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if raw, ok := v.(*string); ok {
		*raw = string(b)
	} else if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			tb.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}
