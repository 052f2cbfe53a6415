// Command membomb allocates without bound in send: the memory cap must stop it.
package main

import "github.com/hermes-host/hermes-host/internal/plugin/testdata/hostile/base"

func init() { base.Manifest = base.PlatformManifest("membomb") }

var hoard [][]byte

//go:wasmexport send
func send() int32 {
	for {
		hoard = append(hoard, make([]byte, 1<<20))
		hoard[len(hoard)-1][0] = 1
	}
}

func main() {}
