package plugin

import (
	"context"
	"log/slog"
	"os"
	"runtime/pprof"
	"testing"
	"time"
)

func TestZZCPU(t *testing.T) {
	f, _ := os.Create("/tmp/cpu.prof")
	pprof.StartCPUProfile(f)
	for i := 0; i < 5; i++ {
		start := time.Now()
		r, err := New(Config{Dir: "/tmp/p5", CacheDir: "/work/main/.hermes/cache/wazero", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		r.Scan(context.Background())
		t.Logf("scan %v", time.Since(start))
		r.Close()
	}
	pprof.StopCPUProfile()
	f.Close()
}
