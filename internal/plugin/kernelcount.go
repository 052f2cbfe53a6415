package plugin

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// kernelFunctions are the exports of Extism's kernel module (extism-runtime.wasm): the guest
// reaches them through Extism's extism:host/env wrappers, the host through Extism's Plugin and
// CurrentPlugin methods. Each call, from either side, looks the function up again and runs it on
// a fresh wazero call engine (and, under a deadline, a watcher goroutine): RATIONALE.md,
// Throughput.
var kernelFunctions = [...]string{"alloc", "free", "length", "length_unsafe", "load_u8", "load_u64",
	"store_u8", "store_u64", "input_set", "input_length", "input_offset", "input_load_u8",
	"input_load_u64", "output_set", "output_length", "output_offset", "reset", "error_set",
	"error_get", "memory_bytes"}

// kernelCounter counts the calls into Extism's kernel module of every plugin a runtime loads,
// by function (Config.CountKernelCalls).
type kernelCounter struct {
	calls [len(kernelFunctions)]atomic.Int64
}

// listeners returns the listener factory for one extism.NewCompiledPlugin. Extism builds
// the WASI and host-function modules (Go functions), then compiles its kernel, the first module
// of Wasm code, then builds its extism:host/env module (Go functions again), then compiles the
// guest; so the exported functions of the first Wasm module are the kernel's, and only those
// get a listener. (The guest is compiled with no listener, but wazero's cache key records that
// a factory was present: counting compiles each plugin once more.)
func (k *kernelCounter) listeners() experimental.FunctionListenerFactory {
	inKernel, pastKernel := false, false
	return experimental.FunctionListenerFactoryFunc(func(def api.FunctionDefinition) experimental.FunctionListener {
		if def.GoFunction() != nil {
			pastKernel = pastKernel || inKernel
			return nil
		}
		if pastKernel {
			return nil
		}
		inKernel = true
		for _, name := range def.ExportNames() {
			if i := slices.Index(kernelFunctions[:], name); i >= 0 {
				return countCalls{&k.calls[i]}
			}
		}
		return nil
	})
}

// counts returns the calls so far by function name, the functions never called left out.
func (k *kernelCounter) counts() map[string]int64 {
	out := map[string]int64{}
	for i := range k.calls {
		if n := k.calls[i].Load(); n > 0 {
			out[kernelFunctions[i]] = n
		}
	}
	return out
}

// countCalls is a wazero function listener that counts the calls of one function.
type countCalls struct{ n *atomic.Int64 }

func (c countCalls) Before(context.Context, api.Module, api.FunctionDefinition, []uint64, experimental.StackIterator) {
	c.n.Add(1)
}

func (countCalls) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}

func (countCalls) Abort(context.Context, api.Module, api.FunctionDefinition, error) {}

// KernelCalls returns how many times each function of Extism's kernel was called, by name,
// since the runtime started, across every plugin; nil unless Config.CountKernelCalls is set.
func (r *Runtime) KernelCalls() map[string]int64 {
	if r.kernel == nil {
		return nil
	}
	return r.kernel.counts()
}
