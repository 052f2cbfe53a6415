package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

var reProcID = regexp.MustCompile(`proc_[0-9a-f]{12}`)

// TestKilledHostsProcessAnnouncedLost: two real `hermes-host serve` processes share one
// PostgreSQL database. The first runs a background `sleep` for the chat and is killed with
// SIGKILL. Once its host lease has expired (5 s) the survivor's sweep (every 2 s) takes it over
// and records the process as lost, and the chat hears so exactly once ("outcome unknown"); `ps`
// shows it lost with its reason. Before, the process stayed "running" forever and the chat never
// heard of it.
func TestKilledHostsProcessAnnouncedLost(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	if testing.Short() {
		t.Skip("multi-host run skipped in -short mode")
	}
	backend := storetest.Postgres(t)
	bin, plugins := buildHost(t)
	fake := echotest.New()
	defer fake.Close()
	type inst struct{ data, cfg, addr string }
	var insts [2]*inst
	for i := range insts {
		h := &inst{data: t.TempDir()}
		h.cfg = filepath.Join(h.data, "hermes.yaml")
		os.WriteFile(h.cfg, []byte(fmt.Sprintf(`
store: "%s"
demo: {plugin: ""}
plugins:
  echo:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {outbox_url: "%s/outbox"}
    access:
      main: {allow_all: true, tools: [shell, processes]}
`, backend.Source, fake.URL())), 0o600)
		insts[i] = h
	}
	a := &host{t: t, bin: bin, plugins: plugins, data: insts[0].data, config: insts[0].cfg}
	a.start()
	b := &host{t: t, bin: bin, plugins: plugins, data: insts[1].data, config: insts[1].cfg}
	b.start()

	a.say("run sleep 300")
	started := mustWait(t, fake, "the start confirmation", echotest.Has("Started"))
	id := reProcID.FindString(started.Text)
	if id == "" {
		t.Fatalf("no process id in %q", started.Text)
	}
	db, err := store.OpenSource(context.Background(), backend.Source, t.TempDir(), store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var pid int
	if err := db.QueryRow(`SELECT pid FROM processes WHERE id = $1`, id).Scan(&pid); err != nil || pid <= 0 {
		t.Fatalf("pid of %s: %d %v", id, pid, err)
	}
	t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGKILL) }) // the orphan nobody watches any more

	killed := time.Now()
	a.kill9()
	lost := mustWait(t, fake, "the lost notice", func(m echotest.Message) bool {
		return strings.Contains(m.Text, id) && strings.Contains(m.Text, "unknown")
	})
	t.Logf("announced %v after the kill: %q", time.Since(killed).Round(time.Millisecond), lost.Text)
	eventually(t, "the notice's event to be final", func() bool {
		var open int
		db.QueryRow(`SELECT COUNT(*) FROM process_events WHERE proc_id = $1 AND state IN ('pending', 'claimed')`, id).Scan(&open)
		return open == 0
	})
	var state, reason string
	var events int
	db.QueryRow(`SELECT state, reason FROM processes WHERE id = $1`, id).Scan(&state, &reason)
	db.QueryRow(`SELECT COUNT(*) FROM process_events WHERE proc_id = $1`, id).Scan(&events)
	if state != "lost" || reason != "host_lost" || events != 1 {
		t.Fatalf("row %s/%s with %d events", state, reason, events)
	}
	// The one event was delivered once, and the host that is left serves on.
	b.say("ps")
	mustWait(t, fake, "ps after the takeover", echotest.Has("Processes"))
	n := 0
	for _, m := range fake.Messages() {
		if strings.Contains(m.Text, id) && !strings.HasPrefix(m.Text, "Started") && !strings.Contains(m.Text, "Processes") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the chat heard of the lost process %d times: %+v", n, fake.Messages())
	}
	out, err := runCLI(bin, insts[1].data, "--config", insts[1].cfg, "ps")
	if err != nil || !strings.Contains(out, "lost: host_lost") {
		t.Fatalf("ps: %v\n%s", err, out)
	}
}
