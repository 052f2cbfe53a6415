package process

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

// BenchmarkCheckpointWrite measures one durable checkpoint (compare-and-set upsert, WAL commit)
// through the registry's writer: alone (latency) and from many goroutines (group commit).
func BenchmarkCheckpointWrite(b *testing.B) {
	setup := func(b *testing.B) (*writer, Info) {
		dir := b.TempDir()
		db, err := store.Open(filepath.Join(dir, "hermes.db"), store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := Migrate(context.Background(), db); err != nil {
			b.Fatal(err)
		}
		w := newWriter(db, time.Now, slog.Default(), nil, 100*time.Millisecond, 5*time.Second)
		b.Cleanup(func() { w.close(); db.Close() })
		in := storedInfo("proc_000000000000", 1234, 5678)
		in.WatchPatterns = []string{"ERROR", "FATAL"}
		return w, in
	}
	b.Run("serial", func(b *testing.B) {
		w, in := setup(b)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			row := in
			row.Gen = int64(i + 1)
			if err := w.submit(&op{row: &row}).wait(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		w, in := setup(b)
		var mu sync.Mutex
		n := 0
		b.SetParallelism(8) // 16 writers on 2 cores: a busy host
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			mu.Lock()
			n++
			row := in
			row.ID = fmt.Sprintf("proc_%012d", n)
			mu.Unlock()
			for pb.Next() {
				row.Gen++
				r := row
				if err := w.submit(&op{row: &r}).wait(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkRecover10k measures Recover over 10,000 checkpointed running processes, each ending
// as lost with its completion queued. Goal: well under a second.
//
//   - dead-pids: the pids no longer exist (the usual case after a reboot or a long outage);
//   - own-pid: every checkpoint names this test's own pid with a wrong start time (PID reuse:
//     /proc/<pid>/stat is read and compared for every entry).
func BenchmarkRecover10k(b *testing.B) {
	const n = 10_000
	self := os.Getpid()
	st, err := readProcStat(self)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		pid   func(j int) int
		ticks uint64
	}{
		{"dead-pids", func(j int) int { return 1<<22 + 1 + j }, 12345}, // above any pid_max
		{"own-pid", func(int) int { return self }, st.startTicks + 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dir := b.TempDir()
				db, err := store.Open(filepath.Join(dir, "hermes.db"), store.Options{})
				if err != nil {
					b.Fatal(err)
				}
				if err := Migrate(ctx, db); err != nil {
					b.Fatal(err)
				}
				err = store.WithTx(ctx, db, func(sqlTx *sql.Tx) error {
					tx := newStmtTx(sqlTx)
					for j := 0; j < n; j++ {
						in := storedInfo(fmt.Sprintf("proc_%012x", j), c.pid(j), c.ticks)
						if _, err := writeRow(ctx, tx, &in, in.Host, time.Now()); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				r, err := New(ctx, db, Options{DataDir: dir, PollInterval: time.Hour})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				rep, err := r.Recover(ctx)
				b.StopTimer()
				if err != nil || rep.Lost != n {
					b.Fatalf("recover: %+v %v", rep, err)
				}
				r.Close()
				db.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/entry")
		})
	}
}

// BenchmarkMemory1000 runs 1000 real processes that each write out bytes of output and then
// keep running, and reports the host's memory once all output has been read: Go heap per
// process, ring buffer bytes per process, RSS and OS threads.
func BenchmarkMemory1000(b *testing.B) {
	for _, out := range []int{16 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("output=%dKiB", out>>10), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				m := measure1000(b, out)
				b.ReportMetric(m.heapPerProc, "heap-B/proc")
				b.ReportMetric(m.ringPerProc, "ring-B/proc")
				b.ReportMetric(m.rssMB, "rss-MB")
				b.ReportMetric(m.threads, "threads")
			}
		})
	}
}

type memFigures struct{ heapPerProc, ringPerProc, rssMB, threads float64 }

func measure1000(tb testing.TB, out int) memFigures {
	const n = 1000
	ctx := context.Background()
	dir := tb.TempDir()
	db, err := store.Open(filepath.Join(dir, "hermes.db"), store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	r, err := New(ctx, db, Options{DataDir: dir, PollInterval: 100 * time.Millisecond, MaxRunning: n})
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Close()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	// Each prints out bytes in lines of 64, then keeps running (without polling anything).
	cmd := fmt.Sprintf(`yes 'background process output, a line of sixty-four bytes.......' | head -c %d; exec sleep 600`, out)
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				res, err := r.Spawn(ctx, SpawnRequest{Command: cmd, Stamp: testStamp("S1"), WatchPatterns: []string{"NEVER"}})
				if err != nil {
					errs <- err
					return
				}
				ids[i] = res.ID
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	defer func() {
		for _, id := range ids {
			if p := r.lookup(id); p != nil {
				syscall.Kill(-p.info.PID, syscall.SIGKILL)
			}
		}
	}()
	waitFor(tb, "all output read", func() bool {
		for _, id := range ids {
			p := r.lookup(id)
			p.mu.Lock()
			done := p.ring.total >= int64(out)
			p.mu.Unlock()
			if !done {
				return false
			}
		}
		return true
	})
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	ring := 0
	for _, id := range ids {
		p := r.lookup(id)
		p.mu.Lock()
		if p.info.State != StateRunning {
			tb.Fatalf("%s is %s", id, p.info.State)
		}
		ring += p.ring.allocated()
		p.mu.Unlock()
	}
	// Deterministic bound: no ring exceeds its cap.
	if ring > n*r.opt.BufferBytes {
		tb.Fatalf("ring buffers hold %d bytes, more than %d × %d", ring, n, r.opt.BufferBytes)
	}
	return memFigures{
		heapPerProc: float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / n,
		ringPerProc: float64(ring) / n,
		rssMB:       procStatus("VmRSS") / 1024,
		threads:     procStatus("Threads"),
	}
}

// procStatus reads a numeric field of /proc/self/status (kB for sizes).
func procStatus(field string) float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			f, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return f
		}
	}
	return 0
}

// TestMemory1000Processes runs the same measurement as BenchmarkMemory1000 once and logs it;
// the only assertion is the deterministic cap on ring buffer memory.
func TestMemory1000Processes(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns 1000 processes")
	}
	m := measure1000(t, 256<<10)
	t.Logf("1000 running processes, 256 KiB output each: heap %.0f B/proc, rings %.0f B/proc, RSS %.0f MB, %v threads",
		m.heapPerProc, m.ringPerProc, m.rssMB, m.threads)
}
