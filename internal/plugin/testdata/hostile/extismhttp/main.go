// Command extismhttp uses Extism's own HTTP request function, which this host disables (egress
// goes through hermes_http and its policy).
package main

import (
	"github.com/extism/go-pdk"

	"github.com/hermes-host/hermes-host/internal/plugin/testdata/hostile/base"
)

func init() { base.Manifest = base.PlatformManifest("extismhttp") }

//go:wasmexport send
func send() int32 {
	res := pdk.NewHTTPRequest(pdk.MethodGet, "https://example.com/").Send()
	pdk.Output(res.Body())
	return 0
}

func main() {}
