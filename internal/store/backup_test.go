package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestBackupWhileWriting: a backup taken from one connection pool while another (as a serving
// host would) keeps committing rows is a sound database holding at least every row committed
// before the backup began; the file is the owner's only; a second backup to the same file is
// refused and leaves it as it was.
func TestBackupWhileWriting(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "hermes.db")
	host, err := Open(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if _, err := host.Exec(`CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	var committed atomic.Int64
	stop, underWay := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer func() {
			if committed.Load() < 200 {
				close(underWay)
			}
		}()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := host.Exec(`INSERT INTO notes (text) VALUES ($1)`, strings.Repeat("x", 200)); err != nil {
				t.Errorf("writer: %v", err)
				return
			}
			if committed.Add(1) == 200 {
				close(underWay)
			}
		}
	})
	<-underWay // the writer is well under way (or failed)
	if t.Failed() {
		t.FailNow()
	}
	cli, err := Open(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	before := committed.Load()
	copyPath := filepath.Join(dir, "backup.db")
	if err := Backup(context.Background(), cli, copyPath); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if fi, err := os.Stat(copyPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the backup file: %v %v, want mode 0600", fi, err)
	}
	if err := Backup(context.Background(), cli, copyPath); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a second backup to the same file: %v, want a refusal", err)
	}

	cp, err := Open(copyPath, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	var check string
	if err := cp.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check of the copy: %q %v", check, err)
	}
	var n int64
	if err := cp.QueryRow(`SELECT COUNT(*) FROM notes`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n < before || n > committed.Load() {
		t.Fatalf("the copy holds %d rows; %d were committed before the backup began, %d by the end", n, before, committed.Load())
	}
	t.Logf("%d rows committed before the backup, %d in the copy, %d by the end", before, n, committed.Load())
}
