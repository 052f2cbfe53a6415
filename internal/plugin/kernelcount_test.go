package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
)

// kernelWorld loads echo.wasm with kernel calls counted, its outbox a loopback server.
func kernelWorld(tb testing.TB) *Plugin {
	tb.Helper()
	outbox := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"ok":true,"message_id":"m1"}`))
	}))
	tb.Cleanup(outbox.Close)
	r := newRuntime(tb, map[string]string{"echo.wasm": echoDir}, Config{
		CountKernelCalls: true,
		Env:              &Env{Egress: egress.NewClient(egress.Limits{})},
		Plugins: map[string]Settings{"echo": {
			EgressExtra: []string{"127.0.0.1"},
			Profiles:    map[string]json.RawMessage{"main": json.RawMessage(`{"outbox_url":"` + outbox.URL + `/out"}`)},
		}}})
	if rej := r.Scan(context.Background()); len(rej) != 0 {
		tb.Fatal(rej)
	}
	return r.Get("echo")
}

var kernelSend = abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: "5", Text: "the answer", DeliveryID: "d1"}

var kernelWebhook = abi.WebhookRequest{Method: "POST", Path: "/", Headers: map[string][]string{"Content-Type": {"application/json"}},
	Body: []byte(`{"id":"u1","chat_id":"5","chat_type":"dm","user_id":"u1","text":"hello"}`)}

// delta returns what the calls of fn added to the runtime's kernel counts.
func delta(r *Runtime, fn func()) map[string]int64 {
	before := r.KernelCalls()
	fn()
	out := r.KernelCalls()
	for name, n := range before {
		if out[name] -= n; out[name] == 0 {
			delete(out, name)
		}
	}
	return out
}

func total(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

// TestKernelCallsAreCounted: with CountKernelCalls, every call into Extism's kernel is counted
// under its name, and the same send counts the same calls each time (so a benchmark's figure
// per send is a property of the code, not of the run); without it, nothing is counted. Both
// runtimes use the test run's on-disk compilation cache, which other tests fill with echo
// compiled without listeners: wazero keys the code by the listeners' presence, so neither
// loads the other's.
func TestKernelCallsAreCounted(t *testing.T) {
	ctx := context.Background()
	p := kernelWorld(t)
	send := func() {
		if res, err := p.Send(ctx, "main", kernelSend); err != nil || res.Error != nil {
			t.Fatalf("send: %+v %v", res, err)
		}
	}
	send() // warm: the instance exists
	first := delta(p.rt, send)
	second := delta(p.rt, send)
	if fmt.Sprint(first) != fmt.Sprint(second) {
		t.Fatalf("two identical sends counted differently: %v then %v", first, second)
	}
	// Extism resets the kernel and sets the input around every call; the SDK reads the input's
	// length, allocates its reply and sets the output; the one hermes_http call allocates a
	// request block and a reply block and reads the reply's length.
	for _, name := range []string{"reset", "input_set", "input_length", "output_set", "alloc", "length"} {
		if first[name] == 0 {
			t.Errorf("a send made no %s call: %v", name, first)
		}
	}
	for name := range first {
		if !slices.Contains(kernelFunctions[:], name) {
			t.Errorf("counted %q, not a kernel function", name)
		}
	}
	if first["alloc"] < 3 {
		t.Errorf("a send with a host call allocated %d blocks, want at least 3 (input, host request and reply)", first["alloc"])
	}
	t.Logf("one send: %d kernel calls %v", total(first), first)

	hook := delta(p.rt, func() {
		if _, err := p.Webhook(ctx, "main", kernelWebhook); err != nil {
			t.Fatal(err)
		}
	})
	if hook["reset"] == 0 || total(hook) >= total(first) {
		t.Errorf("a webhook (no host call) counted %v, a send %v", hook, first)
	}
	t.Logf("one webhook: %d kernel calls %v", total(hook), hook)

	plain := newRuntime(t, map[string]string{"echo.wasm": echoDir}, Config{})
	plain.Scan(ctx)
	if _, err := plain.Get("echo").Webhook(ctx, "main", kernelWebhook); err != nil {
		t.Fatal(err)
	}
	if got := plain.KernelCalls(); got != nil {
		t.Errorf("counted without CountKernelCalls: %v", got)
	}
}

// BenchmarkKernelCalls reports the calls into Extism's kernel per send (echo's send, one
// hermes_http POST to a loopback outbox) and per webhook (echo's webhook: one inbound message,
// no host call), with the counts by function as metrics.
//
//	go test -run '^$' -bench BenchmarkKernelCalls -benchtime 1000x ./internal/plugin
func BenchmarkKernelCalls(b *testing.B) {
	ctx := context.Background()
	p := kernelWorld(b)
	calls := map[string]func() error{
		"send": func() error {
			res, err := p.Send(ctx, "main", kernelSend)
			if err == nil && res.Error != nil {
				err = res.Error
			}
			return err
		},
		"webhook": func() error { _, err := p.Webhook(ctx, "main", kernelWebhook); return err },
	}
	for _, name := range []string{"send", "webhook"} {
		b.Run(name, func(b *testing.B) {
			if err := calls[name](); err != nil { // warm
				b.Fatal(err)
			}
			var failed error
			b.ResetTimer()
			got := delta(p.rt, func() {
				for b.Loop() {
					if err := calls[name](); err != nil && failed == nil {
						failed = err
					}
				}
			})
			if failed != nil {
				b.Fatal(failed)
			}
			b.ReportMetric(float64(total(got))/float64(b.N), "kernel-calls/op")
			for fn, n := range got {
				b.ReportMetric(float64(n)/float64(b.N), fn+"/op")
			}
		})
	}
}
