package memstat

import (
	"errors"
	"testing"
)

// TestSettledSeesAllocation: a live 64 MiB buffer, touched, shows in the resident set and the
// Go heap; released, the heap shrinks again.
func TestSettledSeesAllocation(t *testing.T) {
	before, err := Settled()
	if errors.Is(err, ErrNoProc) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	held, err := Settled()
	if err != nil {
		t.Fatal(err)
	}
	if d := held.RSS - before.RSS; d < 60<<20 {
		t.Errorf("resident set grew by %d bytes holding 64 MiB", d)
	}
	if d := held.HeapInuse - before.HeapInuse; d < 64<<20 {
		t.Errorf("heap in use grew by %d bytes holding 64 MiB", d)
	}
	buf[len(buf)-1]++ // keep buf live until here
	after, err := Settled()
	if err != nil {
		t.Fatal(err)
	}
	if d := held.HeapInuse - after.HeapInuse; d < 60<<20 {
		t.Errorf("heap in use shrank by %d bytes after releasing 64 MiB", d)
	}
}
