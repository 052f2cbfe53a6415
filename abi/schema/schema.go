// Package schema holds the JSON Schema of the ABI's messages (abi.schema.json in this directory),
// generated from package abi's Go types and checked against them in CI. Authors in other
// languages can validate their plugin's output with it; the conformance suite does.
package schema

import _ "embed"

//go:embed abi.schema.json
var doc []byte

// JSON returns the schema document (draft 2020-12). Each message type is under
// "#/$defs/<Go type name>", e.g. "#/$defs/SendResult".
func JSON() []byte { return append([]byte(nil), doc...) }
