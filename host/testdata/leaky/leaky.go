// Package leaky leaks internal types through each kind of exported declaration, for the public
// API check's own test (no public pattern matches testdata). The names with "fine" in them leak
// nothing.
package leaky

import (
	"github.com/hermes-host/hermes-host/internal/kv"
	"github.com/hermes-host/hermes-host/internal/plugin"
)

// Alias is an internal type under a public name.
type Alias = plugin.Env

// Config has an exported field of an internal type, and an unexported one (fine).
type Config struct {
	Env  *plugin.Env
	fine *plugin.Runtime
}

// Embeds embeds an internal type: its fields and methods are promoted.
type Embeds struct{ kv.Store }

// Func returns an internal type.
func Func() (*plugin.Plugin, error) { return nil, nil }

// Iface has a method with an internal parameter.
type Iface interface{ Load(plugin.Limits) }

// Map is a variable of a composite type over an internal one.
var Map map[string][]plugin.Rejection

// Named is defined as an internal type.
type Named plugin.Limits

// Var is a function variable taking an internal type.
var Var func(plugin.Caller)

// T has a method taking an internal type, and an unexported one (fine).
type T struct{}

// Method takes a channel of an internal type.
func (T) Method(chan<- plugin.Info) {}

func (T) fine(*plugin.Runtime) {}

// FineFunc names only public types.
func FineFunc(string) error { return nil }

var _ = Config{}.fine
var _ = T{}.fine
