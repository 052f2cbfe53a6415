package process

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

func TestSpawnStampsEnvironmentAndCompletes(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	res := e.spawn(SpawnRequest{
		Command:          `echo "sid=$HERMES_SESSION_ID key=$HERMES_SESSION_KEY p=$HERMES_SESSION_PLATFORM c=$HERMES_SESSION_CHAT_ID th=$HERMES_SESSION_THREAD_ID u=$HERMES_SESSION_USER_ID id=$HERMES_PROCESS_ID"; echo oops >&2; exit 3`,
		NotifyOnComplete: true,
	})
	if !regexp.MustCompile(`^proc_[0-9a-f]{12}$`).MatchString(res.ID) {
		t.Fatalf("id %q", res.ID)
	}
	if res.PID <= 0 || res.StartTicks == 0 || res.State != StateRunning {
		t.Fatalf("spawn result %+v", res.Info)
	}
	st := e.waitEnd(res.ID)
	if st.State != StateExited || st.ExitCode == nil || *st.ExitCode != 3 || st.Reason != ReasonExit {
		t.Fatalf("end %+v", st.Info)
	}
	want := "sid=S1 key=agent:main:telegram:dm:42 p=telegram c=42 th=7 u=u42 id=" + res.ID + "\noops"
	if st.Output != want {
		t.Fatalf("output %q, want %q", st.Output, want)
	}
	// Poll does not consume: the completion is deliverable, with stamp and tail.
	cs := e.completions(res.ID)
	if len(cs) != 1 || cs[0].QueueState != qPending {
		t.Fatalf("completions %+v", cs)
	}
	ev := cs[0].Event
	if ev.Stamp != testStamp("S1") || ev.Command != res.Command || *ev.ExitCode != 3 || !ev.Notify ||
		ev.Output != want || ev.StartedAt.IsZero() {
		t.Fatalf("event %+v", ev)
	}
	row := e.row(res.ID)
	if row.State != StateExited || row.Stamp != testStamp("S1") || row.Consumed || row.OutputBytes != int64(len(want)+1) {
		t.Fatalf("checkpoint %+v", row)
	}
	if _, err := e.r.Poll(ctx, "proc_000000000000"); !isErr(err, ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
}

// The checkpoint with the full stamp and notify settings is durable before the process exists,
// so a crash right after the start cannot leave an unstamped process.
func TestCheckpointDurableBeforeStart(t *testing.T) {
	e := newEnv(t, Options{})
	var seen Info
	testHookBeforeStart = func(id string) {
		// Read through a second connection pool, as another process would.
		db2 := e.openSecond()
		in, err := loadRow(context.Background(), db2, id)
		if err != nil {
			t.Errorf("no checkpoint before start: %v", err)
		}
		seen = in
	}
	defer func() { testHookBeforeStart = nil }()
	res := e.spawn(SpawnRequest{Command: "true", WatchPatterns: []string{"ERR"}, MaxAge: time.Hour})
	if seen.ID != res.ID || seen.State != StateStarting || seen.Stamp != testStamp("S1") ||
		len(seen.WatchPatterns) != 1 || seen.MaxAge != time.Hour || seen.Gen != 1 || seen.Owner == "" {
		t.Fatalf("checkpoint before start: %+v", seen)
	}
	if row := e.row(res.ID); row.Gen < 2 || row.PID != res.PID || row.StartTicks == 0 {
		t.Fatalf("checkpoint after start: %+v", row)
	}
}

func TestFailedStart(t *testing.T) {
	e := newEnv(t, Options{})
	_, err := e.r.Spawn(context.Background(), SpawnRequest{Command: "true", Dir: "/nonexistent/dir", Stamp: testStamp("S1")})
	if err == nil {
		t.Fatal("spawn in a missing directory succeeded")
	}
	list, err := e.r.List(context.Background())
	if err != nil || len(list) != 1 {
		t.Fatalf("list %v %v", list, err)
	}
	in := list[0]
	if in.State != StateFailedStart || in.Reason == "" || !in.Consumed || in.Notice != qSuppressed {
		t.Fatalf("failed start recorded as %+v", in)
	}
	// The slot is released.
	e.r.mu.Lock()
	n := e.r.running
	e.r.mu.Unlock()
	if n != 0 {
		t.Fatalf("running = %d", n)
	}
}

func TestKillTerminatesProcessGroup(t *testing.T) {
	e := newEnv(t, Options{})
	pidFile := e.dir + "/grandchild.pid"
	res := e.spawn(SpawnRequest{Command: `sleep 300 & echo $! > ` + pidFile + `; echo started; wait`})
	var gc int
	waitFor(t, "grandchild pid", func() bool {
		b, _ := os.ReadFile(pidFile)
		gc, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return gc > 0
	})
	in, err := e.r.Kill(context.Background(), res.ID, KillOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if in.State != StateKilled || in.Reason != ReasonKill || in.Signal != "SIGTERM" || *in.ExitCode != 143 || !in.Consumed {
		t.Fatalf("after kill %+v", in)
	}
	waitFor(t, "grandchild gone", func() bool {
		l, _ := checkLive(gc, 0)
		return l == gone || (l == recycled && !isAlive(gc))
	})
	// Killing is what the agent did: no notification.
	if cs := e.completions(res.ID); len(cs) != 1 || cs[0].QueueState != qSuppressed {
		t.Fatalf("completion %+v", cs)
	}
}

// A member of the group that ignores SIGTERM and outlives the leader is SIGKILLed too.
func TestKillReachesMembersOutlivingTheLeader(t *testing.T) {
	e := newEnv(t, Options{KillGrace: 300 * time.Millisecond})
	pidFile := e.dir + "/stubborn.pid"
	res := e.spawn(SpawnRequest{Command: `(trap '' TERM; exec sleep 300) & echo $! > ` + pidFile + `; wait`})
	var stubborn int
	waitFor(t, "stubborn pid", func() bool {
		b, _ := os.ReadFile(pidFile)
		stubborn, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return stubborn > 0
	})
	st, _ := readProcStat(stubborn)
	in, err := e.r.Kill(context.Background(), res.ID, KillOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if in.State != StateKilled || *in.ExitCode != 143 || in.Signal != "SIGTERM" {
		t.Fatalf("leader %+v", in)
	}
	// Kill returned only once the group was empty (a zombie waiting for its reaper counts as gone).
	if l, _ := checkLive(stubborn, st.startTicks); l == alive {
		t.Fatal("a group member that ignores SIGTERM survived Kill")
	}
}

// isAlive reports whether pid exists and is not a zombie.
func isAlive(pid int) bool {
	st, err := readProcStat(pid)
	return err == nil && st.state != 'Z'
}

func TestKillEscalatesToSIGKILL(t *testing.T) {
	e := newEnv(t, Options{KillGrace: 200 * time.Millisecond})
	res := e.spawn(SpawnRequest{Command: `trap '' TERM; echo ready; while :; do sleep 0.05; done`})
	waitFor(t, "trap installed", func() bool {
		st, _ := e.r.Poll(context.Background(), res.ID)
		return strings.Contains(st.Output, "ready")
	})
	in, err := e.r.Kill(context.Background(), res.ID, KillOptions{Reason: "turn_stop", Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	if in.State != StateKilled || in.Reason != "turn_stop" || in.Signal != "SIGKILL" || in.Consumed {
		t.Fatalf("after kill %+v", in)
	}
	if cs := e.completions(res.ID); len(cs) != 1 || cs[0].QueueState != qPending || cs[0].State != StateKilled {
		t.Fatalf("completion %+v", cs)
	}
}

func TestLogOffsetsAndRing(t *testing.T) {
	e := newEnv(t, Options{BufferBytes: 1000})
	ctx := context.Background()
	// 3000 bytes: 300 lines of "line NNNN\n" (10 bytes each).
	res := e.spawn(SpawnRequest{Command: `i=0; while [ $i -lt 300 ]; do printf 'line %04d\n' $i; i=$((i+1)); done`})
	st := e.waitEnd(res.ID)
	if st.OutputBytes != 3000 || !st.OutputCut || !strings.HasPrefix(st.Output, TruncationMarker+"\n") {
		t.Fatalf("poll %d %v %q", st.OutputBytes, st.OutputCut, st.Output[:40])
	}
	// In the ring (last 1000 bytes).
	ch, err := e.r.Log(ctx, res.ID, 2500, 20)
	if err != nil || string(ch.Data) != "line 0250\nline 0251\n" || ch.Offset != 2500 || ch.Next != 2520 || ch.Total != 3000 || !ch.Ended {
		t.Fatalf("log from ring: %q %+v %v", ch.Data, ch, err)
	}
	// Before the ring: read from the log file.
	ch, err = e.r.Log(ctx, res.ID, 0, 10)
	if err != nil || string(ch.Data) != "line 0000\n" || ch.Offset != 0 {
		t.Fatalf("log from file: %q %+v %v", ch.Data, ch, err)
	}
	// Negative offset: the last bytes.
	ch, err = e.r.Log(ctx, res.ID, -1, 10)
	if err != nil || string(ch.Data) != "line 0299\n" {
		t.Fatalf("tail: %q %v", ch.Data, err)
	}
	e.r.mu.Lock()
	p := e.r.procs[res.ID]
	e.r.mu.Unlock()
	p.mu.Lock()
	alloc := p.ring.allocated()
	p.mu.Unlock()
	if alloc > 1000 {
		t.Fatalf("ring holds %d bytes, cap 1000", alloc)
	}
}

func TestNotifyWinsOverWatch(t *testing.T) {
	e := newEnv(t, Options{})
	res := e.spawn(SpawnRequest{Command: "echo ERROR; sleep 0.2", NotifyOnComplete: true, WatchPatterns: []string{"ERROR"}})
	if res.Note != NoteNotifyWins || len(res.WatchPatterns) != 0 || !res.NotifyOnComplete {
		t.Fatalf("spawn %+v note %q", res.Info, res.Note)
	}
	e.waitEnd(res.ID)
	if row := e.row(res.ID); len(row.WatchPatterns) != 0 || !row.NotifyOnComplete {
		t.Fatalf("checkpoint %+v", row)
	}
	recs := e.events(res.ID)
	if len(recs) != 1 || recs[0].Kind != EventCompletion {
		t.Fatalf("events %+v", recs)
	}
}

func TestMaxAgeKillsAndReports(t *testing.T) {
	clk := newFakeClock()
	e := newEnv(t, Options{Now: clk.Now, MaxAge: time.Hour})
	old := e.spawn(SpawnRequest{Command: "sleep 300"})
	keep := e.spawn(SpawnRequest{Command: "sleep 300", MaxAge: -1})
	list, _ := e.r.List(context.Background())
	for _, in := range list {
		if in.ID == old.ID && (in.MaxAge != time.Hour || in.Age(clk.Now()) != 0) {
			t.Fatalf("listing: max age %v, age %v; want 1h, 0", in.MaxAge, in.Age(clk.Now()))
		}
	}
	clk.Advance(time.Hour + time.Second)
	st := e.waitEnd(old.ID)
	if st.State != StateKilled || st.Reason != ReasonMaxAge || st.Consumed {
		t.Fatalf("old: %+v", st.Info)
	}
	if cs := e.completions(old.ID); len(cs) != 1 || cs[0].QueueState != qPending || cs[0].Reason != ReasonMaxAge {
		t.Fatalf("max-age completion %+v", cs)
	}
	if st, _ := e.r.Poll(context.Background(), keep.ID); st.State != StateRunning {
		t.Fatalf("no-limit process: %+v", st.Info)
	}
}

func TestListAndLogFromSeparateReader(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	run := e.spawn(SpawnRequest{Command: "echo hello; sleep 300"})
	done := e.spawn(SpawnRequest{Command: "echo bye; exit 1", Stamp: testStamp("S2")})
	e.waitEnd(done.ID)
	waitFor(t, "output", func() bool {
		st, _ := e.r.Poll(ctx, run.ID)
		return st.OutputBytes > 0
	})
	// The CLI opens the database itself, read-only, while serve runs.
	db2, err := store.OpenReader(ctx, e.b.Source, e.b.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	list, err := ListProcesses(ctx, db2, e.dir)
	if err != nil || len(list) != 2 {
		t.Fatalf("list %v %v", list, err)
	}
	byID := map[string]Info{}
	for _, in := range list {
		byID[in.ID] = in
	}
	if r := byID[run.ID]; r.State != StateRunning || r.Stamp.Key != "agent:main:telegram:dm:42" {
		t.Errorf("running entry %+v", r)
	}
	if d := byID[done.ID]; d.State != StateExited || d.Stamp.SessionID != "S2" || d.Command != "echo bye; exit 1" || d.Notice != "pending" {
		t.Errorf("ended entry %+v", d)
	}
	// One process, as the listing has it.
	if one, err := InspectProcess(ctx, db2, e.dir, done.ID); err != nil || one.ID != done.ID || one.Notice != "pending" || one.State != StateExited {
		t.Errorf("inspect %+v %v", one, err)
	}
	if one, err := e.r.Inspect(ctx, run.ID); err != nil || one.State != StateRunning || one.OutputBytes == 0 {
		t.Errorf("inspect running %+v %v", one, err)
	}
	if _, err := InspectProcess(ctx, db2, e.dir, "proc_000000000000"); !errors.Is(err, ErrNotFound) {
		t.Errorf("inspect unknown: %v", err)
	}
	if ch, err := ReadLog(ctx, db2, e.dir, run.ID, 0, 0); err != nil || string(ch.Data) != "hello\n" {
		t.Fatalf("log %q %v", ch.Data, err)
	}
	// Reading from the CLI does not consume.
	ch, err := ReadLog(ctx, db2, e.dir, done.ID, 0, 100)
	if err != nil || string(ch.Data) != "bye\n" || !ch.Ended {
		t.Fatalf("read log %+v %v", ch, err)
	}
	if cs := e.completions(done.ID); cs[0].QueueState != qPending {
		t.Fatalf("CLI log consumed the completion: %+v", cs)
	}
	if _, err := ReadLog(ctx, db2, e.dir, "proc_ffffffffffff", 0, 10); !isErr(err, ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
}

func TestTooMany(t *testing.T) {
	e := newEnv(t, Options{MaxRunning: 2})
	e.spawn(SpawnRequest{Command: "sleep 300"})
	b := e.spawn(SpawnRequest{Command: "sleep 300"})
	if _, err := e.r.Spawn(context.Background(), SpawnRequest{Command: "true"}); !isErr(err, ErrTooMany) {
		t.Fatalf("third spawn: %v", err)
	}
	if _, err := e.r.Kill(context.Background(), b.ID, KillOptions{}); err != nil {
		t.Fatal(err)
	}
	e.spawn(SpawnRequest{Command: "true"})
}

func TestSignalledExit(t *testing.T) {
	e := newEnv(t, Options{})
	res := e.spawn(SpawnRequest{Command: "sleep 300"})
	if err := syscall.Kill(-res.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := e.waitEnd(res.ID)
	if st.State != StateExited || st.Signal != "SIGKILL" || st.Reason != ReasonSignal || *st.ExitCode != 137 {
		t.Fatalf("%+v", st.Info)
	}
}

// A chatty process cannot fill the disk: the log file's old part is punched out, offsets stay
// valid, and readers skip what is gone.
func TestLogFileDiskUseBounded(t *testing.T) {
	const logBytes = 64 << 10
	e := newEnv(t, Options{LogBytes: logBytes, PollInterval: 5 * time.Millisecond})
	// 4 MiB in 64-byte lines, slowly enough that the host reads as it goes.
	res := e.spawn(SpawnRequest{Command: `i=0; while [ $i -lt 64 ]; do yes 'sixty-four bytes of output, again and again and again and again.' | head -c 65536; i=$((i+1)); sleep 0.01; done`})
	st := e.waitEnd(res.ID)
	if st.OutputBytes != 4<<20 {
		t.Fatalf("output %d bytes", st.OutputBytes)
	}
	var fs syscall.Stat_t
	if err := syscall.Stat(e.dir+"/proc/"+res.ID+".log", &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Size != 4<<20 {
		t.Fatalf("apparent size %d", fs.Size)
	}
	if used := fs.Blocks * 512; used > 2*logBytes+64<<10 {
		t.Fatalf("log file uses %d bytes of disk, bound is about %d", used, 2*logBytes)
	}
	// A reader from offset 0 gets the first retained byte, never zeros.
	db2 := e.openSecond()
	ch, err := ReadLog(context.Background(), db2, e.dir, res.ID, 0, 4096)
	if err != nil || ch.Offset < (4<<20)-2*logBytes || ch.Offset%logBlock != 0 || len(ch.Data) == 0 || bytes.IndexByte(ch.Data, 0) >= 0 {
		t.Fatalf("read from 0: offset %d, %d bytes, err %v", ch.Offset, len(ch.Data), err)
	}
	if strings.IndexByte(st.Output, 0) >= 0 || !strings.Contains(st.Output, "again and again") {
		t.Fatalf("tail %q", st.Output[len(st.Output)-40:])
	}
}

// The completion's tail is the real end of the output, however much was written at once.
func TestCompletionTailAfterBurst(t *testing.T) {
	e := newEnv(t, Options{PollInterval: time.Hour})
	res := e.spawn(SpawnRequest{Command: `yes x | head -c 3000000; echo; echo THE END`})
	st := e.waitEnd(res.ID)
	if !strings.HasSuffix(st.Output, "\nTHE END") || st.OutputBytes != int64(3000000+len("\nTHE END\n")) {
		t.Fatalf("tail ends %q, %d bytes", st.Output[len(st.Output)-20:], st.OutputBytes)
	}
}
