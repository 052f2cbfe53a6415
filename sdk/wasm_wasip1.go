//go:build wasip1

package sdk

import (
	"encoding/json"

	"github.com/extism/go-pdk"
	"github.com/hermes-host/hermes-host/abi"
)

// The ABI version marker: never called; the host reads its name from the export table.
//
//go:wasmexport hermes_abi_v1_1
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

// run adapts Handle to Extism's calling convention: input in, output or error_set out.
func run(export string) int32 {
	out, err := Handle(export, pdk.Input())
	if err != nil {
		msg, _ := json.Marshal(abi.AsError(err))
		pdk.SetErrorString(string(msg))
		return 1
	}
	pdk.Output(out)
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
	in := pdk.AllocateBytes(req)
	defer in.Free()
	mem := pdk.FindMemory(f(in.Offset()))
	defer mem.Free()
	return mem.ReadBytes()
}

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
