package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
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

// The store's password comes from the environment, and the URL is never printed: it is not in
// the configuration's JSON (what `hermes-host config` and the console show).
func TestStoreFromEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hermes.yaml")
	os.WriteFile(path, []byte(`store: "postgres://hermes:${TEST_PG_PASSWORD}@db.internal:5432/hermes"`+"\n"), 0o600)
	t.Setenv("TEST_PG_PASSWORD", "s3cret")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != "postgres://hermes:s3cret@db.internal:5432/hermes" {
		t.Fatalf("store %q", c.Store)
	}
	b, _ := json.Marshal(c)
	if strings.Contains(string(b), "s3cret") {
		t.Fatalf("the store's password is in the configuration's JSON: %s", b)
	}
}

func TestErrorsAreClear(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ body, want string }{
		"typo":     {"listne: x\n", "listne: unknown key (did you mean listen?) (line 1)"},
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
		if err != nil && strings.Contains(err.Error(), "secretpw") {
			t.Errorf("%s: the error shows a password: %v", name, err)
		}
	}
}

// TestEveryValueIsValidated: each value out of range or misspelt is a configuration error that
// names its key and says what is wanted, instead of a panic later (memory_mib), a silent
// default (reset_mode) or a confusing failure at the first use (listen, egress hosts).
func TestEveryValueIsValidated(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ body, want string }{
		"memory too large":   {"limits: {memory_mib: 100000}\n", "limits.memory_mib 100000: want 1 to 4096"},
		"memory negative":    {"limits: {memory_mib: -1}\n", "limits.memory_mib -1: want 1 to 4096"},
		"pool zero":          {"limits: {pool_size: 0}\n", "limits.pool_size 0: want 1 to 256"},
		"payload":            {"limits: {max_payload_kib: 0}\n", "limits.max_payload_kib 0"},
		"call timeout":       {"limits: {call_timeout: 0s}\n", "limits.call_timeout 0s"},
		"plugin memory":      {"plugins: {telegram: {limits: {memory_mib: 5000}}}\n", "plugins.telegram.limits.memory_mib 5000"},
		"reset mode typo":    {"sessions: {reset_mode: daly}\n", `sessions.reset_mode "daly": want none, idle, daily or both`},
		"daily hour":         {"sessions: {daily_at_hour: 24}\n", "sessions.daily_at_hour 24"},
		"idle negative":      {"sessions: {idle_minutes: -5}\n", "sessions.idle_minutes -5"},
		"listen no port":     {"listen: localhost\n", `listen "localhost": want host:port`},
		"listen bad port":    {"listen: 127.0.0.1:http\n", `port "http" is not a port number`},
		"log level":          {"log_level: verbose\n", `log_level "verbose"`},
		"base url":           {"agent: {kind: openai, model: m, base_url: \"localhost:8000\"}\n", `agent.base_url "localhost:8000"`},
		"egress with scheme": {"plugins: {telegram: {egress_extra: [\"https://api.example.com/\"]}}\n", `egress host "https://api.example.com/"`},
		"plugin name":        {"plugins: {Telegram: {}}\n", `"Telegram" is not a plugin name`},
		"empty profile":      {"plugins:\n  telegram:\n    profiles:\n      main:\n", "plugins.telegram.profiles.main is empty"},
		"store":              {"store: \"mysql://u:secretpw@h/db\"\n", `store: want empty (SQLite in data_dir) or a postgres:// URL`},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
		os.WriteFile(path, []byte(tc.body), 0o600)
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to mention %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secretpw") {
			t.Errorf("%s: the error shows a password: %v", name, err)
		}
	}
	// Several problems are reported together.
	path := filepath.Join(dir, "several.yaml")
	os.WriteFile(path, []byte("limits: {memory_mib: 0}\nsessions: {reset_mode: sometimes}\n"), 0o600)
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "memory_mib") || !strings.Contains(err.Error(), "reset_mode") {
		t.Fatalf("several problems: %v", err)
	}
	// Valid edge values pass.
	path = filepath.Join(dir, "edges.yaml")
	os.WriteFile(path, []byte(`listen: "[::1]:0"
limits: {memory_mib: 4096, pool_size: 1}
sessions: {reset_mode: both, idle_minutes: 0, daily_at_hour: 23}
plugins:
  telegram:
    limits: {memory_mib: 128}
    egress_extra: ["127.0.0.1:8081", "*.example.com", "[::1]:9000", "::1"]
    profiles: {main: {}}
`), 0o600)
	if _, err := Load(path); err != nil {
		t.Fatalf("valid edges: %v", err)
	}
}

// TestPluginsDir: the default plugins directory is created and said to be; one the operator
// named must exist.
func TestPluginsDir(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HERMES_DATA_DIR", dir)
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if created, err := c.EnsurePluginsDir(); err != nil || !created {
		t.Fatalf("default plugins dir: created %v, %v", created, err)
	}
	if created, err := c.EnsurePluginsDir(); err != nil || created {
		t.Fatalf("second time: created %v, %v", created, err)
	}
	path := filepath.Join(dir, "hermes.yaml")
	os.WriteFile(path, []byte("plugins_dir: "+filepath.Join(dir, "plugnis")+"\n"), 0o600)
	if c, err = Load(path); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnsurePluginsDir(); err == nil || !strings.Contains(err.Error(), "plugnis does not exist") {
		t.Fatalf("named plugins dir missing: %v", err)
	}
}

// TestFilePlugins: the plugins the file configures are known apart from the defaults' (echo).
func TestFilePlugins(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hermes.yaml")
	os.WriteFile(path, []byte("plugins:\n  telegram:\n    profiles: {main: {token: x}}\n"), 0o600)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.FilePlugins, ",") != "telegram" {
		t.Fatalf("file plugins %v", c.FilePlugins)
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
	// (Such a key is then refused as a plugin name, quoted as written.)
	os.WriteFile(path, []byte("plugins:\n  \"${TEST_NOTE}\": {}\n"), 0o600)
	if _, err = Load(path); err == nil || !strings.Contains(err.Error(), `"${TEST_NOTE}" is not a plugin name`) {
		t.Fatalf("a reference in a key: %v", err)
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

// A file with no document in it (empty, or only comments) is the defaults: the decoder's
// io.EOF is told apart from a broken document with errors.Is, not by its text.
func TestFileWithoutDocument(t *testing.T) {
	for name, text := range map[string]string{"empty": "", "comment": "# nothing configured yet\n", "separator": "---\n"} {
		path := filepath.Join(t.TempDir(), "hermes.yaml")
		os.WriteFile(path, []byte(text), 0o600)
		c, err := Load(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Listen != "127.0.0.1:8484" {
			t.Fatalf("%s: listen %q, want the default", name, c.Listen)
		}
	}
	if _, err := Parse("broken.yaml", []byte("listen: [\n")); err == nil || !strings.Contains(err.Error(), "config broken.yaml:") {
		t.Fatalf("a broken document: %v", err)
	}
}

// Overrides replace the file's values; a default plugins_dir follows an overridden data_dir, a
// named one does not; the result is validated like a file.
func TestOverride(t *testing.T) {
	c, err := Parse("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Override(Overrides{DataDir: "/srv/hermes", Listen: "127.0.0.1:9000", LogLevel: "debug"}); err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/srv/hermes" || c.PluginsDir != filepath.Join("/srv/hermes", "plugins") || c.Listen != "127.0.0.1:9000" || c.Level().String() != "DEBUG" {
		t.Fatalf("overridden %+v", c)
	}
	c, _ = Parse("hermes.yaml", []byte("plugins_dir: /opt/plugins\n"))
	if err := c.Override(Overrides{DataDir: "/srv/hermes"}); err != nil || c.PluginsDir != "/opt/plugins" {
		t.Fatalf("named plugins_dir %q moved with data_dir (%v)", c.PluginsDir, err)
	}
	if err := c.Override(Overrides{AdminListen: "8485"}); err == nil || !strings.Contains(err.Error(), "admin_listen") {
		t.Fatalf("a bad override was accepted: %v", err)
	}
}

// TestPluginSettingsMergeKeyByKey: a plugin's settings in the file are merged over the defaults'
// key by key, so a file written like plugins/cron/README.md's example (profiles, no limits) keeps
// the cron plugin's embedded 150 s call deadline; a partial limits block keeps the other limits;
// profiles and access entries merge by name, each one given replacing the default's whole; a list
// given replaces the default's.
func TestPluginSettingsMergeKeyByKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hermes.yaml")
	load := func(yaml string) *Config {
		t.Helper()
		os.WriteFile(path, []byte(yaml), 0o600)
		c, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	readme, err := os.ReadFile("../../plugins/cron/README.md")
	if err != nil {
		t.Fatal(err)
	}
	example := regexp.MustCompile("(?s)```yaml\n(plugins:\n.*?)```").FindStringSubmatch(string(readme))
	if example == nil || strings.Contains(example[1], "limits") {
		t.Fatalf("plugins/cron/README.md has no configuration example without limits: %q", example)
	}
	c := load(example[1])
	cron := c.Plugins["cron"]
	if cron.Limits == nil || time.Duration(cron.Limits.CallTimeout) != 150*time.Second || cron.Limits.MemoryMiB != 64 || cron.Limits.PoolSize != 4 {
		t.Fatalf("the README's cron configuration lost the default limits: %+v", cron.Limits)
	}
	if cron.Profiles["main"]["timezone"] != "Europe/Berlin" {
		t.Fatalf("cron profiles %+v", cron.Profiles)
	}

	c = load("plugins:\n  cron:\n    limits: {call_timeout: 60s}\n")
	if l := c.Plugins["cron"].Limits; time.Duration(l.CallTimeout) != 60*time.Second || l.MemoryMiB != 64 || l.PoolSize != 4 || l.MaxPayloadKiB != 4096 {
		t.Fatalf("a partial limits block: %+v", l)
	}
	if _, ok := c.Plugins["cron"].Profiles["main"]; !ok {
		t.Fatal("the default cron profile was lost")
	}

	c = load(`
plugins:
  echo:
    egress_extra: ["10.0.0.1"]
    profiles:
      other: {outbox_url: "http://10.0.0.1/out"}
      main: {outbox_url: "http://127.0.0.1:9999/demo/outbox"}
    access:
      other: {users: ["1"]}
`)
	echo := c.Plugins["echo"]
	if strings.Join(echo.EgressExtra, ",") != "10.0.0.1" {
		t.Fatalf("a list given replaces the default's: %v", echo.EgressExtra)
	}
	if echo.Profiles["main"]["outbox_url"] != "http://127.0.0.1:9999/demo/outbox" || len(echo.Profiles) != 2 {
		t.Fatalf("profiles merge by name: %+v", echo.Profiles)
	}
	if !echo.Access["main"].AllowAll || strings.Join(echo.Access["other"].Users, ",") != "1" {
		t.Fatalf("access merges by name: %+v", echo.Access)
	}
	// Unknown keys inside a plugin's settings are still refused.
	os.WriteFile(path, []byte("plugins:\n  cron:\n    limit: {call_timeout: 60s}\n"), 0o600)
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("a misspelt key: %v", err)

	}
}

// A file's problems come back all together as an *Error, one per problem, each starting with its
// key path and in the configuration's words: the decoder's Go types never show.
func TestProblemsNameTheirKeys(t *testing.T) {
	_, err := Parse("hermes.yaml", []byte(`agent:
  kind: openai
  model: m
  max_tokens: lots
  temprature: 0.5
plugins:
  telegram:
    limits: {pool_size: [1]}
    access:
      main: {users: ["1"], grups: {}}
sessions: {daily_at_hour: 30}
`))
	var bad *Error
	if !errors.As(err, &bad) || bad.File != "hermes.yaml" {
		t.Fatalf("error %T %v", err, err)
	}
	want := []string{
		`agent.max_tokens: want an integer, got "lots" (line 4)`,
		"agent.temprature: unknown key (did you mean temperature?) (line 5)",
		"plugins.telegram.limits.pool_size: want an integer, got a list (line 8)",
		"plugins.telegram.access.main.grups: unknown key (did you mean groups?) (line 10)",
		"sessions.daily_at_hour 30: want an hour from 0 to 23",
	}
	if strings.Join(bad.Problems, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(bad.Problems, "\n"), strings.Join(want, "\n"))
	}
}

// Check creates nothing: a missing plugins_dir the file names is a problem, not a directory.
func TestCheckCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HERMES_DATA_DIR", "")
	path := filepath.Join(dir, "hermes.yaml")
	os.WriteFile(path, []byte("plugins_dir: "+filepath.Join(dir, "plugins")+"\n"), 0o600)
	if _, err := Check(path, Overrides{DataDir: filepath.Join(dir, "data")}); err == nil || !strings.Contains(err.Error(), "plugins_dir: "+filepath.Join(dir, "plugins")+" does not exist") {
		t.Fatalf("check: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("check created %v", entries)
	}
}

func TestMediaSettings(t *testing.T) {
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Media.MaxFileMiB != 20 || c.Media.MaxProfileMiB != 500 || time.Duration(c.Media.Retention) != 168*time.Hour {
		t.Fatalf("defaults %+v", c.Media)
	}
	path := filepath.Join(t.TempDir(), "hermes.yaml")
	for yaml, want := range map[string]string{
		"media: {max_file_mib: 0}\n":                       "media.max_file_mib 0: must be between 1 and 2048",
		"media: {max_file_mib: 50, max_profile_mib: 10}\n": "media.max_profile_mib 10: must be at least media.max_file_mib (50)",
		"media: {retention: 10m}\n":                        "media.retention 10m0s: must be at least 1h",
	} {
		os.WriteFile(path, []byte(yaml), 0o600)
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", yaml, err, want)
		}
	}
	os.WriteFile(path, []byte("media: {max_file_mib: 5, max_profile_mib: 50, retention: 24h}\n"), 0o600)
	if c, err := Load(path); err != nil || c.Media.MaxFileMiB != 5 || time.Duration(c.Media.Retention) != 24*time.Hour {
		t.Fatalf("%+v %v", c, err)
	}
}
