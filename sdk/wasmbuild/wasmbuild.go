//go:build !wasip1

// Package wasmbuild compiles Go plugin packages to .wasm with the standard toolchain
// (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared), caching the result by the content of
// every source file in the module that the package depends on. Tests use it to build the
// first-party and hostile plugins they load, so no .wasm file is ever committed.
package wasmbuild

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Build compiles the package in dir (a path inside this module) and returns the path of the
// .wasm file. Results are cached under the user cache directory (or HERMES_WASM_CACHE).
func Build(dir string) (string, error) { return BuildWith(dir, "") }

// BuildWith is Build with extra -ldflags (for example "-X main.version=2", to build a second
// version of a test plugin).
func BuildWith(dir, ldflags string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	mu := lockFor(abs)
	mu.Lock()
	defer mu.Unlock()

	key, err := sourceKey(abs)
	if err != nil {
		return "", err
	}
	if ldflags != "" {
		sum := sha256.Sum256([]byte(key + "\x00" + ldflags))
		key = hex.EncodeToString(sum[:])
	}
	cacheDir, err := cacheDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(cacheDir, filepath.Base(abs)+"-"+key[:16]+".wasm")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	tmp, err := os.CreateTemp(cacheDir, ".build-*.wasm")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	args := []string{"build", "-buildmode=c-shared", "-trimpath", "-o", tmp.Name()}
	if ldflags != "" {
		args = append(args, "-ldflags="+ldflags)
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = abs
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("wasmbuild: building %s: %v\n%s", dir, err, msg)
	}
	// Rename is atomic: a concurrent test process sees either no file or a whole one.
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}

// MustBuild is Build for tests and benchmarks: it fails tb on error.
func MustBuild(tb testing.TB, dir string) string {
	tb.Helper()
	p, err := Build(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// CopyTo builds dir and copies the result to dst (for tests that populate a plugins directory).
func CopyTo(tb testing.TB, dir, dst string) {
	tb.Helper()
	if err := CopyFile(MustBuild(tb, dir), dst); err != nil {
		tb.Fatal(err)
	}
}

// CopyFile copies src to dst atomically (through a temporary file and a rename), the way an
// operator should drop a plugin into a watched directory.
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

var (
	locksMu sync.Mutex
	locks   = map[string]*sync.Mutex{}
)

func lockFor(dir string) *sync.Mutex {
	locksMu.Lock()
	defer locksMu.Unlock()
	if locks[dir] == nil {
		locks[dir] = &sync.Mutex{}
	}
	return locks[dir]
}

// CompilationCacheDir is a compilation cache for hosts that tests start (config
// compilation_cache, serve --compilation-cache): HERMES_COMPILATION_CACHE, else a directory in
// the user's cache. Entries are keyed by the plugin's hash and written atomically, so every test
// of every run on the machine shares one, and a plugin is compiled once, not once per test.
func CompilationCacheDir(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv("HERMES_COMPILATION_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir = filepath.Join(base, "hermes-host", "wazero")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("wasmbuild: compilation cache: %v", err)
	}
	return dir
}

func cacheDir() (string, error) {
	dir := os.Getenv("HERMES_WASM_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir = filepath.Join(base, "hermes-host", "wasmbuild")
	}
	return dir, os.MkdirAll(dir, 0o755)
}

// sourceKey hashes the Go version, go.mod/go.sum and every file of every package inside the
// module that the package at dir depends on (for wasip1).
func sourceKey(dir string) (string, error) {
	cmd := exec.Command("go", "list", "-deps", "-json=Dir,GoFiles,Module", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("wasmbuild: go list in %s: %v\n%s", dir, err, stderr.String())
	}
	h := sha256.New()
	fmt.Fprintln(h, runtime.Version())
	dec := json.NewDecoder(bytes.NewReader(out))
	var files []string
	modRoot := ""
	for dec.More() {
		var p struct {
			Dir     string
			GoFiles []string
			Module  *struct {
				Path, Dir, Version string
				Main               bool
			}
		}
		if err := dec.Decode(&p); err != nil {
			return "", err
		}
		if p.Module == nil {
			continue // standard library: covered by the Go version
		}
		if !p.Module.Main {
			fmt.Fprintln(h, p.Module.Path, p.Module.Version) // a pinned dependency
			continue
		}
		modRoot = p.Module.Dir
		for _, f := range p.GoFiles {
			files = append(files, filepath.Join(p.Dir, f))
		}
	}
	if modRoot != "" {
		files = append(files, filepath.Join(modRoot, "go.mod"), filepath.Join(modRoot, "go.sum"))
	}
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintln(h, strings.TrimPrefix(f, modRoot), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
