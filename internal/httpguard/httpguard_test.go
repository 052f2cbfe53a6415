package httpguard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecret: created once with mode 0600 and read back the same; a file others can read is
// refused rather than trusted.
func TestSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "admin.token")
	s1, err := Secret(path)
	if err != nil || len(s1) != 64 {
		t.Fatalf("secret %q %v", s1, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode().Perm())
	}
	if s2, err := Secret(path); err != nil || s2 != s1 {
		t.Fatalf("second read %q %v", s2, err)
	}
	if s3, err := ReadSecret(path); err != nil || s3 != s1 {
		t.Fatalf("ReadSecret %q %v", s3, err)
	}
	os.Chmod(path, 0o644)
	if _, err := Secret(path); err == nil || !strings.Contains(err.Error(), "readable by other users") {
		t.Fatalf("loose file: %v", err)
	}
}
