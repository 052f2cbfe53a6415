// Command noexports has an ABI marker and nothing else.
package main

//go:wasmexport hermes_abi_v1_1
func marker() {}

func main() {}
