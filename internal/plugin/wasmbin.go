package plugin

import (
	"errors"
	"fmt"
)

// moduleInfo is what the host learns from a Wasm binary without compiling or running it.
type moduleInfo struct {
	exports map[string]byte // export name → kind (0 func, 1 table, 2 memory, 3 global)
	imports []importEntry
}

type importEntry struct {
	module, name string
	kind         byte
}

const (
	externFunc   = 0
	externTable  = 1
	externMemory = 2
	externGlobal = 3
	externTag    = 4
)

var errNotWasm = errors.New("not a WebAssembly module (bad magic number)")

// parseModule reads the import and export sections of a Wasm binary. It validates only what it
// reads; the compiler validates the rest. It never panics on hostile input.
func parseModule(b []byte) (*moduleInfo, error) {
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return nil, errNotWasm
	}
	if b[4] != 1 || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return nil, fmt.Errorf("unsupported WebAssembly binary version %x (want 1; components are not supported)", b[4:8])
	}
	info := &moduleInfo{exports: map[string]byte{}}
	r := reader{b: b, off: 8}
	seen := map[byte]bool{}
	for r.off < len(r.b) {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("section %d: %w", id, err)
		}
		if uint64(size) > uint64(len(r.b)-r.off) {
			return nil, fmt.Errorf("section %d: size %d runs past the end of the file", id, size)
		}
		body := reader{b: r.b[r.off : r.off+int(size)]}
		r.off += int(size)
		if id != 0 {
			if seen[id] {
				return nil, fmt.Errorf("section %d appears twice", id)
			}
			seen[id] = true
		}
		switch id {
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
		// Skip the import's type description.
		switch kind {
		case externFunc:
			_, err = r.u32()
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
		info.imports = append(info.imports, importEntry{mod, name, kind})
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
		if _, err := r.u32(); err != nil {
			return err
		}
		if _, dup := info.exports[name]; dup {
			return fmt.Errorf("export %q appears twice", name)
		}
		info.exports[name] = kind
	}
	return nil
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
