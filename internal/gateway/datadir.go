package gateway

import (
	"fmt"
	"log/slog"
	"os"
)

// privateDir creates the data directory with mode 0700, or narrows an existing one to it: the
// database (transcripts, every outbound text), the admin token and the demo secret live there.
func privateDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("data directory %s: narrowing mode %v to 0700: %w", dir, fi.Mode().Perm(), err)
		}
		log.Warn("data directory was accessible to other users; narrowed to 0700", "dir", dir, "was", fi.Mode().Perm().String())
	}
	return nil
}
