// Command badsig exports send with an i32 parameter: it would crash on every call, so the host
// refuses it at load.
package main

import "github.com/hermes-host/hermes-host/internal/plugin/testdata/hostile/base"

func init() { base.Manifest = base.PlatformManifest("badsig") }

//go:wasmexport send
func send(n int32) int32 { return n }

func main() {}
