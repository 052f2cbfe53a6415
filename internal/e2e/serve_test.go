package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/testdeadline"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil {
		json.NewDecoder(resp.Body).Decode(v)
	}
	return resp.StatusCode
}

// eventually polls cond until it holds or 30 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// 30 s on a quiet machine, stretched by the harness's factor (a plugin compiling while every
	// package runs at once).
	for deadline := time.Now().Add(testdeadline.Scale(30 * time.Second)); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestServeBinary runs the real binary: health, admin API, webhook routing into a plugin, and a
// plugin dropped into the watched directory while serving (plus a broken one, which is rejected
// without disturbing the others).
func TestServeBinary(t *testing.T) {
	bin, plugins := buildHost(t)
	data := t.TempDir()
	sh := serve(t, bin, plugins, data)
	defer sh.Stop()
	base, admin := "http://"+sh.Addr, sh.Admin

	var health struct{ Status string }
	if code := getJSON(t, "http://"+admin+"/healthz", &health); code != 200 || health.Status != "ok" {
		t.Fatalf("healthz %d %+v", code, health)
	}
	// The demo platform (echo's main profile by default) is reached on the admin listener.
	if code := adminRequest(t, "POST", admin, data, "/demo/inbox", `{"chat_id":"1","text":"hi","id":"m1"}`, nil); code != 200 {
		t.Fatalf("demo inbox: %d", code)
	}
	resp, _ := http.Post(base+"/hooks/echo/main", "application/json", strings.NewReader(`{"chat_id":"1","text":"hi","id":"m2"}`))
	if resp.StatusCode != 404 {
		t.Fatalf("the demo profile on the public listener: %d", resp.StatusCode)
	}
	resp, _ = http.Post(base+"/hooks/nope/main", "application/json", nil)
	if resp.StatusCode != 404 {
		t.Fatalf("unknown plugin: %d", resp.StatusCode)
	}
	resp, _ = http.Post(base+"/hooks/echo/ghost", "application/json", strings.NewReader(`{}`))
	if resp.StatusCode != 404 {
		t.Fatalf("unknown profile: %d", resp.StatusCode)
	}

	// Drop a new plugin and a broken one into the directory while serving.
	wasmbuild.CopyTo(t, "../plugin/testdata/probe", filepath.Join(plugins, "probe.wasm"))
	os.WriteFile(filepath.Join(plugins, "broken.wasm"), []byte("not wasm"), 0o644)
	type api struct {
		Plugins  []struct{ Name, State string }
		Rejected []struct{ Path, Error string }
	}
	eventually(t, "probe to load and broken.wasm to be rejected", func() bool {
		var a api
		adminRequest(t, "GET", admin, data, "/api/plugins", "", &a)
		probe := false
		for _, p := range a.Plugins {
			probe = probe || (p.Name == "probe" && p.State == "active")
		}
		return probe && len(a.Plugins) == len(firstParty)+1 && len(a.Rejected) == 1 &&
			strings.Contains(a.Rejected[0].Error, "not a WebAssembly module")
	})
	if code := adminRequest(t, "GET", admin, data, "/metrics", "", nil); code != 200 {
		t.Fatalf("metrics %d", code)
	}
}

// TestPluginsCommandsOperatorView: `plugins ls` shows the running server's view (no re-run of
// every plugin); `plugins inspect` names the file it was given; a command that reported its own
// failure does not add "Error: exit 1".
func TestPluginsCommandsOperatorView(t *testing.T) {
	bin, plugins := buildHost(t)
	data := t.TempDir()
	sh := serve(t, bin, plugins, data)
	stop := sh.Stop
	defer stop()
	addr := sh.Admin
	out, err := runCLI(bin, data, "--plugins", plugins, "--admin-listen", addr, "plugins", "ls")
	if err != nil || !strings.Contains(out, "from the server at "+addr) || !strings.Contains(out, "echo") {
		t.Fatalf("plugins ls while serving: %v\n%s", err, out)
	}
	stop()
	out, err = runCLI(bin, data, "--plugins", plugins, "--admin-listen", addr, "plugins", "ls")
	if err != nil || !strings.Contains(out, "no server answering") || !strings.Contains(out, "echo") {
		t.Fatalf("plugins ls without a server: %v\n%s", err, out)
	}
	echo := filepath.Join(plugins, "echo.wasm")
	out, err = runCLI(bin, data, "plugins", "inspect", echo)
	if err != nil || !strings.Contains(out, `"file": "`+echo+`"`) {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.wasm")
	os.WriteFile(bad, []byte("not wasm"), 0o644)
	out, err = runCLI(bin, data, "plugins", "inspect", bad)
	if err == nil || !strings.Contains(out, "rejected") || strings.Contains(out, "Error: exit") {
		t.Fatalf("inspect of a bad file: %v\n%s", err, out)
	}
}
