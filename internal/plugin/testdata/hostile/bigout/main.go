// Command bigout answers send with 2 MiB of output, over the output cap its test sets.
package main

import (
	"github.com/extism/go-pdk"

	"github.com/hermes-host/hermes-host/internal/plugin/testdata/hostile/base"
)

func init() { base.Manifest = base.PlatformManifest("bigout") }

//go:wasmexport send
func send() int32 {
	pdk.Output(make([]byte, 2<<20))
	return 0
}

func main() {}
