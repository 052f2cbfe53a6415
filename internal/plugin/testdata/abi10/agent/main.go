// Command agent declares ABI 1.0 but imports hermes_agent, which ABI 1.1 added: the host must
// reject it at load, before running it.
package main

import (
	"github.com/hermes-host/hermes-host/internal/plugin/testdata/hostile/base"
)

func init() {
	base.Manifest = `{"name":"abi10agent","version":"1","kind":"scheduler","capabilities":[]}`
}

//go:wasmimport extism:host/user hermes_agent
func hostAgent(uint64) uint64

//go:wasmexport tick
func tick() int32 {
	hostAgent(0)
	return 0
}

func main() {}
