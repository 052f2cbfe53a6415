// Command unscoped declares api.telegram.org without scopes: any of its exports could post into
// a chat. The host flags it at load, and refuses it under strict_egress.
package main

import "github.com/hermes-host/hermes-host/internal/plugin/testdata/hostile/base"

func init() {
	base.Manifest = `{"name":"unscoped","version":"1","kind":"platform","platform":"telegram",
	"capabilities":[],"message_limit":{"max":100,"unit":"byte"},"egress":["api.telegram.org"]}`
}

//go:wasmexport send
func send() int32 { return 0 }

func main() {}
