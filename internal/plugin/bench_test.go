package plugin

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/memstat"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
	"github.com/tetratelabs/wazero"
)

// BenchmarkCall compares the host's call path for a no-op export (pool acquire, deadline,
// call state, error classification, metrics, release) with a bare Extism Plugin.Call of the
// same export, measured in the same run. "bare-default" uses Extism's defaults (no deadline: a
// spinning guest would hang the caller forever); "bare-timeout" sets Extism's own per-call
// timeout, the cheapest way Extism offers to stop a spinning guest; "bare-same-config" has the
// host's runtime configuration but no deadline on the call.
//
// Each reports, besides wall time, the process's CPU time per call (cpu-µs/op: user and system
// time of every thread, so the deadline's watcher goroutines and the collector count), which is
// steadier than wall time on a shared machine; "host" also reports both as ratios to
// bare-default (x-bare-default, cpu-x-bare-default) and to bare-same-config-deadline
// (x-bare-deadline, cpu-x-bare-deadline) measured in the same run.
//
// Run: go test -run '^$' -bench 'BenchmarkCall$' -benchtime 20000x -count 3 ./internal/plugin
func BenchmarkCall(b *testing.B) {
	ctx := context.Background()
	wasm, err := os.ReadFile(wasmbuild.MustBuild(b, probeDir))
	if err != nil {
		b.Fatal(err)
	}
	cache := wazero.NewCompilationCache()
	bare := func(b *testing.B, rc wazero.RuntimeConfig, timeoutMs uint64) *extism.Plugin {
		compiled, err := extism.NewCompiledPlugin(ctx,
			extism.Manifest{Wasm: []extism.Wasm{extism.WasmData{Data: wasm}}, Timeout: timeoutMs},
			extism.PluginConfig{EnableWasi: true, RuntimeConfig: rc.WithCompilationCache(cache)},
			newRuntimeFns(b))
		if err != nil {
			b.Fatal(err)
		}
		p, err := compiled.Instance(ctx, extism.PluginInstanceConfig{})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := p.Call("noop", nil); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close(ctx); compiled.Close(ctx) }) // not left live for the next ones' GC
		return p
	}
	var baseWall, baseCPU, dlWall, dlCPU float64 // bare-default and bare-same-config-deadline, per call
	b.Run("bare-default", func(b *testing.B) {
		p := bare(b, wazero.NewRuntimeConfig(), 0)
		baseWall, baseCPU = measureCalls(b, func() error { _, _, err := p.Call("noop", nil); return err })
	})
	// The same bare instance running the SDK's send export ("version": no host call), so the
	// figure over bare-default is the guest's own work: decoding the request and encoding the
	// reply with encoding/json inside Wasm, plus the SDK's three kernel calls.
	// "bare-send-same-config" is that call compiled as the host compiles it
	// (WithCloseOnContextDone, which the call deadline needs): wazero then leaves compiled code
	// for Go at every loop header to check whether the module was closed, and the guest's Go
	// code (encoding/json's scanner, the Go runtime's own loops) passes loop headers constantly.
	in, _ := json.Marshal(abi.SendRequest{Call: abi.Call{Profile: "main", Config: json.RawMessage(`{}`)},
		Message: abi.OutboundMessage{ChatID: "1", Text: "version"}})
	for name, rc := range map[string]wazero.RuntimeConfig{
		"bare-send":             wazero.NewRuntimeConfig(),
		"bare-send-same-config": wazero.NewRuntimeConfig().WithCloseOnContextDone(true),
	} {
		b.Run(name, func(b *testing.B) {
			p := bare(b, rc, 0)
			measureCalls(b, func() error { _, _, err := p.Call(abi.ExportSend, in); return err })
		})
	}
	b.Run("bare-timeout", func(b *testing.B) {
		p := bare(b, wazero.NewRuntimeConfig(), 10_000) // Extism's own call timeout
		measureCalls(b, func() error { _, _, err := p.Call("noop", nil); return err })
	})
	b.Run("bare-same-config", func(b *testing.B) {
		p := bare(b, wazero.NewRuntimeConfig().WithCloseOnContextDone(true), 0)
		measureCalls(b, func() error { _, _, err := p.Call("noop", nil); return err })
	})
	// bare-same-config with a deadline on each call, as the host sets one: the cheapest
	// call that a deadline can stop, on Extism and wazero as they are.
	b.Run("bare-same-config-deadline", func(b *testing.B) {
		p := bare(b, wazero.NewRuntimeConfig().WithCloseOnContextDone(true), 0)
		dlWall, dlCPU = measureCalls(b, func() error {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, _, err := p.CallWithContext(cctx, "noop", nil)
			return err
		})
	})
	b.Run("host", func(b *testing.B) {
		r := newRuntime(b, map[string]string{"probe.wasm": probeDir}, Config{Metrics: NewMetrics(newRegistry())})
		r.Scan(ctx)
		p := r.Get("probe")
		wall, cpu := measureCalls(b, func() error { _, err := p.Call(ctx, "main", "noop", nil); return err })
		if baseWall > 0 {
			b.ReportMetric(wall/baseWall, "x-bare-default")
			b.ReportMetric(cpu/baseCPU, "cpu-x-bare-default")
		}
		if dlWall > 0 {
			b.ReportMetric(wall/dlWall, "x-bare-deadline")
			b.ReportMetric(cpu/dlCPU, "cpu-x-bare-deadline")
		}
	})
	// The host's call and bare-same-config-deadline in alternating blocks of calls, so that
	// drift over the run (the machine's load, the heap) falls on both alike: the ratio is the
	// host's overhead on the cheapest call a deadline can stop.
	b.Run("host-vs-bare-deadline", func(b *testing.B) {
		r := newRuntime(b, map[string]string{"probe.wasm": probeDir}, Config{Metrics: NewMetrics(newRegistry())})
		r.Scan(ctx)
		host := r.Get("probe")
		bareP := bare(b, wazero.NewRuntimeConfig().WithCloseOnContextDone(true), 0)
		calls := [2]func() error{
			func() error { _, err := host.Call(ctx, "main", "noop", nil); return err },
			func() error {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				_, _, err := bareP.CallWithContext(cctx, "noop", nil)
				return err
			},
		}
		const block = 500
		var took [2]time.Duration
		runtime.GC()
		b.ResetTimer()
		for n := 0; n < b.N; n += block {
			for k, call := range calls {
				start := time.Now()
				for range min(block, b.N-n) {
					if err := call(); err != nil {
						b.Fatal(err)
					}
				}
				took[k] += time.Since(start)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(took[0].Nanoseconds())/float64(b.N), "host-ns/call")
		b.ReportMetric(float64(took[1].Nanoseconds())/float64(b.N), "bare-ns/call")
		b.ReportMetric(float64(took[0])/float64(took[1]), "x-bare-deadline")
	})
}

// measureCalls runs call b.N times and reports the process's CPU time per call (cpu-µs/op).
// It returns the wall and CPU time per call, in nanoseconds.
func measureCalls(b *testing.B, call func() error) (wall, cpu float64) {
	b.Helper()
	runtime.GC() // what setting up left behind is not collected on the measured calls' time
	cpu0 := memstat.CPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	wall = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	cpu = float64(memstat.CPU()-cpu0) / float64(b.N)
	b.ReportMetric(cpu/1e3, "cpu-µs/op")
	return wall, cpu
}

// BenchmarkPool measures acquiring and releasing a warm instance.
func BenchmarkPool(b *testing.B) {
	ctx := context.Background()
	r := newRuntime(b, map[string]string{"probe.wasm": probeDir}, Config{})
	r.Scan(ctx)
	v := r.Get("probe").current()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		inst, err := v.pool.get(ctx, classOut)
		if err != nil {
			b.Fatal(err)
		}
		v.pool.put(inst, classOut)
	}
}

// BenchmarkNeighbour measures a healthy plugin's call (the probe's send) while another plugin
// is idle, spins in every instance of its pool, or bombs its memory in a loop, and reports each
// as a ratio to the idle figure measured in the same run ("x-idle").
func BenchmarkNeighbour(b *testing.B) {
	ctx := context.Background()
	slow := Settings{Limits: Limits{CallTimeout: time.Minute, PoolSize: 2, MaxOutput: 1 << 20},
		Profiles: map[string]json.RawMessage{"main": json.RawMessage(`{}`)}}
	r := newRuntime(b, map[string]string{"probe.wasm": probeDir, "loop.wasm": hostileTD + "loop", "membomb.wasm": hostileTD + "membomb"},
		Config{Plugins: map[string]Settings{"loop": slow, "membomb": slow}, ScaleProcs: true})
	if rej := r.Scan(ctx); len(rej) != 0 {
		b.Fatal(rej)
	}
	probe := r.Get("probe")
	call := func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := probeSend(b, probe, "main", "version"); err != nil {
				b.Fatal(err)
			}
		}
	}
	// neighbour keeps n calls of name running until stop.
	neighbour := func(name string, n int) (stop func()) {
		nctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for nctx.Err() == nil {
					r.Get(name).Send(nctx, "main", abi.OutboundMessage{ChatID: "1"})
				}
			}()
		}
		time.Sleep(200 * time.Millisecond) // let them start
		return func() { cancel(); wg.Wait() }
	}
	var idle float64
	b.Run("idle", func(b *testing.B) {
		call(b)
		idle = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	for _, tc := range []struct{ name, plugin string }{{"spinning", "loop"}, {"membomb", "membomb"}} {
		b.Run(tc.name, func(b *testing.B) {
			stop := neighbour(tc.plugin, 2)
			defer stop()
			b.ResetTimer()
			call(b)
			b.StopTimer()
			if idle > 0 {
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/idle, "x-idle")
			}
		})
	}
}
