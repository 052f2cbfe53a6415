package plugin

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"reflect"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// dataSeg is one data segment of a test module: flag 0 (active, memory 0) at offset, unless
// passive.
type dataSeg struct {
	offset  int32
	data    []byte
	passive bool
}

// dataModule encodes a module with one memory of pages pages and the given data segments,
// and a data count section when withCount.
func dataModule(pages uint32, segs []dataSeg, withCount bool) []byte {
	section := func(out []byte, id byte, body []byte) []byte {
		out = append(out, id)
		out = binary.AppendUvarint(out, uint64(len(body)))
		return append(out, body...)
	}
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = section(b, 5, binary.AppendUvarint([]byte{1, 0}, uint64(pages))) // memory: min pages
	if withCount {
		b = section(b, 12, binary.AppendUvarint(nil, uint64(len(segs))))
	}
	body := binary.AppendUvarint(nil, uint64(len(segs)))
	for _, s := range segs {
		if s.passive {
			body = append(body, 1)
		} else {
			body = append(body, 0, 0x41)
			body = appendSLEB(body, int64(s.offset))
			body = append(body, 0x0b)
		}
		body = binary.AppendUvarint(body, uint64(len(s.data)))
		body = append(body, s.data...)
	}
	return section(b, 11, body)
}

// memoryImage instantiates mod without running any of its code (imports answered by stubs
// that fail if called) and returns its first memory's bytes, or ok false when wazero refuses
// the module or its instantiation (a segment out of bounds).
func memoryImage(t testing.TB, mod []byte) (image []byte, ok bool) {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithMemoryLimitPages(512))
	defer rt.Close(ctx)
	info, err := parseModule(mod)
	if err != nil {
		return nil, false
	}
	stubs := map[string]wazero.HostModuleBuilder{}
	for _, im := range info.imports {
		if im.kind != externFunc || im.module == wasi_snapshot_preview1.ModuleName {
			continue
		}
		if int(im.typeIdx) >= len(info.types) {
			return nil, false
		}
		hb, seen := stubs[im.module]
		if !seen {
			hb = rt.NewHostModuleBuilder(im.module)
			stubs[im.module] = hb
		}
		ty := info.types[im.typeIdx]
		vt := func(vs []byte) []api.ValueType { return append([]api.ValueType(nil), vs...) }
		hb.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) {
			panic("stub called")
		}), vt(ty.params), vt(ty.results)).Export(im.name)
	}
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	for _, hb := range stubs {
		if _, err := hb.Instantiate(ctx); err != nil {
			return nil, false
		}
	}
	compiled, err := rt.CompileModule(ctx, mod)
	if err != nil {
		return nil, false
	}
	m, err := rt.InstantiateModule(ctx, compiled, wazero.NewModuleConfig().WithStartFunctions())
	if err != nil {
		return nil, false
	}
	mem := m.Memory()
	if mem == nil || reflect.ValueOf(mem).IsNil() { // wazero returns a typed nil without one
		return nil, true
	}
	image, _ = mem.Read(0, mem.Size())
	return bytes.Clone(image), true
}

// checkCompacted asserts that compacting mod keeps the memory image it instantiates to (and
// whether it instantiates at all).
func checkCompacted(t testing.TB, mod []byte) (before, after int) {
	t.Helper()
	out, before, after := compactData(mod)
	want, wantOK := memoryImage(t, mod)
	got, gotOK := memoryImage(t, out)
	if wantOK != gotOK {
		t.Fatalf("the original instantiates: %v; compacted (%d -> %d segments): %v", wantOK, before, after, gotOK)
	}
	if !bytes.Equal(want, got) {
		t.Fatalf("compacting %d -> %d segments changed the memory image", before, after)
	}
	return before, after
}

func TestCompactData(t *testing.T) {
	text := func(s string) []byte { return []byte(s) }
	for _, tc := range []struct {
		name      string
		segs      []dataSeg
		withCount bool
		want      int // segments after
	}{
		{"joined across short gaps, out of order", []dataSeg{{100, text("c"), false}, {0, text("ab"), false}, {4, text("x"), false}}, false, 1},
		{"a gap longer than a page stays", []dataSeg{{0, text("a"), false}, {10 + compactGap, text("b"), false}}, false, 2},
		{"adjacent", []dataSeg{{0, text("ab"), false}, {2, text("cd"), false}}, false, 1},
		{"empty segments", []dataSeg{{8, nil, false}, {8, text("z"), false}, {9, nil, false}}, false, 1},
		{"overlap keeps the module", []dataSeg{{0, text("abc"), false}, {1, text("X"), false}}, false, 2},
		{"passive keeps the module", []dataSeg{{0, text("a"), false}, {0, text("b"), true}}, false, 2},
		{"data count keeps the module", []dataSeg{{0, text("a"), false}, {2, text("b"), false}}, true, 0},
		{"high offsets", []dataSeg{{65530, text("abcd"), false}, {65535, text("e"), false}}, false, 1},
		{"out of bounds stays out of bounds", []dataSeg{{65530, text("abc"), false}, {65536, text("b"), false}}, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mod := dataModule(1, tc.segs, tc.withCount)
			_, after := checkCompacted(t, mod)
			if out, _, _ := compactData(mod); (after == 0 || after == len(tc.segs)) != bytes.Equal(out, mod) {
				t.Errorf("%d segments after, but the module was rewritten: %v", after, !bytes.Equal(out, mod))
			}
			if after != tc.want {
				t.Errorf("%d -> %d segments, want %d (0: not looked at)", len(tc.segs), after, tc.want)
			}
		})
	}
}

// TestCompactDataGoPlugin: a Go plugin's thousands of data segments become a few, and the
// memory its instance starts with is the same byte for byte.
func TestCompactDataGoPlugin(t *testing.T) {
	wasm, err := os.ReadFile(wasmbuild.MustBuild(t, echoDir))
	if err != nil {
		t.Fatal(err)
	}
	before, after := checkCompacted(t, wasm)
	t.Logf("echo.wasm: %d data segments -> %d", before, after)
	if before < 1000 || after > 10 {
		t.Errorf("%d -> %d data segments; want thousands (Go's linker) joined into a few", before, after)
	}
}

// FuzzCompactData: compacting never panics on any input, and never changes the memory image a
// module instantiates to or whether it instantiates.
func FuzzCompactData(f *testing.F) {
	f.Add(dataModule(1, []dataSeg{{3, []byte("ab"), false}, {0, []byte("x"), false}}, false))
	f.Add(dataModule(1, []dataSeg{{0, []byte("abc"), false}, {1, []byte("X"), false}}, false))
	f.Add(dataModule(1, []dataSeg{{0, []byte("a"), false}, {70000, []byte("b"), false}}, false))
	f.Add(dataModule(1, []dataSeg{{-1, []byte("a"), false}}, false))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x0b\x01\x05"))
	f.Fuzz(func(t *testing.T, mod []byte) {
		checkCompacted(t, mod)
	})
}
