//go:build !wasip1

package sdk

import (
	"encoding/json"

	"github.com/hermes-host/hermes-host/abi"
)

// wasmTransport outside Wasm has no host to reach until a test host installs one.
type wasmTransport struct{}

func (wasmTransport) HostCall(fn string, _ []byte) []byte {
	out, _ := json.Marshal(abi.Reply{Error: abi.Errorf(abi.CodeUnavailable,
		"%s: no host (running natively; use package sdktest to provide one)", fn)})
	return out
}
