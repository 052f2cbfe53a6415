package process

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

// putRow writes a checkpoint directly, as an earlier host would have.
func putRow(t testing.TB, db *sql.DB, in Info) bool {
	t.Helper()
	var applied bool
	err := store.WithTx(context.Background(), db, func(tx *sql.Tx) error {
		var err error
		applied, err = writeRow(context.Background(), newStmtTx(tx), &in, in.Host, time.Now())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return applied
}

func storedInfo(id string, pid int, ticks uint64) Info {
	return Info{
		ID: id, Gen: 2, Command: "sleep 300", PID: pid, StartTicks: ticks, State: StateRunning,
		Stamp: testStamp("S1"), NotifyOnComplete: true, OutputChars: 2000, StartedAt: time.Now().Add(-time.Minute),
		Owner: "1:1", // a writer that is not alive (pid 1 never has start time 1 tick)
	}
}

// startSleeper starts a live process of the test's own, in its own process group, that is
// not known to any registry.
func startSleeper(t *testing.T) (*exec.Cmd, procStat) {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	st, err := readProcStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, st
}

// Scenario 11: a checkpointed pid that is alive but has another start time is a different
// process. It is neither adopted nor signalled; the checkpoint ends as lost, reported once.
func TestRecoverPIDReuseNotAdoptedNorSignalled(t *testing.T) {
	e := newEnv(t, Options{})
	sleeper, st := startSleeper(t)
	pid := sleeper.Process.Pid
	in := storedInfo("proc_aaaaaaaaaaaa", pid, st.startTicks+1) // forged: the "old" process started a tick later
	in.Reason = ReasonKill                                      // even a kill in progress must not signal it
	putRow(t, e.db, in)

	rep := e.reopen()
	if len(rep.Adopted) != 0 || rep.Killed != 1 {
		t.Fatalf("report %+v", rep)
	}
	row := e.row(in.ID)
	if row.State != StateKilled || row.ExitCode != nil || row.Gen != 3 {
		t.Fatalf("checkpoint %+v", row)
	}
	if e.r.lookup(in.ID) != nil {
		t.Fatal("recycled pid is tracked")
	}
	// Give the registry's loop a few ticks to do something wrong, then check the stranger lives.
	e.flush()
	time.Sleep(5 * e.opts.PollInterval)
	if l, _ := checkLive(pid, st.startTicks); l != alive {
		t.Fatal("the process that reused the pid was signalled")
	}
	if cs := e.completions(in.ID); len(cs) != 1 || cs[0].QueueState != qPending || cs[0].ExitCode != nil {
		t.Fatalf("completions %+v", cs)
	}
	// A plain lost one (no kill in progress) says why.
	in2 := storedInfo("proc_bbbbbbbbbbbb", pid, st.startTicks+1)
	putRow(t, e.db, in2)
	e.reopen()
	if row := e.row(in2.ID); row.State != StateLost || row.Reason != ReasonRecycled {
		t.Fatalf("checkpoint %+v", row)
	}
}

// A checkpoint written by a host that is still alive (another pid:starttime) is not ours.
func TestRecoverSkipsLiveForeignWriter(t *testing.T) {
	e := newEnv(t, Options{})
	other, st := startSleeper(t) // stands in for another live host
	in := storedInfo("proc_cccccccccccc", 999999, 1)
	in.Owner = fmt.Sprintf("%d:%d", other.Process.Pid, st.startTicks)
	putRow(t, e.db, in)
	rep := e.reopen()
	if rep.Skipped != 1 {
		t.Fatalf("report %+v", rep)
	}
	if row := e.row(in.ID); row.State != StateRunning || row.Gen != in.Gen {
		t.Fatalf("foreign checkpoint touched: %+v", row)
	}
}

func TestRecoverInterruptedSpawnIsLost(t *testing.T) {
	e := newEnv(t, Options{})
	in := storedInfo("proc_dddddddddddd", 0, 0)
	in.State, in.Gen = StateStarting, 1
	putRow(t, e.db, in)
	rep := e.reopen()
	if rep.Lost != 1 {
		t.Fatalf("report %+v", rep)
	}
	row := e.row(in.ID)
	if row.State != StateLost || row.Reason != ReasonSpawnCrash || row.Stamp != testStamp("S1") {
		t.Fatalf("checkpoint %+v", row)
	}
	e.reopen()
	if cs := e.completions(in.ID); len(cs) != 1 || cs[0].Stamp != testStamp("S1") {
		t.Fatalf("completions %+v", cs)
	}
}

// The host stopped between starting a process and checkpointing its pid: Recover finds the
// process by the id in its environment and adopts it.
func TestRecoverFindsProcessStartedBeforeItsPidWasRecorded(t *testing.T) {
	e := newEnv(t, Options{})
	id := "proc_ffffffffff01"
	cmd := exec.Command("/bin/sh", "-c", wrapperScript, e.r.opt.Shell, "sleep 300", e.dir+"/proc/"+id+".exit")
	cmd.Env = append(cmd.Environ(), "HERMES_PROCESS_ID="+id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-exited })
	in := storedInfo(id, 0, 0)
	in.State, in.Gen = StateStarting, 1
	putRow(t, e.db, in)

	rep := e.reopen()
	if len(rep.Adopted) != 1 || rep.Adopted[0] != id {
		t.Fatalf("report %+v", rep)
	}
	row := e.row(id)
	if row.State != StateRunning || row.PID != cmd.Process.Pid || !row.Adopted || row.StartTicks == 0 {
		t.Fatalf("checkpoint %+v", row)
	}
	if _, err := e.r.Kill(context.Background(), id, KillOptions{}); err != nil {
		t.Fatal(err)
	}
	<-exited
	if cs := e.completions(id); len(cs) != 1 || cs[0].State != StateKilled {
		t.Fatalf("completions %+v", cs)
	}
}

// In-process restart: a live process is re-adopted, its output continues from the log file, its
// end is seen by polling /proc and its exit status comes from the exit file.
func TestRecoverAdoptsLiveProcess(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	gate, open := e.gate("adopt")
	res := e.spawn(SpawnRequest{Command: "echo before; " + waitGate(gate) + "echo after; exit 4", NotifyOnComplete: true, WatchPatterns: nil})
	killMe := e.spawn(SpawnRequest{Command: "sleep 300"})
	waitFor(t, "first output", func() bool {
		st, _ := e.r.Poll(ctx, res.ID)
		return st.OutputBytes > 0
	})
	rep := e.reopen()
	if len(rep.Adopted) != 2 {
		t.Fatalf("report %+v", rep)
	}
	st, err := e.r.Poll(ctx, res.ID)
	if err != nil || !st.Adopted || st.State != StateRunning || st.Output != "before" {
		t.Fatalf("adopted %+v %q %v", st.Info, st.Output, err)
	}
	open()
	end := e.waitEnd(res.ID)
	if end.State != StateExited || end.ExitCode == nil || *end.ExitCode != 4 || end.Output != "before\nafter" {
		t.Fatalf("end %+v %q", end.Info, end.Output)
	}
	// Kill of an adopted process: the start time is checked, then the group is signalled.
	in, err := e.r.Kill(ctx, killMe.ID, KillOptions{})
	if err != nil || in.State != StateKilled {
		t.Fatalf("kill adopted %+v %v", in, err)
	}
	e.reopen()
	e.reopen()
	for _, id := range []string{res.ID, killMe.ID} {
		if cs := e.completions(id); len(cs) != 1 {
			t.Fatalf("%s: %d completions", id, len(cs))
		}
	}
}

// An older snapshot that lands after a newer one does not overwrite it. The order is forced:
// the older writer starts only after the newer one committed. Both write through their own
// connection pool, as two processes would.
func TestCheckpointOlderSnapshotLandingLateIsIgnored(t *testing.T) {
	e := newEnv(t, Options{})
	res := e.spawn(SpawnRequest{Command: "sleep 300"})
	p := e.r.lookup(res.ID)
	p.mu.Lock()
	base := p.info
	p.mu.Unlock()

	older, newer := base, base
	older.Gen, older.NotifyOnComplete, older.Reason = base.Gen+1, false, "older"
	newer.Gen, newer.NotifyOnComplete, newer.WatchDisabled, newer.Reason = base.Gen+2, true, true, "newer"

	dbA, dbB := e.openSecond(), e.openSecond()
	newerCommitted := make(chan struct{})
	var wg sync.WaitGroup
	var olderApplied, newerApplied bool
	wg.Add(2)
	go func() {
		defer wg.Done()
		<-newerCommitted
		olderApplied = putRow(t, dbA, older)
	}()
	go func() {
		defer wg.Done()
		newerApplied = putRow(t, dbB, newer)
		close(newerCommitted)
	}()
	wg.Wait()
	if !newerApplied || olderApplied {
		t.Fatalf("applied: newer %v older %v", newerApplied, olderApplied)
	}
	row := e.row(res.ID)
	if row.Gen != newer.Gen || row.Reason != "newer" || !row.NotifyOnComplete || !row.WatchDisabled {
		t.Fatalf("row %+v", row)
	}
	// Through the registry's writer: a stale row applies nothing, and its events are not queued.
	stale := older
	o := e.r.w.submit(&op{row: &stale, events: []queuedEvent{{state: qPending, ev: Event{Kind: EventWatchMatch, ProcID: res.ID}}}})
	if err := o.wait(); err != nil || o.applied {
		t.Fatalf("stale op: applied %v err %v", o.applied, err)
	}
	if len(e.events(res.ID)) != 0 {
		t.Fatal("stale op queued an event")
	}
}

// Many writers, random order: the row ends at the highest generation with that snapshot's data.
func TestCheckpointConcurrentWritersKeepNewest(t *testing.T) {
	e := newEnv(t, Options{})
	base := storedInfo("proc_eeeeeeeeeeee", 0, 0)
	base.Gen = 1
	putRow(t, e.db, base)
	dbs := []*sql.DB{e.db, e.openSecond(), e.openSecond()}
	gens := rand.Perm(120)
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(gens); i += 6 {
				in := base
				in.Gen = int64(gens[i]) + 2
				in.Reason = fmt.Sprint("gen-", in.Gen)
				putRow(t, dbs[i%len(dbs)], in)
			}
		}()
	}
	wg.Wait()
	row := e.row(base.ID)
	if row.Gen != 121 || row.Reason != "gen-121" {
		t.Fatalf("row gen %d reason %q", row.Gen, row.Reason)
	}
}

func TestParseProcStat(t *testing.T) {
	// The command name may contain spaces and parentheses.
	line := "4242 (we ird) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615\n"
	st, err := parseProcStat([]byte(line))
	if err != nil || st.state != 'S' || st.pgid != 4242 || st.startTicks != 987654 {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := parseProcStat([]byte("garbage")); err == nil {
		t.Fatal("garbage parsed")
	}
	if l, err := checkLive(1<<30, 5); err != nil || l != gone {
		t.Fatalf("impossible pid: %v %v", l, err)
	}
	self, _ := readProcStat(syscall.Getpid())
	if l, _ := checkLive(syscall.Getpid(), self.startTicks); l != alive {
		t.Fatal("self not alive")
	}
	if l, _ := checkLive(syscall.Getpid(), 0); l != recycled {
		t.Fatal("unknown start time must never count as the same process")
	}
	if !strings.Contains(selfIdentity(), ":") || ownerAliveElsewhere(selfIdentity()) {
		t.Fatal("self identity")
	}
}
