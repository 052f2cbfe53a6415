package plugin

import (
	"errors"
	"fmt"
	"strings"
)

// moduleInfo is what the host learns from a Wasm binary without compiling or running it.
type moduleInfo struct {
	exports map[string]byte   // export name → kind (0 func, 1 table, 2 memory, 3 global)
	index   map[string]uint32 // export name → index in its kind's index space
	imports []importEntry
	types   []funcType // the type section
	funcs   []uint32   // type index of each function the module defines (function section)
}

type importEntry struct {
	module, name string
	kind         byte
	typeIdx      uint32 // for a function import
}

// funcType is a function signature: value type bytes (0x7f i32, 0x7e i64, 0x7d f32, 0x7c f64,
// 0x7b v128, 0x70 funcref, 0x6f externref; a typed reference is shown as "ref").
type funcType struct {
	params, results []byte
}

func (t funcType) String() string {
	names := func(vs []byte) string {
		var out []string
		for _, v := range vs {
			out = append(out, valTypeName(v))
		}
		return "(" + strings.Join(out, ", ") + ")"
	}
	return names(t.params) + " -> " + names(t.results)
}

func valTypeName(v byte) string {
	switch v {
	case 0x7f:
		return "i32"
	case 0x7e:
		return "i64"
	case 0x7d:
		return "f32"
	case 0x7c:
		return "f64"
	case 0x7b:
		return "v128"
	case 0x70:
		return "funcref"
	case 0x6f:
		return "externref"
	}
	return "ref"
}

// funcSig returns the signature of the exported function name, if the module says.
func (info *moduleInfo) funcSig(name string) (funcType, bool) {
	idx, ok := info.index[name]
	if kind, exported := info.exports[name]; !ok || !exported || kind != externFunc {
		return funcType{}, false
	}
	var typeIdx uint32
	var n uint32
	found := false
	for _, im := range info.imports {
		if im.kind != externFunc {
			continue
		}
		if n == idx {
			typeIdx, found = im.typeIdx, true
			break
		}
		n++
	}
	if !found {
		local := idx - n
		if int(local) >= len(info.funcs) {
			return funcType{}, false
		}
		typeIdx = info.funcs[local]
	}
	if int(typeIdx) >= len(info.types) {
		return funcType{}, false
	}
	return info.types[typeIdx], true
}

const (
	externFunc   = 0
	externTable  = 1
	externMemory = 2
	externGlobal = 3
	externTag    = 4
)

var errNotWasm = errors.New("not a WebAssembly module (bad magic number)")

// parseModule reads the import and export sections of a Wasm binary, after checkBounds. It
// validates only what it reads; the compiler validates the rest. It never panics on hostile
// input.
func parseModule(b []byte) (*moduleInfo, error) {
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return nil, errNotWasm
	}
	if b[4] != 1 || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return nil, fmt.Errorf("unsupported WebAssembly binary version %x (want 1; components are not supported)", b[4:8])
	}
	if err := checkBounds(b); err != nil {
		return nil, err
	}
	info := &moduleInfo{exports: map[string]byte{}, index: map[string]uint32{}}
	r := reader{b: b, off: 8}
	seen := map[byte]bool{}
	for r.off < len(r.b) {
		id, body, err := r.section()
		if err != nil {
			return nil, err
		}
		if id != 0 {
			if seen[id] {
				return nil, fmt.Errorf("section %d appears twice", id)
			}
			seen[id] = true
		}
		switch id {
		case 1:
			if err := info.readTypes(&body); err != nil {
				return nil, fmt.Errorf("type section: %w", err)
			}
		case 3:
			n, err := body.u32()
			for i := uint32(0); err == nil && i < n; i++ {
				var t uint32
				if t, err = body.u32(); err == nil {
					info.funcs = append(info.funcs, t)
				}
			}
			if err != nil {
				return nil, fmt.Errorf("function section: %w", err)
			}
		case 2:
			if err := info.readImports(&body); err != nil {
				return nil, fmt.Errorf("import section: %w", err)
			}
		case 7:
			if err := info.readExports(&body); err != nil {
				return nil, fmt.Errorf("export section: %w", err)
			}
		}
	}
	return info, nil
}

func (info *moduleInfo) readImports(r *reader) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		mod, err := r.name()
		if err != nil {
			return err
		}
		name, err := r.name()
		if err != nil {
			return err
		}
		kind, err := r.byte()
		if err != nil {
			return err
		}
		// Read a function's type index; skip other imports' type descriptions.
		var typeIdx uint32
		switch kind {
		case externFunc:
			typeIdx, err = r.u32()
		case externTable:
			if _, err = r.byte(); err == nil {
				err = r.limits()
			}
		case externMemory:
			err = r.limits()
		case externGlobal:
			if _, err = r.byte(); err == nil {
				_, err = r.byte()
			}
		case externTag:
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		default:
			return fmt.Errorf("import %s.%s has unknown kind %d", mod, name, kind)
		}
		if err != nil {
			return err
		}
		info.imports = append(info.imports, importEntry{mod, name, kind, typeIdx})
	}
	return nil
}

func (info *moduleInfo) readExports(r *reader) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		name, err := r.name()
		if err != nil {
			return err
		}
		kind, err := r.byte()
		if err != nil {
			return err
		}
		idx, err := r.u32()
		if err != nil {
			return err
		}
		if _, dup := info.exports[name]; dup {
			return fmt.Errorf("export %q appears twice", name)
		}
		info.exports[name] = kind
		info.index[name] = idx
	}
	return nil
}

func (info *moduleInfo) readTypes(r *reader) error {
	n, err := r.u32()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		form, err := r.byte()
		if err != nil {
			return err
		}
		if form != 0x60 {
			return fmt.Errorf("type %d: form 0x%02x is not a plain function type (GC types are not supported)", i, form)
		}
		var t funcType
		for _, list := range []*[]byte{&t.params, &t.results} {
			m, err := r.u32()
			if err != nil {
				return err
			}
			for j := uint32(0); j < m; j++ {
				v, err := r.byte()
				if err != nil {
					return err
				}
				if v == 0x63 || v == 0x64 { // (ref null? heaptype): skip the heap type
					if _, err := r.s33(); err != nil {
						return err
					}
				}
				*list = append(*list, v)
			}
		}
		info.types = append(info.types, t)
	}
	return nil
}

// s33 reads a signed LEB128 of at most 5 bytes (a heap type).
func (r *reader) s33() (int64, error) { return r.sleb(5) }

// sleb reads a signed LEB128 of at most maxBytes bytes.
func (r *reader) sleb(maxBytes int) (int64, error) {
	var v int64
	for shift := 0; shift < 7*maxBytes; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= int64(c&0x7f) << shift
		if c&0x80 == 0 {
			if shift+7 < 64 && c&0x40 != 0 {
				v |= -1 << (shift + 7) // sign-extend
			}
			return v, nil
		}
	}
	return 0, errors.New("integer encoding too long")
}

// section reads one section (or a name subsection): its id and its body, which must fit in what
// is left.
func (r *reader) section() (id byte, body reader, err error) {
	if id, err = r.byte(); err != nil {
		return 0, reader{}, err
	}
	size, err := r.u32()
	if err != nil {
		return 0, reader{}, fmt.Errorf("section %d: %w", id, err)
	}
	if body, err = r.sub(size); err != nil {
		return 0, reader{}, fmt.Errorf("section %d: size %d runs past the end (%d bytes left)", id, size, len(r.b)-r.off)
	}
	return id, body, nil
}

// sub takes the next n bytes as a reader of their own.
func (r *reader) sub(n uint32) (reader, error) {
	if uint64(n) > uint64(len(r.b)-r.off) {
		return reader{}, errTruncated
	}
	body := reader{b: r.b[r.off : r.off+int(n)]}
	r.off += int(n)
	return body, nil
}

// reader decodes the Wasm binary encoding.
type reader struct {
	b   []byte
	off int
}

var errTruncated = errors.New("truncated")

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errTruncated
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// u32 reads an unsigned LEB128 of at most 5 bytes.
func (r *reader) u32() (uint32, error) {
	var v uint64
	for shift := 0; shift < 35; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			if v > 0xffffffff {
				return 0, errors.New("integer overflows 32 bits")
			}
			return uint32(v), nil
		}
	}
	return 0, errors.New("integer encoding too long")
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	if uint64(n) > uint64(len(r.b)-r.off) {
		return "", errTruncated
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s, nil
}

func (r *reader) limits() error {
	flag, err := r.byte()
	if err != nil {
		return err
	}
	if _, err := r.u32(); err != nil {
		return err
	}
	if flag&1 != 0 {
		_, err = r.u32()
	}
	return err
}
