// Package base gives the hostile test plugins a valid ABI marker, describe and configure, so
// each of them only writes the one export that misbehaves. It deliberately avoids the SDK,
// whose exports recover panics: these plugins must be able to trap.
package base

import "github.com/extism/go-pdk"

// Manifest is the describe output; plugins set it in init.
var Manifest = `{}`

//go:wasmexport hermes_abi_v1_1
func marker() {}

//go:wasmexport describe
func describe() int32 {
	pdk.OutputString(Manifest)
	return 0
}

//go:wasmexport configure
func configure() int32 {
	pdk.OutputString(`{}`)
	return 0
}

// PlatformManifest returns a valid platform manifest named name.
func PlatformManifest(name string) string {
	return `{"name":"` + name + `","version":"1","kind":"platform","platform":"` + name + `",
	"capabilities":[],"message_limit":{"max":100,"unit":"byte"}}`
}
