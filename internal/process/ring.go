package process

import (
	"strings"
	"unicode/utf8"
)

// TruncationMarker starts a tail that was cut: older output exists that the tail leaves out.
const TruncationMarker = "[… output truncated …]"

// ring keeps the last max bytes of a process's merged stdout and stderr. Offsets are logical:
// byte n of the output is at offset n, whatever the ring has dropped, so they match offsets in the
// process's log file. The buffer is allocated lazily and grows by doubling up to max, so a quiet
// process costs a few KB, not max.
//
// ring is not safe for concurrent use; its owner's mutex guards it.
type ring struct {
	buf   []byte // physical storage; logical offset o lives at buf[o % len(buf)]
	max   int
	total int64 // bytes ever written
}

const ringMinAlloc = 4 << 10

func newRing(max int) ring { return ring{max: max} }

// start is the logical offset of the oldest retained byte.
func (r *ring) start() int64 {
	if n := int64(len(r.buf)); r.total > n {
		return r.total - n
	}
	return 0
}

// write appends p, dropping the oldest bytes beyond max.
func (r *ring) write(p []byte) {
	if len(p) == 0 || r.max <= 0 {
		r.total += int64(len(p))
		return
	}
	if len(p) > r.max { // only the last max bytes can survive
		r.total += int64(len(p) - r.max)
		p = p[len(p)-r.max:]
	}
	if need := r.total + int64(len(p)); need > int64(len(r.buf)) && len(r.buf) < r.max {
		r.grow(need)
	}
	n := int64(len(r.buf))
	for len(p) > 0 {
		pos := r.total % n
		c := copy(r.buf[pos:], p)
		p = p[c:]
		r.total += int64(c)
	}
}

// grow reallocates to hold need bytes (capped at max), keeping the retained bytes at their
// logical positions under the new modulus.
func (r *ring) grow(need int64) {
	size := int64(len(r.buf))
	if size < ringMinAlloc {
		size = ringMinAlloc
	}
	for size < need && size < int64(r.max) {
		size *= 2
	}
	if size > int64(r.max) {
		size = int64(r.max)
	}
	nb := make([]byte, size)
	from := r.start()
	if keep := r.total - size; keep > from { // the new buffer cannot hold everything retained
		from = keep
	}
	for o := from; o < r.total; {
		seg := r.segment(o, r.total)
		c := copy(nb[o%size:], seg)
		o += int64(c)
	}
	r.buf = nb
}

// segment returns the longest physically contiguous slice starting at logical offset o and ending
// no later than end. o must be retained.
func (r *ring) segment(o, end int64) []byte {
	n := int64(len(r.buf))
	pos := o % n
	stop := pos + (end - o)
	if stop > n {
		stop = n
	}
	return r.buf[pos:stop]
}

// read copies up to limit retained bytes starting at logical offset off (clamped to start).
// It returns the bytes and the offset they actually start at.
func (r *ring) read(off int64, limit int) ([]byte, int64) {
	if s := r.start(); off < s {
		off = s
	}
	end := r.total
	if limit >= 0 && off+int64(limit) < end {
		end = off + int64(limit)
	}
	return r.readRange(off, end)
}

// readRange copies the retained part of logical bytes [off, end).
func (r *ring) readRange(off, end int64) ([]byte, int64) {
	if s := r.start(); off < s {
		off = s
	}
	if end > r.total {
		end = r.total
	}
	if off >= end {
		return nil, off
	}
	out := make([]byte, 0, end-off)
	for o := off; o < end; {
		seg := r.segment(o, end)
		out = append(out, seg...)
		o += int64(len(seg))
	}
	return out, off
}

// allocated is the memory the ring holds.
func (r *ring) allocated() int { return cap(r.buf) }

// tail returns the output before logical offset end (pass total for "everything"): at most
// maxChars characters and maxLines lines (0 = no line limit), cut on a line boundary. cut reports
// whether anything before it was left out (by the ring or by the limits); the text then starts
// with TruncationMarker.
func (r *ring) tail(end int64, maxChars, maxLines int) (text string, cut bool) {
	from := end - int64(maxChars+1)*utf8.UTFMax
	if from < 0 {
		from = 0
	}
	b, got := r.readRange(from, end)
	return cutTail(b, got > 0, maxChars, maxLines)
}

// cutTail applies the tail rule to b, the last bytes of some output. lostBefore says whether
// output before b exists.
func cutTail(b []byte, lostBefore bool, maxChars, maxLines int) (string, bool) {
	cut, fragment := lostBefore, lostBefore
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1] // so that "the last N lines" counts real lines
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if maxChars > 0 && utf8.RuneCountInString(s) > maxChars {
		i := len(s)
		for n := 0; n < maxChars; n++ {
			_, size := utf8.DecodeLastRuneInString(s[:i])
			i -= size
		}
		s = s[i:]
		cut, fragment = true, true
	}
	if maxLines > 0 {
		n := 0
		for i := len(s) - 1; i >= 0; i-- {
			if s[i] == '\n' {
				if n++; n == maxLines {
					s = s[i+1:]
					cut, fragment = true, false // cut exactly at a line start
					break
				}
			}
		}
	}
	if !cut {
		return s, false
	}
	// A partial first line is dropped when a full line follows it.
	if i := strings.IndexByte(s, '\n'); fragment && i >= 0 && i < len(s)-1 {
		s = s[i+1:]
	}
	return TruncationMarker + "\n" + s, true
}
