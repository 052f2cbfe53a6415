package delivery

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// countingPlatform accepts everything at once: it isolates the ledger's own cost (three durable
// state changes, the lane, the boundary lock and the in-lock revalidation) from the plugin's.
type countingPlatform struct{ n atomic.Int64 }

func (c *countingPlatform) Send(context.Context, string, string, abi.OutboundMessage) (*abi.SendResult, error) {
	c.n.Add(1)
	return &abi.SendResult{MessageIDs: []string{"1"}}, nil
}

func (c *countingPlatform) Reserve(_ context.Context, plugin string) (Sender, error) {
	return direct{c.Send, plugin}, nil
}

func (c *countingPlatform) Limit(string) (abi.MessageLimit, error) {
	return abi.MessageLimit{Max: 4096, Unit: abi.UnitUTF16}, nil
}

// BenchmarkLedger measures guarded deliveries per second through the ledger with an in-process
// platform, over 1 and 64 chats.
func BenchmarkLedger(b *testing.B) {
	for _, chats := range []int{1, 64} {
		b.Run(fmt.Sprintf("chats=%d", chats), func(b *testing.B) {
			p := &countingPlatform{}
			f := newFixture(b, nil, Options{})
			f.l.tr = p
			st := f.stamp()
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				m := f.msg(st, "x", GuardLineage)
				m.Transcript = false
				m.Target.ChatID = fmt.Sprint(i % chats)
				if _, err := f.l.Enqueue(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
			for p.n.Load() < int64(b.N) {
				time.Sleep(100 * time.Microsecond)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
		})
	}
}
