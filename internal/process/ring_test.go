package process

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRingMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 7, 100, 5000, 200_000} {
		r := newRing(size)
		var all []byte
		for i := 0; i < 120; i++ {
			n := rng.IntN(3 * size / 2)
			if rng.IntN(10) == 0 {
				n = rng.IntN(3 * ringMinAlloc)
			}
			p := make([]byte, n)
			for j := range p {
				p[j] = byte('a' + rng.IntN(26))
			}
			r.write(p)
			all = append(all, p...)
			if r.total != int64(len(all)) || r.allocated() > size && size >= ringMinAlloc {
				t.Fatalf("size %d: total %d want %d, allocated %d", size, r.total, len(all), r.allocated())
			}
			want := all
			if len(want) > size {
				want = want[len(want)-size:]
			}
			got, at := r.read(0, -1)
			if !bytes.Equal(got, want) || at != int64(len(all)-len(want)) {
				t.Fatalf("size %d step %d: retained %d bytes at %d, want %d at %d", size, i, len(got), at, len(want), len(all)-len(want))
			}
			if len(all) > 0 {
				off := rng.Int64N(int64(len(all)))
				lim := rng.IntN(size + 1)
				got, at := r.read(off, lim)
				start := max(off, int64(len(all)-len(want)))
				end := min(start+int64(lim), int64(len(all)))
				if at != start || !bytes.Equal(got, all[start:end]) {
					t.Fatalf("read(%d,%d) = %d bytes at %d", off, lim, len(got), at)
				}
			}
		}
	}
}

func TestRingGrowsLazily(t *testing.T) {
	r := newRing(200_000)
	if r.allocated() != 0 {
		t.Fatal("allocated before any output")
	}
	r.write([]byte("hello\n"))
	if r.allocated() != ringMinAlloc {
		t.Fatalf("small output allocated %d", r.allocated())
	}
	r.write(make([]byte, 1<<20))
	if r.allocated() != 200_000 {
		t.Fatalf("allocated %d, want the cap", r.allocated())
	}
}

func TestTailIsLineSafe(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 500; i++ {
		fmt.Fprintf(&b, "line %03d: ünïcödé\n", i)
	}
	out := b.String()
	r := newRing(200_000)
	r.write([]byte(out))

	s, cut := r.tail(r.total, 2000, 0)
	if !cut || !strings.HasPrefix(s, TruncationMarker+"\nline ") {
		t.Fatalf("cut tail starts %q", s[:60])
	}
	body := strings.TrimPrefix(s, TruncationMarker+"\n")
	if utf8.RuneCountInString(body) > 2000 || !strings.HasSuffix(body, "line 499: ünïcödé") || !strings.HasSuffix(out, body+"\n") {
		t.Fatalf("tail body (%d chars) is not a line-aligned suffix", utf8.RuneCountInString(body))
	}
	// Short output is returned whole, unmarked.
	small := newRing(100)
	small.write([]byte("a\nb\n"))
	if s, cut := small.tail(small.total, 2000, 0); s != "a\nb" || cut {
		t.Fatalf("small tail %q %v", s, cut)
	}
	// Output the ring already dropped is marked, and the partial first line skipped.
	small.write([]byte(strings.Repeat("x", 95) + "\nlast\n"))
	if s, cut := small.tail(small.total, 2000, 0); !cut || s != TruncationMarker+"\nlast" {
		t.Fatalf("dropped-output tail %q", s)
	}
	// Line limit, and a tail that ends before the end of the output (watch context).
	if s, _ := r.tail(int64(strings.Index(out, "line 010")), 2000, 3); s != TruncationMarker+"\nline 007: ünïcödé\nline 008: ünïcödé\nline 009: ünïcödé" {
		t.Fatalf("line-limited tail %q", s)
	}
	// One huge line: cut by characters, no line boundary to respect, still valid UTF-8.
	huge := newRing(200_000)
	huge.write([]byte(strings.Repeat("é", 5000)))
	if s, cut := huge.tail(huge.total, 2000, 0); !cut || !utf8.ValidString(s) || utf8.RuneCountInString(s) != 2000+utf8.RuneCountInString(TruncationMarker)+1 {
		t.Fatalf("huge line tail: %d chars", utf8.RuneCountInString(s))
	}
}
