package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

// newHosts starts n hosts on one fresh PostgreSQL database, each with its own data directory and
// webhook address, all talking to one echo platform (the hosts of one deployment).
func newHosts(t *testing.T, n int) []*world {
	t.Helper()
	source := storetest.Postgres(t).Source
	fake := echotest.New()
	t.Cleanup(fake.Close)
	hosts := make([]*world, n)
	for i := range hosts {
		hosts[i] = newWorldFake(t, source, fake, nil)
	}
	return hosts
}

// gated returns a command that waits for a file before it prints marker and exits with code,
// and a function that creates the file (run at the test's end too, so nothing outlives it).
func gated(t *testing.T, marker string, code int) (cmd string, open func()) {
	t.Helper()
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	open = func() { os.WriteFile(gate, nil, 0o600) }
	t.Cleanup(open)
	// The loop also ends when the directory is gone: the test's cleanup opens the gate and then
	// removes the directory, often before the loop's next look, and a process of a host the test
	// stopped has nobody else to end it.
	return "while [ ! -e '" + gate + "' ] && [ -d '" + dir + "' ]; do sleep 0.05; done; echo " + marker + "; exit " + strconv.Itoa(code), open
}

// mentions matches the platform's messages about process id.
func mentions(id string) func(echotest.Message) bool {
	return func(m echotest.Message) bool { return strings.Contains(m.Text, id) }
}

// countAbout counts the platform's messages about process id.
func countAbout(fake *echotest.Server, id string) int {
	n := 0
	for _, m := range fake.Messages() {
		if strings.Contains(m.Text, id) {
			n++
		}
	}
	return n
}

// settled waits until every event of process id is final (done or suppressed) and the ledger has
// nothing of it on its way, and returns the events.
func settled(t *testing.T, w *world, id string) []process.Record {
	t.Helper()
	for deadline := time.Now().Add(testdeadline.Scale(60 * time.Second)); ; time.Sleep(50 * time.Millisecond) {
		recs, err := w.g.procs.Queue().Events(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		final := len(recs) > 0
		for _, r := range recs {
			final = final && (r.QueueState == "done" || r.QueueState == "suppressed")
		}
		busy := false
		for _, st := range []delivery.State{delivery.Pending, delivery.Sending} {
			for _, r := range w.rows(st) {
				busy = busy || strings.Contains(r.Target.Text, id)
			}
		}
		if final && !busy {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the events of %s never settled: %+v", id, recs)
		}
	}
}

// A host stops for good while background processes it started run: one of the two survivors
// takes it over (the other, racing it for the host's lease, gets nothing) and records them as
// lost. The chat of the first hears so once, within the takeover time; the user of the second
// left the session (/new) after starting it, so its lost notice is stale: dropped with a record,
// never delivered. Before, the processes stayed "running" in every host's view and their chats
// never heard of them.
func TestStoppedHostsProcessesAnnouncedLostOnce(t *testing.T) {
	t.Parallel()
	hosts := newHosts(t, 3)
	a, b := hosts[0], hosts[1]
	for _, chat := range []string{"31", "32"} {
		a.say(chat, "", "hi")
		a.wait("hello", func(m echotest.Message) bool { return m.ChatID == chat })
	}
	cmd, _ := gated(t, "never-seen", 0)
	id := a.spawn(src("31", ""), cmd, nil)
	left := a.spawn(src("32", ""), cmd, nil)
	a.say("32", "", "/new")
	a.wait("the /new confirmation", func(m echotest.Message) bool { return strings.Contains(m.Text, "New conversation") })
	stopped := time.Now()
	a.stop() // the host is gone; its processes run on, watched by nobody
	b.wait("the lost notice", mentions(id))
	t.Logf("announced %v after the host stopped", time.Since(stopped).Round(time.Millisecond))
	recs := settled(t, b, id)
	if len(recs) != 1 || recs[0].Kind != process.EventCompletion || recs[0].State != process.StateLost ||
		recs[0].Reason != process.ReasonHostLost || recs[0].QueueState != "done" || strings.HasPrefix(recs[0].Outcome, "dropped") {
		t.Fatalf("events %+v", recs)
	}
	if n := countAbout(a.fake, id); n != 1 {
		t.Fatalf("the chat heard of %s %d times: %+v", id, n, a.fake.Messages())
	}
	in, err := b.g.procs.Inspect(context.Background(), id)
	if err != nil || in.State != process.StateLost || in.Reason != process.ReasonHostLost {
		t.Fatalf("ps: %+v %v", in, err)
	}
	if in.Host != b.g.shared.id && in.Host != hosts[2].g.shared.id {
		t.Fatalf("recorded by %q, not by a survivor", in.Host)
	}

	recs = settled(t, b, left)
	if len(recs) != 1 || recs[0].State != process.StateLost || !strings.HasPrefix(recs[0].Outcome, "dropped") ||
		!strings.Contains(recs[0].Outcome, "user_boundary") {
		t.Fatalf("events of the process of the left session %+v", recs)
	}
	dropped := 0
	for _, r := range b.rows(delivery.Dropped) {
		if r.Origin == left {
			dropped++
		}
	}
	if dropped != 1 {
		t.Fatalf("%d ledger records of the dropped notice", dropped)
	}
	if n := countAbout(a.fake, left); n != 0 {
		t.Fatalf("the stale lost notice was delivered: %+v", a.fake.Messages())
	}
}

// A host is paused past its lease (SIGSTOP, then SIGCONT): a survivor takes it over and records
// its running process as lost, and the chat may hear so. The host comes back with its registry
// still tracking the process, holds its lease again and re-records the process (running), and
// when the process ends the chat hears the real end exactly once, after the lost notice or in
// its place; the row ends with the true exit code.
func TestPausedHostComesBack(t *testing.T) {
	t.Parallel()
	hosts := newHosts(t, 2)
	a, b := hosts[0], hosts[1]
	ctx := context.Background()
	a.say("33", "", "hi")
	a.wait("hello", func(echotest.Message) bool { return true })
	cmd, open := gated(t, "the-real-end", 3)
	id := a.spawn(src("33", ""), cmd, nil)
	// The pause: host a's lease runs out and b claims it (the claim's new fence makes a's next
	// renewal fail, as after a real pause; a campaigns for it again only a third of the lease
	// later, by when b has done its takeover).
	takeOver(t, b, a)
	if in, _ := b.g.procs.Inspect(ctx, id); in.State != process.StateLost {
		t.Fatalf("after the takeover: %+v", in)
	}
	// Back: a holds its lease again and re-records the process it still runs.
	for deadline := time.Now().Add(testdeadline.Scale(60 * time.Second)); ; time.Sleep(50 * time.Millisecond) {
		if in, _ := b.g.procs.Inspect(ctx, id); in.State == process.StateRunning && in.Host == a.g.shared.id {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the host that came back never reconciled its process")
		}
	}
	lost := countAbout(a.fake, id) // 1 if the lost notice went out before a came back, else 0
	open()
	a.wait("the real end", func(m echotest.Message) bool { return mentions(id)(m) && strings.Contains(m.Text, "exit 3") })
	recs := settled(t, a, id)
	in, err := a.g.procs.Inspect(ctx, id)
	if err != nil || in.State != process.StateExited || in.ExitCode == nil || *in.ExitCode != 3 || in.Host != a.g.shared.id {
		t.Fatalf("ps: %+v %v", in, err)
	}
	real := 0
	for _, m := range a.fake.Messages() {
		if mentions(id)(m) && strings.Contains(m.Text, "exit 3") {
			real++
		}
	}
	if real != 1 || countAbout(a.fake, id) != lost+1 {
		t.Fatalf("the chat heard %d real ends, %d messages about %s in all (%d lost notices): %+v; events %+v",
			real, countAbout(a.fake, id), id, lost, a.fake.Messages(), recs)
	}
	t.Logf("lost notice delivered before the host came back: %v; events %+v", lost == 1, recs)
}

// A host taken over while it was paused goes on when it resumes and, before it holds its lease
// again, starts a process; then it stops for good. No lease of it is left to expire, yet a
// survivor finds the process (it names a host without a lease), takes it over and records it as
// lost, once. Before, nobody ever did: the process ran on with its chat never told (found by
// the promise checker: no-process-left-running).
func TestWorkOfAHostGoneAfterItsTakeoverIsTakenOver(t *testing.T) {
	t.Parallel()
	hosts := newHosts(t, 2)
	a, b := hosts[0], hosts[1]
	a.say("34", "", "hi")
	a.wait("hello", func(echotest.Message) bool { return true })
	// The pause: b claims a's lease and takes a over (there is nothing to take yet).
	takeOver(t, b, a)
	// a resumes and, before it takes its lease back (a third of the lease later), starts a
	// process; then it stops. (Had it taken its lease back, it releases it as it stops, and the
	// ordinary takeover follows: the outcome asserted below is the same.)
	cmd, _ := gated(t, "never-seen", 0)
	id := a.spawn(src("34", ""), cmd, nil)
	a.stop()
	b.wait("the lost notice", mentions(id))
	recs := settled(t, b, id)
	if len(recs) != 1 || recs[0].State != process.StateLost || recs[0].Reason != process.ReasonHostLost {
		t.Fatalf("events %+v", recs)
	}
	if n := countAbout(a.fake, id); n != 1 {
		t.Fatalf("the chat heard of %s %d times: %+v", id, n, a.fake.Messages())
	}
}

// takeOver makes host paused's lease run out, as a pause past it would, and has survivor claim
// it and take paused over at once (one sweep).
func takeOver(t *testing.T, survivor, paused *world) {
	t.Helper()
	ctx := context.Background()
	if _, err := survivor.g.db.ExecContext(ctx, `UPDATE leases SET expires_at = 0, fence = fence + 1 WHERE name = $1`, "host:"+paused.g.shared.id); err != nil {
		t.Fatal(err)
	}
	survivor.g.shared.sweep(ctx, survivor.g)
}
