package plugin

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// TestReserve: a reserved instance is taken from the pool before the caller's lock and used by
// exactly one send; while all instances are reserved, another reservation waits (bounded by the
// call deadline); Release gives an unused one back.
func TestReserve(t *testing.T) {
	r := newRuntime(t, map[string]string{"probe.wasm": probeDir}, Config{Defaults: Limits{PoolSize: 1}})
	if rej := r.Scan(context.Background()); len(rej) != 0 {
		t.Fatalf("rejections: %+v", rej)
	}
	p := r.Get("probe")
	ctx := context.Background()
	res, err := p.Reserve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := p.Reserve(short); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second reservation of a pool of one: %v", err)
	}
	out, err := res.Send(ctx, "main", abi.OutboundMessage{ChatID: "1", Text: "version"})
	if err != nil || len(out.MessageIDs) != 1 || out.MessageIDs[0] != `"1"` {
		t.Fatalf("send on the reservation: %+v %v", out, err)
	}
	res.Release() // after Send: nothing to give back
	if _, err := res.Send(ctx, "main", abi.OutboundMessage{ChatID: "1", Text: "version"}); err == nil {
		t.Fatal("a reservation sent twice")
	}
	// The instance went back to the pool after the send; reserve it and give it back unused.
	again, err := p.Reserve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again.Release()
	if got, err := probeSend(t, p, "main", "version"); err != nil || got != `"1"` {
		t.Fatalf("send after release: %q %v", got, err)
	}
	// A reservation for an unknown profile fails the send and still returns the instance.
	bad, err := p.Reserve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Send(ctx, "nobody", abi.OutboundMessage{ChatID: "1"}); abi.CodeOf(err) != abi.CodeNotFound {
		t.Fatalf("unknown profile: %v", err)
	}
	if _, err := probeSend(t, p, "main", "version"); err != nil {
		t.Fatalf("instance lost after a failed reserved send: %v", err)
	}
}
