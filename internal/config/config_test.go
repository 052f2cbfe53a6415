package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:8484" || c.Agent.Kind != "builtin" || time.Duration(c.Limits.CallTimeout) != 10*time.Second {
		t.Fatalf("defaults %+v", c)
	}
	if c.PluginsDir != filepath.Join(c.DataDir, "plugins") {
		t.Fatalf("plugins dir %q", c.PluginsDir)
	}
}

func TestFileOverridesAndEnv(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hermes.yaml")
	os.WriteFile(path, []byte(`
listen: 127.0.0.1:9999
plugins:
  telegram:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {token: "${TEST_TG_TOKEN}"}
`), 0o600)
	t.Setenv("TEST_TG_TOKEN", "123:abc")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:9999" || c.DataDir != ".hermes" {
		t.Fatalf("merged %+v", c)
	}
	b, _ := c.Plugins["telegram"].ProfileJSON("main")
	if string(b) != `{"token":"123:abc"}` {
		t.Fatalf("profile json %s", b)
	}
	if len(c.EnvRefs) != 1 || c.EnvRefs[0] != "TEST_TG_TOKEN" {
		t.Fatalf("env refs %v", c.EnvRefs)
	}
	if _, ok := c.Plugins["echo"]; !ok {
		t.Fatal("default echo plugin settings lost by merging")
	}
}

func TestErrorsAreClear(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ body, want string }{
		"typo":     {"listne: x\n", "field listne not found"},
		"env":      {"agent: {api_key: \"${SURELY_NOT_SET_42}\"}\n", "SURELY_NOT_SET_42"},
		"duration": {"limits: {call_timeout: soon}\n", `"soon" is not a duration`},
		"agent":    {"agent: {kind: magic}\n", `agent.kind "magic"`},
	} {
		path := filepath.Join(dir, name+".yaml")
		os.WriteFile(path, []byte(tc.body), 0o600)
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to mention %q", name, err, tc.want)
		}
	}
}
