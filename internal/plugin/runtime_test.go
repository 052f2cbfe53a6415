package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
	"github.com/hermes-host/hermes-host/internal/kv"
	"github.com/hermes-host/hermes-host/internal/memstat"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

const (
	probeDir  = "testdata/probe"
	echoDir   = "../../plugins/echo"
	hostileTD = "testdata/hostile/"
)

// newRuntime makes a runtime over a fresh plugins directory holding the given builds
// (file name → package dir), with the run's on-disk compilation cache so repeated tests are fast.
func newRuntime(t testing.TB, files map[string]string, cfg Config) *Runtime {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	for name, dir := range files {
		wasmbuild.CopyTo(t, dir, filepath.Join(cfg.Dir, name))
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = wasmbuild.CompilationCacheDir(t) // the run's, shared with every package's tests
	}
	if cfg.Env == nil {
		cfg.Env = &Env{}
	}
	if cfg.Logger == nil && !testing.Verbose() {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Plugins == nil {
		cfg.Plugins = map[string]Settings{}
	}
	for _, name := range []string{"probe", "echo", "loop", "membomb", "bigout", "sneaky", "exiter", "grower"} {
		s, ok := cfg.Plugins[name]
		if !ok {
			s = Settings{Profiles: map[string]json.RawMessage{"main": json.RawMessage(`{"token":"t-main","outbox_url":"http://127.0.0.1:1/"}`)}}
		}
		cfg.Plugins[name] = s
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func probeSend(t testing.TB, p *Plugin, profile, text string) (string, error) {
	t.Helper()
	res, err := p.Send(context.Background(), profile, abi.OutboundMessage{ChatID: "1", Text: text})
	if err != nil {
		return "", err
	}
	if res.Error != nil {
		return "", &abi.Error{Code: res.Error.Code, Message: res.Error.Message}
	}
	if len(res.MessageIDs) != 1 {
		return "", fmt.Errorf("message ids %v", res.MessageIDs)
	}
	return res.MessageIDs[0], nil
}

func TestLoadValidatesAndServes(t *testing.T) {
	r := newRuntime(t, map[string]string{"probe.wasm": probeDir, "echo.wasm": echoDir}, Config{})
	if rej := r.Scan(context.Background()); len(rej) != 0 {
		t.Fatalf("rejections: %+v", rej)
	}
	names := []string{}
	for _, p := range r.Plugins() {
		names = append(names, p.Name())
	}
	if strings.Join(names, ",") != "echo,probe" {
		t.Fatalf("plugins %v", names)
	}
	p := r.Get("probe")
	info := p.Info()
	if info.State != "active" || info.ABI != "1.2" || info.Instances != 1 || info.Manifest.Platform != "probe" {
		t.Fatalf("info %+v", info)
	}
	if got, err := probeSend(t, p, "main", "profile"); err != nil || got != `"main:t-main"` {
		t.Fatalf("profile = %s, %v", got, err)
	}
	// An unknown profile is refused before the plugin runs.
	if _, err := p.Send(context.Background(), "nobody", abi.OutboundMessage{ChatID: "1"}); abi.CodeOf(err) != abi.CodeNotFound {
		t.Fatalf("unknown profile: %v", err)
	}
	// A handler panic inside the SDK comes back as an error; the instance survives.
	if _, err := probeSend(t, p, "main", "panic"); abi.CodeOf(err) != abi.CodeInternal || !strings.Contains(err.Error(), "probe was asked to panic") {
		t.Fatalf("sdk panic: %v", err)
	}
	if got, err := probeSend(t, p, "main", "version"); err != nil || got != `"1"` {
		t.Fatalf("after panic: %s %v", got, err)
	}
}

func TestProfilesAreValidated(t *testing.T) {
	r := newRuntime(t, map[string]string{"probe.wasm": probeDir}, Config{Plugins: map[string]Settings{
		"probe": {Profiles: map[string]json.RawMessage{
			"main":    json.RawMessage(`{"token":"ok"}`),
			"revoked": json.RawMessage(`{"token":"bad"}`),
			"empty":   json.RawMessage(`{}`),
			"typed":   json.RawMessage(`{"token":42}`),
		}},
	}})
	r.Scan(context.Background())
	p := r.Get("probe")
	if got := strings.Join(p.Profiles(), ","); got != "main" {
		t.Fatalf("serving profiles %q", got)
	}
	probs := p.Info().Profiles
	for profile, want := range map[string]string{"revoked": "token is revoked", "empty": "token is required", "typed": "token must be of type string"} {
		if len(probs[profile]) != 1 || probs[profile][0] != want {
			t.Errorf("%s: problems %q, want %q", profile, probs[profile], want)
		}
		if _, err := p.Send(context.Background(), profile, abi.OutboundMessage{ChatID: "1"}); abi.CodeOf(err) != abi.CodeDenied {
			t.Errorf("%s: send %v", profile, err)
		}
	}
}

func TestBadFilesAreRejectedWithReasons(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "garbage.wasm"), []byte("#!/bin/sh\nrm -rf /\n"), 0o644)
	r := newRuntime(t, map[string]string{
		"probe.wasm":      probeDir,
		"panicky.wasm":    hostileTD + "panicky",
		"wrongabi.wasm":   hostileTD + "wrongabi",
		"noexports.wasm":  hostileTD + "noexports",
		"badsig.wasm":     hostileTD + "badsig",
		"extismhttp.wasm": hostileTD + "extismhttp",
	}, Config{Dir: dir})
	rej := r.Scan(context.Background())
	want := map[string]string{
		"garbage.wasm":    "not a WebAssembly module",
		"panicky.wasm":    "panicky: describe",
		"wrongabi.wasm":   "plugin is built for ABI 2.0",
		"noexports.wasm":  `missing required export "describe"`,
		"badsig.wasm":     `export "send" has type (i32) -> (i32); every export the host calls must be () -> (i32)`,
		"extismhttp.wasm": "imports extism:host/env.http_request (Extism HTTP), which this host disables; use hermes_http",
	}
	if len(rej) != len(want) {
		t.Fatalf("rejections %+v", rej)
	}
	for _, x := range rej {
		if w := want[filepath.Base(x.Path)]; !strings.Contains(x.Error, w) {
			t.Errorf("%s: %q does not say %q", filepath.Base(x.Path), x.Error, w)
		}
	}
	if got := len(r.Rejections()); got != 6 {
		t.Errorf("Rejections() has %d entries", got)
	}
	// The healthy plugin loaded regardless.
	if _, err := probeSend(t, r.Get("probe"), "main", "version"); err != nil {
		t.Fatal(err)
	}
	// A second scan does not retry unchanged rejected files.
	if rej := r.Scan(context.Background()); len(rej) != 0 {
		t.Fatalf("rescan: %+v", rej)
	}
}

func TestHostileContained(t *testing.T) {
	short := Settings{
		Limits:   Limits{CallTimeout: 300 * time.Millisecond, MemoryPages: 512, BreakerCrashes: 3, BreakerWindow: time.Minute},
		Profiles: map[string]json.RawMessage{"main": json.RawMessage(`{}`)},
	}
	big := short // slow under -race: filling memory takes time
	big.Limits.CallTimeout, big.Limits.MaxOutput = 20*time.Second, 1<<20
	r := newRuntime(t, map[string]string{
		"probe.wasm":   probeDir,
		"loop.wasm":    hostileTD + "loop",
		"membomb.wasm": hostileTD + "membomb",
		"bigout.wasm":  hostileTD + "bigout",
	}, Config{Plugins: map[string]Settings{"loop": short, "membomb": big, "bigout": big}})
	if rej := r.Scan(context.Background()); len(rej) != 0 {
		t.Fatalf("rejections %+v", rej)
	}
	ctx := context.Background()
	probe := r.Get("probe")

	// While loop spins, the probe keeps answering.
	spinning := make(chan error, 1)
	go func() {
		_, err := r.Get("loop").Send(ctx, "main", abi.OutboundMessage{ChatID: "1"})
		spinning <- err
	}()
	for i := 0; i < 20; i++ {
		if _, err := probeSend(t, probe, "main", "version"); err != nil {
			t.Fatalf("probe while loop spins: %v", err)
		}
	}
	err := <-spinning
	var crash *CrashError
	if !errors.As(err, &crash) || crash.Reason != "deadline" || !strings.Contains(err.Error(), "call deadline of 300ms exceeded") {
		t.Fatalf("loop: %v", err)
	}
	if !errors.Is(err, ErrCrashed) || errors.Is(err, ErrFailed) {
		t.Fatalf("a crash is not ErrCrashed (or is ErrFailed): %v", err)
	}

	// The memory bomb dies at its cap; the Go runtime's last words explain why.
	_, err = r.Get("membomb").Send(ctx, "main", abi.OutboundMessage{ChatID: "1"})
	if !errors.As(err, &crash) || crash.Reason != "trap" || !strings.Contains(err.Error(), "out of memory") {
		t.Fatalf("membomb: %v", err)
	}
	if n := r.Get("membomb").Info().Instances; n != 0 {
		t.Fatalf("crashed instance kept: %d instances", n)
	}
	// Oversized output is refused with the sizes; the instance is healthy and kept.
	_, err = r.Get("bigout").Send(ctx, "main", abi.OutboundMessage{ChatID: "1"})
	if abi.CodeOf(err) != abi.CodeTooLarge || !strings.Contains(err.Error(), "2097152 bytes exceeds the cap of 1048576") {
		t.Fatalf("bigout: %v", err)
	}

	// Repeated crashes trip the breaker: loop is failed with its last error; others serve.
	for i := 0; i < 2; i++ {
		r.Get("loop").Send(ctx, "main", abi.OutboundMessage{ChatID: "1"})
	}
	_, err = r.Get("loop").Send(ctx, "main", abi.OutboundMessage{ChatID: "1"})
	var failed *FailedError
	if !errors.As(err, &failed) {
		t.Fatalf("after 3 crashes: %v", err)
	}
	// The refusal unwraps to the last crash: its reason and its cause stay reachable.
	if crash = nil; !errors.As(err, &crash) || crash.Reason != "deadline" || crash.Plugin != "loop" {
		t.Fatalf("the failed plugin's error does not unwrap to its last crash: %v (crash %+v)", err, crash)
	}
	if !errors.Is(err, ErrFailed) || !errors.Is(err, ErrCrashed) {
		t.Fatalf("errors.Is finds neither ErrFailed nor the last crash's ErrCrashed in %v", err)
	}
	if info := r.Get("loop").Info(); info.State != "failed" || !strings.Contains(info.LastError, "deadline") {
		t.Fatalf("loop info %+v", info)
	}
	if _, err := probeSend(t, probe, "main", "version"); err != nil {
		t.Fatalf("probe after loop failed: %v", err)
	}
}

// recordingSessions answers Resolve with what it was asked, and panics on request.
type recordingSessions struct {
	mu   sync.Mutex
	last abi.Source
}

func (s *recordingSessions) Resolve(_ context.Context, c Caller, src abi.Source) (abi.SessionRef, error) {
	if src.ChatID == "panic" {
		panic("sessions exploded")
	}
	s.mu.Lock()
	s.last = src
	s.mu.Unlock()
	return abi.SessionRef{Key: "agent:" + src.Profile + ":" + src.Platform + ":dm:" + src.ChatID, SessionID: "s1", Generation: 1}, nil
}
func (s *recordingSessions) Observe(context.Context, Caller, abi.ObserveRequest) (abi.SessionRef, error) {
	return abi.SessionRef{}, nil
}
func (s *recordingSessions) Redact(context.Context, Caller, abi.Source) (bool, error) {
	return false, nil
}
func (s *recordingSessions) Seed(context.Context, Caller, abi.SeedRequest) (abi.SessionRef, error) {
	return abi.SessionRef{}, nil
}

// newKV opens a key-value store in a fresh database, closed when the test ends.
func newKV(t *testing.T) *kv.Store {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "h.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	kvs, err := kv.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return kvs
}

func TestHostFunctions(t *testing.T) {
	ctx := context.Background()
	kvs := newKV(t)
	sessions := &recordingSessions{}
	r := newRuntime(t, map[string]string{"probe.wasm": probeDir}, Config{
		Env: &Env{KV: kvs, Sessions: sessions, Egress: egress.NewClient(egress.Limits{})},
		Plugins: map[string]Settings{"probe": {Profiles: map[string]json.RawMessage{
			"main": json.RawMessage(`{"token":"a"}`), "work": json.RawMessage(`{"token":"b"}`)}}},
	})
	r.Scan(ctx)
	p := r.Get("probe")

	// kv is per profile and durable.
	if _, err := probeSend(t, p, "main", "kvset offset=42"); err != nil {
		t.Fatal(err)
	}
	if got, _ := probeSend(t, p, "main", "kvget offset"); got != `{"found":true,"value":"42"}` {
		t.Fatalf("main kvget %s", got)
	}
	if got, _ := probeSend(t, p, "work", "kvget offset"); got != `{"found":false,"value":""}` {
		t.Fatalf("work kvget %s", got)
	}
	// The plugin asked for telegram/other; the host forced its own platform and profile.
	got, err := probeSend(t, p, "work", "resolve 77")
	if err != nil {
		t.Fatal(err)
	}
	if sessions.last.Platform != "probe" || sessions.last.Profile != "work" || !strings.Contains(got, "agent:work:probe:dm:77") {
		t.Fatalf("forced source %+v, reply %s", sessions.last, got)
	}
	// Services this host lacks answer unavailable, as data.
	if _, err := probeSend(t, p, "main", "dispatch e1"); abi.CodeOf(err) != abi.CodeUnavailable {
		t.Fatalf("dispatch: %v", err)
	}
	// A platform plugin may not use the scheduler's send.
	if _, err := probeSend(t, p, "main", "sendto"); abi.CodeOf(err) != abi.CodeDenied {
		t.Fatalf("sendto: %v", err)
	}
	if got, err := probeSend(t, p, "main", "clock"); err != nil || len(got) < 13 {
		t.Fatalf("clock %s %v", got, err)
	}

	// What poll reports about a profile is shown in Info, per profile, until a poll clears it.
	polled := func(profile string) map[string]abi.ProfileStatus {
		t.Helper()
		if _, err := p.Poll(ctx, profile, 0); err != nil {
			t.Fatal(err)
		}
		return p.Info().Status
	}
	if st := polled("main"); len(st) != 0 {
		t.Fatalf("status before any report: %+v", st)
	}
	probeSend(t, p, "main", "kvset status=stopped: closed with 4013")
	probeSend(t, p, "work", "kvset status=ok: connected")
	polled("work")
	if st := polled("main"); st["main"] != (abi.ProfileStatus{State: "stopped", Message: "closed with 4013"}) || st["work"].State != "ok" {
		t.Fatalf("status after reports: %+v", st)
	}
	probeSend(t, p, "main", "kvset status=")
	if st := polled("main"); len(st) != 1 || st["work"].State != "ok" {
		t.Fatalf("status after main's report was cleared: %+v", st)
	}

	// A panic inside a host function comes back to the guest as an error; the instance that saw
	// it is discarded, and the plugin keeps serving on a fresh one.
	before := p.Info().Instances
	if _, err := probeSend(t, p, "main", "resolve panic"); abi.CodeOf(err) != abi.CodeInternal || !strings.Contains(err.Error(), "sessions exploded") {
		t.Fatalf("host panic: %v", err)
	}
	if n := p.Info().Instances; n != before-1 {
		t.Fatalf("instance kept after a host-function panic: %d instances, %d before", n, before)
	}
	if _, err := probeSend(t, p, "main", "version"); err != nil {
		t.Fatal(err)
	}
	if st, _ := p.current().breaker.state(); st != "active" {
		t.Fatal("a host bug must not count against the plugin")
	}
}

func TestEgressFromWasm(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/big" {
			w.Write(make([]byte, 4096))
			return
		}
		w.Write([]byte("pong"))
	}))
	defer srv.Close()
	r := newRuntime(t, map[string]string{"probe.wasm": probeDir, "sneaky.wasm": hostileTD + "sneaky"}, Config{
		Env: &Env{Egress: egress.NewClient(egress.Limits{MaxResponse: 1024})},
		Plugins: map[string]Settings{"probe": {EgressExtra: []string{"127.0.0.1"}, // the operator grants the loopback server
			Profiles: map[string]json.RawMessage{"main": json.RawMessage(`{"token":"t"}`)}}},
	})
	r.Scan(context.Background())

	// Declared loopback host: works.
	if got, err := probeSend(t, r.Get("probe"), "main", "http "+srv.URL+"/ping"); err != nil || got != `"pong"` {
		t.Fatalf("declared: %s %v", got, err)
	}
	// Over the response cap: cut with an error.
	if _, err := probeSend(t, r.Get("probe"), "main", "http "+srv.URL+"/big"); abi.CodeOf(err) != abi.CodeTooLarge {
		t.Fatalf("big: %v", err)
	}
	// Undeclared host: refused before any connection is made.
	before := hits.Load()
	got, err := probeSend(t, r.Get("sneaky"), "main", srv.URL+"/exfiltrate")
	if err != nil {
		t.Fatal(err)
	}
	var e abi.Error
	json.Unmarshal([]byte(got), &e)
	if e.Code != abi.CodeDenied || !strings.Contains(e.Message, "declared: api.example.com") || hits.Load() != before {
		t.Fatalf("sneaky got %s (hits %d→%d)", got, before, hits.Load())
	}
}

// TestGuestSleep: a guest's time.Sleep really sleeps (it does not spin a core until the time has
// passed), and a guest sleeping past its call deadline is still stopped at the deadline.
func TestGuestSleep(t *testing.T) {
	r := newRuntime(t, map[string]string{"probe.wasm": probeDir}, Config{Plugins: map[string]Settings{"probe": {
		Limits:   Limits{CallTimeout: time.Second},
		Profiles: map[string]json.RawMessage{"main": json.RawMessage(`{"token":"t"}`)},
	}}})
	r.Scan(context.Background())
	probe := r.Get("probe")
	if _, err := probeSend(t, probe, "main", "version"); err != nil { // warm: the instance exists
		t.Fatal(err)
	}
	cpu0, wall0 := memstat.CPU(), time.Now()
	if got, err := probeSend(t, probe, "main", "sleep 400ms"); err != nil || got != `"slept 400ms"` {
		t.Fatalf("sleep: %s %v", got, err)
	}
	wall, cpu := time.Since(wall0), memstat.CPU()-cpu0
	t.Logf("a 400ms guest sleep took %v wall, %v CPU", wall, cpu)
	if wall < 400*time.Millisecond || cpu > wall/2 {
		t.Fatalf("a 400ms sleep took %v wall and %v CPU: the guest spun instead of sleeping", wall, cpu)
	}
	start := time.Now()
	_, err := probeSend(t, probe, "main", "sleep 30s")
	var crash *CrashError
	if !errors.As(err, &crash) || crash.Reason != "deadline" || time.Since(start) > 10*time.Second {
		t.Fatalf("a guest sleeping past its deadline: %v after %v", err, time.Since(start))
	}
}

func TestHotReload(t *testing.T) {
	ctx := context.Background()
	// The swap is what is under test, not the machine's speed: a loaded CI machine running
	// four callers under -race may take longer than the default deadline to start the new
	// module's runtime, so the deadline is stretched by the harness's factor.
	r := newRuntime(t, map[string]string{"probe.wasm": probeDir}, Config{Defaults: Limits{CallTimeout: testdeadline.Scale(time.Minute)}})
	r.Scan(ctx)
	p := r.Get("probe")
	v2, err := wasmbuild.BuildWith(probeDir, "-X main.version=2")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(r.cfg.Dir, "probe.wasm")

	// Calls in flight throughout the swap: none may fail.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls, failures atomic.Int32
	var sawV2 atomic.Bool
	stopCallers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopCallers() // also when the test fails early: no caller may outlive it
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Paced, not spinning: four callers in a tight loop under -race starve the
				// compiler of the new version (five times slower on 2 cores) and, on a loaded
				// CI machine, its describe past the deadline. Paced, each call still overlaps
				// the swap: the property is that none fails, not how many there are.
				time.Sleep(2 * time.Millisecond)
				got, err := probeSend(t, p, "main", "version")
				calls.Add(1)
				if err != nil {
					failures.Add(1)
					t.Errorf("call during reload: %v", err)
				}
				if got == `"2"` {
					sawV2.Store(true)
				}
			}
		}()
	}
	if err := wasmbuild.CopyFile(v2, path); err != nil {
		t.Fatal(err)
	}
	if rej := r.Scan(ctx); len(rej) != 0 {
		t.Fatalf("reload rejected: %+v", rej)
	}
	for deadline := time.Now().Add(testdeadline.Scale(10 * time.Second)); !sawV2.Load() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	stopCallers()
	if failures.Load() != 0 || !sawV2.Load() {
		t.Fatalf("%d of %d calls failed; saw v2: %v", failures.Load(), calls.Load(), sawV2.Load())
	}
	t.Logf("%d calls during the swap", calls.Load())
	if got, _ := probeSend(t, p, "main", "version"); got != `"2"` {
		t.Fatalf("after reload: %s", got)
	}
	if p.Manifest().Version != "2" {
		t.Fatalf("manifest version %s", p.Manifest().Version)
	}

	// A broken replacement leaves version 2 serving.
	os.WriteFile(path+".tmp", []byte("\x00asm\x01\x00\x00\x00\x07\x05"), 0o644)
	os.Rename(path+".tmp", path)
	rej := r.Scan(ctx)
	if len(rej) != 1 || !strings.Contains(rej[0].Error, "runs past the end") {
		t.Fatalf("broken replacement: %+v", rej)
	}
	if got, err := probeSend(t, p, "main", "version"); err != nil || got != `"2"` {
		t.Fatalf("after broken replacement: %s %v", got, err)
	}
	// Removing the file unloads the plugin.
	os.Remove(path)
	r.Scan(ctx)
	if r.Get("probe") != nil {
		t.Fatal("plugin still loaded after its file was removed")
	}
	if _, err := p.Send(ctx, "main", abi.OutboundMessage{ChatID: "1"}); !errors.Is(err, ErrUnloaded) {
		t.Fatalf("call to unloaded plugin: %v", err)
	}
}

// TestProcExitDiscardsInstance: an export that calls proc_exit(0) looks like a clean return to
// Extism, but its module is closed; proc_exit(3) is an error from wazero. Both are an exit. The runtime discards that instance as a crash, and later
// calls, unrelated to the exit, all run on live instances.
func TestProcExitDiscardsInstance(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t, map[string]string{"exiter.wasm": hostileTD + "exiter"}, Config{})
	if rej := r.Scan(ctx); len(rej) != 0 {
		t.Fatalf("rejections %+v", rej)
	}
	p := r.Get("exiter")
	_, err := p.Send(ctx, "main", abi.OutboundMessage{ChatID: "1", Text: "exit"})
	var crash *CrashError
	if !errors.As(err, &crash) || crash.Reason != "exit" || !strings.Contains(err.Error(), "proc_exit(0)") {
		t.Fatalf("exit: %v", err)
	}
	if n := p.Info().Instances; n != 0 {
		t.Fatalf("the exited instance was kept: %d instances", n)
	}
	// A non-zero status is an exit too, with its status: not a trap.
	_, err = p.Send(ctx, "main", abi.OutboundMessage{ChatID: "1", Text: "exit 3"})
	if !errors.As(err, &crash) || crash.Reason != "exit" || !strings.Contains(err.Error(), "proc_exit(3)") {
		t.Fatalf("exit 3: %v", err)
	}
	// Both are shown before any breaker trips: how many, and the last.
	if info := p.Info(); info.State != "active" || info.Crashes != 2 || !strings.Contains(info.LastCrash, "proc_exit(3)") || info.LastCrashAt == nil {
		t.Fatalf("info after two crashes: %+v", info)
	}
	for i := 0; i < 20; i++ {
		res, err := p.Send(ctx, "main", abi.OutboundMessage{ChatID: "1", Text: "hello"})
		if err != nil || len(res.MessageIDs) != 1 {
			t.Fatalf("call %d after the exit: %+v %v", i, res, err)
		}
	}
}

// TestOversizedManifestIsRefused: a valid manifest of 3 MiB is refused at load with its size,
// never kept to be sent with every listing.
func TestOversizedManifestIsRefused(t *testing.T) {
	r := newRuntime(t, map[string]string{"bigmanifest.wasm": hostileTD + "bigmanifest"}, Config{})
	rej := r.Scan(context.Background())
	if len(rej) != 1 || !strings.Contains(rej[0].Error, "a manifest of 3145") || !strings.Contains(rej[0].Error, "at most 65536") {
		t.Fatalf("rejections %+v", rej)
	}
	if r.Get("bigmanifest") != nil {
		t.Fatal("the plugin loaded")
	}
}

// TestDeadIdleInstanceIsReplaced: an instance that died while idle refuses calls without running
// guest code, so the call moves to a fresh instance and no crash is counted.
func TestDeadIdleInstanceIsReplaced(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t, map[string]string{"exiter.wasm": hostileTD + "exiter"}, Config{})
	r.Scan(ctx)
	p := r.Get("exiter")
	v := p.current()
	inst, err := v.pool.get(ctx, classOut)
	if err != nil {
		t.Fatal(err)
	}
	inst.p.Close(ctx) // dies behind the runtime's back
	v.pool.put(inst, classOut)
	if !inst.dead.Load() {
		t.Fatal("closing the instance did not mark it dead")
	}
	if _, err := p.Send(ctx, "main", abi.OutboundMessage{ChatID: "1", Text: "hello"}); err != nil {
		t.Fatalf("call after an idle instance died: %v", err)
	}
	if len(v.breaker.times) != 0 {
		t.Fatalf("a refused call on a dead instance counted as a crash")
	}
}

// spinloaders builds four files that spin while loading (in _initialize, describe, and in
// configure for two names) and copies them into dir.
func spinloaders(t testing.TB, dir string) {
	t.Helper()
	for file, flags := range map[string]string{
		"spin-init.wasm":       "-X main.where=init",
		"spin-describe.wasm":   "-X main.where=describe",
		"spin-configure1.wasm": "-X main.where=configure -X main.name=spinc1",
		"spin-configure2.wasm": "-X main.where=configure -X main.name=spinc2",
	} {
		built, err := wasmbuild.BuildWith(hostileTD+"spinload", flags)
		if err != nil {
			t.Fatal(err)
		}
		if err := wasmbuild.CopyFile(built, filepath.Join(dir, file)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHangingProfilesConfigureAtOnce: three profiles whose configure hangs are configured at
// once, each under its own deadline, so the load takes about one deadline, never three (as it
// did one profile after another).
func TestHangingProfilesConfigureAtOnce(t *testing.T) {
	dir := t.TempDir()
	built, err := wasmbuild.BuildWith(hostileTD+"spinload", "-X main.where=configure -X main.name=spinc1")
	if err != nil {
		t.Fatal(err)
	}
	if err := wasmbuild.CopyFile(built, filepath.Join(dir, "spinc1.wasm")); err != nil {
		t.Fatal(err)
	}
	// Compiled once first (into the run's cache), so the load timed below is the configures.
	newRuntime(t, nil, Config{Dir: dir}).Scan(context.Background())
	const deadline = 2 * time.Second
	cfg := Config{Dir: dir, Plugins: map[string]Settings{"spinc1": {Limits: Limits{CallTimeout: deadline, BreakerCrashes: 10},
		Profiles: map[string]json.RawMessage{"a": json.RawMessage(`{}`), "b": json.RawMessage(`{}`), "c": json.RawMessage(`{}`)}}}}
	r := newRuntime(t, nil, cfg)
	start := time.Now()
	if rej := r.Scan(context.Background()); len(rej) != 0 {
		t.Fatalf("rejections %+v", rej)
	}
	took := time.Since(start)
	info := r.Get("spinc1").Info()
	for _, name := range []string{"a", "b", "c"} {
		if ps := info.Profiles[name]; len(ps) != 1 || !strings.Contains(ps[0], "deadline") {
			t.Errorf("profile %s: %v", name, ps)
		}
	}
	// One after another, three deadlines cannot pass in less than 3 x deadline.
	if took >= 3*deadline {
		t.Fatalf("loading took %v: the profiles were configured one after another (deadline %v each)", took, deadline)
	}
	t.Logf("three hanging profiles configured in %v (deadline %v each)", took.Round(time.Millisecond), deadline)
}

// TestSlowLoadsDoNotDelayOthers: four files spin while loading; a good plugin in the same
// directory loads and serves while they are still spinning, and each spinner is rejected at its
// own deadline with the reason.
func TestSlowLoadsDoNotDelayOthers(t *testing.T) {
	dir := t.TempDir()
	spinloaders(t, dir)
	// Compiled once first (into the run's cache, the load itself refused at once), so that the
	// deadlines below are spent loading, not queueing for the compiler.
	newRuntime(t, nil, Config{Dir: dir, Defaults: Limits{LoadTimeout: time.Millisecond}}).Scan(context.Background())
	profile := map[string]json.RawMessage{"main": json.RawMessage(`{}`)}
	r := newRuntime(t, map[string]string{"zz-probe.wasm": probeDir}, Config{Dir: dir,
		// The spinners' deadlines scale with the harness's factor: under make test the probe
		// took longer to load than 8 s, and half the spinners had ended before it served. A
		// spinning describe (or start-up) runs until the load's deadline, a spinning configure
		// until its call's.
		Defaults: Limits{CallTimeout: testdeadline.Scale(8 * time.Second), LoadTimeout: testdeadline.Scale(12 * time.Second)},
		Plugins:  map[string]Settings{"spinc1": {Profiles: profile}, "spinc2": {Profiles: profile}}})
	done := make(chan []Rejection)
	go func() { done <- r.Scan(context.Background()) }()
	for r.Get("probe") == nil {
		select {
		case rej := <-done:
			t.Fatalf("the scan finished before the probe was loaded: %+v", rej)
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The probe serves while the spinners are still loading.
	if _, err := probeSend(t, r.Get("probe"), "main", "version"); err != nil {
		t.Fatal(err)
	}
	if n := len(r.Loading()); n != 4 {
		t.Fatalf("%d files loading while the probe serves, want the 4 spinners", n)
	}
	select {
	case rej := <-done:
		t.Fatalf("the scan finished before the spinners' deadline: %+v", rej)
	default:
	}
	rej := <-done
	if len(rej) != 2 || len(r.Loading()) != 0 {
		t.Fatalf("rejections %+v, loading %v", rej, r.Loading())
	}
	for _, x := range rej {
		if !strings.Contains(x.Error, "describe") || !strings.Contains(x.Error, "deadline") {
			t.Errorf("%s: %s", filepath.Base(x.Path), x.Error)
		}
	}
	// The configure spinners load, with their profile disabled and the reason shown.
	for _, name := range []string{"spinc1", "spinc2"} {
		p := r.Get(name)
		if p == nil {
			t.Fatalf("%s not loaded", name)
		}
		if probs := p.Info().Profiles["main"]; len(probs) != 1 || !strings.Contains(probs[0], "deadline") {
			t.Errorf("%s problems %q", name, probs)
		}
	}
}

// TestSettingsFollowManifestName: a file not named <name>.wasm still gets the operator's
// settings for the name its manifest declares: limits and egress narrowing.
func TestSettingsFollowManifestName(t *testing.T) {
	r := newRuntime(t, map[string]string{"renamed-file.wasm": probeDir}, Config{
		Env: &Env{Egress: egress.NewClient(egress.Limits{})},
		Plugins: map[string]Settings{"probe": {
			Limits:       Limits{CallTimeout: 1234 * time.Millisecond, PoolSize: 3},
			EgressNarrow: []string{"api.example.com"},
			Profiles:     map[string]json.RawMessage{"main": json.RawMessage(`{"token":"t"}`)},
		}}})
	r.Scan(context.Background())
	p := r.Get("probe")
	if p == nil {
		t.Fatal("not loaded")
	}
	v := p.current()
	if v.limits.CallTimeout != 1234*time.Millisecond || v.pool.max[classOut] != 3 {
		t.Fatalf("limits %+v, pool %v", v.limits, v.pool.max)
	}
	// The manifest declares 127.0.0.1; the operator narrowed it away.
	if _, err := probeSend(t, p, "main", "http http://127.0.0.1:1/x"); abi.CodeOf(err) != abi.CodeDenied {
		t.Fatalf("narrowed egress: %v", err)
	}
}

// TestDeadlineVisibleToGuest: the call's remaining time reaches the plugin, and the SDK's HTTP
// helper keeps its default timeout inside it: a platform that never answers produces an error
// the plugin reports, not a call the host has to stop as a crash.
func TestDeadlineVisibleToGuest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accepts, reads, never answers
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			go io.Copy(io.Discard, c)
		}
	}()
	r := newRuntime(t, map[string]string{"probe.wasm": probeDir}, Config{
		Env: &Env{Egress: egress.NewClient(egress.Limits{})},
		Plugins: map[string]Settings{"probe": {Limits: Limits{CallTimeout: 3 * time.Second}, EgressExtra: []string{"127.0.0.1"},
			Profiles: map[string]json.RawMessage{"main": json.RawMessage(`{"token":"t"}`)}}}})
	r.Scan(context.Background())
	p := r.Get("probe")
	if got, err := probeSend(t, p, "main", "deadline"); err != nil || got != "3" {
		t.Fatalf("deadline seen by the guest: %s %v", got, err)
	}
	start := time.Now()
	res, err := p.Send(context.Background(), "main", abi.OutboundMessage{ChatID: "1", Text: "http http://" + ln.Addr().String() + "/hang"})
	if err != nil {
		t.Fatalf("the HTTP wait outlived the call: %v", err)
	}
	if res.Error == nil || res.Error.Code != abi.CodeUncertain || time.Since(start) > 3*time.Second {
		t.Fatalf("after %v: %+v", time.Since(start), res.Error)
	}
}

// TestCancelledCallIsNotACrash: a call the host cancels (a long poll at shutdown) stops the
// instance, but is neither logged nor counted as a crash.
func TestCancelledCallIsNotACrash(t *testing.T) {
	r := newRuntime(t, map[string]string{"probe.wasm": probeDir}, Config{})
	r.Scan(context.Background())
	p := r.Get("probe")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err := p.Send(ctx, "main", abi.OutboundMessage{ChatID: "1", Text: "spin"})
	var crash *CrashError
	if !errors.Is(err, context.Canceled) || errors.As(err, &crash) {
		t.Fatalf("cancelled call: %v", err)
	}
	if n := len(p.current().breaker.times); n != 0 {
		t.Fatalf("%d crashes counted", n)
	}
	if _, err := probeSend(t, p, "main", "version"); err != nil {
		t.Fatal(err)
	}
}

// A guest whose start-up takes longer than a call's deadline (as a Go guest's did on a loaded CI
// machine: more than 30 s) still loads: describe, the call that starts the guest's runtime, runs
// under the load's deadline. Past the load's deadline it is rejected, naming describe.
func TestSlowStartLoadsWithinTheLoadDeadline(t *testing.T) {
	built, err := wasmbuild.BuildWith(hostileTD+"spinload", "-X main.where=slowinit -X main.slow=1500ms -X main.name=slowstart")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		load time.Duration
		ok   bool
	}{{testdeadline.Scale(30 * time.Second), true}, {time.Second, false}} {
		dir := t.TempDir()
		if err := wasmbuild.CopyFile(built, filepath.Join(dir, "slowstart.wasm")); err != nil {
			t.Fatal(err)
		}
		r := newRuntime(t, nil, Config{Dir: dir, Defaults: Limits{CallTimeout: 300 * time.Millisecond, LoadTimeout: c.load}})
		rej := r.Scan(context.Background())
		if c.ok {
			if len(rej) != 0 || r.Get("slowstart") == nil {
				t.Fatalf("a 1.5 s start-up under a %v load deadline (call deadline 300ms): rejections %+v", c.load, rej)
			}
			continue
		}
		if len(rej) != 1 || !strings.Contains(rej[0].Error, "describe") || !strings.Contains(rej[0].Error, "deadline") {
			t.Fatalf("a 1.5 s start-up under a 1s load deadline: rejections %+v", rej)
		}
	}
}

// The host loads plugins built for its ABI minor and the one before (1.1 on a 1.2 host): a 1.1
// scheduler loads and ticks (and is never asked for jobs or fetch); a plugin that declares 1.1
// but a 1.2 capability is rejected before it runs, and so is a plugin built for 1.0.
func TestPreviousABIMinorStillLoads(t *testing.T) {
	r := newRuntime(t, map[string]string{
		"prevabi.wasm":  "testdata/prevabi/scheduler",
		"prevcaps.wasm": "testdata/prevabi/caps",
		"v10.wasm":      "testdata/prevabi/v10",
	}, Config{Plugins: map[string]Settings{"prevabi": {Profiles: map[string]json.RawMessage{"main": json.RawMessage(`{}`)}}}})
	rej := r.Scan(context.Background())
	why := map[string]string{}
	for _, x := range rej {
		why[filepath.Base(x.Path)] = x.Error
	}
	if len(rej) != 2 || !strings.Contains(why["prevcaps.wasm"], `capability "attachments" needs ABI 1.2; the plugin declares 1.1`) ||
		!strings.Contains(why["v10.wasm"], "rebuild the plugin") {
		t.Fatalf("rejections %+v", rej)
	}
	p := r.Get("prevabi")
	if p == nil || p.Info().ABI != "1.1" {
		t.Fatalf("the 1.1 scheduler did not load: %+v", r.Rejections())
	}
	res, err := p.Tick(context.Background(), "main", time.Now())
	if err != nil || res.NextTickMs != 1234 {
		t.Fatalf("tick: %+v %v", res, err)
	}
	if _, err := p.Jobs(context.Background(), "main", abi.JobsRequest{Op: abi.JobsList}); abi.CodeOf(err) != abi.CodeUnsupported {
		t.Fatalf("jobs on a scheduler without the capability: %v", err)
	}
	if _, err := p.Fetch(context.Background(), "main", abi.Attachment{Kind: abi.AttachImage}, 10); abi.CodeOf(err) != abi.CodeUnsupported {
		t.Fatalf("fetch on a plugin without the capability: %v", err)
	}
}

// TestOnePlatformOneOwner: a second plugin claiming a platform another plugin owns is rejected
// with a reason naming the owner; routing goes to the owner only; a new version of the owner may
// keep or change its platform.
func TestOnePlatformOneOwner(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t, map[string]string{"echo.wasm": echoDir}, Config{Plugins: map[string]Settings{
		"impostor": {Profiles: map[string]json.RawMessage{"main": json.RawMessage(`{"token":"t"}`)}},
	}})
	if rej := r.Scan(ctx); len(rej) != 0 {
		t.Fatal(rej)
	}
	impostor, err := wasmbuild.BuildWith(probeDir, "-X main.name=impostor -X main.platform=echo")
	if err != nil {
		t.Fatal(err)
	}
	// "a-" sorts before "echo.wasm": the claim does not depend on the order files are read.
	if err := wasmbuild.CopyFile(impostor, filepath.Join(r.cfg.Dir, "a-impostor.wasm")); err != nil {
		t.Fatal(err)
	}
	rej := r.Scan(ctx)
	if len(rej) != 1 || !strings.Contains(rej[0].Error, `platform "echo" is already owned by plugin echo`) {
		t.Fatalf("rejections %+v", rej)
	}
	if r.Get("impostor") != nil {
		t.Fatal("the impostor loaded")
	}
	if got := r.Rejections(); len(got) != 1 || !strings.Contains(got[0].Error, "owned by plugin echo") {
		t.Fatalf("Rejections %+v", got)
	}
	if name, ok := r.PluginFor("echo", "main"); !ok || name != "echo" {
		t.Fatalf("PluginFor = %q %v", name, ok)
	}

	// The owner unloaded, a fresh claimant loads and owns the platform.
	os.Remove(filepath.Join(r.cfg.Dir, "echo.wasm"))
	os.Remove(filepath.Join(r.cfg.Dir, "a-impostor.wasm"))
	r.Scan(ctx)
	if _, ok := r.Owner("echo"); ok {
		t.Fatal("owner survives its plugin")
	}
	if err := wasmbuild.CopyFile(impostor, filepath.Join(r.cfg.Dir, "impostor.wasm")); err != nil {
		t.Fatal(err)
	}
	if rej := r.Scan(ctx); len(rej) != 0 {
		t.Fatal(rej)
	}
	if name, ok := r.PluginFor("echo", "main"); !ok || name != "impostor" {
		t.Fatalf("PluginFor after the owner left = %q %v", name, ok)
	}
}

// TestBlockSizes moves values of every length from 0 to 24 bytes through the SDK's copies
// across Extism memory (the call's input and output, a host call's request and reply), so each
// block ends at every offset within an 8-byte word: the SDK copies whole words and the last,
// partial one as a word overlapping the previous, and a wrong tail would corrupt the value.
func TestBlockSizes(t *testing.T) {
	ctx := context.Background()
	kvs := newKV(t)
	r := newRuntime(t, map[string]string{"probe.wasm": probeDir}, Config{Env: &Env{KV: kvs}})
	r.Scan(ctx)
	p := r.Get("probe")
	const alphabet = "abcdefghijklmnopqrstuvwxyz"
	for n := 0; n <= 24; n++ {
		v := alphabet[:n]
		if _, err := probeSend(t, p, "main", "kvset k="+v); err != nil {
			t.Fatalf("set %d bytes: %v", n, err)
		}
		got, err := probeSend(t, p, "main", "kvget k")
		if want := `{"found":true,"value":"` + v + `"}`; err != nil || got != want {
			t.Fatalf("%d bytes: got %q, %v; want %q", n, got, err, want)
		}
	}
}

// TestRescanSkipsUnchangedFiles: a rescan does not read a file again whose device, inode, size
// and modification time are what the last read saw, once that read came more than a second
// after the modification; a file rewritten in place within that second, even with its size
// and time restored, is read again and its new content loaded.
func TestRescanSkipsUnchangedFiles(t *testing.T) {
	a, err := wasmbuild.BuildWith(hostileTD+"spinload", "-X main.where=none -X main.name=aaaa")
	if err != nil {
		t.Fatal(err)
	}
	b, err := wasmbuild.BuildWith(hostileTD+"spinload", "-X main.where=none -X main.name=bbbb")
	if err != nil {
		t.Fatal(err)
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if len(ab) != len(bb) {
		t.Skipf("the two builds differ in size (%d, %d): the in-place case needs equal sizes", len(ab), len(bb))
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "p.wasm")
	r := newRuntime(t, nil, Config{Dir: dir})
	scan := func(want string) int64 {
		t.Helper()
		before := fileReads.Load()
		if rej := r.Scan(context.Background()); len(rej) != 0 {
			t.Fatal(rej)
		}
		if r.Get(want) == nil {
			t.Fatalf("plugin %s not loaded", want)
		}
		return fileReads.Load() - before
	}

	// An old file: read once, then never again while it stays as it is.
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.WriteFile(path, ab, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(path, old, old)
	if n := scan("aaaa"); n != 1 {
		t.Fatalf("first scan read %d files", n)
	}
	for range 3 {
		if n := scan("aaaa"); n != 0 {
			t.Fatalf("a rescan of an unchanged file read it (%d reads)", n)
		}
	}
	// A new modification time is a change: read again.
	os.Chtimes(path, time.Now(), time.Now())
	if n := scan("aaaa"); n != 1 {
		t.Fatalf("a file with a new modification time: %d reads", n)
	}

	// A racy file: loaded within a second of being written, then rewritten in place with the
	// same size and its old modification time. The rescan reads it and loads the new content.
	if err := os.WriteFile(path, ab, 0o644); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	scan("aaaa")
	if err := os.WriteFile(path, bb, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(path, fi.ModTime(), fi.ModTime())
	if n := scan("bbbb"); n != 1 {
		t.Fatalf("the racy rewrite: %d reads", n)
	}
}
