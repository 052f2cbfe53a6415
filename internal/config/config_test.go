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

// TestEnvValueStaysOneValue: ${NAME} is expanded in parsed values, so a value holding quotes, a
// newline and YAML syntax cannot add or change keys.
func TestEnvValueStaysOneValue(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hermes.yaml")
	os.WriteFile(path, []byte(`
plugins:
  telegram:
    profiles:
      main:
        token: "${TEST_TG_TOKEN}"
        note: ${TEST_NOTE}
limits:
  pool_size: ${TEST_POOL}
`), 0o600)
	evil := "x\"\nlisten: 0.0.0.0:80\nadmin_listen: 0.0.0.0:81\n  \"y: '${HOME}"
	t.Setenv("TEST_TG_TOKEN", evil)
	t.Setenv("TEST_NOTE", "a: b, c: [d]")
	t.Setenv("TEST_POOL", "7")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:8484" || c.AdminListen != "127.0.0.1:8485" {
		t.Fatalf("a value rewrote the listeners: %q %q", c.Listen, c.AdminListen)
	}
	p := c.Plugins["telegram"].Profiles["main"]
	if p["token"] != evil || p["note"] != "a: b, c: [d]" {
		t.Fatalf("values %q %q", p["token"], p["note"])
	}
	if c.Limits.PoolSize != 7 {
		t.Fatalf("a plain expanded value keeps its type: pool_size %d", c.Limits.PoolSize)
	}
	if strings.Join(c.EnvRefs, ",") != "TEST_TG_TOKEN,TEST_NOTE,TEST_POOL" {
		t.Fatalf("refs %v", c.EnvRefs)
	}
	// A reference in a key is not expanded (keys are structure), and ${...} text produced by an
	// expansion is not expanded again.
	os.WriteFile(path, []byte("plugins:\n  \"${TEST_NOTE}\": {}\n"), 0o600)
	if c, err = Load(path); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Plugins["${TEST_NOTE}"]; !ok {
		t.Fatalf("plugins %v", c.Plugins)
	}
}

func TestAccessDefaults(t *testing.T) {
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	echo := c.Plugins["echo"].Access["main"]
	if !echo.AllowAll || strings.Join(echo.Tools, ",") != "shell,processes,cron" || c.Demo.Plugin != "echo" {
		t.Fatalf("demo access %+v %+v", echo, c.Demo)
	}
	path := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(path, []byte("plugins: {telegram: {access: {main: {tools: [root]}}}}\n"), 0o600)
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), `"root"`) {
		t.Fatalf("unknown tool: %v", err)
	}
	os.WriteFile(path, []byte("plugins: {telegram: {access: {main: {users: [111, 222], groups: {\"-100\": {users: [333]}}}}}}\n"), 0o600)
	if c, err = Load(path); err != nil {
		t.Fatal(err)
	}
	a := c.Plugins["telegram"].Access["main"]
	if strings.Join(a.Users, ",") != "111,222" || a.Groups["-100"].Users[0] != "333" {
		t.Fatalf("numeric ids as strings: %+v", a)
	}
}
