package e2e

import (
	"testing"
)

// BenchmarkServeStart measures a cold `hermes-host serve` process start (exec to serving, with
// the first-party plugins loaded and the listener open), with the on-disk compilation cache warm
// and with it empty.
func BenchmarkServeStart(b *testing.B) {
	bin, plugins := buildHost(b)
	b.Run("warm-cache", func(b *testing.B) {
		data := b.TempDir()
		_, stop := startServe(b, bin, plugins, data) // fills the cache (HERMES_COMPILATION_CACHE's, if set)
		stop()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_, stop := startServe(b, bin, plugins, data)
			stop()
		}
	})
	b.Run("cold-cache", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			// A cache of its own: HERMES_COMPILATION_CACHE would make it warm.
			_, stop := startServe(b, bin, plugins, b.TempDir(), "--compilation-cache", b.TempDir())
			stop()
		}
	})
}
