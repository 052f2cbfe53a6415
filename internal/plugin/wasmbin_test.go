package plugin

import (
	"bytes"
	"testing"
)

// wasmModule assembles a minimal module with the given sections, for parser tests.
func wasmModule(sections ...[]byte) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	for _, s := range sections {
		b = append(b, s...)
	}
	return b
}

func section(id byte, body []byte) []byte {
	return append(append([]byte{id}, leb(uint32(len(body)))...), body...)
}

func leb(v uint32) []byte {
	var out []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, c|0x80)
			continue
		}
		return append(out, c)
	}
}

func name(s string) []byte { return append(leb(uint32(len(s))), s...) }

func TestParseModuleExportsAndImports(t *testing.T) {
	imports := bytes.Join([][]byte{
		leb(2),
		name("extism:host/user"), name("hermes_log"), {externFunc}, leb(0),
		name("env"), name("memory"), {externMemory}, {0x01}, leb(1), leb(2),
	}, nil)
	exports := bytes.Join([][]byte{
		leb(2),
		name("hermes_abi_v1_0"), {externFunc}, leb(0),
		name("describe"), {externFunc}, leb(1),
	}, nil)
	info, err := parseModule(wasmModule(section(2, imports), section(7, exports)))
	if err != nil {
		t.Fatal(err)
	}
	if info.exports["describe"] != externFunc || len(info.exports) != 2 {
		t.Fatalf("exports = %v", info.exports)
	}
	if len(info.imports) != 2 || info.imports[0].name != "hermes_log" || info.imports[1].kind != externMemory {
		t.Fatalf("imports = %+v", info.imports)
	}
}

func TestParseModuleRejects(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":           nil,
		"not wasm":        []byte("#!/bin/sh\necho hi\n"),
		"component":       []byte("\x00asm\x0d\x00\x01\x00"),
		"section overrun": wasmModule([]byte{7, 0x7f, 0x00}),
		"bad leb":         wasmModule([]byte{7, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}),
		"dup export": wasmModule(section(7, bytes.Join([][]byte{leb(2),
			name("a"), {0}, leb(0), name("a"), {0}, leb(0)}, nil))),
		"truncated name": wasmModule(section(7, []byte{1, 10, 'a'})),
	} {
		if _, err := parseModule(b); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
}

// FuzzParseModule checks that the parser never panics or loops on hostile input. The seed
// corpus lives in testdata/fuzz/FuzzParseModule.
func FuzzParseModule(f *testing.F) {
	f.Add(wasmModule(section(7, bytes.Join([][]byte{leb(1), name("describe"), {0}, leb(0)}, nil))))
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	for _, mod := range hugeCounts(f, wasmModule()) {
		f.Add(mod)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := parseModule(b)
		if err == nil && info == nil {
			t.Fatal("nil info without error")
		}
	})
}
