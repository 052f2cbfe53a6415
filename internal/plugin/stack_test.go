package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

// TestStackOverflowGivesMemoryBack: a Go guest that recurses without end, five times in a row.
// A Go guest's goroutine stacks live in its linear memory, so the recursion ends at memory_mib:
// each call is a crash (reason trap; the guest's runtime reports it out of memory), its
// instance is closed, and the host's resident memory comes back to within 20 MiB of where it
// was. A neighbour plugin's calls go on meanwhile; the ratio of its median latency during the
// overflows to its median latency idle is logged. (A guest compiled to use the WebAssembly
// call stack itself, as AssemblyScript or Rust do, is bounded by wazero's call-stack ceiling
// instead, in the host's heap: not measured here.)
func TestStackOverflowGivesMemoryBack(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("measures /proc/self/statm")
	}
	main := map[string]json.RawMessage{"main": json.RawMessage(`{}`)}
	r := newRuntime(t, map[string]string{"recurse.wasm": hostileTD + "recurse", "probe.wasm": probeDir},
		Config{Plugins: map[string]Settings{"recurse": {Profiles: main, Limits: Limits{CallTimeout: time.Minute}}}})
	if rej := r.Scan(context.Background()); len(rej) != 0 {
		t.Fatal(rej)
	}
	probe := r.Get("probe")
	latency := func(n int) time.Duration { // the median of n calls
		var ds []time.Duration
		for range n {
			start := time.Now()
			if _, err := probeSend(t, probe, "main", "version"); err != nil {
				t.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	idle := latency(50)
	debug.FreeOSMemory()
	base := rss(t)

	var peak int64
	stop := make(chan struct{})
	busy := make(chan time.Duration)
	go func() { // the neighbour, during the overflows
		var ds []time.Duration
		for {
			select {
			case <-stop:
				sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
				busy <- ds[len(ds)/2]
				return
			default:
			}
			start := time.Now()
			if _, err := probeSend(t, probe, "main", "version"); err != nil {
				t.Error(err)
			}
			ds = append(ds, time.Since(start))
			time.Sleep(time.Millisecond)
		}
	}()
	for i := range 5 {
		start := time.Now()
		_, err := r.Get("recurse").Send(context.Background(), "main", abi.OutboundMessage{ChatID: "1", Text: "x"})
		var crash *CrashError
		if !errors.As(err, &crash) || crash.Reason != "trap" || !strings.Contains(crash.Stderr, "out of memory") {
			t.Fatalf("overflow %d: %v", i+1, err)
		}
		peak = max(peak, rss(t))
		t.Logf("overflow %d: crashed after %v; resident %d MiB", i+1, time.Since(start).Round(time.Millisecond), rss(t)>>20)
	}
	close(stop)
	during := <-busy
	if raceDetector {
		// The race detector's shadow of the stacks stays resident whatever the heap gives
		// back: the crashes are checked, the memory is measured without -race (make test runs
		// this test once more without it).
		t.Logf("under -race: resident memory not measured; neighbour latency idle %v, during %v", idle, during)
		return
	}
	// The host gives the memory back in the background, after a trap (Runtime.reclaim).
	after := rss(t)
	for deadline := time.Now().Add(testdeadline.Scale(10 * time.Second)); after-base > 20<<20 && time.Now().Before(deadline); after = rss(t) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("5 stack overflows: resident baseline %d MiB, highest after a crash %d MiB, after %d MiB (+%d); neighbour latency idle %v, during %v (ratio %.1f)",
		base>>20, peak>>20, after>>20, (after-base)>>20, idle, during, float64(during)/float64(idle))
	if after-base > 20<<20 {
		t.Errorf("resident memory %d MiB over its baseline after the overflows; want within 20 MiB", (after-base)>>20)
	}
}
