// Command bigmanifest describes itself with a valid manifest of 3 MiB (its description), which
// the host would otherwise keep and send with every plugin listing.
package main

import (
	"strings"

	"github.com/hermes-host/hermes-host/internal/plugin/testdata/hostile/base"
)

func init() {
	m := base.PlatformManifest("bigmanifest")
	base.Manifest = strings.Replace(m, `"version":"1"`, `"version":"1","description":"`+strings.Repeat("x", 3<<20)+`"`, 1)
}

//go:wasmexport send
func send() int32 { return 0 }

func main() {}
