// Command wrongabi declares ABI 2.0, which this host does not speak.
package main

//go:wasmexport hermes_abi_v2_0
func marker() {}

//go:wasmexport describe
func describe() int32 { return 0 }

//go:wasmexport configure
func configure() int32 { return 0 }

func main() {}
