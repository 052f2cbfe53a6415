// Command v10 is a scheduler built for ABI 1.0, two minors before this host's: the host rejects
// it at load, saying the plugin must be rebuilt.
package main

import "github.com/extism/go-pdk"

//go:wasmexport hermes_abi_v1_0
func marker() {}

//go:wasmexport describe
func describe() int32 {
	pdk.OutputString(`{"name":"v10","version":"1","kind":"scheduler","capabilities":[]}`)
	return 0
}

//go:wasmexport configure
func configure() int32 {
	pdk.OutputString(`{}`)
	return 0
}

//go:wasmexport tick
func tick() int32 {
	pdk.OutputString(`{}`)
	return 0
}

func main() {}
