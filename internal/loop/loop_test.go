package loop

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/auth"
	"github.com/hermes-host/hermes-host/internal/inbound"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// events records what the loops dispatch.
type events struct {
	mu  sync.Mutex
	ids []string
}

func (e *events) Dispatch(_ context.Context, _, _ string, ev abi.InboundEvent) (abi.DispatchReply, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ids = append(e.ids, ev.ID)
	return abi.DispatchReply{}, nil
}

func (e *events) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.ids)
}

// TestPollLoopRestartsAfterBreakerAndReplace: a plugin whose poll crashes trips its breaker and
// its poll loop stops; replacing the file with a working version starts the loop again, and
// the file's name (not poller.wasm) does not matter.
func TestPollLoopRestartsAfterBreakerAndReplace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "whatever-name.wasm")
	crash, err := wasmbuild.BuildWith("testdata/poller", "-X main.mode=crash")
	if err != nil {
		t.Fatal(err)
	}
	ok, err := wasmbuild.Build("testdata/poller")
	if err != nil {
		t.Fatal(err)
	}
	if err := wasmbuild.CopyFile(crash, path); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	var sup *Supervisor
	// The run's shared compilation cache: each build of the poller is compiled once per run.
	rt, err := plugin.New(plugin.Config{Dir: dir, CacheDir: wasmbuild.CompilationCacheDir(t), Logger: quiet, Plugins: map[string]plugin.Settings{"poller": {
		Limits:   plugin.Limits{BreakerCrashes: 2},
		Profiles: map[string]json.RawMessage{"main": json.RawMessage(`{}`)}}},
		OnChange: func() {
			if sup != nil {
				sup.Reconcile(context.Background())
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	got := &events{}
	sup = New(rt, &inbound.Door{Engine: got, Gate: admitAll{}, Log: quiet}, quiet)
	defer sup.Stop()
	rt.Scan(context.Background())
	sup.Reconcile(context.Background())

	waitFor(t, "the breaker to trip", func() bool { return rt.Get("poller").Status() != nil })
	waitFor(t, "the poll loop to stop", func() bool { sup.mu.Lock(); defer sup.mu.Unlock(); return len(sup.loops) == 0 })
	sup.Reconcile(context.Background()) // a failed plugin's loop is not restarted
	if sup.mu.Lock(); len(sup.loops) != 0 {
		t.Fatal("a loop was started for a failed plugin")
	}
	sup.mu.Unlock()

	if err := wasmbuild.CopyFile(ok, path); err != nil {
		t.Fatal(err)
	}
	rt.Scan(context.Background()) // the replacement starts healthy; OnChange reconciles
	waitFor(t, "events from the replaced plugin", func() bool { return got.count() >= 2 })
	if got.ids[0] != "ok1" {
		t.Fatalf("events %v", got.ids)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(testdeadline.Scale(30 * time.Second)); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// admitAll is a gate that admits every sender: these tests are about the loops, not about who
// may talk (internal/auth has its own tests).
type admitAll struct{}

func (admitAll) Admit(context.Context, string, string, abi.InboundEvent) (auth.Decision, error) {
	return auth.Decision{Verdict: auth.Allow}, nil
}
