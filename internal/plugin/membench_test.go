package plugin

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
)

// memSample is the process's memory at one moment, after a forced collection that also
// returns freed heap pages to the operating system.
type memSample struct {
	rss, heapInuse, sys int64 // bytes
}

func sampleMemory(tb testing.TB) memSample {
	tb.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{rss: vmRSS(tb), heapInuse: int64(ms.HeapInuse), sys: int64(ms.Sys)}
}

// vmRSS reads the process's resident set size from /proc/self/status (Linux).
func vmRSS(tb testing.TB) int64 {
	tb.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		tb.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				tb.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	tb.Fatal("no VmRSS in /proc/self/status")
	return 0
}

const mib = float64(1 << 20)

// BenchmarkMemory measures what a warm instance of echo.wasm costs: the runtime loads echo
// (compiling it and creating the one instance describe runs on), then warms warmInstances
// instances of its pool, each having served one real send (a hermes_http POST to a loopback
// outbox), all kept idle in the pool. It reports, per warm instance:
//   - rss-MiB/instance: growth of the process's resident set (VmRSS), which includes the
//     instances' linear memories (anonymous mappings outside the Go heap, see memory_unix.go);
//   - heap-MiB/instance: growth of the Go heap in use (wazero's and Extism's per-instance
//     structures: module instances, function tables, globals, Extism's bookkeeping);
//   - linear-MiB/instance: bytes the instance's Wasm memories have committed (the guest's and
//     Extism kernel's), as the runtime counts them for KeepMemoryPages;
//   - load-rss-MiB: what loading the plugin cost before the warm instances (compiled code,
//     the describe instance, which echo keeps for inbound calls).
//
// Run once: go test -run '^$' -bench BenchmarkMemory -benchtime 1x ./internal/plugin
func BenchmarkMemory(b *testing.B) {
	const warmInstances = 16
	ctx := context.Background()
	outbox := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"ok":true,"message_id":"m1"}`))
	}))
	defer outbox.Close()
	for b.Loop() {
		before := sampleMemory(b)
		r := newRuntime(b, map[string]string{"echo.wasm": echoDir}, Config{
			Env: &Env{Egress: egress.NewClient(egress.Limits{})},
			Plugins: map[string]Settings{"echo": {
				Limits:      Limits{PoolSize: warmInstances, IdleTimeout: time.Hour},
				EgressExtra: []string{"127.0.0.1"},
				Profiles:    map[string]json.RawMessage{"main": json.RawMessage(`{"outbox_url":"` + outbox.URL + `/out"}`)},
			}}})
		if rej := r.Scan(ctx); len(rej) != 0 {
			b.Fatal(rej)
		}
		v := r.Get("echo").current()
		loaded := sampleMemory(b)

		// Take warmInstances at once, then run one send on each through the host's call path,
		// which puts it back idle. Echo has inbound exports, so the describe instance stays
		// kept for inbound calls and all warmInstances are new.
		insts := make([]*instance, warmInstances)
		for i := range insts {
			inst, err := v.pool.get(ctx, classOut)
			if err != nil {
				b.Fatal(err)
			}
			insts[i] = inst
		}
		for _, inst := range insts {
			res, err := typedCallOn[abi.SendResult](ctx, v, inst, "main", abi.ExportSend, 0, func(c abi.Call) any {
				return abi.SendRequest{Call: c, Message: abi.OutboundMessage{ChatID: "1", Text: "warm"}}
			})
			if err != nil || res.Error != nil || len(res.MessageIDs) != 1 {
				b.Fatalf("warming send: %+v %v", res, err)
			}
		}
		if n := v.pool.size(); n != warmInstances+1 {
			b.Fatalf("%d instances in the pool, want %d", n, warmInstances+1)
		}
		var linear int64
		for _, inst := range insts {
			linear += inst.mem.bytes()
		}
		warm := sampleMemory(b)

		extra := float64(warmInstances)
		b.ReportMetric(float64(warm.rss-loaded.rss)/mib/extra, "rss-MiB/instance")
		b.ReportMetric(float64(warm.heapInuse-loaded.heapInuse)/mib/extra, "heap-MiB/instance")
		b.ReportMetric(float64(warm.sys-loaded.sys)/mib/extra, "gosys-MiB/instance")
		b.ReportMetric(float64(linear)/mib/float64(warmInstances), "linear-MiB/instance")
		b.ReportMetric(float64(loaded.rss-before.rss)/mib, "load-rss-MiB")
		b.ReportMetric(float64(warm.rss)/mib, "total-rss-MiB")
		r.Close()
	}
}
