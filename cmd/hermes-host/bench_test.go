package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// firstParty are the first-party plugins a default installation serves.
var firstParty = []string{"echo", "telegram"}

// buildHost builds the hermes-host binary and a plugins directory with the first-party plugins.
func buildHost(tb testing.TB) (bin, plugins string) {
	tb.Helper()
	dir := tb.TempDir()
	bin = filepath.Join(dir, "hermes-host")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		tb.Fatalf("build: %v\n%s", err, out)
	}
	plugins = filepath.Join(dir, "plugins")
	os.MkdirAll(plugins, 0o755)
	for _, name := range firstParty {
		wasmbuild.CopyTo(tb, "../../plugins/"+name, filepath.Join(plugins, name+".wasm"))
	}
	return bin, plugins
}

var (
	pidsMu    sync.Mutex
	servePIDs = map[int]bool{}
	lastPID   int
)

// startServe runs `hermes-host serve` and returns once it logs that it is serving (plugins
// loaded, listener open). The process is killed when the test ends.
func startServe(tb testing.TB, bin, plugins, dataDir string, extra ...string) (addr string, stop func()) {
	tb.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--plugins", plugins}, extra...)
	cmd := exec.Command(bin, args...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait() }
	pidsMu.Lock()
	servePIDs[cmd.Process.Pid] = true
	lastPID = cmd.Process.Pid
	pidsMu.Unlock()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "msg=\"hermes-host serving\" addr="); i >= 0 {
			addr = strings.Fields(line[i+len("msg=\"hermes-host serving\" addr="):])[0]
			go func() {
				for sc.Scan() {
				}
			}()
			return addr, stop
		}
	}
	stop()
	tb.Fatal("serve exited before serving")
	return "", nil
}

// BenchmarkServeStart measures a cold `hermes-host serve` process start (exec to serving, with
// the first-party plugins loaded and the listener open), with the on-disk compilation cache warm
// and with it empty.
func BenchmarkServeStart(b *testing.B) {
	bin, plugins := buildHost(b)
	b.Run("warm-cache", func(b *testing.B) {
		data := b.TempDir()
		_, stop := startServe(b, bin, plugins, data) // fills the cache
		stop()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_, stop := startServe(b, bin, plugins, data)
			stop()
		}
	})
	b.Run("cold-cache", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_, stop := startServe(b, bin, plugins, b.TempDir())
			stop()
		}
	})
}
