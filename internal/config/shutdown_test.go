package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestShutdownTimeout: 20 s by default; a file may set another; zero, negative and over an
// hour are refused with the key's name.
func TestShutdownTimeout(t *testing.T) {
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(c.ShutdownTimeout); d != 20*time.Second {
		t.Fatalf("default shutdown_timeout %v, want 20s", d)
	}
	dir := t.TempDir()
	load := func(body string) (*Config, error) {
		path := filepath.Join(dir, "hermes.yaml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return Load(path)
	}
	if c, err := load("shutdown_timeout: 90s\n"); err != nil || time.Duration(c.ShutdownTimeout) != 90*time.Second {
		t.Fatalf("shutdown_timeout: 90s: %v %v", c, err)
	}
	for _, bad := range []string{"0s", "-5s", "2h"} {
		_, err := load("shutdown_timeout: " + bad + "\n")
		if err == nil || !strings.Contains(err.Error(), "shutdown_timeout") {
			t.Errorf("shutdown_timeout: %s: error %v, want one naming the key", bad, err)
		}
	}
}
