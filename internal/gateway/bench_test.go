package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/internal/config"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/egress"
	"github.com/hermes-host/hermes-host/internal/memstat"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// stamps creates chats sessions and returns a stamp for each (work started now).
func (w *world) stamps(tb testing.TB, chats int) []session.Stamp {
	out := make([]session.Stamp, chats)
	for i := range out {
		s := src(fmt.Sprint(1000+i), "")
		key, _ := w.g.kernel.Key(s)
		err := w.g.kernel.WithBoundary(context.Background(), key, func(b *session.Boundary) error {
			if _, err := b.Resolve(s, session.ResolveOptions{}); err != nil {
				return err
			}
			var err error
			out[i], err = b.Stamp(s)
			return err
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// BenchmarkGuardedDeliveries measures guarded deliveries per second end to end: ledger rows
// (pending → sending → delivered, each committed), per-chat lanes, the boundary lock and the
// revalidation inside it, a call into echo.wasm, and its HTTP POST to a loopback platform.
func BenchmarkGuardedDeliveries(b *testing.B) {
	for _, chats := range []int{1, 64} {
		b.Run(fmt.Sprintf("chats=%d", chats), func(b *testing.B) {
			w := newWorld(&testing.T{})
			defer w.srv.Close()
			guardedDeliveries(b, w.stamps(b, chats), "echo", []*delivery.Ledger{w.g.ledger}, w.fake.Accepted)
		})
	}
}

// guardedDeliveries enqueues b.N guarded notifications through plugin, round robin over the
// sessions of st and over ledgers (the hosts'), waits until sent (the platforms' count of
// accepted messages) has grown by b.N, and reports deliveries/s and the process's CPU time per
// delivery. It returns the rate.
func guardedDeliveries(b *testing.B, st []session.Stamp, plugin string, ledgers []*delivery.Ledger, sent func() int) float64 {
	ctx := context.Background()
	before := sent()
	b.ResetTimer()
	start, cpu := time.Now(), memstat.CPU()
	for i := 0; i < b.N; i++ {
		s := st[i%len(st)]
		if _, err := ledgers[i%len(ledgers)].Enqueue(ctx, delivery.Message{Plugin: plugin, Profile: "main", Key: s.Key,
			Target: abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: s.Route.ChatID}, Text: "x", Kind: delivery.KindNotification,
			Guard: delivery.GuardLineage, Stamp: s}); err != nil {
			b.Fatal(err)
		}
	}
	for sent()-before < b.N {
		time.Sleep(time.Millisecond)
	}
	rate := float64(b.N) / time.Since(start).Seconds()
	b.StopTimer()
	b.ReportMetric(rate, "deliveries/s")
	b.ReportMetric(float64((memstat.CPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/delivery")
	return rate
}

// BenchmarkGuardedDeliveriesByGuest is BenchmarkGuardedDeliveries at 64 chats with the guest
// swapped and nothing else: the same ledger rows and commits, lanes, boundary lock, in-lock
// revalidation and call deadline (wazero's deadline check compiled in), once through echo.wasm
// (Go) and once through the AssemblyScript example (examples/assemblyscript, built with npm),
// whose send does the same work as echo's: decode the call, build the platform's JSON, one
// hermes_http POST to a loopback platform, read its answer. The example is a 28 KB module
// without a Go runtime; "x-go" is its rate over the Go guest's in the same run: what the
// guest's toolchain costs a delivery on this host. Each also reports the process's CPU time per
// delivery (the producer, the host and the loopback platform together), which varies less
// between runs here than the rate does. Skipped without npm.
func BenchmarkGuardedDeliveriesByGuest(b *testing.B) {
	const chats = 64
	var goRate float64
	b.Run("go", func(b *testing.B) {
		w := newWorld(&testing.T{})
		defer w.srv.Close()
		goRate = guardedDeliveries(b, w.stamps(b, chats), "echo", []*delivery.Ledger{w.g.ledger}, w.fake.Accepted)
	})
	b.Run("assemblyscript", func(b *testing.B) {
		wasm := assemblyScriptExample(b)
		var posted atomic.Int64
		api := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			rw.Write([]byte(`{"message_id":"m` + fmt.Sprint(posted.Add(1)) + `"}`))
		}))
		defer api.Close()
		fake := echotest.New()
		defer fake.Close()
		w := newWorldConfigured(&testing.T{}, "", fake, nil, func(cfg *config.Config) {
			if err := wasmbuild.CopyFile(wasm, filepath.Join(cfg.PluginsDir, "asdemo.wasm")); err != nil {
				b.Fatal(err)
			}
			cfg.Plugins["asdemo"] = config.Plugin{EgressExtra: []string{"127.0.0.1"},
				Profiles: map[string]map[string]any{"main": {"api_url": api.URL + "/post"}}}
		})
		defer w.srv.Close()
		rate := guardedDeliveries(b, w.stamps(b, chats), "asdemo", []*delivery.Ledger{w.g.ledger}, func() int { return int(posted.Load()) })
		if goRate > 0 {
			b.ReportMetric(rate/goRate, "x-go")
		}
	})
}

// assemblyScriptExample builds examples/assemblyscript with npm (installing its compiler first
// if node_modules is missing) and returns the module's path; without npm the benchmark is skipped.
func assemblyScriptExample(b *testing.B) string {
	b.Helper()
	if _, err := exec.LookPath("npm"); err != nil {
		b.Skip("npm is not installed; make test installs it")
	}
	dir, err := filepath.Abs("../../examples/assemblyscript")
	if err != nil {
		b.Fatal(err)
	}
	steps := [][]string{{"run", "build"}}
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		steps = append([][]string{{"ci", "--no-audit", "--no-fund"}}, steps...)
	}
	for _, args := range steps {
		cmd := exec.Command("npm", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("npm %v: %v\n%s", args, err, out)
		}
	}
	return filepath.Join(dir, "build", "asdemo.wasm")
}

// BenchmarkSendPath isolates what the guard adds to one send: the same plugin send (echo.wasm
// POSTing to the loopback platform), bare, and inside the key's boundary after the in-lock
// revalidation.
func BenchmarkSendPath(b *testing.B) {
	w := newWorld(&testing.T{})
	defer w.srv.Close()
	s := w.stamps(b, 1)[0]
	ctx := context.Background()
	msg := abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: s.Route.ChatID, Text: "x"}
	tr := transport{w.g}
	sendOnce := func(ctx context.Context) error {
		r, err := tr.Reserve(ctx, "echo")
		if err != nil {
			return err
		}
		defer r.Release()
		_, err = r.Send(ctx, "main", msg)
		return err
	}
	var send float64
	b.Run("unguarded", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := sendOnce(ctx); err != nil {
				b.Fatal(err)
			}
		}
		send = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	// The egress scope check each hermes_http call of that send makes (echo's own policy: its
	// outbox is scoped to send, POST), reported as a share of the whole send ("x-send").
	pol := w.g.runtime.Get("echo").Caller("main").Egress
	outbox, _ := url.Parse(w.fake.URL() + "/outbox")
	for name, pol := range map[string]egress.Policy{"scope-check": pol, "unscoped-check": {Extra: pol.Extra}} {
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := pol.Check(outbox, egress.Use{Export: abi.ExportSend, Method: "POST"}); err != nil {
					b.Fatal(err)
				}
			}
			if send > 0 {
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/send, "x-send")
			}
		})
	}
	b.Run("guarded", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r, err := tr.Reserve(ctx, "echo")
			if err != nil {
				b.Fatal(err)
			}
			err = w.g.kernel.WithBoundary(ctx, s.Key, func(bd *session.Boundary) error {
				if v := bd.Classify(s); !v.Deliverable() {
					return fmt.Errorf("verdict %v", v)
				}
				_, err := r.Send(bd.Context(), "main", msg)
				return err
			})
			r.Release()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkInbound measures inbound chat messages answered per second through the real public
// listener: one webhook POST per message into echo.wasm (64 chats, 8 concurrent senders), the
// door, the durable inbox, the turn engine with the built-in agent, and each answer's delivery
// to the loopback platform. It reports the acknowledgement latency of the POSTs (p50, p99) and
// messages answered per second, counted when every turn is done and no delivery is pending.
// Consecutive messages of one chat that wait behind a running turn are answered together, as
// in production. Eight senders each waiting for its answer bound the rate offered by the
// acknowledgement latency; BenchmarkInboundOffered offers a fixed rate instead.
func BenchmarkInbound(b *testing.B) {
	w := newWorld(&testing.T{})
	defer w.srv.Close()
	const senders = 8
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start, cpu := time.Now(), memstat.CPU()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				t0 := time.Now()
				if !postInbound(b, w, i) {
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	waitAnswered(b, w)
	reportInbound(b, time.Since(start), memstat.CPU()-cpu, lat)
}

// BenchmarkInboundOffered offers the same messages as BenchmarkInbound at a fixed rate (an
// open loop: message i is due at i/rate seconds, whatever became of the ones before it), and
// measures each acknowledgement from the moment its message was due, so a host that falls
// behind shows it in the latency rather than by slowing the senders down.
func BenchmarkInboundOffered(b *testing.B) {
	for _, rate := range []int{250, 500} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			w := newWorld(&testing.T{})
			defer w.srv.Close()
			lat := make([]time.Duration, b.N)
			due := make(chan int, b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			start, cpu := time.Now(), memstat.CPU()
			for range 128 { // enough in flight that the senders never set the pace
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range due {
						at := start.Add(time.Duration(i) * time.Second / time.Duration(rate))
						time.Sleep(time.Until(at))
						if !postInbound(b, w, i) {
							return
						}
						lat[i] = time.Since(at)
					}
				}()
			}
			for i := range b.N {
				due <- i
			}
			close(due)
			wg.Wait()
			waitAnswered(b, w)
			reportInbound(b, time.Since(start), memstat.CPU()-cpu, lat)
		})
	}
}

// postInbound posts message i of an inbound benchmark (64 chats) to echo's webhook.
func postInbound(b *testing.B, w *world, i int) bool {
	const chats = 64
	body, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("bench%d", i), "chat_id": fmt.Sprint(5000 + i%chats),
		"chat_type": "dm", "user_id": "u1", "text": fmt.Sprintf("hello %d", i)})
	resp, err := http.Post(w.srv.URL+"/hooks/echo/main", "application/json", bytes.NewReader(body))
	if err != nil {
		b.Error(err)
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Errorf("webhook answered %d", resp.StatusCode)
		return false
	}
	return true
}

// waitAnswered waits until every turn is done and no delivery is pending or sending.
func waitAnswered(b *testing.B, w *world) {
	ctx := context.Background()
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
		var open int
		if err := w.g.db.QueryRow(`SELECT COUNT(*) FROM turn_inbox WHERE state IN ('received', 'queued', 'running')`).Scan(&open); err != nil {
			b.Fatal(err)
		}
		pending, err := w.g.ledger.List(ctx, delivery.Filter{State: delivery.Pending})
		if err != nil {
			b.Fatal(err)
		}
		sending, err := w.g.ledger.List(ctx, delivery.Filter{State: delivery.Sending})
		if err != nil {
			b.Fatal(err)
		}
		if open == 0 && len(pending)+len(sending) == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("not answered after 5 minutes: %d turns open, %d deliveries pending", open, len(pending)+len(sending))
		}
	}
}

// reportInbound reports answered/s over took, the acknowledgement percentiles and the
// process's CPU time per message.
func reportInbound(b *testing.B, took, cpu time.Duration, lat []time.Duration) {
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/message")
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/took.Seconds(), "answered/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ack-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ack-p99-ms")
}

// BenchmarkSharedDeliveries measures guarded deliveries per second at 64 chats with hosts
// sharing one database: one host on SQLite (the baseline, as BenchmarkGuardedDeliveries), then
// one, two and three hosts on one PostgreSQL database (HERMES_TEST_POSTGRES). Deliveries are
// enqueued round robin through the hosts' ledgers, as webhooks arriving at different hosts
// would; each host sends through its own echo.wasm to its own loopback platform. It reports
// deliveries/s, the process's CPU time per delivery, the ratio to the SQLite host ("x-sqlite")
// and, on PostgreSQL, the database round trips (statements and transaction starts) per delivery.
func BenchmarkSharedDeliveries(b *testing.B) {
	const chats = 64
	var baseline float64
	run := func(b *testing.B, hosts int, source string) {
		worlds := make([]*world, hosts)
		for i := range worlds {
			worlds[i] = newWorldOn(&testing.T{}, source, nil)
			defer worlds[i].srv.Close()
		}
		ledgers := make([]*delivery.Ledger, hosts)
		for i, w := range worlds {
			ledgers[i] = w.g.ledger
		}
		sent := func() int {
			n := 0
			for _, w := range worlds {
				n += w.fake.Accepted()
			}
			return n
		}
		st := worlds[0].stamps(b, chats)
		trips, retries := store.RoundTrips(), store.Retries()
		rate := guardedDeliveries(b, st, "echo", ledgers, sent)
		if source == "" {
			baseline = rate
		} else {
			b.ReportMetric(float64(store.RoundTrips()-trips)/float64(b.N), "trips/delivery")
			b.ReportMetric(float64(store.Retries()-retries)/float64(b.N), "retries/delivery")
		}
		if baseline > 0 {
			b.ReportMetric(rate/baseline, "x-sqlite")
		}
	}
	b.Run("sqlite/hosts=1", func(b *testing.B) { run(b, 1, "") })
	for _, hosts := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("postgres/hosts=%d", hosts), func(b *testing.B) {
			run(b, hosts, storetest.Postgres(b).Source)
		})
	}
}
