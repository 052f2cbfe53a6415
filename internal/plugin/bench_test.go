package plugin

import (
	"context"
	"os"
	"testing"

	extism "github.com/extism/go-sdk"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
	"github.com/tetratelabs/wazero"
)

// BenchmarkCall compares the host's call path for a no-op export (pool acquire, deadline,
// call state, error classification, metrics, release) with a bare Extism Plugin.Call of the
// same export, measured in the same run. "bare-default" uses Extism's defaults (no deadline: a
// spinning guest would hang the caller forever); "bare-timeout" sets Extism's own per-call
// timeout, the cheapest way Extism offers to stop a spinning guest; "bare-same-config" has the
// host's runtime configuration but no deadline on the call.
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
		return p
	}
	b.Run("bare-default", func(b *testing.B) {
		p := bare(b, wazero.NewRuntimeConfig(), 0)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, _, err := p.Call("noop", nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bare-timeout", func(b *testing.B) {
		p := bare(b, wazero.NewRuntimeConfig(), 10_000) // Extism's own call timeout
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, _, err := p.Call("noop", nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bare-same-config", func(b *testing.B) {
		p := bare(b, wazero.NewRuntimeConfig().WithCloseOnContextDone(true), 0)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, _, err := p.Call("noop", nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("host", func(b *testing.B) {
		r := newRuntime(b, map[string]string{"probe.wasm": probeDir}, Config{Metrics: NewMetrics(newRegistry())})
		r.Scan(ctx)
		p := r.Get("probe")
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := p.Call(ctx, "main", "noop", nil); err != nil {
				b.Fatal(err)
			}
		}
	})
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
