package plugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
)

// The on-disk compilation cache keeps each plugin file's compiled code in a directory of its
// own, named by the file's SHA-256 (the file's identity everywhere else too), so the runtime
// can tell whose code an entry is and remove what no file uses any more. wazero's own cache
// keys are hashes of what it compiled, which say nothing about the file: with one shared
// directory, every version of every plugin ever loaded stayed on disk (18–20 MB of machine code
// for each version of a first-party plugin).

// CacheKeep is how long the compiled code of a file that is no longer in the plugins directory
// stays in the on-disk cache: a rollback to a version used within the week still starts warm.
// A file's directory is touched whenever that file loads, so code in use never ages out.
const CacheKeep = 7 * 24 * time.Hour

// moduleCache returns the compilation cache to compile the file whose SHA-256 is sum with, and
// whether the caller owns it (and closes it after the compiled module): the file's own
// directory under CacheDir, touched now; or, without a CacheDir, the runtime's in-memory cache.
func (r *Runtime) moduleCache(sum string) (wazero.CompilationCache, bool, error) {
	if r.cfg.CacheDir == "" {
		return r.cache, false, nil
	}
	dir := filepath.Join(r.cfg.CacheDir, sum)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, err
	}
	now := time.Now()
	_ = os.Chtimes(dir, now, now) // in use; a read-only cache is still read
	c, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return nil, false, err
	}
	return c, true, nil
}

// pruneCache removes from the on-disk cache the directories of files not in keep (by SHA-256)
// that no load or scan has touched for CacheKeep, and, as old, the directories of the layout
// before per-file directories (wazero's "wazero-<version>-<arch>-<os>" at the top); it touches
// the directories of the files in keep once a day. Nothing else in the directory is touched. Errors are logged, not returned: a cache that cannot be pruned
// still works.
func (r *Runtime) pruneCache(keep map[string]bool, now time.Time) {
	if r.cfg.CacheDir == "" {
		return
	}
	entries, err := os.ReadDir(r.cfg.CacheDir)
	if err != nil {
		return // not created yet, or unreadable: compiling reports that
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !(isSHA256(name) || strings.HasPrefix(name, "wazero-")) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		if keep[name] {
			// A host that runs for weeks without reloading keeps its files' code fresh, so a
			// runtime on the same cache with another plugins directory (plugins ls --plugins)
			// does not take it for unused.
			if now.Sub(info.ModTime()) > 24*time.Hour {
				_ = os.Chtimes(filepath.Join(r.cfg.CacheDir, name), now, now)
			}
			continue
		}
		if now.Sub(info.ModTime()) < CacheKeep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(r.cfg.CacheDir, name)); err != nil {
			r.log.Warn("plugin: pruning the compilation cache failed", "dir", filepath.Join(r.cfg.CacheDir, name), "error", err)
			continue
		}
		r.log.Info("plugin: removed compiled code no plugin file has used for a week", "dir", filepath.Join(r.cfg.CacheDir, name))
	}
}

// isSHA256 reports whether s is a SHA-256 in lower-case hex, the name of a file's directory.
func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// closeCache closes c if the version owns it (see moduleCache).
func closeCache(c wazero.CompilationCache, own bool) {
	if own && c != nil {
		c.Close(context.Background())
	}
}
