package plugin

import (
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
)

// instanceMemory is the memory allocator of one instance (through wazero's experimental
// allocator hook). It backs the instance's linear memories, the guest's and Extism kernel's,
// caps each at the plugin's current limit (so the cap follows the operator's settings for the
// plugin's manifest name, known only after describe), and counts the bytes they have grown to,
// so the runtime can discard an instance that grew large instead of keeping it idle.
//
// On Unix a memory is an anonymous mapping reserved up front and committed as it grows: it
// never moves, growing does not copy, and closing the instance unmaps it, so the memory goes
// back to the operating system at once rather than after the Go collector runs.
type instanceMemory struct {
	limit func() uint64 // bytes per memory, read at every growth
	size  atomic.Int64  // bytes committed by all live memories of the instance
}

var _ experimental.MemoryAllocator = (*instanceMemory)(nil)

// Allocate implements experimental.MemoryAllocator.
func (m *instanceMemory) Allocate(_, max uint64) experimental.LinearMemory {
	return newLinearMemory(max, m)
}

// bytes reports how far the instance's memories have grown.
func (m *instanceMemory) bytes() int64 { return m.size.Load() }

// sliceMemory is the portable linear memory: a Go slice that grows by copying.
type sliceMemory struct {
	acct *instanceMemory
	buf  []byte
}

func (s *sliceMemory) Reallocate(size uint64) []byte {
	if size > s.acct.limit() {
		return nil
	}
	if n := uint64(len(s.buf)); size > n {
		s.acct.size.Add(int64(size - n))
		s.buf = append(s.buf, make([]byte, size-n)...)
	}
	return s.buf[:size:size]
}

func (s *sliceMemory) Free() {
	s.acct.size.Add(-int64(len(s.buf)))
	s.buf = nil
}
