//go:build wasip1

package sdk

import (
	"encoding/binary"
	"encoding/json"

	"github.com/extism/go-pdk"
	"github.com/hermes-host/hermes-host/abi"
)

// The ABI version marker: never called; the host reads its name from the export table.
//
//go:wasmexport hermes_abi_v1_2
func abiMarker() {}

//go:wasmexport describe
func exportDescribe() int32 { return run(abi.ExportDescribe) }

//go:wasmexport configure
func exportConfigure() int32 { return run(abi.ExportConfigure) }

//go:wasmexport webhook
func exportWebhook() int32 { return run(abi.ExportWebhook) }

//go:wasmexport poll
func exportPoll() int32 { return run(abi.ExportPoll) }

//go:wasmexport send
func exportSend() int32 { return run(abi.ExportSend) }

//go:wasmexport tick
func exportTick() int32 { return run(abi.ExportTick) }

//go:wasmexport jobs
func exportJobs() int32 { return run(abi.ExportJobs) }

//go:wasmexport fetch
func exportFetch() int32 { return run(abi.ExportFetch) }

// run adapts Handle to Extism's calling convention: input in, output or error_set out.
func run(export string) int32 {
	out, err := Handle(export, loadWords(int(extismInputLength()), extismInputLoadU64, extismInputLoadU8))
	if err != nil {
		msg, _ := json.Marshal(abi.AsError(err))
		pdk.SetErrorString(string(msg))
		return 1
	}
	extismOutputSet(allocateBytes(out), uint64(len(out)))
	return 0
}

type wasmTransport struct{}

// HostCall places req in Extism memory, calls the imported host function and reads its reply.
func (wasmTransport) HostCall(fn string, req []byte) []byte {
	f := imports[fn]
	if f == nil {
		out, _ := json.Marshal(abi.Reply{Error: abi.Errorf(abi.CodeUnsupported, "unknown host function %s", fn)})
		return out
	}
	in := allocateBytes(req)
	defer extismFree(in)
	out := f(in)
	if out == 0 {
		return []byte{}
	}
	defer extismFree(out)
	return loadWords(int(extismLength(out)),
		func(i uint64) uint64 { return extismLoadU64(out + i) },
		func(i uint64) uint32 { return extismLoadU8(out + i) })
}

// Moving bytes across Extism's memory boundary. go-pdk copies 8 bytes per host call and the
// last len%8 bytes one per call; in the Go host each of those byte-wise calls runs Extism's
// kernel module through a fresh wazero function handle (about 10 KiB allocated and cleared).
// These helpers copy the tail as one more 8-byte word overlapping the previous one, so a block
// of 8 bytes or more costs no byte-wise call. The overlapping word lies inside the block.

// loadWords reads n bytes through load64 (offset i → the 8 bytes at i), with load8 only for
// blocks shorter than a word.
func loadWords(n int, load64 func(uint64) uint64, load8 func(uint64) uint32) []byte {
	buf := make([]byte, n)
	if n < 8 {
		for i := range buf {
			buf[i] = byte(load8(uint64(i)))
		}
		return buf
	}
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], load64(uint64(i)))
	}
	if n%8 != 0 {
		binary.LittleEndian.PutUint64(buf[n-8:], load64(uint64(n-8)))
	}
	return buf
}

// allocateBytes copies b into a new Extism memory block and returns its offset.
func allocateBytes(b []byte) uint64 {
	off := extismAlloc(uint64(len(b)))
	n := len(b)
	if n < 8 {
		for i, c := range b {
			extismStoreU8(off+uint64(i), uint32(c))
		}
		return off
	}
	for i := 0; i+8 <= n; i += 8 {
		extismStoreU64(off+uint64(i), binary.LittleEndian.Uint64(b[i:]))
	}
	if n%8 != 0 {
		extismStoreU64(off+uint64(n-8), binary.LittleEndian.Uint64(b[n-8:]))
	}
	return off
}

//go:wasmimport extism:host/env input_length
func extismInputLength() uint64

//go:wasmimport extism:host/env input_load_u64
func extismInputLoadU64(offset uint64) uint64

//go:wasmimport extism:host/env input_load_u8
func extismInputLoadU8(offset uint64) uint32

//go:wasmimport extism:host/env output_set
func extismOutputSet(offset, length uint64)

//go:wasmimport extism:host/env alloc
func extismAlloc(length uint64) uint64

//go:wasmimport extism:host/env free
func extismFree(offset uint64)

//go:wasmimport extism:host/env length
func extismLength(offset uint64) uint64

//go:wasmimport extism:host/env load_u64
func extismLoadU64(offset uint64) uint64

//go:wasmimport extism:host/env load_u8
func extismLoadU8(offset uint64) uint32

//go:wasmimport extism:host/env store_u64
func extismStoreU64(offset, v uint64)

//go:wasmimport extism:host/env store_u8
func extismStoreU8(offset uint64, v uint32)

var imports = map[string]func(uint64) uint64{
	abi.HostLog:            hostLog,
	abi.HostClock:          hostClock,
	abi.HostKVGet:          hostKVGet,
	abi.HostKVSet:          hostKVSet,
	abi.HostKVDelete:       hostKVDelete,
	abi.HostHTTP:           hostHTTP,
	abi.HostWSOpen:         hostWSOpen,
	abi.HostWSSend:         hostWSSend,
	abi.HostWSRecv:         hostWSRecv,
	abi.HostWSClose:        hostWSClose,
	abi.HostSessionResolve: hostSessionResolve,
	abi.HostSessionObserve: hostSessionObserve,
	abi.HostSessionRedact:  hostSessionRedact,
	abi.HostSessionSeed:    hostSessionSeed,
	abi.HostDispatch:       hostDispatch,
	abi.HostSend:           hostSend,
	abi.HostAgent:          hostAgent,
}

//go:wasmimport extism:host/user hermes_log
func hostLog(uint64) uint64

//go:wasmimport extism:host/user hermes_clock
func hostClock(uint64) uint64

//go:wasmimport extism:host/user hermes_kv_get
func hostKVGet(uint64) uint64

//go:wasmimport extism:host/user hermes_kv_set
func hostKVSet(uint64) uint64

//go:wasmimport extism:host/user hermes_kv_delete
func hostKVDelete(uint64) uint64

//go:wasmimport extism:host/user hermes_http
func hostHTTP(uint64) uint64

//go:wasmimport extism:host/user hermes_ws_open
func hostWSOpen(uint64) uint64

//go:wasmimport extism:host/user hermes_ws_send
func hostWSSend(uint64) uint64

//go:wasmimport extism:host/user hermes_ws_recv
func hostWSRecv(uint64) uint64

//go:wasmimport extism:host/user hermes_ws_close
func hostWSClose(uint64) uint64

//go:wasmimport extism:host/user hermes_session_resolve
func hostSessionResolve(uint64) uint64

//go:wasmimport extism:host/user hermes_session_observe
func hostSessionObserve(uint64) uint64

//go:wasmimport extism:host/user hermes_session_redact
func hostSessionRedact(uint64) uint64

//go:wasmimport extism:host/user hermes_session_seed
func hostSessionSeed(uint64) uint64

//go:wasmimport extism:host/user hermes_dispatch
func hostDispatch(uint64) uint64

//go:wasmimport extism:host/user hermes_send
func hostSend(uint64) uint64

//go:wasmimport extism:host/user hermes_agent
func hostAgent(uint64) uint64
