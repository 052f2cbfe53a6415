package chunk

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
)

var telegram = abi.MessageLimit{Max: 4096, Unit: abi.UnitUTF16}

var suffixRE = regexp.MustCompile(` \((\d+)/(\d+)\)$`)

// check asserts every invariant of Split for text under limit and returns the parts.
func check(t testing.TB, text string, limit abi.MessageLimit) []string {
	t.Helper()
	got := Split(text, limit)
	s, parts := bestEffort(text, limit)
	if want := s.render(parts); !equal(got, want) {
		t.Fatalf("Split is not deterministic:\n%q\n%q", got, want)
	}
	src := s.text // sanitized
	if !utf8.ValidString(src) {
		t.Fatalf("sanitized text is not valid UTF-8")
	}
	if text == "" {
		if len(got) != 0 {
			t.Fatalf("empty text gave %q", got)
		}
		return got
	}
	if limit.Max <= 0 || Len(src, limit.Unit) <= limit.Max {
		if len(got) != 1 || got[0] != src {
			t.Fatalf("text that fits was changed: %q", got)
		}
		return got
	}
	prev := 0
	for i, p := range parts {
		out := got[i]
		if !utf8.ValidString(out) {
			t.Fatalf("part %d is not valid UTF-8: %q", i, out)
		}
		if n := Len(out, limit.Unit); n > limit.Max {
			if !s.overflow || utf8.RuneCountInString(out) != 1 {
				t.Fatalf("part %d/%d is %d %s units, limit %d: %q", i+1, len(parts), n, limit.Unit, limit.Max, out)
			}
		}
		if gap := src[prev:p.start]; strings.TrimFunc(gap, unicode.IsSpace) != "" {
			t.Fatalf("part %d skipped non-whitespace %q", i, gap)
		}
		if p.end <= p.start {
			t.Fatalf("part %d is empty", i)
		}
		prev = p.end
		if len(got) > 1 && s.number {
			m := suffixRE.FindStringSubmatch(out)
			if m == nil || m[1] != fmt.Sprint(i+1) || m[2] != fmt.Sprint(len(got)) {
				t.Fatalf("part %d has no suffix (%d/%d): %q", i, i+1, len(got), out)
			}
		} else if s.number && suffixRE.MatchString(out) && !suffixRE.MatchString(src) {
			t.Fatalf("single part numbered: %q", out)
		}
		if s.fences && i < len(parts)-1 {
			if open, _ := scanFences(out, false, ""); open {
				t.Fatalf("part %d leaves a fence open: %q", i, out)
			}
		}
	}
	if tail := src[prev:]; strings.TrimFunc(tail, unicode.IsSpace) != "" {
		t.Fatalf("lost the tail %q", tail)
	}
	// Black box: the parts minus suffixes and fence repairs hold the input's non-whitespace text.
	var joined strings.Builder
	for i, out := range got {
		p := parts[i]
		if s.number && len(got) > 1 {
			out = out[:len(out)-len(fmt.Sprintf(" (%d/%d)", i+1, len(got)))]
		}
		if !strings.HasPrefix(out, p.prefix) {
			t.Fatalf("part %d lacks its reopened fence %q", i, p.prefix)
		}
		out = out[len(p.prefix):]
		if p.close {
			if !strings.HasSuffix(out, closeFence) {
				t.Fatalf("part %d lacks its closing fence", i)
			}
			out = out[:len(out)-len(closeFence)]
		}
		if out != src[p.start:p.end] {
			t.Fatalf("part %d body %q is not the input's %q", i, out, src[p.start:p.end])
		}
		joined.WriteString(out)
	}
	if nonSpace(joined.String()) != nonSpace(src) {
		t.Fatalf("non-whitespace content changed")
	}
	return got
}

func nonSpace(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
}

// FuzzSplit checks Split's invariants on arbitrary text, limits and units: every part within
// the limit (but for a lone code point wider than a tiny limit), valid UTF-8, numbering and
// balanced fences, and the parts minus suffixes and fence repairs reproducing the input's
// non-whitespace content in order.
func FuzzSplit(f *testing.F) {
	f.Add("hello world", 5, uint8(0))
	f.Add("```go\nfunc main() {}\n```\ntext after", 20, uint8(0))
	f.Add(strings.Repeat("😀", 30)+"x", 25, uint8(0))
	f.Fuzz(func(t *testing.T, text string, max int, unit uint8) {
		u := []string{abi.UnitUTF16, abi.UnitCodePoint, abi.UnitByte, ""}[unit%4]
		// Keep the limit near the text's length so that most inputs are split; 0 is no limit.
		limit := abi.MessageLimit{Max: int(uint(max) % uint(Len(text, u)+8)), Unit: u}
		check(t, text, limit)
	})
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLen(t *testing.T) {
	for _, c := range []struct {
		s                 string
		utf16, cp, nbytes int
	}{
		{"", 0, 0, 0},
		{"hello", 5, 5, 5},
		{"héllo", 5, 5, 6},
		{"日本", 2, 2, 6},
		{"😀", 2, 1, 4},
		{"👍🏽", 4, 2, 8},
		{"❤️", 2, 2, 6},
		{"🇫🇷", 4, 2, 8},
		{"\xff", 1, 1, 3},
	} {
		if got := Len(c.s, abi.UnitUTF16); got != c.utf16 {
			t.Errorf("Len(%q, utf16) = %d, want %d", c.s, got, c.utf16)
		}
		if got := Len(c.s, abi.UnitCodePoint); got != c.cp {
			t.Errorf("Len(%q, codepoint) = %d, want %d", c.s, got, c.cp)
		}
		if got := Len(c.s, abi.UnitByte); got != c.nbytes {
			t.Errorf("Len(%q, byte) = %d, want %d", c.s, got, c.nbytes)
		}
		if got := Len(c.s, "furlongs"); got != c.nbytes {
			t.Errorf("Len(%q, unknown) = %d, want bytes %d", c.s, got, c.nbytes)
		}
	}
}

func TestFitsAndWhole(t *testing.T) {
	text := strings.Repeat("a", 4096)
	if !Fits(text, telegram) || Fits(text+"b", telegram) || !Fits(text+"b", abi.MessageLimit{}) {
		t.Fatal("Fits is wrong at the boundary")
	}
	if got := Split(text, telegram); len(got) != 1 || got[0] != text {
		t.Fatalf("exactly 4096 units must be one unchanged part")
	}
	if got := Split("", telegram); got != nil {
		t.Fatalf("empty text: %q", got)
	}
	if got := Split("x\n\n", abi.MessageLimit{}); len(got) != 1 || got[0] != "x\n\n" {
		t.Fatalf("no limit: %q", got)
	}
}

// Scenario 32: a Telegram reply of 5000 UTF-16 units becomes (1/2) and (2/2), fences balanced,
// each part at most 4096 units.
func TestScenario32(t *testing.T) {
	var b strings.Builder
	b.WriteString("Here is the script you asked for 😀:\n\n```python\n")
	for i := 0; Len(b.String(), abi.UnitUTF16) < 4950; i++ {
		fmt.Fprintf(&b, "print('line %d 🚀 – Grüße')\n", i)
	}
	b.WriteString("```\nDone.")
	text := b.String()
	for Len(text, abi.UnitUTF16) < 5000 {
		text += "!"
	}
	if n := Len(text, abi.UnitUTF16); n != 5000 {
		t.Fatalf("fixture is %d units", n)
	}
	got := check(t, text, telegram)
	if len(got) != 2 {
		t.Fatalf("got %d parts", len(got))
	}
	if !strings.HasSuffix(got[0], "\n``` (1/2)") || !strings.HasSuffix(got[1], " (2/2)") {
		t.Fatalf("suffixes/fence close wrong:\n%s\n---\n%s", tail(got[0]), tail(got[1]))
	}
	if !strings.HasPrefix(got[1], "```python\nprint('line ") {
		t.Fatalf("part 2 does not reopen the fence with its language: %q", got[1][:40])
	}
	for i, p := range got {
		if strings.Count(p, "```")%2 != 0 {
			t.Fatalf("part %d has unbalanced fences", i+1)
		}
		if n := Len(p, abi.UnitUTF16); n > 4096 {
			t.Fatalf("part %d is %d units", i+1, n)
		}
	}
	// The first part is cut at a newline: it ends with a whole line of code.
	body := strings.TrimSuffix(got[0], "\n``` (1/2)")
	if !strings.HasSuffix(body, "')") {
		t.Fatalf("first part not cut at a line end: %q", tail(body))
	}
}

func tail(s string) string {
	if len(s) > 60 {
		return "…" + s[len(s)-60:]
	}
	return s
}

// An unbreakable run of astral emoji straddling the 4096 boundary must never be cut inside a
// surrogate pair: with a suffix of 6 units, room is 4090 units = 2045 emoji.
func TestAstralAtBoundary(t *testing.T) {
	for _, pad := range []int{0, 1} {
		text := strings.Repeat("x", pad) + strings.Repeat("😀", 3000)
		got := check(t, text, telegram)
		if len(got) != 2 {
			t.Fatalf("pad %d: %d parts", pad, len(got))
		}
		first := strings.TrimSuffix(got[0], " (1/2)")
		if n := Len(first, abi.UnitUTF16); n != 4090-pad%2 {
			t.Fatalf("pad %d: first part body is %d units, want %d", pad, n, 4090-pad%2)
		}
		if !strings.HasPrefix(got[1], "😀") {
			t.Fatalf("second part starts with %q", got[1][:4])
		}
	}
	// Exactly 4096 units of emoji is one message; one more unit is two.
	text := strings.Repeat("😀", 2048)
	if got := check(t, text, telegram); len(got) != 1 {
		t.Fatalf("2048 emoji: %d parts", len(got))
	}
	if got := check(t, text+"a", telegram); len(got) != 2 {
		t.Fatalf("2048 emoji + a: %d parts", len(got))
	}
}

func TestClustersKeptWhole(t *testing.T) {
	for _, cluster := range []string{
		"❤️",      // heart + VS16
		"👍🏽",      // skin tone
		"👨‍👩‍👧‍👦", // ZWJ family
		"🇫🇷",      // flag
		"é",       // e + combining acute
		"🏴󠁧󠁢󠁳󠁣󠁴󠁿", // subdivision flag (tags)
	} {
		for offset := 0; offset < 8; offset++ {
			text := strings.Repeat("a", offset) + strings.Repeat(cluster, 200)
			limit := abi.MessageLimit{Max: 60, Unit: abi.UnitUTF16}
			for i, p := range check(t, text, limit) {
				body := suffixRE.ReplaceAllString(p, "")
				body = strings.TrimLeft(body, "a")
				if body != "" && strings.ReplaceAll(body, cluster, "") != "" {
					t.Fatalf("%q offset %d: part %d splits a cluster: %q", cluster, offset, i, p)
				}
			}
		}
	}
}

func TestPrefersNewlineThenSpace(t *testing.T) {
	limit := abi.MessageLimit{Max: 40, Unit: abi.UnitCodePoint}
	got := check(t, "the first line is here\nsecond line is a bit longer than that", abi.MessageLimit{Max: 45, Unit: abi.UnitCodePoint})
	if got[0] != "the first line is here (1/2)" {
		t.Fatalf("did not cut at the newline: %q", got)
	}
	got = check(t, "alpha beta gamma delta epsilon zeta eta theta iota", limit)
	want := []string{"alpha beta gamma delta epsilon (1/2)", "zeta eta theta iota (2/2)"}
	if !equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestLongWord(t *testing.T) {
	word := strings.Repeat("abcdefghij", 1000) // 10000 units, no break
	got := check(t, word, telegram)
	if len(got) != 3 {
		t.Fatalf("%d parts", len(got))
	}
	if strings.Join(stripSuffixes(got), "") != word {
		t.Fatal("a long word was not reproduced exactly")
	}
	if n := Len(got[0], abi.UnitUTF16); n != 4096 {
		t.Fatalf("a hard cut should use the whole room, got %d", n)
	}
}

func stripSuffixes(parts []string) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = suffixRE.ReplaceAllString(p, "")
	}
	return out
}

func TestFencesAcrossParts(t *testing.T) {
	var b strings.Builder
	b.WriteString("Intro\n```go\n")
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&b, "\tx%d := %d\n", i, i)
	}
	b.WriteString("```\nBetween\n```\nplain\n```\nEnd")
	limit := abi.MessageLimit{Max: 100, Unit: abi.UnitUTF16}
	got := check(t, b.String(), limit)
	if len(got) < 4 {
		t.Fatalf("expected several parts, got %d", len(got))
	}
	for i, p := range got {
		if strings.Count(p, "```")%2 != 0 {
			t.Fatalf("part %d unbalanced: %q", i, p)
		}
		if i > 0 && strings.Contains(got[i-1], "\tx") && strings.Contains(p, "\tx") && !strings.HasPrefix(p, "```go\n\tx") {
			t.Fatalf("part %d does not reopen with go and keep indentation: %q", i, p)
		}
	}
}

func TestClosingFenceAbsorbed(t *testing.T) {
	// The cut lands just before the closing fence: the fence itself fits in the room kept for
	// the repair, so the part ends with the original fence and the next does not reopen one.
	code := "```\n" + strings.Repeat("x", 20) + "\n```\n" + strings.Repeat("y ", 30)
	limit := abi.MessageLimit{Max: 35, Unit: abi.UnitByte}
	got := check(t, code, limit)
	if got[0] != "```\n"+strings.Repeat("x", 20)+"\n``` (1/4)" || got[1] != "y y y y y y y y y y y y (2/4)" {
		t.Fatalf("got %q", got)
	}
}

func TestInlineCodeNotSplit(t *testing.T) {
	text := "run this: `some command --with flags` then wait for it to finish"
	limit := abi.MessageLimit{Max: 35, Unit: abi.UnitCodePoint}
	got := check(t, text, limit)
	if got[0] != "run this: (1/3)" || !strings.HasPrefix(got[1], "`some command") {
		t.Fatalf("got %q", got)
	}
}

func TestTwoDigitNumbering(t *testing.T) {
	text := strings.Repeat("word ", 400) // 2000 units
	limit := abi.MessageLimit{Max: 100, Unit: abi.UnitUTF16}
	got := check(t, text, limit)
	if len(got) < 10 {
		t.Fatalf("%d parts", len(got))
	}
	if !strings.HasSuffix(got[0], fmt.Sprintf(" (1/%d)", len(got))) {
		t.Fatalf("first: %q", got[0])
	}
}

func TestUnits(t *testing.T) {
	text := strings.Repeat("日本語 ", 100) // 400 code points, 1000 bytes
	for _, u := range []string{abi.UnitUTF16, abi.UnitCodePoint, abi.UnitByte} {
		got := check(t, text, abi.MessageLimit{Max: 150, Unit: u})
		want := map[string]int{abi.UnitUTF16: 3, abi.UnitCodePoint: 3, abi.UnitByte: 8}[u]
		if len(got) != want {
			t.Errorf("%s: %d parts, want %d", u, len(got), want)
		}
	}
}

func TestTinyLimits(t *testing.T) {
	text := "hello world 😀 ```go\ncode\n``` the end"
	// Strict mode reports a limit that cannot hold the suffix.
	for max := 1; max <= 8; max++ {
		_, err := SplitOptions(text, abi.MessageLimit{Max: max, Unit: abi.UnitUTF16}, Options{})
		if !errors.Is(err, ErrLimitTooSmall) {
			t.Fatalf("max %d: err %v", max, err)
		}
	}
	// Split falls back to plain parts; only an astral code point wider than the limit overflows.
	got := check(t, text, abi.MessageLimit{Max: 1, Unit: abi.UnitUTF16})
	if strings.Join(got, "") != strings.Join(strings.Fields(text), "") {
		t.Fatalf("max 1: %q", got)
	}
	for max := 1; max <= 30; max++ {
		for _, u := range []string{abi.UnitUTF16, abi.UnitCodePoint, abi.UnitByte} {
			check(t, text, abi.MessageLimit{Max: max, Unit: u})
		}
	}
	// Without numbering and fences a small limit works in strict mode.
	got, err := SplitOptions("ab cd ef", abi.MessageLimit{Max: 2, Unit: abi.UnitByte}, Options{NoNumbering: true, NoFences: true})
	if err != nil || !equal(got, []string{"ab", "cd", "ef"}) {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestWhitespaceOnlyRuns(t *testing.T) {
	limit := abi.MessageLimit{Max: 20, Unit: abi.UnitByte}
	check(t, "a"+strings.Repeat(" ", 100)+"b", limit)
	check(t, strings.Repeat("\n", 100)+"x", limit)
	if got := check(t, strings.Repeat(" ", 100), limit); len(got) != 0 {
		t.Fatalf("whitespace: %q", got)
	}
}

func TestInvalidUTF8(t *testing.T) {
	text := strings.Repeat("ab\xffcd ", 50)
	for _, p := range check(t, text, abi.MessageLimit{Max: 40, Unit: abi.UnitByte}) {
		if !utf8.ValidString(p) {
			t.Fatalf("invalid part %q", p)
		}
	}
}

func BenchmarkSplit(b *testing.B) {
	var sb strings.Builder
	for sb.Len() < 64<<10 {
		sb.WriteString("Some prose with an emoji 😀 and `code`.\n```go\nfunc f() { return }\n```\n")
	}
	text := sb.String()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		Split(text, telegram)
	}
}

func BenchmarkSplitFits(b *testing.B) {
	text := strings.Repeat("hello 😀 ", 400)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		Split(text, telegram)
	}
}
