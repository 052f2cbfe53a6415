// Command exiter calls proc_exit(0) (os.Exit) from send when the message text is "exit" (and
// proc_exit(3) for "exit 3"), and answers every other send normally: the instance that exited
// must never serve again.
package main

import (
	"encoding/json"
	"os"

	"github.com/extism/go-pdk"

	"github.com/hermes-host/hermes-host/internal/plugin/testdata/hostile/base"
)

func init() { base.Manifest = base.PlatformManifest("exiter") }

//go:wasmexport send
func send() int32 {
	var req struct {
		Message struct {
			Text string `json:"text"`
		} `json:"message"`
	}
	json.Unmarshal(pdk.Input(), &req)
	switch req.Message.Text {
	case "exit":
		os.Exit(0)
	case "exit 3":
		os.Exit(3)
	}
	pdk.OutputString(`{"message_ids":["ok"]}`)
	return 0
}

func main() {}
