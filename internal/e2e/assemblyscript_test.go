package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk/sdktest"
)

// requireTool skips the test when name is not installed, unless HERMES_REQUIRE_TOOLS is set
// (make test sets it, and installs what the tests need), in which case a missing tool fails.
func requireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("HERMES_REQUIRE_TOOLS") != "" {
			t.Fatalf("%s is not installed (make test installs it)", name)
		}
		t.Skipf("%s is not installed; make test installs it", name)
	}
}

// The AssemblyScript example (examples/assemblyscript), built from npm for ABI 1.1, passes
// conformance on this 1.2 host and behaves: a webhook becomes an event, a send reaches the platform.
func TestAssemblyScriptExample(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	requireTool(t, "npm")
	dir, err := filepath.Abs("../../examples/assemblyscript")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"ci", "--no-audit", "--no-fund"}, {"run", "build"}} {
		cmd := exec.Command("npm", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	wasm := filepath.Join(dir, "build", "asdemo.wasm")
	bin, _ := buildHost(t)
	// The example is built for ABI 1.1, the minor before the host's: it loads and passes as it is.
	if out, err := exec.Command(bin, "conformance", wasm).CombinedOutput(); err != nil || !strings.Contains(string(out), "ok:") ||
		!strings.Contains(string(out), "ABI 1.1") || abi.Current().String() != "1.2" {
		t.Fatalf("conformance (host ABI %s): %v\n%s", abi.Current(), err, out)
	}

	var got map[string]string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&got)
		w.Write([]byte(`{"message_id":"m7"}`))
	}))
	defer api.Close()
	h := sdktest.Wasm(t, wasm, sdktest.Options{
		Profiles: map[string]any{"main": map[string]any{"api_url": api.URL}}, EgressExtra: []string{"127.0.0.1"},
	})
	res, err := h.Webhook("main", abi.WebhookRequest{Method: "POST", Path: "/hooks/asdemo/main",
		Body: []byte(`{"id":"7","chat_id":"42","user_id":"ada","text":"héllo \"world\"\n"}`)})
	if err != nil || res.Response.Status != 200 || len(res.Events) != 1 {
		t.Fatalf("webhook: %+v %v", res, err)
	}
	if ev := res.Events[0]; ev.ID != "asdemo:7" || ev.Source.ChatID != "42" || ev.Source.UserID != "ada" || ev.Text != "héllo \"world\"\n" {
		t.Fatalf("event %+v", ev)
	}
	sent, err := h.Send("main", abi.OutboundMessage{ChatID: "42", Text: "réponse ✓"})
	if err != nil || sent.Error != nil || len(sent.MessageIDs) != 1 || sent.MessageIDs[0] != "m7" {
		t.Fatalf("send: %+v %v", sent, err)
	}
	if got["chat_id"] != "42" || got["text"] != "réponse ✓" {
		t.Fatalf("the platform got %v", got)
	}
}
