package process

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// survivor opens another host's registry on e's database (its own connection pool and data
// directory, as a second host would), closed when the test ends.
func (e *env) survivor(host string) *Registry {
	e.t.Helper()
	r, err := New(context.Background(), e.openSecond(), Options{DataDir: e.t.TempDir(), Host: host, PollInterval: 20 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { r.Close() })
	return r
}

// kinds returns id's events of kind.
func (e *env) kinds(id string, kind EventKind) []Record {
	var out []Record
	for _, r := range e.events(id) {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// Two survivors take over a host that stopped at the same moment (the lease claim lets one do
// it; the second may be one whose claim came after the first died mid-way): each of the host's
// running processes is recorded as lost once, with one "host lost, outcome unknown" completion
// queued with the row, and nothing of the survivors' own is touched.
func TestTakeOverAnnouncesOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		e := newEnvOn(t, b, Options{Host: "hostA"})
		notify := e.spawn(SpawnRequest{Command: "sleep 30", NotifyOnComplete: true})
		quiet := e.spawn(SpawnRequest{Command: "sleep 30"})
		s1, s2 := e.survivor("hostB"), e.survivor("hostC")
		own, err := s1.Spawn(ctx, SpawnRequest{Command: "sleep 30", Stamp: testStamp("S1")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s1.Kill(context.Background(), own.ID, KillOptions{}) })

		var wg sync.WaitGroup
		start := make(chan struct{})
		counts := make([]int, 2)
		for i, s := range []*Registry{s1, s2} {
			wg.Go(func() {
				<-start
				n, err := s.TakeOver(ctx, "hostA")
				if err != nil {
					t.Error(err)
				}
				counts[i] = n
			})
		}
		close(start)
		wg.Wait()
		if counts[0]+counts[1] != 2 {
			t.Fatalf("the survivors recorded %v processes as lost, want 2 in all", counts)
		}
		for _, id := range []string{notify.ID, quiet.ID} {
			row := e.row(id)
			if row.State != StateLost || row.Reason != ReasonHostLost || row.ExitCode != nil || row.EndedAt.IsZero() ||
				(row.Host != "hostB" && row.Host != "hostC") {
				t.Fatalf("row %+v", row)
			}
			c := e.completions(id)
			if len(c) != 1 || c[0].QueueState != qPending || c[0].State != StateLost || c[0].Reason != ReasonHostLost ||
				c[0].ExitCode != nil || !strings.Contains(c[0].Message, "hostA") {
				t.Fatalf("completions of %s: %+v", id, c)
			}
		}
		if c := e.completions(notify.ID); !c[0].Notify {
			t.Fatalf("the lost notice lost notify_on_complete: %+v", c[0])
		}
		if n, err := s2.TakeOver(ctx, "hostA"); err != nil || n != 0 {
			t.Fatalf("a second takeover recorded %d (%v)", n, err)
		}
		if row := e.row(own.ID); row.State != StateRunning || row.Host != "hostB" {
			t.Fatalf("the survivor's own process: %+v", row)
		}
	})
}

// A host that was only paused comes back while its registry still tracks the process: its
// checkpoints are not applied over the survivor's record as if nothing happened, nor swallowed as
// stale; the process's truth is reconciled. The chat hears once: the real end replaces the lost
// notice while that is still queued, or corrects it once when it was delivered; a process still
// running is running again, and its queued lost notice is withdrawn until the real end.
func TestReturningHostReconciles(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		for _, tc := range []struct {
			name      string
			delivered bool // the lost notice was delivered before the host came back
			reassert  bool // the host re-records its processes (its lease held again) before the end
		}{
			{name: "queued"},
			{name: "delivered", delivered: true},
			{name: "running", reassert: true},
			{name: "running_delivered", delivered: true, reassert: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnvOn(t, b.Fresh(t), Options{Host: "hostA"})
				gate, open := e.gate("end")
				res := e.spawn(SpawnRequest{Command: waitGate(gate) + "echo the-real-end; exit 3", NotifyOnComplete: true})
				s := e.survivor("hostB")
				if n, err := s.TakeOver(ctx, "hostA"); err != nil || n != 1 {
					t.Fatalf("takeover %d %v", n, err)
				}
				if tc.delivered {
					c, err := s.Queue().Claim(ctx, 10, time.Minute)
					if err != nil || len(c) != 1 || c[0].State != StateLost {
						t.Fatalf("claim %+v %v", c, err)
					}
					if err := s.Queue().Ack(ctx, c[0].Seq, c[0].Token, "delivered"); err != nil {
						t.Fatal(err)
					}
				}
				if tc.reassert {
					n, err := e.r.Reassert(ctx)
					if err != nil || n != 1 {
						t.Fatalf("reassert %d %v", n, err)
					}
					if row := e.row(res.ID); row.State != StateRunning || row.Host != "hostA" || row.Reason != "" || !row.EndedAt.IsZero() {
						t.Fatalf("after reassert %+v", row)
					}
					c := e.completions(res.ID)
					if want := map[bool]string{false: qSuppressed, true: qDone}[tc.delivered]; len(c) != 1 || c[0].QueueState != want {
						t.Fatalf("lost notice after reassert %+v, want %s", c, want)
					}
					if !tc.delivered && c[0].Outcome != outcomeWithdrawn {
						t.Fatalf("queued lost notice not withdrawn: %+v", c[0])
					}
				}
				open()
				e.waitEnd(res.ID)
				row := e.row(res.ID)
				if row.State != StateExited || row.ExitCode == nil || *row.ExitCode != 3 || row.Host != "hostA" {
					t.Fatalf("row after the real end %+v", row)
				}
				c, corr := e.completions(res.ID), e.kinds(res.ID, EventCorrection)
				if len(c) != 1 {
					t.Fatalf("completions %+v", c)
				}
				real := c[0].Event
				if tc.delivered {
					if c[0].QueueState != qDone || c[0].State != StateLost || len(corr) != 1 || corr[0].QueueState != qPending {
						t.Fatalf("want the delivered lost notice and one correction: %+v %+v", c, corr)
					}
					real = corr[0].Event
				} else if c[0].QueueState != qPending || len(corr) != 0 {
					t.Fatalf("want the lost notice replaced by the real end: %+v %+v", c, corr)
				}
				if real.State != StateExited || real.ExitCode == nil || *real.ExitCode != 3 || !strings.Contains(real.Output, "the-real-end") || !real.Notify {
					t.Fatalf("the real end %+v", real)
				}
				if got := e.r.Queue(); got != nil {
					pending, err := got.Claim(ctx, 10, time.Minute)
					if err != nil || len(pending) != 1 {
						t.Fatalf("deliverable now: %+v %v (want exactly the real end)", pending, err)
					}
				}
			})
		}
	})
}

// A host restarts with its data directory after a survivor recorded its processes as lost: its
// Recover finds them (their log files are here), adopts the one still running (its queued lost
// notice withdrawn, the real end replacing it later) and ends the one whose exit file says how it
// ended (the real end replacing the queued notice, or correcting the delivered one).
func TestRestartedHostReconcilesTakenOverProcesses(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		e := newEnvOn(t, b, Options{Host: "hostA"})
		gate, open := e.gate("end")
		downGate, openDown := e.gate("down")
		running := e.spawn(SpawnRequest{Command: waitGate(gate) + "echo adopted-end", NotifyOnComplete: true})
		ended := e.spawn(SpawnRequest{Command: waitGate(downGate) + "echo ended-while-down; exit 4", NotifyOnComplete: true})
		delivered := e.spawn(SpawnRequest{Command: waitGate(downGate) + "exit 5", NotifyOnComplete: true})
		e.r.Close() // the host stops; its processes go on
		s := e.survivor("hostB")
		if n, err := s.TakeOver(ctx, "hostA"); err != nil || n != 3 {
			t.Fatalf("takeover %d %v", n, err)
		}
		c, err := s.Queue().Claim(ctx, 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, cl := range c {
			if cl.ProcID == delivered.ID {
				if err := s.Queue().Ack(ctx, cl.Seq, cl.Token, "delivered"); err != nil {
					t.Fatal(err)
				}
			} else if err := s.Queue().Release(ctx, cl.Seq, cl.Token, 0); err != nil {
				t.Fatal(err)
			}
		}
		// Two of them end while no host runs them; their wrappers record how.
		openDown()
		for _, id := range []string{ended.ID, delivered.ID} {
			waitFor(t, "the exit file of "+id, func() bool { _, ok := readExitFile(e.r.exitPath(id)); return ok })
		}
		e.opts.Host = "hostA2" // the restarted host has a new instance id
		e.r = e.open()
		rep, err := e.r.Recover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Retaken) != 3 || len(rep.Adopted) != 1 || rep.Adopted[0] != running.ID || rep.Exited != 2 {
			t.Fatalf("recover %+v", rep)
		}
		if row := e.row(running.ID); row.State != StateRunning || row.Host != "hostA2" {
			t.Fatalf("adopted row %+v", row)
		}
		if c := e.completions(running.ID); len(c) != 1 || c[0].QueueState != qSuppressed || c[0].Outcome != outcomeWithdrawn {
			t.Fatalf("the running process's lost notice %+v", c)
		}
		if c := e.completions(ended.ID); len(c) != 1 || c[0].QueueState != qPending || c[0].ExitCode == nil || *c[0].ExitCode != 4 ||
			!strings.Contains(c[0].Output, "ended-while-down") {
			t.Fatalf("the ended process's notice %+v", c)
		}
		if c, corr := e.completions(delivered.ID), e.kinds(delivered.ID, EventCorrection); len(c) != 1 || c[0].QueueState != qDone ||
			len(corr) != 1 || corr[0].ExitCode == nil || *corr[0].ExitCode != 5 {
			t.Fatalf("the delivered one: %+v correction %+v", c, corr)
		}
		open()
		e.waitEnd(running.ID)
		if c := e.completions(running.ID); len(c) != 1 || c[0].QueueState != qPending || c[0].State != StateExited ||
			!strings.Contains(c[0].Output, "adopted-end") {
			t.Fatalf("the adopted process's end %+v", c)
		}
		if rows, err := ListProcesses(ctx, e.db, e.dir); err != nil {
			t.Fatal(err)
		} else {
			for _, in := range rows {
				if in.ID == delivered.ID && (in.Notice != qDone || in.Correction != qPending) {
					t.Fatalf("ps of the corrected process: notice %q correction %q", in.Notice, in.Correction)
				}
			}
		}
	})
}

// On a database shared by several hosts, a host's Recover leaves the processes of another host
// alone (their log files are in that host's data directory, their pids on its machine), even
// when the writer identity of their rows names no live process here.
func TestRecoverLeavesAnotherHostsProcesses(t *testing.T) {
	e := newEnv(t, Options{Host: "hostA"})
	res := e.spawn(SpawnRequest{Command: "sleep 30", NotifyOnComplete: true})
	if _, err := e.db.Exec(`UPDATE processes SET owner = '1:1' WHERE id = ?`, res.ID); err != nil {
		t.Fatal(err) // a writer that is not alive here: another machine's pid
	}
	other := e.survivor("hostB")
	rep, err := other.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Adopted) != 0 || rep.Lost+rep.Exited+rep.Killed != 0 || rep.Skipped != 1 {
		t.Fatalf("recover %+v", rep)
	}
	if row := e.row(res.ID); row.State != StateRunning || row.Host != "hostA" || row.Adopted {
		t.Fatalf("row %+v", row)
	}
}

// A host whose process another host has taken as its own since (say it restarted with the same
// data directory while the first one was only frozen, and adopted the process) writes nothing
// over that host's row when it comes back: its end is refused (ErrTakenOver, logged with what it
// carried), not written over the other host's record because its generation is newer.
func TestCheckpointOfAHostThatLostTheRowIsNotWritten(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		e := newEnvOn(t, b, Options{Host: "hostA"})
		gate, open := e.gate("end")
		res := e.spawn(SpawnRequest{Command: waitGate(gate) + "exit 0", NotifyOnComplete: true})
		// hostZ adopted it, and its generation is not newer than what hostA writes next (the
		// generations of two hosts' snapshots do not order them).
		if _, err := e.db.Exec(`UPDATE processes SET host = 'hostZ', adopted = 1 WHERE id = ?`, res.ID); err != nil {
			t.Fatal(err)
		}
		open()
		e.waitEnd(res.ID)
		if row := e.row(res.ID); row.State != StateRunning || row.Host != "hostZ" || !row.Adopted {
			t.Fatalf("the other host's row was overwritten: %+v", row)
		}
		if c := e.completions(res.ID); len(c) != 0 {
			t.Fatalf("completions %+v", c)
		}
		if _, err := e.r.Wait(context.Background(), res.ID, time.Second); !isErr(err, ErrTakenOver) {
			t.Fatalf("Wait's consumption of the end: %v, want ErrTakenOver", err)
		}
	})
}
