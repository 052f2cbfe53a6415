package chunk

import (
	"unicode"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
)

// measure counts text in one of the abi.Unit* units.
type measure int

const (
	byBytes measure = iota
	byCodePoints
	byUTF16
)

func measureOf(unit string) measure {
	switch unit {
	case abi.UnitUTF16:
		return byUTF16
	case abi.UnitCodePoint:
		return byCodePoints
	}
	return byBytes
}

// width is the size of r in m. r is a decoded code point (U+FFFD for an invalid byte).
func (m measure) width(r rune) int {
	switch m {
	case byUTF16:
		if r > 0xFFFF {
			return 2
		}
		return 1
	case byCodePoints:
		return 1
	}
	return utf8.RuneLen(r)
}

func (m measure) len(s string) int {
	switch m {
	case byCodePoints:
		return utf8.RuneCountInString(s)
	case byUTF16:
		n := 0
		for _, r := range s {
			n += m.width(r)
		}
		return n
	}
	if utf8.ValidString(s) {
		return len(s)
	}
	n := 0
	for _, r := range s {
		n += utf8.RuneLen(r) // an invalid byte counts as the 3 bytes of U+FFFD
	}
	return n
}

// fit returns the largest byte index i, on a code point boundary, with m.len(s[:i]) <= budget.
func (m measure) fit(s string, budget int) int {
	if m == byBytes && utf8.ValidString(s) {
		if budget >= len(s) {
			return len(s)
		}
		i := budget
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		return i
	}
	n := 0
	for i, r := range s {
		n += m.width(r)
		if n > budget {
			return i
		}
	}
	return len(s)
}

// clusterStart returns the largest i <= end that does not split a grapheme-ish cluster of s,
// or 0 when s[:end] holds no such boundary after the first cluster. end must be a code point
// boundary.
func clusterStart(s string, end int) int {
	for i := end; i > 0; {
		if boundary(s, i) {
			return i
		}
		_, n := utf8.DecodeLastRuneInString(s[:i])
		i -= n
	}
	return 0
}

const zwj = '\u200D'

// boundary reports whether a cut at byte i of s (a code point boundary) keeps clusters whole. It
// is a cheap subset of the Unicode grapheme rules (UAX #29): it keeps combining marks, variation
// selectors, emoji modifiers, tag sequences and ZWJ sequences with their base, regional
// indicator pairs (flags) together, and CR with LF.
func boundary(s string, i int) bool {
	if i <= 0 || i >= len(s) {
		return true
	}
	a, _ := utf8.DecodeLastRuneInString(s[:i])
	b, _ := utf8.DecodeRuneInString(s[i:])
	switch {
	case a == '\r' && b == '\n':
		return false
	case a == zwj || extends(b):
		return false
	case regional(a) && regional(b):
		// Flags are pairs: break only after an even run of regional indicators.
		n := 0
		for j := i; j > 0; {
			r, w := utf8.DecodeLastRuneInString(s[:j])
			if !regional(r) {
				break
			}
			n++
			j -= w
		}
		return n%2 == 0
	}
	return true
}

// extends reports whether r attaches to the code point before it.
func extends(r rune) bool {
	switch {
	case r == zwj,
		r >= 0xFE00 && r <= 0xFE0F,   // variation selectors
		r >= 0xE0100 && r <= 0xE01EF, // variation selectors supplement
		r >= 0x1F3FB && r <= 0x1F3FF, // emoji skin tone modifiers
		r >= 0xE0020 && r <= 0xE007F: // tag characters (subdivision flags)
		return true
	}
	return r >= 0x300 && unicode.In(r, unicode.Mn, unicode.Me, unicode.Mc)
}

func regional(r rune) bool { return r >= 0x1F1E6 && r <= 0x1F1FF }
