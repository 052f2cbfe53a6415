package plugin

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"
)

// compactGap is the longest run of zero bytes compactData writes between two data segments to
// join them. Go's linker starts a new segment after every run of zeros longer than a few bytes
// (telegram.wasm has 52,425 segments for 1.7 MB of data); wazero keeps every segment as its
// own structure for the module's lifetime and copies each into every new instance, and the
// per-segment overhead was several times the data itself (RATIONALE.md, "The compiler sees the
// data segments joined").
const compactGap = 4096

// compactData returns the module with adjacent active data segments of memory 0 joined, the
// bytes between them written as zeros, and the number of segments before and after. Linear
// memory starts zeroed, so the instance's memory after instantiation is the same byte for
// byte. It returns the input unchanged (and equal counts) unless every data segment is an
// active segment of memory 0 at a constant i32 offset and no two overlap (each segment then
// writes bytes no other segment writes, so their order does not matter, and a joined segment
// writes only zeros where none wrote), and the module has no data count section (without one no
// instruction can name a segment by index, so renumbering them changes nothing). The file's
// identity (its SHA-256, the plugin's version) stays that of the original file; only the
// compiler sees the compacted module.
func compactData(b []byte) (out []byte, before, after int) {
	if len(b) < 8 {
		return b, 0, 0
	}
	r := reader{b: b, off: 8}
	var dataStart, dataEnd int // the data section's body
	sectionStart := 0          // where the data section's id byte is
	for r.off < len(r.b) {
		start := r.off
		id, body, err := r.section()
		if err != nil {
			return b, 0, 0
		}
		switch id {
		case 12: // data count: instructions may name segments
			return b, 0, 0
		case 11:
			sectionStart, dataStart, dataEnd = start, r.off-len(body.b), r.off
		}
	}
	if dataEnd == 0 {
		return b, 0, 0
	}
	type segment struct {
		offset uint32
		data   []byte
	}
	body := reader{b: b[dataStart:dataEnd]}
	n, err := body.u32()
	if err != nil || uint64(n) > uint64(len(body.b)) { // every segment takes at least a byte
		return b, 0, 0
	}
	segs := make([]segment, 0, n)
	for i := uint32(0); i < n; i++ {
		flag, err := body.u32()
		if err != nil || flag != 0 {
			return b, int(n), int(n)
		}
		if op, err := body.byte(); err != nil || op != 0x41 { // i32.const
			return b, int(n), int(n)
		}
		off, err := body.s32()
		if err != nil || off < 0 {
			return b, int(n), int(n)
		}
		if op, err := body.byte(); err != nil || op != 0x0b { // end
			return b, int(n), int(n)
		}
		size, err := body.u32()
		if err != nil || uint64(size) > uint64(len(body.b)-body.off) {
			return b, int(n), int(n)
		}
		segs = append(segs, segment{uint32(off), body.b[body.off : body.off+int(size)]})
		body.off += int(size)
	}
	if body.off != len(body.b) {
		return b, int(n), int(n)
	}
	// Segments that write disjoint bytes may be applied in any order (Go's linker does not
	// emit them in address order); overlapping ones must keep theirs.
	byOffset := func(a, b segment) int { return cmp.Compare(a.offset, b.offset) }
	if !slices.IsSortedFunc(segs, byOffset) {
		slices.SortStableFunc(segs, byOffset)
	}
	var end uint64 // where the previous segment ended
	for _, s := range segs {
		if uint64(s.offset) < end {
			return b, int(n), int(n)
		}
		end = uint64(s.offset) + uint64(len(s.data))
	}

	// Join runs whose gaps are short: a run is segs[first:last+1], written from its first
	// offset to its last segment's end.
	type run struct {
		first, last int
		offset, end uint32
	}
	var runs []run
	for i, s := range segs {
		if k := len(runs) - 1; k >= 0 && uint64(s.offset)-uint64(runs[k].end) <= compactGap {
			runs[k].last, runs[k].end = i, s.offset+uint32(len(s.data))
			continue
		}
		runs = append(runs, run{i, i, s.offset, s.offset + uint32(len(s.data))})
	}
	if len(runs) == len(segs) {
		return b, len(segs), len(segs)
	}
	// One allocation for the whole module: the sections before the data section, the new
	// data section, the sections after it.
	secLen := ulebLen(uint64(len(runs)))
	for _, r := range runs {
		size := uint64(r.end - r.offset)
		secLen += 3 + len(appendSLEB(nil, int64(r.offset))) + ulebLen(size) + int(size)
	}
	out = make([]byte, 0, sectionStart+1+ulebLen(uint64(secLen))+secLen+len(b)-dataEnd)
	out = append(out, b[:sectionStart]...)
	out = append(out, 11)
	out = binary.AppendUvarint(out, uint64(secLen))
	out = binary.AppendUvarint(out, uint64(len(runs)))
	for _, r := range runs {
		out = append(out, 0, 0x41)
		out = appendSLEB(out, int64(r.offset))
		out = append(out, 0x0b)
		out = binary.AppendUvarint(out, uint64(r.end-r.offset))
		at := r.offset
		for _, s := range segs[r.first : r.last+1] {
			out = append(out, make([]byte, s.offset-at)...) // zeros; no allocation
			out = append(out, s.data...)
			at = s.offset + uint32(len(s.data))
		}
	}
	out = append(out, b[dataEnd:]...)
	return out, len(segs), len(runs)
}

func ulebLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// s32 reads a signed LEB128 of at most 5 bytes that fits in 32 bits.
func (r *reader) s32() (int32, error) {
	v, err := r.sleb(5)
	if err == nil && (v < -1<<31 || v >= 1<<31) {
		err = errors.New("integer overflows 32 bits")
	}
	return int32(v), err
}

// appendSLEB appends v as a signed LEB128.
func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
