// Command panicky panics in every export, describe included.
package main

//go:wasmexport hermes_abi_v1_1
func marker() {}

//go:wasmexport describe
func describe() int32 { panic("panicky: describe") }

//go:wasmexport configure
func configure() int32 { panic("panicky: configure") }

//go:wasmexport send
func send() int32 { panic("panicky: send") }

//go:wasmexport webhook
func webhook() int32 { panic("panicky: webhook") }

//go:wasmexport poll
func poll() int32 { panic("panicky: poll") }

func main() {}
