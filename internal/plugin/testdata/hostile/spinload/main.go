// Command spinload spins while it is being loaded: in _initialize (package init), in describe or
// in configure, as chosen at build time with -ldflags "-X main.where=init|describe|configure
// -X main.name=NAME". The load deadline must stop it without delaying any other plugin.
// With -X main.where=slowinit it sleeps for main.slow (a duration) in _initialize and then
// behaves: a start-up slower than a call's deadline, as on a loaded machine.
package main

import (
	"time"

	"github.com/extism/go-pdk"
)

var (
	where = "describe"
	name  = "spinload"
	slow  = "1s"
	sink  int
)

func spin() {
	for i := 0; ; i++ {
		sink = i
	}
}

func init() {
	switch where {
	case "init":
		spin()
	case "slowinit":
		d, _ := time.ParseDuration(slow)
		time.Sleep(d)
	}
}

//go:wasmexport hermes_abi_v1_1
func marker() {}

//go:wasmexport describe
func describe() int32 {
	if where == "describe" {
		spin()
	}
	pdk.OutputString(`{"name":"` + name + `","version":"1","kind":"platform","platform":"` + name + `",
	"capabilities":[],"message_limit":{"max":100,"unit":"byte"}}`)
	return 0
}

//go:wasmexport configure
func configure() int32 {
	if where == "configure" {
		spin()
	}
	pdk.OutputString(`{}`)
	return 0
}

//go:wasmexport send
func send() int32 {
	pdk.OutputString(`{"message_ids":["1"]}`)
	return 0
}

func main() {}
