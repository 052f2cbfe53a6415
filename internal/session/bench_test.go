package session

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store"
)

// Run with, for example:
//
//	go test -run '^$' -bench . -benchtime 2s -count 5 -cpu 1 ./internal/session
//
// BenchmarkResolve1M builds a 1M-key database once per process (a bulk transaction, in a
// temporary directory removed when the process exits), only when -bench selects it.

var benchDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

// BenchmarkClassifyWarm is the pre-flight classification of a stamp whose session is current,
// with a warm cache (the common case for every completion and watch match).
func BenchmarkClassifyWarm(b *testing.B) {
	e := newSQLiteEnv(b, Options{})
	s := benchStamp(b, e, dm("bench"))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if v := e.k.Classify(e.ctx, s); v.Kind != Deliver {
			b.Fatal(v)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "classifications/s")
}

// BenchmarkClassifyInBoundary is the authoritative check: take the key's lock, classify,
// release (what every send pays on top of the send itself).
func BenchmarkClassifyInBoundary(b *testing.B) {
	e := newSQLiteEnv(b, Options{})
	s := benchStamp(b, e, dm("bench"))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var v Verdict
		e.k.WithBoundary(e.ctx, s.Key, func(bd *Boundary) error { v = bd.Classify(s); return nil })
		if v.Kind != Deliver {
			b.Fatal(v)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "classifications/s")
}

func benchStamp(b *testing.B, e *env, src abi.Source) Stamp {
	var s Stamp
	err := e.k.WithBoundary(e.ctx, must1(BuildKey(src, KeyOptions{})), func(bd *Boundary) error {
		if _, err := bd.Resolve(src, ResolveOptions{}); err != nil {
			return err
		}
		var err error
		s, err = bd.Stamp(src)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func must1[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

const bigKeys = 1_000_000

var (
	bigOnce sync.Once
	bigPath string
	bigErr  error
)

func bigSource(i int) abi.Source {
	return abi.Source{Platform: "telegram", ChatType: abi.ChatDM, ChatID: fmt.Sprintf("%08d", i)}
}

// buildBig writes 1M keys, each routed to its own session, in one bulk transaction.
func buildBig(b *testing.B) string {
	bigOnce.Do(func() {
		benchDir, bigErr = os.MkdirTemp("", "hermes-session-bench-")
		if bigErr != nil {
			return
		}
		bigPath = filepath.Join(benchDir, "1m.db")
		db, err := store.Open(bigPath, store.Options{})
		if err != nil {
			bigErr = err
			return
		}
		defer db.Close()
		ctx := context.Background()
		k, err := Open(ctx, db, Options{})
		if err != nil {
			bigErr = err
			return
		}
		k.Close()
		start := time.Now()
		now := time.Now()
		bigErr = store.Update(ctx, db, store.PathSessions, func(tx *store.Tx) error {
			ins, err := tx.PrepareContext(ctx, `INSERT INTO sessions (id, session_key, created_by, started_at, origin) VALUES ($1, $2, 'new', $3, $4)`)
			if err != nil {
				return err
			}
			route, err := tx.PrepareContext(ctx, `INSERT INTO session_routes (session_key, session_id, generation, created_at, updated_at) VALUES ($1, $2, 1, $3, $4)`)
			if err != nil {
				return err
			}
			for i := range bigKeys {
				src := bigSource(i)
				key := must1(BuildKey(src, KeyOptions{}))
				id := NewSessionID(now.Add(time.Duration(i) * time.Second)) // ids are unique per second
				if _, err := ins.ExecContext(ctx, id, key, now.UnixMilli(), encodeSource(src)); err != nil {
					return err
				}
				if _, err := route.ExecContext(ctx, key, id, now.UnixMilli(), now.UnixMilli()); err != nil {
					return err
				}
			}
			return nil
		})
		fmt.Fprintf(os.Stderr, "built %d keys in %v\n", bigKeys, time.Since(start).Round(time.Millisecond))
	})
	if bigErr != nil {
		b.Fatal(bigErr)
	}
	return bigPath
}

// BenchmarkResolve1M measures key resolution against 1M keys in SQLite with the cache off (every
// lookup goes to the store), reporting p50 and p99 latency:
//   - lookup: Kernel.Current (the route read);
//   - internal: Kernel.Resolve with Internal (lock + single flight + route read);
//   - message: Kernel.Resolve for a user message (lock + route read + activity write).
func BenchmarkResolve1M(b *testing.B) {
	path := buildBig(b)
	db, err := store.Open(path, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	k, err := Open(ctx, db, Options{CacheSize: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	for _, c := range []struct {
		name string
		op   func(src abi.Source, key string) error
	}{
		{"lookup", func(_ abi.Source, key string) error {
			_, ok, err := k.Current(ctx, key)
			if err == nil && !ok {
				err = fmt.Errorf("no route for %s", key)
			}
			return err
		}},
		{"internal", func(src abi.Source, _ string) error {
			_, err := k.Resolve(ctx, src, ResolveOptions{Internal: true})
			return err
		}},
		{"message", func(src abi.Source, _ string) error {
			_, err := k.Resolve(ctx, src, ResolveOptions{})
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			lat := make([]time.Duration, 0, 1<<16)
			b.ResetTimer()
			for b.Loop() {
				i := rng.IntN(bigKeys)
				src := bigSource(i)
				key := must1(BuildKey(src, KeyOptions{}))
				t0 := time.Now()
				if err := c.op(src, key); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*50/100].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(lat[len(lat)*999/1000].Microseconds()), "p99.9-µs")
		})
	}
}

// BenchmarkTransition measures locked transitions (Stop: a generation bump; Reset: end the
// session, insert its child, move the route) on one key and spread over many keys, from
// parallel goroutines (-cpu sets how many).
func BenchmarkTransition(b *testing.B) {
	for _, op := range []string{"stop", "reset"} {
		for _, many := range []bool{false, true} {
			name := op + "/one-key"
			if many {
				name = op + "/many-keys"
			}
			b.Run(name, func(b *testing.B) {
				e := newSQLiteEnv(b, Options{})
				const nKeys = 256
				keys := make([]string, nKeys)
				for i := range keys {
					src := dm(fmt.Sprintf("t%d", i))
					keys[i] = must1(BuildKey(src, KeyOptions{}))
					if _, err := e.k.Resolve(e.ctx, src, ResolveOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				var next atomic.Int64
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						key := keys[0]
						if many {
							key = keys[next.Add(1)%nKeys]
						}
						var err error
						if op == "stop" {
							_, err = e.k.Stop(e.ctx, key)
						} else {
							_, err = e.k.Reset(e.ctx, key, "")
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "transitions/s")
			})
		}
	}
}
