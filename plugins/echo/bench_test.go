//go:build !wasip1

package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk/sdktest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// BenchmarkSendNativeVsWasm runs echo's send, the same plugin code, natively and as Wasm
// through the production runtime (call deadline and all), against the same host functions and
// the same loopback outbox, in alternating blocks so the machine's drift falls on both. It
// reports each one's time per send and the Wasm run's ratio to the native one: what running
// the plugin as Wasm costs on a send. Built with -tags hermes_nodeadlinecheck, the Wasm run
// is compiled without wazero's deadline check (RATIONALE.md, Throughput).
//
//	go test -run '^$' -bench BenchmarkSendNativeVsWasm -benchtime 4000x ./plugins/echo
func BenchmarkSendNativeVsWasm(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"ok":true,"message_id":"m1"}`))
	}))
	defer srv.Close()
	opts := sdktest.Options{EgressExtra: []string{"127.0.0.1"}, Profiles: map[string]any{"main": map[string]any{"outbox_url": srv.URL + "/out"}}}
	hosts := [2]sdktest.Host{sdktest.Native(b, opts), sdktest.Wasm(b, wasmbuild.MustBuild(b, "."), opts)}
	msg := abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: "5", Text: "the answer", DeliveryID: "d1"}
	for _, h := range hosts { // warm: connections, the Wasm instance
		if _, err := h.Send("main", msg); err != nil {
			b.Fatal(err)
		}
	}
	const block = 200
	var took [2]time.Duration
	b.ResetTimer()
	for n := 0; n < b.N; n += block {
		for k, h := range hosts {
			start := time.Now()
			for range min(block, b.N-n) {
				if res, err := h.Send("main", msg); err != nil || res.Error != nil {
					b.Fatalf("send: %+v %v", res, err)
				}
			}
			took[k] += time.Since(start)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(took[0].Microseconds())/float64(b.N), "native-µs/send")
	b.ReportMetric(float64(took[1].Microseconds())/float64(b.N), "wasm-µs/send")
	b.ReportMetric(float64(took[1])/float64(took[0]), "x-native")
}
