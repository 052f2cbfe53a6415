package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/host"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// A crash is host.ErrCrashed, a tripped breaker host.ErrFailed, and an ordinary refusal keeps
// its ABI error code: the runtime's errors reach a program through the public API's values.
func TestPluginCallErrors(t *testing.T) {
	loop := wasmbuild.MustBuild(t, "../internal/plugin/testdata/hostile/loop")
	ctx := context.Background()
	p, err := host.LoadPlugin(ctx, loop, host.PluginOptions{
		Profiles:    map[string]json.RawMessage{"main": json.RawMessage(`{}`)},
		CallTimeout: 200 * time.Millisecond, CacheDir: wasmbuild.CompilationCacheDir(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Send(ctx, "main", abi.OutboundMessage{ChatID: "1"})
	if !errors.Is(err, host.ErrCrashed) || !errors.Is(err, host.ErrDeadline) || errors.Is(err, host.ErrFailed) {
		t.Fatalf("a send past its deadline: %v, want ErrCrashed and ErrDeadline", err)
	}
	if _, err := p.Send(ctx, "nobody", abi.OutboundMessage{ChatID: "1"}); abi.CodeOf(err) != abi.CodeNotFound || errors.Is(err, host.ErrCrashed) {
		t.Fatalf("a send for an unknown profile: %v (code %q), want %s", err, abi.CodeOf(err), abi.CodeNotFound)
	}
	for i := 0; i < 10 && !errors.Is(err, host.ErrFailed); i++ {
		_, err = p.Send(ctx, "main", abi.OutboundMessage{ChatID: "1"})
	}
	if !errors.Is(err, host.ErrFailed) || !errors.Is(err, host.ErrCrashed) || p.Active() {
		t.Fatalf("after repeated crashes: %v (active %v), want ErrFailed, which is also the last crash", err, p.Active())
	}
}

// NoBreaker keeps a plugin that crashes callable: each call gets a fresh instance.
func TestPluginNoBreaker(t *testing.T) {
	loop := wasmbuild.MustBuild(t, "../internal/plugin/testdata/hostile/loop")
	ctx := context.Background()
	p, err := host.LoadPlugin(ctx, loop, host.PluginOptions{
		Profiles:    map[string]json.RawMessage{"main": json.RawMessage(`{}`)},
		CallTimeout: 100 * time.Millisecond, NoBreaker: true, CacheDir: wasmbuild.CompilationCacheDir(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < 8; i++ {
		if _, err := p.Send(ctx, "main", abi.OutboundMessage{ChatID: "1"}); !errors.Is(err, host.ErrCrashed) || errors.Is(err, host.ErrFailed) {
			t.Fatalf("crash %d: %v", i+1, err)
		}
	}
	if !p.Active() {
		t.Fatal("the breaker tripped")
	}
}

// A Config gives its document once: File or YAML. Settings beside it are validated like the file.
func TestConfigErrors(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/hermes.yaml"
	os.WriteFile(path, []byte("listen: 127.0.0.1:0\n"), 0o600)
	if _, err := host.Open(ctx, host.Config{File: path, YAML: []byte("listen: 127.0.0.1:0\n")}, host.Options{}); err == nil {
		t.Fatal("a Config with both File and YAML opened")
	}
	if _, err := host.Open(ctx, host.Config{DataDir: t.TempDir(), LogLevel: "loud"}, host.Options{}); err == nil {
		t.Fatal("a bad log level opened")
	}
	if _, err := host.Open(ctx, host.Config{YAML: []byte("no_such_key: 1\n"), DataDir: t.TempDir()}, host.Options{}); err == nil {
		t.Fatal("an unknown key opened")
	}
}
