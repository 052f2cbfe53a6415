// Command scheduler is a scheduler plugin built for ABI 1.1, the minor before this host's: the
// host must still load it and tick it, and must not call jobs (it declares no such capability).
package main

import (
	"github.com/extism/go-pdk"

	"github.com/hermes-host/hermes-host/internal/plugin/testdata/hostile/base"
)

func init() {
	base.Manifest = `{"name":"prevabi","version":"1","kind":"scheduler","capabilities":[]}`
}

//go:wasmexport tick
func tick() int32 {
	pdk.OutputString(`{"next_tick_ms": 1234}`)
	return 0
}

func main() {}
