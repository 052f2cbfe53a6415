// Package memstat reads how much memory and CPU time the process uses, for the benchmarks.
package memstat

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CPU is the CPU time the process has used so far, user and system. Differences of it measure
// work done, which varies less between runs on a busy machine than rates against the wall clock.
func CPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Sample is the process's memory at one moment, in bytes.
type Sample struct {
	RSS       int64 // resident set (VmRSS): the Go heap, stacks, and memory outside the Go heap (mappings, C-style allocators)
	HeapInuse int64 // Go heap spans in use (runtime.MemStats.HeapInuse)
	Sys       int64 // memory the Go runtime obtained from the operating system (runtime.MemStats.Sys)
}

// Settled forces a collection, returns freed heap pages to the operating system, and then
// samples, so that successive samples differ by what is live rather than by garbage.
func Settled() (Sample, error) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss, err := residentSet()
	return Sample{RSS: rss, HeapInuse: int64(ms.HeapInuse), Sys: int64(ms.Sys)}, err
}

// ErrNoProc is returned where /proc/self/status does not exist (not Linux).
var ErrNoProc = errors.New("memstat: no /proc/self/status")

// residentSet reads VmRSS from /proc/self/status.
func residentSet() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoProc, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("memstat: VmRSS %q: %v", rest, err)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("memstat: no VmRSS in /proc/self/status")
}

// Must is Settled for tests and benchmarks: it skips tb where /proc/self/status does not
// exist and fails it on any other error.
func Must(tb testing.TB) Sample {
	tb.Helper()
	m, err := Settled()
	if errors.Is(err, ErrNoProc) {
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return m
}
