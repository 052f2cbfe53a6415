// Command caps declares ABI 1.1 but the capability "attachments", which ABI 1.2 added: the host
// must reject it at load.
package main

import (
	"github.com/extism/go-pdk"

	"github.com/hermes-host/hermes-host/internal/plugin/testdata/hostile/base"
)

func init() {
	base.Manifest = `{"name":"prevcaps","version":"1","kind":"platform","platform":"prevcaps",
	"capabilities":["attachments"],"message_limit":{"max":100,"unit":"byte"}}`
}

//go:wasmexport send
func send() int32 {
	pdk.OutputString(`{}`)
	return 0
}

//go:wasmexport fetch
func fetch() int32 {
	pdk.OutputString(`{"data":""}`)
	return 0
}

func main() {}
