package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// rss is the test process's resident memory in bytes (Linux).
func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm:", err)
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// TestMemoryBound states and checks the bound on a plugin's host memory: while calls run, at
// most PoolSize+InboundPoolSize instances exist, each with two memories (the guest's and
// Extism's kernel's) capped at MemoryPages, so host memory for a plugin stays under
// instances × 2 × cap plus a fixed overhead. After its call, an instance that crashed (a memory
// bomb at its cap) or grew past KeepMemoryPages is discarded and its memory is unmapped at
// once: resident memory returns to the baseline without waiting for a collection.
func TestMemoryBound(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("measures /proc/self/statm")
	}
	const capMiB, pool = 64, 4
	const overhead = 48 << 20 // compiled code, per-instance runtime structures, Go heap noise
	lim := Settings{
		Limits:   Limits{MemoryPages: capMiB * 16, PoolSize: pool, CallTimeout: 30 * time.Second, MaxOutput: 1 << 20},
		Profiles: map[string]json.RawMessage{"main": json.RawMessage(`{}`)},
	}
	r := newRuntime(t, map[string]string{"membomb.wasm": hostileTD + "membomb", "grower.wasm": hostileTD + "grower"},
		Config{Plugins: map[string]Settings{"membomb": lim, "grower": lim}})
	if rej := r.Scan(context.Background()); len(rej) != 0 {
		t.Fatal(rej)
	}
	ctx := context.Background()
	send := func(name, text string) error {
		_, err := r.Get(name).Send(ctx, "main", abi.OutboundMessage{ChatID: "1", Text: text})
		return err
	}
	if err := send("grower", "1"); err != nil {
		t.Fatal(err)
	}
	debug.FreeOSMemory()
	base := rss(t)

	// Sample resident memory while pool-size calls run at once.
	var peak atomic.Int64
	sample := func(stop <-chan struct{}) {
		for {
			if n := rss(t); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	run := func(name, text string) []error {
		stop := make(chan struct{})
		go sample(stop)
		defer close(stop)
		var wg sync.WaitGroup
		errs := make([]error, pool)
		for i := range pool {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = send(name, text) }()
		}
		wg.Wait()
		return errs
	}
	bound := int64(pool)*2*capMiB<<20 + overhead

	for _, err := range run("membomb", "") {
		var crash *CrashError
		if !errors.As(err, &crash) || !strings.Contains(err.Error(), "out of memory") {
			t.Fatalf("membomb: %v", err)
		}
	}
	debug.FreeOSMemory()
	after := rss(t)
	t.Logf("membomb ×%d: baseline %d MiB, peak %d MiB (+%d), after %d MiB (+%d); bound +%d MiB",
		pool, base>>20, peak.Load()>>20, (peak.Load()-base)>>20, after>>20, (after-base)>>20, bound>>20)
	if peak.Load()-base > bound {
		t.Errorf("peak +%d MiB over the bound of +%d MiB", (peak.Load()-base)>>20, bound>>20)
	}
	if after-base > overhead {
		t.Errorf("after the bombs: +%d MiB resident, over the fixed overhead of %d MiB", (after-base)>>20, overhead>>20)
	}

	// Healthy calls that leave their instance at 48 MiB: the instances are not kept idle.
	peak.Store(0)
	for _, err := range run("grower", "48") {
		if err != nil {
			t.Fatalf("grower: %v", err)
		}
	}
	if n := r.Get("grower").Info().Instances; n != 0 {
		t.Fatalf("%d grown instances kept idle", n)
	}
	debug.FreeOSMemory()
	after = rss(t)
	t.Logf("grower 48 MiB ×%d: peak +%d MiB, after +%d MiB", pool, (peak.Load()-base)>>20, (after-base)>>20)
	if after-base > overhead {
		t.Errorf("after the grown calls: +%d MiB resident, over the fixed overhead of %d MiB", (after-base)>>20, overhead>>20)
	}
	// The plugin still serves (on a fresh instance).
	if err := send("grower", "0"); err != nil {
		t.Fatal(err)
	}
}

// TestIdleInstancesTrimmed: instances idle past IdleTimeout are closed, all but the most
// recently used one and the one kept warm for inbound calls (the probe takes webhooks).
func TestIdleInstancesTrimmed(t *testing.T) {
	r := newRuntime(t, map[string]string{"probe.wasm": probeDir}, Config{
		Defaults: Limits{IdleTimeout: 100 * time.Millisecond}})
	r.Scan(context.Background())
	v := r.Get("probe").current()
	var insts []*instance
	for range 4 {
		inst, err := v.pool.get(context.Background(), classOut)
		if err != nil {
			t.Fatal(err)
		}
		insts = append(insts, inst)
	}
	for _, inst := range insts {
		v.pool.put(inst, classOut)
	}
	if n := v.pool.size(); n != 5 {
		t.Fatalf("%d instances, want 4 and the one kept for inbound calls", n)
	}
	for deadline := time.Now().Add(5 * time.Second); v.pool.size() != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d instances still idle after 5 s; want 2", v.pool.size())
		}
	}
	if _, err := probeSend(t, r.Get("probe"), "main", "version"); err != nil {
		t.Fatal(err)
	}
}

// TestColdPluginClosesItsLastInstances: once no call has run for ColdTimeout, the instances
// IdleTimeout keeps (the most recently used one and the one kept for inbound calls) are closed
// too, but never while a call holds an instance; the next call starts a fresh one.
func TestColdPluginClosesItsLastInstances(t *testing.T) {
	cold := testdeadline.Scale(400 * time.Millisecond)
	r := newRuntime(t, map[string]string{"probe.wasm": probeDir}, Config{
		Defaults: Limits{IdleTimeout: 50 * time.Millisecond, ColdTimeout: cold}})
	r.Scan(context.Background())
	v := r.Get("probe").current()
	waitSize := func(want int, why string) {
		t.Helper()
		for deadline := time.Now().Add(testdeadline.Scale(5 * time.Second)); v.pool.size() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d instances, want %d", why, v.pool.size(), want)
			}
		}
	}
	// A call in progress keeps the plugin warm however long it takes: the idle instance kept
	// for inbound calls stays beside the busy one.
	busy, err := v.pool.get(context.Background(), classOut)
	if err != nil {
		t.Fatal(err)
	}
	waitSize(2, "while a call holds an instance")
	time.Sleep(2 * cold)
	if n := v.pool.size(); n != 2 {
		t.Fatalf("a call in progress for twice ColdTimeout: %d instances, want 2 (the busy one and the one kept for inbound calls)", n)
	}
	v.pool.put(busy, classOut)
	waitSize(0, "after ColdTimeout with no call")
	if _, err := probeSend(t, r.Get("probe"), "main", "version"); err != nil {
		t.Fatalf("the first call after going cold: %v", err)
	}
	if n := v.pool.size(); n != 1 {
		t.Fatalf("after the first call: %d instances, want the 1 it started", n)
	}
	waitSize(0, "cold again")
}

// TestColdSchedulerTicksOnFreshInstances: ticks do not make a plugin active. A scheduler that
// only its timer wakes goes cold and each tick then runs on an instance closed after it (cron
// with nothing due ticks every minute and would otherwise keep one forever); any other call
// makes it active again, and ticks then use kept instances as before.
func TestColdSchedulerTicksOnFreshInstances(t *testing.T) {
	// Long enough that the jobs call and the tick after it (which must find the plugin warm)
	// never take longer together, even under load.
	cold := testdeadline.Scale(2 * time.Second)
	r := newRuntime(t, map[string]string{"cron.wasm": "../../plugins/cron"}, Config{
		Env:      &Env{KV: newKV(t)},
		Defaults: Limits{IdleTimeout: 50 * time.Millisecond, ColdTimeout: cold},
		Plugins:  map[string]Settings{"cron": {Profiles: map[string]json.RawMessage{"main": json.RawMessage(`{}`)}}}})
	if rej := r.Scan(context.Background()); len(rej) != 0 {
		t.Fatal(rej)
	}
	p := r.Get("cron")
	v := p.current()
	waitSize := func(want int, why string) {
		t.Helper()
		for deadline := time.Now().Add(cold + testdeadline.Scale(5*time.Second)); v.pool.size() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d instances, want %d", why, v.pool.size(), want)
			}
		}
	}
	tick := func() {
		t.Helper()
		if _, err := p.Tick(context.Background(), "main", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	waitSize(0, "cold after load")
	for range 3 {
		tick()
		if n := v.pool.size(); n != 0 {
			t.Fatalf("after a tick on the cold plugin: %d instances, want 0", n)
		}
	}
	if _, err := p.Jobs(context.Background(), "main", abi.JobsRequest{Op: "list"}); err != nil {
		t.Fatal(err)
	}
	tick()
	if n := v.pool.size(); n != 1 {
		t.Fatalf("after jobs and a tick: %d instances, want the 1 kept warm", n)
	}
	waitSize(0, "cold again with only ticks")
}

// TestLoadGivesMemoryBack: loading a file leaves the heap full of garbage (wazero decodes,
// validates and compiles every function), which the Go runtime would keep resident for reuse.
// After a scan that compiled telegram.wasm from an empty cache, the heap pages kept idle but
// not returned to the system come down to a few MiB within seconds. (Heap figures, not RSS,
// so the race detector's shadow memory does not count; not parallel, so no other test's
// garbage is counted.)
func TestLoadGivesMemoryBack(t *testing.T) {
	r := newRuntime(t, map[string]string{"telegram.wasm": "../../plugins/telegram"}, Config{CacheDir: t.TempDir()})
	if rej := r.Scan(context.Background()); len(rej) != 0 {
		t.Fatal(rej)
	}
	const want = 16 << 20
	var ms runtime.MemStats
	for deadline := time.Now().Add(testdeadline.Scale(10 * time.Second)); ; time.Sleep(50 * time.Millisecond) {
		runtime.ReadMemStats(&ms)
		kept := int64(ms.HeapIdle - ms.HeapReleased)
		if kept <= want {
			t.Logf("idle heap kept from the system after the load: %d MiB (in use %d MiB, resident %d MiB)", kept>>20, ms.HeapInuse>>20, rss(t)>>20)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after loading telegram.wasm the runtime still keeps %d MiB of idle heap from the system (want at most %d MiB)", kept>>20, want>>20)
		}
	}
}

// TestFreshInstanceStartsOutsideTheCallDeadline: a guest's runtime starts in an instance's first
// call, and an instance is started whenever the pool needs one (a second concurrent call, the
// first call after the plugin went cold, every tick of a cold scheduler). That start must not
// run under the deadline of the call that needed the instance: a start slower than the call's
// deadline (here a probe whose init spins three deadlines long) is not a crash, and the call
// then gets its whole deadline.
func TestFreshInstanceStartsOutsideTheCallDeadline(t *testing.T) {
	deadline := testdeadline.Scale(200 * time.Millisecond)
	slow, err := wasmbuild.BuildWith(probeDir, "-X main.startSpin="+(3*deadline).String())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := wasmbuild.CopyFile(slow, filepath.Join(dir, "probe.wasm")); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, nil, Config{Dir: dir, Defaults: Limits{CallTimeout: deadline, BreakerCrashes: 1}})
	if rej := r.Scan(context.Background()); len(rej) != 0 {
		t.Fatal(rej) // describe at load starts the first instance under LoadTimeout
	}
	p := r.Get("probe")
	v := p.current()
	busy, err := v.pool.get(context.Background(), classOut) // the instance the load started
	if err != nil {
		t.Fatal(err)
	}
	defer v.pool.put(busy, classOut)
	before := v.pool.size()
	if _, err := probeSend(t, p, "main", "version"); err != nil {
		t.Fatalf("a send on a fresh instance whose start outlasts the call deadline: %v", err)
	}
	if n := v.pool.size(); n != before+1 {
		t.Fatalf("%d instances after the send, want %d: it did not run on a fresh one", n, before+1)
	}
	if err := v.breaker.check("probe"); err != nil {
		t.Fatalf("the slow start was counted as a crash: %v", err)
	}
	// A reservation starts its new instance when it is taken, before the caller takes the chat's
	// boundary for the send.
	busy2, err := v.pool.get(context.Background(), classOut) // the one the send started
	if err != nil {
		t.Fatal(err)
	}
	defer v.pool.put(busy2, classOut)
	res, err := p.Reserve(context.Background())
	if err != nil {
		t.Fatalf("reserving a fresh instance whose start outlasts the call deadline: %v", err)
	}
	defer res.Release() // after Send it does nothing
	if !res.inst.started {
		t.Fatal("Reserve handed out an instance whose runtime has not started")
	}
	if sent, err := res.Send(context.Background(), "main", abi.OutboundMessage{ChatID: "1", Text: "version"}); err != nil || sent.Error != nil {
		t.Fatalf("the reserved send: %+v %v", sent, err)
	}
	// The caller's cancellation (the host stopping) still stops a start: not a crash.
	busy3, err := v.pool.get(context.Background(), classOut) // the one the reservation started
	if err != nil {
		t.Fatal(err)
	}
	defer v.pool.put(busy3, classOut)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(deadline/4, cancel)
	if _, err := p.Send(ctx, "main", abi.OutboundMessage{ChatID: "1", Text: "version"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a send cancelled while its instance started: %v, want context.Canceled", err)
	}
	if err := v.breaker.check("probe"); err != nil {
		t.Fatalf("a cancelled start was counted as a crash: %v", err)
	}
}
