// Package chunk splits outbound text into parts that fit a platform's message length limit.
//
// A platform plugin declares its limit as an abi.MessageLimit: a maximum and the unit the
// platform counts in (Telegram counts UTF-16 code units, so an astral emoji costs 2). Split cuts
// the text so that every part fits, in this order of preference:
//
//   - at the last newline in the second half of the room available,
//   - else at the last space or tab there,
//   - else as late as possible, on a grapheme-ish boundary: never inside a UTF-8 sequence, a
//     UTF-16 surrogate pair, an emoji with a variation selector or skin tone, a ZWJ sequence, a
//     flag, or a letter with combining marks (unless one such cluster alone exceeds the room,
//     in which case it is cut between code points).
//
// A cut in the middle of a line never lands inside an inline code span (`like this`) when it
// can move back before the span's opening backtick. Whitespace at a cut is dropped: trailing
// whitespace of a part, the newline (and blank lines) after it, or the spaces after a mid-line
// cut; the indentation of the line that starts the next part is kept.
//
// ``` code fences stay balanced: a part that ends inside a fence is closed with "\n```" and the
// next part reopens it with the same language tag. A line whose trimmed text starts with ```
// toggles the fence, as in the Hermes gateway's truncate_message.
//
// When there is more than one part, each ends with " (i/n)"; the suffix and the fence repairs are
// counted inside the limit.
package chunk

import (
	"errors"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
)

// ErrLimitTooSmall is returned by SplitOptions when the limit cannot hold a part's numbering
// suffix, fence repairs and at least one character.
var ErrLimitTooSmall = errors.New("chunk: message limit too small")

// Options adjusts SplitOptions. The zero value is what Split uses first.
type Options struct {
	// NoNumbering leaves out the " (i/n)" suffix.
	NoNumbering bool
	// NoFences turns off code fence repair: parts are cut without regard to ``` fences.
	NoFences bool
}

const (
	fence      = "```"
	closeFence = "\n```"
	// maxLangTag is the longest language tag (in bytes) carried over when a fence is reopened;
	// a longer tag is dropped and the fence is reopened bare.
	maxLangTag = 32
)

// Len returns the length of s counted in unit: abi.UnitUTF16 (UTF-16 code units: 2 for a code
// point above U+FFFF, else 1), abi.UnitCodePoint, or abi.UnitByte. Any other unit counts bytes,
// the most conservative of the three. Each invalid UTF-8 byte counts as one U+FFFD.
func Len(s, unit string) int {
	return measureOf(unit).len(s)
}

// Fits reports whether s fits in limit. A limit with Max <= 0 is no limit.
func Fits(s string, limit abi.MessageLimit) bool {
	return limit.Max <= 0 || Len(s, limit.Unit) <= limit.Max
}

// Split cuts text into parts of at most limit.Max units each (see the package documentation).
// Text that fits is returned whole and unchanged as the only part; empty text yields no parts;
// a limit with Max <= 0 is no limit. Each run of invalid UTF-8 bytes is first replaced with
// U+FFFD.
//
// Split never fails. When the limit is too small for numbering and fence repairs (about 20
// units with fences, 10 without), it falls back to plain parts with neither; and a single code
// point wider than the whole limit (an astral character under a 1-unit UTF-16 limit, say) is
// emitted as a part of its own even though it does not fit. Use SplitOptions to get
// ErrLimitTooSmall instead.
func Split(text string, limit abi.MessageLimit) []string {
	s, parts := bestEffort(text, limit)
	return s.render(parts)
}

// SplitOptions is Split with options, and with an error instead of a fallback: it returns
// ErrLimitTooSmall when some part cannot hold its suffix, fence repairs and one code point.
func SplitOptions(text string, limit abi.MessageLimit, opt Options) ([]string, error) {
	s := newSplitter(text, limit, opt)
	parts, err := s.plan()
	if err != nil {
		return nil, err
	}
	return s.render(parts), nil
}

// bestEffort plans Split's parts: numbered with fence repair if the limit allows, else plain.
func bestEffort(text string, limit abi.MessageLimit) (*splitter, []part) {
	s := newSplitter(text, limit, Options{})
	if parts, err := s.plan(); err == nil {
		return s, parts
	}
	s = newSplitter(text, limit, Options{NoNumbering: true, NoFences: true})
	s.overflow = true
	parts, _ := s.plan() // cannot fail with overflow set
	return s, parts
}

// part is one piece of the output: text[start:end] of the (sanitized) input, preceded by a
// reopened fence and followed by a closing fence when the splitter repaired one.
type part struct {
	prefix     string
	start, end int
	close      bool
}

type splitter struct {
	text     string
	m        measure
	max      int
	number   bool
	fences   bool // fence repair on, and the text has a fence marker
	overflow bool // emit a too-wide code point alone rather than fail
}

func newSplitter(text string, limit abi.MessageLimit, opt Options) *splitter {
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	return &splitter{
		text:   text,
		m:      measureOf(limit.Unit),
		max:    limit.Max,
		number: !opt.NoNumbering,
		fences: !opt.NoFences && strings.Contains(text, fence),
	}
}

// plan chooses the parts, reserving room for a suffix wide enough for the number of parts.
// Empty text has no parts; text that fits is one part, the whole text.
func (s *splitter) plan() ([]part, error) {
	if s.text == "" {
		return nil, nil
	}
	if s.max <= 0 || s.m.len(s.text) <= s.max {
		return []part{{end: len(s.text)}}, nil
	}
	digits := 1
	for {
		reserve := 0
		if s.number {
			reserve = len(" (/)") + 2*digits
		}
		parts, err := s.cutAll(reserve)
		if err != nil {
			return nil, err
		}
		if !s.number || len(parts) < 2 {
			return parts, nil
		}
		d := len(strconv.Itoa(len(parts)))
		if d <= digits {
			return parts, nil
		}
		digits = d
	}
}

func (s *splitter) render(parts []part) []string {
	if len(parts) == 0 {
		return nil
	}
	out := make([]string, len(parts))
	for i, p := range parts {
		var b strings.Builder
		b.WriteString(p.prefix)
		b.WriteString(s.text[p.start:p.end])
		if p.close {
			b.WriteString(closeFence)
		}
		if s.number && len(parts) > 1 {
			b.WriteString(" (" + strconv.Itoa(i+1) + "/" + strconv.Itoa(len(parts)) + ")")
		}
		out[i] = b.String()
	}
	return out
}

// cutAll walks the text once, cutting parts that leave reserve units for the suffix.
func (s *splitter) cutAll(reserve int) ([]part, error) {
	var parts []part
	open, lang := false, ""
	pos := 0
	for pos < len(s.text) {
		prefix := ""
		if open {
			prefix = fence + lang + "\n"
		}
		rest := s.text[pos:]
		if strings.TrimLeftFunc(rest, unicode.IsSpace) == "" {
			break
		}
		if room := s.max - reserve - s.m.len(prefix); room >= 0 && s.m.fit(rest, room) == len(rest) {
			end := pos + len(strings.TrimRightFunc(rest, unicode.IsSpace))
			parts = append(parts, part{prefix: prefix, start: pos, end: end})
			break
		}
		budget := s.max - reserve - s.m.len(prefix)
		if s.fences {
			budget -= len(closeFence)
		}
		cut := s.cut(rest, budget, open, lang)
		if cut == 0 {
			return nil, ErrLimitTooSmall
		}
		body := strings.TrimRightFunc(rest[:cut], unicode.IsSpace)
		if body == "" {
			// Nothing but whitespace fits: drop the whole run.
			pos += len(rest) - len(strings.TrimLeftFunc(rest, unicode.IsSpace))
			continue
		}
		p := part{prefix: prefix, start: pos, end: pos + len(body)}
		if s.fences {
			open, lang = scanFences(body, open, lang)
			if open {
				// A closing fence line right after the cut fits in the room kept for the repair.
				if end, ok := s.absorbClose(rest, len(body), budget+len(closeFence)); ok {
					p.end = pos + end
					open, lang = false, ""
				}
			}
			p.close = open
		}
		parts = append(parts, p)
		pos = p.end + skipBoundary(s.text[p.end:])
	}
	return parts, nil
}

// cut returns how many bytes of rest the next part takes (before trimming), given budget units
// of room; 0 means not even one code point fits.
func (s *splitter) cut(rest string, budget int, open bool, lang string) int {
	if budget < 1 {
		if !s.overflow {
			return 0
		}
		budget = 1
	}
	hard := s.m.fit(rest, budget)
	if hard == 0 {
		if !s.overflow {
			return 0
		}
		_, hard = utf8.DecodeRuneInString(rest)
		return hard
	}
	if b := clusterStart(rest, hard); b > 0 {
		hard = b
	}
	cut := hard
	if i := strings.LastIndexByte(rest[:hard], '\n'); i > 0 && i >= hard/2 {
		return i
	}
	if i := strings.LastIndexAny(rest[:hard], " \t"); i > 0 && i >= hard/2 {
		cut = i
	}
	return s.avoidInlineCode(rest, cut, open, lang)
}

// avoidInlineCode moves a mid-line cut back before the opening backtick of an inline code span
// it would fall into, when that leaves something before it.
func (s *splitter) avoidInlineCode(rest string, cut int, open bool, lang string) int {
	lineStart := strings.LastIndexByte(rest[:cut], '\n') + 1
	if s.fences {
		if open, _ = scanFences(rest[:lineStart], open, lang); open {
			return cut
		}
	}
	line := rest[lineStart:cut]
	if strings.HasPrefix(strings.TrimSpace(line), fence) {
		return cut
	}
	opener, n := -1, 0
	for i := 0; i < len(line); i++ {
		if line[i] == '`' && (i == 0 || line[i-1] != '\\') {
			opener = i
			n++
		}
	}
	if n%2 == 1 && lineStart+opener > 0 {
		return lineStart + opener
	}
	return cut
}

// absorbClose reports the end of the line after rest[:end] when that line is a fence line and
// the part up to it still fits in room units.
func (s *splitter) absorbClose(rest string, end, room int) (int, bool) {
	if end >= len(rest) || rest[end] != '\n' {
		return 0, false
	}
	line := rest[end+1:]
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	if !strings.HasPrefix(strings.TrimSpace(line), fence) {
		return 0, false
	}
	end += 1 + len(strings.TrimRightFunc(line, unicode.IsSpace))
	if s.m.len(rest[:end]) > room {
		return 0, false
	}
	return end, true
}

// skipBoundary returns how many bytes of whitespace to drop at the start of the next part: up to
// and including the last newline of the leading whitespace (keeping the next line's
// indentation), or all of it when it holds no newline.
func skipBoundary(s string) int {
	ws := len(s) - len(strings.TrimLeftFunc(s, unicode.IsSpace))
	if i := strings.LastIndexByte(s[:ws], '\n'); i >= 0 {
		return i + 1
	}
	return ws
}

// scanFences returns the fence state after the lines of body, starting from open/lang.
func scanFences(body string, open bool, lang string) (bool, string) {
	for line := range strings.SplitSeq(body, "\n") {
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(t, fence) {
			continue
		}
		if open {
			open, lang = false, ""
		} else {
			open, lang = true, langTag(t)
		}
	}
	return open, lang
}

// langTag returns the language tag of an opening fence line: its first word after the backticks.
func langTag(line string) string {
	tag := strings.TrimSpace(strings.TrimLeft(line, "`"))
	if i := strings.IndexFunc(tag, func(r rune) bool { return r == '`' || unicode.IsSpace(r) }); i >= 0 {
		tag = tag[:i]
	}
	if len(tag) > maxLangTag {
		return ""
	}
	return tag
}
