package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

// TestBackupBesideAServingHost: `hermes-host backup FILE` copies the store while a host serves
// and chats keep writing; the copy opens as a sound database holding the conversations so far.
// The same FILE again is refused and left alone, and a PostgreSQL store is pointed at pg_dump.
// Restored as the README says (stop the host, remove the -wal and -shm files, copy the file to
// data_dir/hermes.db), the copy is what the next start serves from.
func TestBackupBesideAServingHost(t *testing.T) {
	t.Parallel()
	fake := echotest.New()
	defer fake.Close()
	bin, plugins := buildHost(t)
	data := t.TempDir()
	config := filepath.Join(data, "hermes.yaml")
	os.WriteFile(config, []byte(fmt.Sprintf(`
demo: {plugin: ""}
plugins:
  echo:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {outbox_url: "%s/outbox"}
    access:
      main: {allow_all: true}
`, fake.URL())), 0o600)
	h := serve(t, bin, plugins, data, "--config", config)

	// Chats write (inbox rows, transcripts, deliveries) before, during and after the backup.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	for c := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if code, _ := postEvent(t, h.Addr, fmt.Sprintf("b%d-%d", c, i), fmt.Sprintf("bc%d", c)); code == http.StatusOK {
					mu.Lock()
					accepted++
					mu.Unlock()
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	seen := 0 // the matcher sees each accepted message once, in order
	mustWait(t, fake, "20 answers", func(echotest.Message) bool { seen++; return seen >= 20 })

	file := filepath.Join(t.TempDir(), "hermes-backup.db")
	out, err := runCLI(bin, data, "--config", config, "backup", file)
	if err != nil || !strings.Contains(out, "backed up") || !strings.Contains(out, "to restore") {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	time.Sleep(testdeadline.Scale(200 * time.Millisecond)) // and the chats go on a little
	close(stop)
	wg.Wait()

	before, _ := os.ReadFile(file)
	out, err = runCLI(bin, data, "--config", config, "backup", file)
	if err == nil || !strings.Contains(out, "exists") {
		t.Fatalf("a backup onto an existing file: %v\n%s", err, out)
	}
	if after, _ := os.ReadFile(file); string(after) != string(before) {
		t.Fatal("the refused backup changed the existing file")
	}
	pg := filepath.Join(t.TempDir(), "pg.yaml")
	os.WriteFile(pg, []byte("store: \"postgres://hermes@127.0.0.1:1/hermes\"\n"), 0o600)
	if out, err := runCLI(bin, data, "--config", pg, "backup", filepath.Join(t.TempDir(), "x.db")); err == nil || !strings.Contains(out, "pg_dump") {
		t.Fatalf("backup of a PostgreSQL store: %v\n%s", err, out)
	}

	db, err := store.Open(file, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var check string
	var inCopy, answered int
	err = db.QueryRow(`PRAGMA integrity_check`).Scan(&check)
	if err == nil {
		err = db.QueryRow(`SELECT COUNT(*) FROM turn_inbox`).Scan(&inCopy)
	}
	if err == nil {
		err = db.QueryRow(`SELECT COUNT(*) FROM deliveries WHERE state = 'delivered'`).Scan(&answered)
	}
	db.Close()
	if err != nil || check != "ok" {
		t.Fatalf("the copy: integrity %q, %v", check, err)
	}
	mu.Lock()
	total := accepted
	mu.Unlock()
	if inCopy < 20 || inCopy > total || answered < 20 {
		t.Fatalf("the copy holds %d inbox rows and %d delivered answers; %d events were accepted in all, 20 answered before the backup",
			inCopy, answered, total)
	}
	t.Logf("backup: %d of %d events and %d delivered answers in the copy (%d bytes)", inCopy, total, answered, len(before))

	// Restore as the README says: stop the host (SIGTERM: it drains), replace the database.
	h.Signal(syscall.SIGTERM)
	if code, ok := h.Wait(testdeadline.Scale(60 * time.Second)); !ok || code != 0 {
		t.Fatalf("the host's stop: exited %v, code %d", ok, code)
	}
	dbPath := filepath.Join(data, "hermes.db")
	os.Remove(dbPath + "-wal")
	os.Remove(dbPath + "-shm")
	src, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(dbPath, os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	src.Close()
	dst.Close()
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	// It serves from the copy: what came after the backup is not in it (a restore goes back to
	// the backup's moment), and what the copy held is there.
	restored, err := store.Open(dbPath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close()
	var inbox, delivered int
	err = restored.QueryRow(`SELECT COUNT(*) FROM turn_inbox`).Scan(&inbox)
	if err == nil {
		err = restored.QueryRow(`SELECT COUNT(*) FROM deliveries WHERE state = 'delivered'`).Scan(&delivered)
	}
	if err != nil || inbox != inCopy || delivered < answered {
		t.Fatalf("the restored host has %d inbox rows and %d delivered answers (%v); the copy held %d and %d", inbox, delivered, err, inCopy, answered)
	}
}
