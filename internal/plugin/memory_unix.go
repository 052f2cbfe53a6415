//go:build unix

package plugin

import (
	"golang.org/x/sys/unix"

	"github.com/tetratelabs/wazero/experimental"
)

// mmapMemory is a linear memory in an anonymous mapping: max bytes reserved (address space
// only), committed read-write as the guest grows it.
type mmapMemory struct {
	acct      *instanceMemory
	buf       []byte // the whole reservation
	committed uint64
}

func newLinearMemory(max uint64, acct *instanceMemory) experimental.LinearMemory {
	if max == 0 || max > 1<<32 {
		return &sliceMemory{acct: acct}
	}
	buf, err := unix.Mmap(-1, 0, int(max), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return &sliceMemory{acct: acct} // no address space: fall back to the Go heap
	}
	return &mmapMemory{acct: acct, buf: buf}
}

func (m *mmapMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.buf)) || size > m.acct.limit() {
		return nil // memory.grow fails: the guest sees out of memory
	}
	if size > m.committed {
		page := uint64(unix.Getpagesize())
		next := min((size+page-1)/page*page, uint64(len(m.buf)))
		if err := unix.Mprotect(m.buf[m.committed:next], unix.PROT_READ|unix.PROT_WRITE); err != nil {
			return nil
		}
		m.acct.size.Add(int64(next - m.committed))
		m.committed = next
	}
	return m.buf[:size:size]
}

func (m *mmapMemory) Free() {
	if m.buf == nil {
		return
	}
	unix.Munmap(m.buf)
	m.acct.size.Add(-int64(m.committed))
	m.buf, m.committed = nil, 0
}
