package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `hermes-host new plugin` writes a skeleton whose own tests pass and whose .wasm passes
// conformance, as generated.
func TestNewPluginSkeleton(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	bin, _ := buildHost(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "acme")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		// Offline: every module the skeleton needs is in the module cache already (this module
		// needs them), and the checksums come from the checkout's go.sum.
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out, err := exec.Command(bin, "new", "plugin", "acme", "--dir", dir, "--replace", root).CombinedOutput(); err != nil {
		t.Fatalf("new plugin: %v\n%s", err, out)
	}
	run("go", "mod", "tidy")
	run("go", "vet", "./...")
	run("go", "test", "./...")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", "acme.wasm", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOPROXY=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out := run(bin, "conformance", filepath.Join(dir, "acme.wasm"))
	if !strings.Contains(out, "ok:") || strings.Contains(out, "FAIL") {
		t.Fatalf("conformance:\n%s", out)
	}
	if out, err := exec.Command(bin, "new", "plugin", "Bad Name").CombinedOutput(); err == nil || !strings.Contains(string(out), "use 1-32 of a-z") {
		t.Fatalf("a bad name: %v\n%s", err, out)
	}
}
