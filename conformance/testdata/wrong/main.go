// Command wrong is a plugin whose answers are well-behaved in every way the contract checks
// could see before the normal-path checks existed (it never traps), and wrong in normal
// operation: send answers non-JSON, webhook answers status 999 to a real update (and refuses the
// suite's own empty one, so only a webhook sample finds it), poll returns an event without a chat
// type. The conformance suite must fail it.
package main

import (
	"github.com/extism/go-pdk"

	"github.com/hermes-host/hermes-host/internal/plugin/testdata/hostile/base"
)

func init() {
	base.Manifest = `{"name":"wrong","version":"1","kind":"platform","platform":"wrong",
	"capabilities":["webhook","poll"],"message_limit":{"max":100,"unit":"byte"}}`
}

// input returns the request, or reports an error for input that is not a JSON object with a
// profile (so the bad-input checks pass and only the normal path is wrong).
func input() bool {
	in := pdk.Input()
	if len(in) < 2 || in[0] != '{' || in[len(in)-1] != '}' || !contains(in, `"profile":"`) {
		pdk.SetErrorString(`{"code":"bad_request","message":"bad input"}`)
		return false
	}
	return true
}

func contains(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if string(b[i:i+len(s)]) == s {
			return true
		}
	}
	return false
}

//go:wasmexport send
func send() int32 {
	if !input() {
		return 1
	}
	pdk.OutputString("sent!")
	return 0
}

//go:wasmexport webhook
func webhook() int32 {
	if !input() {
		return 1
	}
	// The suite's own request ({}) is refused, as a real adapter would refuse it: only a real
	// update (a webhook sample) reaches the broken path.
	if contains(pdk.Input(), `"body":"e30="`) {
		pdk.OutputString(`{"response":{"status":400,"body":"YmFkIHVwZGF0ZQ=="}}`)
		return 0
	}
	pdk.OutputString(`{"response":{"status":999}}`)
	return 0
}

//go:wasmexport poll
func poll() int32 {
	if !input() {
		return 1
	}
	pdk.OutputString(`{"events":[{"id":"1","kind":"message","source":{"chat_id":"1"},"text":"hi"}]}`)
	return 0
}

func main() {}
