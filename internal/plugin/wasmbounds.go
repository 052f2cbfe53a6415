package plugin

import (
	"errors"
	"fmt"
)

// maxFunctionLocals is the most locals one function may declare: the limit JavaScript engines
// apply (the WebAssembly JS API's implementation limits). wazero allocates a function's locals
// as declared before reading its code, up to 2^32 of them.
const maxFunctionLocals = 50_000

// checkBounds walks every vector a Wasm binary declares and requires each count and length to
// fit in the bytes that follow it (every element takes at least one byte). wazero's decoder
// allocates what a count says before reading the elements, so a file of a few bytes that
// declares 2^32 data segments made it ask for hundreds of GiB, and the Go runtime ends the
// process when the system refuses ("fatal error: runtime: out of memory"); a dropped file would
// take the host down with every plugin. This runs before any of the file reaches wazero. It
// checks extents only; the compiler validates the rest.
func checkBounds(b []byte) error {
	r := reader{b: b, off: 8}
	for r.off < len(r.b) {
		id, body, err := r.section()
		if err != nil {
			return err
		}
		if err := checkSection(id, &body); err != nil {
			return fmt.Errorf("%s section: %w", sectionName(id), err)
		}
	}
	return nil
}

func sectionName(id byte) string {
	names := []string{"custom", "type", "import", "function", "table", "memory", "global", "export",
		"start", "element", "code", "data", "data count", "tag"}
	if int(id) < len(names) {
		return names[id]
	}
	return fmt.Sprintf("unknown (%d)", id)
}

func checkSection(id byte, r *reader) error {
	switch id {
	case 0:
		name, err := r.name()
		if err != nil {
			return err
		}
		if name == "name" {
			return checkNames(r)
		}
		return nil
	case 8, 12: // start, data count: one index or count, no vector
		return nil
	}
	n, err := r.count("entries")
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		var err error
		switch id {
		case 1:
			err = r.funcType()
		case 9:
			err = r.element()
		case 10:
			err = r.functionBody()
		case 11:
			err = r.dataSegment()
		default:
			return nil // fixed-size entries of at least a byte each: the count is bounded
		}
		if err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
	}
	return nil
}

// count reads a vector's length and requires that many bytes to follow.
func (r *reader) count(what string) (uint32, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if uint64(n) > uint64(len(r.b)-r.off) {
		return 0, fmt.Errorf("%d %s declared in the %d bytes that follow", n, what, len(r.b)-r.off)
	}
	return n, nil
}

func (r *reader) skip(n uint32) error {
	_, err := r.sub(n)
	return err
}

// skipVec skips a byte vector (a length, then that many bytes).
func (r *reader) skipVec(what string) error {
	n, err := r.count(what)
	if err == nil {
		err = r.skip(n)
	}
	return err
}

func (r *reader) funcType() error {
	if _, err := r.byte(); err != nil {
		return err
	}
	for range 2 { // parameters, results
		n, err := r.count("value types")
		if err != nil {
			return err
		}
		for range n {
			if err := r.valueType(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *reader) valueType() error {
	v, err := r.byte()
	if err == nil && (v == 0x63 || v == 0x64) { // (ref null? heaptype)
		_, err = r.s33()
	}
	return err
}

func (r *reader) functionBody() error {
	size, err := r.u32()
	if err != nil {
		return err
	}
	body, err := r.sub(size)
	if err != nil {
		return err
	}
	groups, err := body.count("local groups")
	if err != nil {
		return err
	}
	var locals uint64
	for range groups {
		n, err := body.u32()
		if err != nil {
			return err
		}
		if locals += uint64(n); locals > maxFunctionLocals {
			return fmt.Errorf("more than %d locals", maxFunctionLocals)
		}
		if err := body.valueType(); err != nil {
			return err
		}
	}
	return nil
}

func (r *reader) dataSegment() error {
	flag, err := r.u32()
	if err != nil {
		return err
	}
	switch flag {
	case 0:
		err = r.constExpr()
	case 1:
	case 2:
		if _, err = r.u32(); err == nil {
			err = r.constExpr()
		}
	default:
		return fmt.Errorf("unknown data segment flag %d", flag)
	}
	if err != nil {
		return err
	}
	return r.skipVec("bytes")
}

// element reads an element segment (the eight encodings of the bulk memory and reference types
// proposals: bit 0 passive or declarative, bit 1 explicit table or declarative, bit 2
// expressions instead of function indices).
func (r *reader) element() error {
	flag, err := r.u32()
	if err != nil {
		return err
	}
	if flag > 7 {
		return fmt.Errorf("unknown element segment flag %d", flag)
	}
	if flag&3 == 2 { // active with an explicit table index
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	if flag&1 == 0 { // active: an offset
		if err := r.constExpr(); err != nil {
			return err
		}
	}
	if flag&3 != 0 { // an element kind or reference type
		if err := r.valueType(); err != nil {
			return err
		}
	}
	n, err := r.count("elements")
	if err != nil {
		return err
	}
	for range n {
		if flag&4 != 0 {
			err = r.constExpr()
		} else {
			_, err = r.u32()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

var errConstExpr = errors.New("unsupported instruction in a constant expression")

// constExpr skips a constant expression up to its end.
func (r *reader) constExpr() error {
	for {
		op, err := r.byte()
		if err != nil {
			return err
		}
		switch op {
		case 0x0b: // end
			return nil
		case 0x41, 0x42: // i32.const, i64.const
			_, err = r.sleb(10)
		case 0x43:
			err = r.skip(4)
		case 0x44:
			err = r.skip(8)
		case 0x23, 0xd2: // global.get, ref.func
			_, err = r.u32()
		case 0xd0: // ref.null
			_, err = r.s33()
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended constant expressions
		case 0xfd: // v128.const
			var sub uint32
			if sub, err = r.u32(); err == nil {
				if sub != 12 {
					return errConstExpr
				}
				err = r.skip(16)
			}
		default:
			return errConstExpr
		}
		if err != nil {
			return err
		}
	}
}

// checkNames bounds the name section's maps, which wazero sizes from their declared counts.
func checkNames(r *reader) error {
	for r.off < len(r.b) {
		id, sub, err := r.section()
		if err != nil {
			return fmt.Errorf("name subsection: %w", err)
		}
		switch id {
		case 1: // function names: a name map
			err = sub.nameMap()
		case 2: // local names: an indirect name map
			var n uint32
			if n, err = sub.count("functions"); err == nil {
				for i := uint32(0); i < n && err == nil; i++ {
					if _, err = sub.u32(); err == nil {
						err = sub.nameMap()
					}
				}
			}
		}
		if err != nil {
			return fmt.Errorf("name subsection %d: %w", id, err)
		}
	}
	return nil
}

func (r *reader) nameMap() error {
	n, err := r.count("names")
	if err != nil {
		return err
	}
	for range n {
		if _, err := r.u32(); err != nil {
			return err
		}
		if err := r.skipVec("bytes of a name"); err != nil {
			return err
		}
	}
	return nil
}
