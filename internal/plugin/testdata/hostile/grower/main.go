// Command grower keeps as many MiB as the message text says (a decimal number) in memory and
// answers normally: a healthy call that leaves its instance large.
package main

import (
	"encoding/json"
	"strconv"

	"github.com/extism/go-pdk"

	"github.com/hermes-host/hermes-host/internal/plugin/testdata/hostile/base"
)

func init() { base.Manifest = base.PlatformManifest("grower") }

var hoard [][]byte

//go:wasmexport send
func send() int32 {
	var req struct {
		Message struct {
			Text string `json:"text"`
		} `json:"message"`
	}
	json.Unmarshal(pdk.Input(), &req)
	n, _ := strconv.Atoi(req.Message.Text)
	for i := 0; i < n; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		hoard = append(hoard, b)
	}
	pdk.OutputString(`{"message_ids":["ok"]}`)
	return 0
}

func main() {}
