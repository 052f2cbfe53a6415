// Command loop spins forever in send: the call deadline must stop it.
package main

import "github.com/hermes-host/hermes-host/internal/plugin/testdata/hostile/base"

func init() { base.Manifest = base.PlatformManifest("loop") }

var sink int

//go:wasmexport send
func send() int32 {
	for i := 0; ; i++ {
		sink = i
	}
}

func main() {}
