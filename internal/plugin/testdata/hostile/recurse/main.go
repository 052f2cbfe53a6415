// Command recurse recurses without end in send: the call overflows the guest's stack. The
// instance crashes and is closed, and the memory its stack took is given back.
package main

import "github.com/hermes-host/hermes-host/internal/plugin/testdata/hostile/base"

func init() { base.Manifest = base.PlatformManifest("recurse") }

var sink int

//go:noinline
func deeper(n int) int {
	var pad [16]int // a frame of some size, as real code has
	pad[n%16] = n
	sink += pad[(n+1)%16]
	return deeper(n+1) + pad[n%16]
}

//go:wasmexport send
func send() int32 { return int32(deeper(0)) }

func main() {}
