package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `hermes-host new plugin` writes a skeleton whose own tests pass and whose .wasm passes
// conformance, as generated, and whose tests fail when its send table retries what may have
// been posted or its manifest gives the platform's API to every export.
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
	// The skeleton's own tests hold it to the promises its authors copy: changed to retry a 5xx
	// (which may follow the post) or to give the API to every export, its tests fail.
	main := filepath.Join(dir, "main.go")
	orig, err := os.ReadFile(main)
	if err != nil {
		t.Fatal(err)
	}
	for _, regress := range []struct{ name, from, to, test string }{
		{"retry after effect", "return fail(abi.SendUncertain, fmt.Sprint(res.Status)", "return fail(abi.SendRetryable, fmt.Sprint(res.Status)", "TestSendOutcomes"},
		{"the API as plain egress", "EgressScopes: []abi.EgressScope{", "Egress: []string{apiHost}, EgressScopes: []abi.EgressScope{", "TestOnlySendReachesThePlatformAPI"},
	} {
		if !strings.Contains(string(orig), regress.from) {
			t.Fatalf("%s: the skeleton no longer has %q", regress.name, regress.from)
		}
		os.WriteFile(main, []byte(strings.Replace(string(orig), regress.from, regress.to, 1)), 0o644)
		cmd := exec.Command("go", "test", "-run", regress.test+"/native", ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--- FAIL: "+regress.test) {
			t.Errorf("%s: the skeleton's %s did not fail: %v\n%s", regress.name, regress.test, err, out)
		}
	}
	os.WriteFile(main, orig, 0o644)
	if out, err := exec.Command(bin, "new", "plugin", "Bad Name").CombinedOutput(); err == nil || !strings.Contains(string(out), "use 1-32 of a-z") {
		t.Fatalf("a bad name: %v\n%s", err, out)
	}
}
