package plugin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
	"github.com/hermes-host/hermes-host/internal/memstat"
)

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
		before := memstat.Must(b)
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
		loaded := memstat.Must(b)

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
		warm := memstat.Must(b)

		extra := float64(warmInstances)
		b.ReportMetric(float64(warm.RSS-loaded.RSS)/mib/extra, "rss-MiB/instance")
		b.ReportMetric(float64(warm.HeapInuse-loaded.HeapInuse)/mib/extra, "heap-MiB/instance")
		b.ReportMetric(float64(warm.Sys-loaded.Sys)/mib/extra, "gosys-MiB/instance")
		b.ReportMetric(float64(linear)/mib/float64(warmInstances), "linear-MiB/instance")
		b.ReportMetric(float64(loaded.RSS-before.RSS)/mib, "load-rss-MiB")
		b.ReportMetric(float64(warm.RSS)/mib, "total-rss-MiB")
		r.Close()
	}
}
