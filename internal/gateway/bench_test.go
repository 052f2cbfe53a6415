package gateway

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/egress"
	"github.com/hermes-host/hermes-host/internal/session"
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
			st := w.stamps(b, chats)
			ctx := context.Background()
			before := len(w.fake.Messages())
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				s := st[i%chats]
				if _, err := w.g.ledger.Enqueue(ctx, delivery.Message{Plugin: "echo", Profile: "main", Key: s.Key,
					Target: abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: s.Route.ChatID}, Text: "x", Kind: delivery.KindNotification,
					Guard: delivery.GuardLineage, Stamp: s}); err != nil {
					b.Fatal(err)
				}
			}
			for len(w.fake.Messages())-before < b.N {
				time.Sleep(time.Millisecond)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
		})
	}
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
	var send float64
	b.Run("unguarded", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := tr.Send(ctx, "echo", "main", msg); err != nil {
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
			err := w.g.kernel.WithBoundary(ctx, s.Key, func(bd *session.Boundary) error {
				if v := bd.Classify(s); !v.Deliverable() {
					return fmt.Errorf("verdict %v", v)
				}
				_, err := tr.Send(bd.Context(), "echo", "main", msg)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
