package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/config"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// heldAgent answers "answer to <text>" once release is closed; it tells started of each turn.
type heldAgent struct {
	started chan string
	release chan struct{}
}

func (a *heldAgent) Turn(ctx context.Context, t *agent.Turn) (*agent.Reply, error) {
	a.started <- t.Text
	select {
	case <-a.release:
		return &agent.Reply{Text: "answer to " + t.Text}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestDrainOrder: when Run's context ends, intake stops first (a webhook is answered 503 with
// Retry-After, and its event is not recorded) while the turn in progress goes on; Run waits for
// that turn, then for the delivery of its answer, and only then returns, well within
// shutdown_timeout.
func TestDrainOrder(t *testing.T) {
	t.Parallel()
	fake := echotest.New()
	defer fake.Close()
	dir := t.TempDir()
	cfg := defaultConfig(t)
	cfg.DataDir, cfg.PluginsDir, cfg.Listen, cfg.AdminListen = dir, filepath.Join(dir, "plugins"), "127.0.0.1:0", "127.0.0.1:0"
	cfg.CompilationCache = wasmbuild.CompilationCacheDir(t)
	cfg.Demo.Plugin = ""
	cfg.Plugins = map[string]config.Plugin{"echo": {EgressExtra: []string{"127.0.0.1"},
		Profiles: map[string]map[string]any{"main": {"outbox_url": fake.URL() + "/outbox"}},
		Access:   map[string]config.Access{"main": {AllowAll: true}}}}
	timeout := testdeadline.Scale(60 * time.Second)
	cfg.ShutdownTimeout = config.Duration(timeout)
	wasmbuild.CopyTo(t, "../../plugins/echo", filepath.Join(cfg.PluginsDir, "echo.wasm"))
	a := &heldAgent{started: make(chan string, 4), release: make(chan struct{})}
	g, err := OpenWith(context.Background(), cfg, slog.New(slog.DiscardHandler), Options{Agent: a})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, adminAddr := make(chan string, 1), make(chan string, 1)
	runDone := make(chan error, 1)
	go func() { runDone <- g.Run(ctx, func(public, admin string) { addr <- public; adminAddr <- admin }) }()
	hook := "http://" + <-addr + "/hooks/echo/main"
	healthz := "http://" + <-adminAddr + "/healthz"
	post := func(id string) *http.Response {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"id": id, "chat_id": "42", "user_id": "u1", "text": "hello " + id})
		resp, err := http.Post(hook, "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	deadline := time.Now().Add(testdeadline.Scale(30 * time.Second))
	for post("m1").StatusCode != http.StatusOK { // 503 while echo loads
		if time.Now().After(deadline) {
			t.Fatal("the webhook never took m1")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := <-a.started; got != "hello m1" {
		t.Fatalf("turn for %q", got)
	}

	stopAt := time.Now()
	cancel() // what SIGTERM does to serve
	for {
		resp := post("m2")
		if resp.StatusCode == http.StatusServiceUnavailable {
			if resp.Header.Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
			break
		}
		if resp.StatusCode != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("a webhook during the drain: %d", resp.StatusCode)
		}
		// Taken just before the drain began: it waits, queued, for the next start.
		time.Sleep(5 * time.Millisecond)
	}
	// /healthz says so too: a supervisor or load balancer sends a draining host nothing new.
	if resp, err := http.Get(healthz); err != nil {
		t.Fatal(err)
	} else {
		var h struct{ Status string }
		json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || h.Status != "draining" {
			t.Fatalf("/healthz while draining: %d %q", resp.StatusCode, h.Status)
		}
	}
	select {
	case err := <-runDone:
		t.Fatalf("Run returned (%v) while a turn was in progress", err)
	default:
	}
	close(a.release)
	select {
	case err := <-runDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(timeout + testdeadline.Scale(10*time.Second)):
		t.Fatal("Run did not return")
	}
	if took := time.Since(stopAt); took >= timeout {
		t.Errorf("the drain took %v, the whole shutdown_timeout (%v): it should end once the turn's answer is out", took, timeout)
	}
	// The answer went out before Run returned.
	if n := fake.Count("answer to hello m1"); n != 1 {
		t.Fatalf("the answer reached the platform %d times before Run returned; got %v", n, fake.Messages())
	}
	var state string
	if err := g.db.QueryRow(`SELECT state FROM turn_inbox WHERE event_id = 'm1'`).Scan(&state); err != nil || state != "done" {
		t.Fatalf("m1's row: %q %v", state, err)
	}
}
