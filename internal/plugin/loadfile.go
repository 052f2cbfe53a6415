package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
)

// FileOptions configure LoadFile.
type FileOptions struct {
	// Profiles are the configurations to load the plugin with (profile → JSON object).
	Profiles map[string]json.RawMessage
	// Env supplies host services (kv, egress, sessions); nil is a bare host.
	Env *Env
	// EgressExtra grants hosts beyond the manifest's (a loopback fake).
	EgressExtra []string
	// EgressAlias maps a loopback fake's address to the declared host it stands in for (that
	// host's egress scopes apply to it).
	EgressAlias map[string]string
	// Limits override the runtime's defaults.
	Limits Limits
	// CacheDir is the compilation cache; empty uses the user cache directory.
	CacheDir string
}

// LoadFile loads a single plugin file through the production runtime, as serve would, in a
// runtime of its own. It returns the runtime (to be closed by the caller) and the plugin, or the
// reason the file was rejected. Tools and tests use it: inspect, conformance, sdktest.
func LoadFile(ctx context.Context, path string, opt FileOptions) (*Runtime, *Plugin, error) {
	dir, err := os.MkdirTemp("", "hermes-plugin-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(path)), data, 0o644); err != nil {
		return nil, nil, err
	}
	cache := opt.CacheDir
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		cache = filepath.Join(base, "hermes-host", "wazero")
	}
	rt, err := New(Config{
		Dir: dir, CacheDir: cache, Env: opt.Env, Defaults: opt.Limits,
		Other: Settings{Limits: opt.Limits, Profiles: opt.Profiles, EgressExtra: opt.EgressExtra,
			EgressAlias: opt.EgressAlias},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, nil, err
	}
	if rej := rt.Scan(ctx); len(rej) > 0 {
		rt.Close()
		return nil, nil, errors.New(rej[0].Error)
	}
	ps := rt.Plugins()
	if len(ps) != 1 {
		rt.Close()
		return nil, nil, fmt.Errorf("expected one plugin, loaded %d", len(ps))
	}
	return rt, ps[0], nil
}
