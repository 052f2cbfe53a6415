package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPruneForgetsOldProcesses: an ended process is forgotten Retention after it ended (its row,
// its final events, its log and exit files), unless an event of it is still undelivered: that
// process waits until the event is final, and goes at the next prune after that.
func TestPruneForgetsOldProcesses(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	a := e.spawn(SpawnRequest{Command: `echo a`})
	b := e.spawn(SpawnRequest{Command: `echo b`, NotifyOnComplete: true})
	e.waitEnd(a.ID)
	e.waitEnd(b.ID)
	files := func(id string) []string {
		return []string{filepath.Join(e.dir, "proc", id+".log"), filepath.Join(e.dir, "proc", id+".exit")}
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	if !exists(files(a.ID)[0]) || !exists(files(b.ID)[0]) {
		t.Fatal("no log files to prune")
	}
	// a's completion is delivered; b's stays undelivered.
	deliver := func(id string) {
		t.Helper()
		claimed, err := e.r.Queue().Claim(ctx, 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claimed {
			if c.ProcID == id {
				err = e.r.Queue().Ack(ctx, c.Seq, c.Token, "delivered")
			} else {
				err = e.r.Queue().Release(ctx, c.Seq, c.Token, 0)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	deliver(a.ID)
	known := func(id string) bool {
		t.Helper()
		_, err := loadRow(ctx, e.db, id)
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	if err := e.r.prune(ctx, time.Now().Add(e.r.opt.Retention-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !known(a.ID) || !known(b.ID) || !exists(files(a.ID)[0]) {
		t.Fatal("a prune within the retention removed a process")
	}
	if err := e.r.prune(ctx, time.Now().Add(e.r.opt.Retention+time.Hour)); err != nil {
		t.Fatal(err)
	}
	if known(a.ID) || len(e.events(a.ID)) != 0 {
		t.Fatalf("a process ended past the retention is still known (events %v)", e.events(a.ID))
	}
	for _, f := range files(a.ID) {
		if exists(f) {
			t.Fatalf("%s stayed after its process was pruned", f)
		}
	}
	if !known(b.ID) || len(e.completions(b.ID)) != 1 || !exists(files(b.ID)[0]) {
		t.Fatal("a process with an undelivered completion was pruned")
	}
	deliver(b.ID)
	if err := e.r.prune(ctx, time.Now().Add(e.r.opt.Retention+time.Hour)); err != nil {
		t.Fatal(err)
	}
	if known(b.ID) || exists(files(b.ID)[0]) {
		t.Fatal("a process whose completion was delivered stayed past the retention")
	}
}
