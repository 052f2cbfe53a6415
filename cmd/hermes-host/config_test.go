package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// checkFile writes body to a configuration file and runs `config check -c` on it.
func checkFile(t *testing.T, body string, extra ...string) (stdout, stderr string, err error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hermes.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return runCmd(t, append([]string{"config", "check", "-c", path}, extra...)...)
}

// config check names the key path of every problem, in the configuration's words (never a Go
// type), and exits 1.
func TestConfigCheckNamesEachKey(t *testing.T) {
	cleanEnv(t)
	missing := filepath.Join(t.TempDir(), "plugnis")
	for name, tc := range map[string]struct {
		body string
		want []string
	}{
		"unknown key":       {"agent:\n  knd: openai\n", []string{"agent.knd: unknown key (did you mean kind?) (line 2)"}},
		"unknown top key":   {"listne: 127.0.0.1:1\n", []string{"listne: unknown key (did you mean listen?)"}},
		"no suggestion":     {"agent:\n  colour: blue\n", []string{"agent.colour: unknown key (known here: kind, base_url,"}},
		"wrong type":        {"agent:\n  max_tokens: lots\n", []string{`agent.max_tokens: want an integer, got "lots" (line 2)`}},
		"wrong type bool":   {"strict_egress: maybe\n", []string{`strict_egress: want true or false, got "maybe"`}},
		"wrong shape":       {"limits: 64\n", []string{`limits: want a mapping of keys (memory_mib, call_timeout, pool_size, max_payload_kib), got "64"`}},
		"list item":         {"agent:\n  models: [a, {b: c}]\n", []string{"agent.models[1]: want a string, got a mapping"}},
		"duration":          {"limits: {call_timeout: soon}\n", []string{`limits.call_timeout: "soon" is not a duration (like 10s or 2m)`}},
		"out of range":      {"limits: {memory_mib: 100000}\n", []string{"limits.memory_mib 100000: want 1 to 4096"}},
		"listen address":    {"admin_listen: \"8485\"\n", []string{`admin_listen "8485": want host:port`}},
		"malformed yaml":    {"listen: [\n", []string{"line 1: did not find expected node content"}},
		"tab indentation":   {"agent:\n\tkind: openai\n", []string{"line 2: found character that cannot start any token"}},
		"unset env":         {"plugins:\n  telegram:\n    profiles:\n      main: {token: \"${HERMES_TEST_SURELY_UNSET}\"}\n", []string{"plugins.telegram.profiles.main.token: ${HERMES_TEST_SURELY_UNSET} is not set in the environment (line 4)"}},
		"missing plugins":   {"plugins_dir: " + missing + "\n", []string{"plugins_dir: " + missing + " does not exist"}},
		"nested unknown":    {"plugins:\n  telegram:\n    access:\n      main:\n        groups:\n          \"-100\": {require_mentoin: true}\n", []string{"plugins.telegram.access.main.groups.-100.require_mentoin: unknown key (did you mean require_mention?) (line 6)"}},
		"nested wrong type": {"plugins:\n  slack:\n    limits: {pool_size: many}\n", []string{`plugins.slack.limits.pool_size: want an integer, got "many"`}},
		"nested range":      {"plugins:\n  slack:\n    limits: {memory_mib: 5000}\n", []string{"plugins.slack.limits.memory_mib 5000: want 1 to 4096"}},
		"key with dots":     {"plugins:\n  telegram:\n    egress_alias: {\"10.0.0.5:8081\": [x]}\n", []string{`plugins.telegram.egress_alias."10.0.0.5:8081": want a string, got a list`}},
		"given twice":       {"listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n", []string{"listen: given twice (first on line 1) (line 2)"}},
		"tool":              {"plugins: {telegram: {access: {main: {tools: [root]}}}}\n", []string{`plugins.telegram.access.main.tools: "root"`}},
		// Every problem, not the first: a wrong type, an unknown key, a value out of range and
		// an unset variable in one file.
		"all of them": {"agent:\n  max_tokens: lots\n  knd: x\nlimits: {pool_size: 0}\nsessions: {reset_mode: \"${HERMES_TEST_SURELY_UNSET}x\"}\n", []string{
			"5 problem(s)", `agent.max_tokens: want an integer, got "lots"`, "agent.knd: unknown key", "limits.pool_size 0: want 1 to 256",
			"sessions.reset_mode: ${HERMES_TEST_SURELY_UNSET} is not set", `sessions.reset_mode "x": want none, idle, daily or both`}},
	} {
		t.Run(name, func(t *testing.T) {
			_, stderr, err := checkFile(t, tc.body)
			var exit exitError
			if !errors.As(err, &exit) || exit.code != 1 {
				t.Fatalf("exit %v, want 1; stderr:\n%s", err, stderr)
			}
			contains(t, "config check", stderr, tc.want...)
			for _, goType := range []string{"config.", "!!str", "!!int", "unmarshal", "int64", "map[string]"} {
				if strings.Contains(stderr, goType) {
					t.Errorf("the problem names Go's types (%q):\n%s", goType, stderr)
				}
			}
		})
	}
}

// A good configuration, and the flags given beside it, check out; a bad flag is a problem too.
func TestConfigCheckGood(t *testing.T) {
	cleanEnv(t)
	out, stderr, err := checkFile(t, "listen: 127.0.0.1:9000\nagent: {kind: openai, model: m, base_url: \"http://127.0.0.1:8000/v1\"}\n")
	if err != nil || !strings.HasSuffix(out, ": ok\n") {
		t.Fatalf("%v %q %q", err, out, stderr)
	}
	_, stderr, err = checkFile(t, "listen: 127.0.0.1:9000\n", "--admin-listen", "nowhere")
	if !errors.As(err, new(exitError)) || !strings.Contains(stderr, `admin_listen "nowhere"`) {
		t.Fatalf("a bad flag: %v %q", err, stderr)
	}
	if out, _, err := runCmd(t, "config", "check"); err != nil || !strings.Contains(out, "embedded defaults") {
		t.Fatalf("the defaults: %v %q", err, out)
	}
	if _, stderr, err := runCmd(t, "config", "check", "-c", filepath.Join(t.TempDir(), "none.yaml")); !errors.As(err, new(exitError)) || !strings.Contains(stderr, "no such file") {
		t.Fatalf("a missing file: %v %q", err, stderr)
	}
}

// config show prints the configuration in effect, the file's values and the flags' merged
// over the defaults, with no secret in it.
func TestConfigShowRedacts(t *testing.T) {
	cleanEnv(t)
	t.Setenv("HERMES_TEST_TG_TOKEN", "123456:tg-secret-token")
	t.Setenv("HERMES_TEST_PG", "pg-secret-pw")
	path := filepath.Join(t.TempDir(), "hermes.yaml")
	os.WriteFile(path, []byte(`store: "postgres://hermes:${HERMES_TEST_PG}@db.internal/hermes"
agent: {kind: openai, model: m, base_url: "http://127.0.0.1:8000/v1", api_key: literal-api-key, headers: {X-Auth: header-secret}}
plugins:
  telegram:
    profiles:
      main: {token: "${HERMES_TEST_TG_TOKEN}", note: "uses ${HERMES_TEST_TG_TOKEN}", mode: poll}
  slack:
    profiles:
      main: {bot_token: xoxb-literal, signing_secret: literal-signing, app_password: pw-literal}
`), 0o600)
	out, _, err := runCmd(t, "config", "show", "-c", path, "--listen", "127.0.0.1:9999")
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"tg-secret-token", "pg-secret-pw", "literal-api-key", "header-secret", "xoxb-literal", "literal-signing", "pw-literal"} {
		if strings.Contains(out, secret) {
			t.Errorf("config show shows %q:\n%s", secret, out)
		}
	}
	contains(t, "config show", out, "listen: 127.0.0.1:9999", "kind: openai", "mode: poll", "call_timeout: 2m30s", // the cron default, merged
		"token: '[redacted]'", "note: uses ${HERMES_TEST_TG_TOKEN}", "api_key: '[redacted]'", "X-Auth: '[redacted]'", "db.internal/hermes")
	if regexp.MustCompile(`(?m): null$`).MatchString(out) {
		t.Errorf("config show prints nulls:\n%s", out)
	}
}
