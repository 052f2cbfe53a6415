package session

import (
	"fmt"
	"os"
	"testing"

	"github.com/hermes-host/hermes-host/internal/memstat"
)

// BenchmarkIdleSessions measures what idle sessions cost the host: it opens a kernel on SQLite
// (LocalLocker; the route cache on, as by default, or off), creates idleSessions sessions the way a
// first message from each of that many chats does (Kernel.Resolve), lets every call return,
// and reports per 1,000 idle sessions:
//   - heap-KiB/1k-sessions: growth of the Go heap in use after a forced collection. What stays
//     in memory for an idle session is its route cache entry (key, session id, generation);
//     the LocalLocker keeps no entry for a key nobody holds or waits on (lock-entries reports
//     that), and the single-flight table keeps none once a resolution returns;
//     With the cache off the heap does not grow with idle sessions;
//   - rss-KiB/1k-sessions: growth of the process's resident set (VmRSS), which also counts
//     SQLite's page cache (modernc's allocator, outside the Go heap): it grows with the pages
//     read and written, up to SQLite's default cache_size of 2,000 KiB per open connection,
//     and so stops growing with the number of sessions once the database outgrows it;
//   - db-KiB/1k-sessions: growth of the database file (after a WAL checkpoint): the session
//     row and the route row, with their indexes. Everything else about a session (its
//     messages, title, parent) is only on disk.
//
// Run once: go test -run '^$' -bench BenchmarkIdleSessions -benchtime 1x ./internal/session
func BenchmarkIdleSessions(b *testing.B) {
	const idleSessions = 5000
	per1k := float64(idleSessions) / 1000
	for _, cache := range []struct {
		name string
		size int
	}{{"cache=on", 0}, {"cache=off", -1}} {
		b.Run(cache.name, func(b *testing.B) {
			for b.Loop() {
				idleSessionsOnce(b, cache.size, idleSessions, per1k)
			}
		})
	}
}

func idleSessionsOnce(b *testing.B, cacheSize, idleSessions int, per1k float64) {
	e := newSQLiteEnv(b, Options{CacheSize: cacheSize})
	// One session first, so the connections, prepared statements and SQLite's caches exist
	// before the baseline.
	if _, err := e.k.Resolve(e.ctx, dm("warm"), ResolveOptions{}); err != nil {
		b.Fatal(err)
	}
	dbBefore := dbBytes(b, e)
	before := memstat.Must(b)
	for i := range idleSessions {
		if _, err := e.k.Resolve(e.ctx, dm(fmt.Sprintf("idle-%d", i)), ResolveOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	after := memstat.Must(b)
	dbAfter := dbBytes(b, e)
	if n, want := e.k.cache.len(), idleSessions+1; n != want && cacheSize >= 0 || n != 0 && cacheSize < 0 {
		b.Fatalf("%d route cache entries with cache size %d", n, cacheSize)
	}
	locks := e.k.locker.(*LocalLocker).Len()
	if locks != 0 {
		b.Fatalf("%d lock entries for idle keys", locks)
	}
	b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/1024/per1k, "heap-KiB/1k-sessions")
	b.ReportMetric(float64(after.RSS-before.RSS)/1024/per1k, "rss-KiB/1k-sessions")
	b.ReportMetric(float64(dbAfter-dbBefore)/1024/per1k, "db-KiB/1k-sessions")
	b.ReportMetric(float64(locks), "lock-entries")
}

// dbBytes checkpoints the WAL into the database file and returns the file's size.
func dbBytes(tb testing.TB, e *env) int64 {
	tb.Helper()
	if _, err := e.db.ExecContext(e.ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		tb.Fatal(err)
	}
	fi, err := os.Stat(e.path)
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Size()
}
