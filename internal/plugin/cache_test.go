package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// TestCompilationCacheIsPruned: each file's compiled code lives in a directory named by the
// file's SHA-256, and a scan removes the directories of files no longer in the plugins
// directory once no load has touched them for CacheKeep, with the old single-directory layout;
// the code of files present stays however old, and nothing else in the cache is touched.
func TestCompilationCacheIsPruned(t *testing.T) {
	dir, cache := t.TempDir(), t.TempDir()
	wasmbuild.CopyTo(t, probeDir, filepath.Join(dir, "probe.wasm"))
	data, err := os.ReadFile(filepath.Join(dir, "probe.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	probeSum := hex.EncodeToString(h[:])
	old, recent := time.Now().Add(-CacheKeep-time.Hour), time.Now().Add(-CacheKeep+time.Hour)
	entry := func(name string, at time.Time) string {
		p := filepath.Join(cache, name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "code"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := entry(strings.Repeat("a", 64), old)       // a file gone for over a week
	fresh := entry(strings.Repeat("b", 64), recent)    // gone, but within the week
	layout := entry("wazero-v1.11.0-amd64-linux", old) // the layout before per-file directories
	foreign := entry("operator-notes", old)            // not the runtime's
	upper := entry(strings.Repeat("C", 64), old)       // not a hex SHA-256 as the runtime writes it
	if err := os.WriteFile(filepath.Join(cache, "README"), nil, 0o600); err != nil {
		t.Fatal(err)
	}

	r := newRuntime(t, nil, Config{Dir: dir, CacheDir: cache})
	if rej := r.Scan(context.Background()); len(rej) != 0 {
		t.Fatal(rej)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	compiled, _ := filepath.Glob(filepath.Join(cache, probeSum, "*", "*"))
	if len(compiled) == 0 {
		t.Fatalf("no compiled code under the file's directory %s", filepath.Join(cache, probeSum))
	}
	for p, want := range map[string]bool{stale: false, layout: false, fresh: true, foreign: true, upper: true, filepath.Join(cache, "README"): true} {
		if exists(p) != want {
			t.Errorf("%s exists: %v, want %v", filepath.Base(p), !want, want)
		}
	}

	// A present file's code stays however long since it was compiled (it loads from it).
	own := filepath.Join(cache, probeSum)
	if err := os.Chtimes(own, old, old); err != nil {
		t.Fatal(err)
	}
	r.Scan(context.Background())
	if info, err := os.Stat(own); err != nil {
		t.Fatal("the code of a file in the plugins directory was pruned")
	} else if time.Since(info.ModTime()) > time.Hour {
		t.Fatal("a scan left the directory of a present file's code untouched for over a day")
	}
	if err := os.Chtimes(own, old, old); err != nil {
		t.Fatal(err)
	}
	// Removed from the plugins directory, it goes once a week has passed since its last load.
	if err := os.Remove(filepath.Join(dir, "probe.wasm")); err != nil {
		t.Fatal(err)
	}
	r.Scan(context.Background())
	if exists(own) {
		t.Fatal("the code of a removed file unused for a week stayed")
	}
}
