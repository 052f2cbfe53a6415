package process_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/store"
)

// TB is the part of testing.TB the scenario uses.
type TB = testing.TB

// Timeout bounds every wait on a host or a process. It is generous on purpose: a loaded CI
// machine is slow, and nothing here asserts on durations.
var Timeout = 90 * time.Second

// host is one running incarnation of the host under test.
type host struct {
	t    TB
	name string
	cmd  *exec.Cmd
	out  <-chan string
	errb *bytes.Buffer
}

func startHost(t TB, name string, start func() *exec.Cmd, dataDir string, spawns []SpawnSpec) *host {
	t.Helper()
	cmd := start()
	spec, _ := json.Marshal(spawns)
	cmd.Env = append(cmd.Environ(), EnvDataDir+"="+dataDir, EnvSpawn+"="+string(spec))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	h := &host{t: t, name: name, cmd: cmd, errb: &bytes.Buffer{}}
	cmd.Stderr = h.errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: start: %v", name, err)
	}
	h.out = lines(stdout)
	t.Cleanup(func() { h.kill() })
	return h
}

// next returns the next protocol line, failing if the host ends or the timeout passes.
func (h *host) next() string {
	h.t.Helper()
	select {
	case l, ok := <-h.out:
		if !ok {
			h.t.Fatalf("%s ended unexpectedly; stderr:\n%s", h.name, h.errb.String())
		}
		return l
	case <-time.After(Timeout):
		h.t.Fatalf("%s: no output for %s; stderr:\n%s", h.name, Timeout, h.errb.String())
	}
	return ""
}

// kill sends SIGKILL: a crash, no cleanup in the host.
func (h *host) kill() {
	if h.cmd.ProcessState != nil {
		return
	}
	h.cmd.Process.Signal(syscall.SIGKILL)
	h.cmd.Wait()
}

type spawned struct {
	label, id string
	pid       int
}

// Run plays the scenario. start must return a fresh, unstarted command that runs a host (Run
// adds the environment and reads its stdout).
//
//  1. Host 1 spawns six processes and is killed with SIGKILL.
//  2. While no host runs, three "short" processes end: one exits 0, one exits 7, one is
//     SIGKILLed (so it leaves no exit status).
//  3. Host 2 recovers: the three short ones are reported once each (exit status from the exit
//     file, or lost); the three "long" ones are re-adopted. Then they end (exit 0, exit 3, and
//     one SIGKILLed from outside) and host 2 reports each once, with output written after the
//     restart. Host 2 is killed with SIGKILL.
//  4. Host 3 recovers and reports nothing.
//
// Throughout, `ps` reads (ListProcesses, WriteLog) work from this separate process.
func Run(t TB, start func() *exec.Cmd) {
	t.Helper()
	dir := t.TempDir()
	gates := filepath.Join(dir, "gates")
	if err := os.MkdirAll(gates, 0o700); err != nil {
		t.Fatalf("%v", err)
	}
	gate := func(name string) string {
		return `while [ ! -e '` + filepath.Join(gates, name) + `' ]; do sleep 0.05; done; `
	}
	open := func(name string) {
		if err := os.WriteFile(filepath.Join(gates, name), nil, 0o600); err != nil {
			t.Fatalf("%v", err)
		}
	}
	specs := []SpawnSpec{
		{"short-ok", gate("short") + "echo short-ok out; exit 0"},
		{"short-fail", gate("short") + "echo short-fail out >&2; exit 7"},
		{"short-killed", "sleep 600"},
		{"long-ok", "echo long-ok before; " + gate("long") + "echo long-ok after; exit 0"},
		{"long-fail", gate("long") + "exit 3"},
		{"long-killed", "sleep 600"},
	}
	procs := map[string]spawned{}
	t.Cleanup(func() { // never leave processes behind, whatever failed
		for _, p := range procs {
			syscall.Kill(-p.pid, syscall.SIGKILL)
		}
	})

	// 1. Host 1 spawns, then crashes.
	h1 := startHost(t, "host 1", start, dir, specs)
	expectRecovered(h1)
	for range specs {
		f := strings.Fields(h1.next())
		if len(f) != 4 || f[0] != "spawned" {
			t.Fatalf("host 1: expected spawned, got %q", f)
		}
		pid, _ := strconv.Atoi(f[3])
		procs[f[1]] = spawned{label: f[1], id: f[2], pid: pid}
	}
	if l := h1.next(); l != "ready" {
		t.Fatalf("host 1: %q", l)
	}
	h1.kill()

	// 2. While down: the short ones end.
	open("short")
	syscall.Kill(-procs["short-killed"].pid, syscall.SIGKILL)
	for _, l := range []string{"short-ok", "short-fail", "short-killed"} {
		waitDead(t, procs[l].pid)
	}

	// 3. Host 2 recovers and reports.
	h2 := startHost(t, "host 2", start, dir, nil)
	rep := expectRecovered(h2)
	if len(rep.Adopted) != 3 || rep.Exited != 2 || rep.Lost != 1 {
		t.Fatalf("host 2 recovery: %+v", rep)
	}
	for _, l := range []string{"long-ok", "long-fail", "long-killed"} {
		if !contains(rep.Adopted, procs[l].id) {
			t.Fatalf("host 2 did not re-adopt %s: %+v", l, rep)
		}
	}
	if l := h2.next(); l != "ready" {
		t.Fatalf("host 2: %q", l)
	}
	events := map[string][]process.Event{}
	collect := func(h *host, n int) {
		t.Helper()
		for got := 0; got < n; {
			l := h.next()
			if l == "idle" {
				continue
			}
			ev := parseEvent(t, h, l)
			events[ev.ProcID] = append(events[ev.ProcID], ev)
			got++
		}
	}
	collect(h2, 3)
	checkPS(t, dir, procs)
	open("long")
	syscall.Kill(-procs["long-killed"].pid, syscall.SIGKILL)
	collect(h2, 3)
	h2.kill()

	// 4. Host 3 has nothing left to report.
	h3 := startHost(t, "host 3", start, dir, nil)
	if rep := expectRecovered(h3); len(rep.Adopted)+rep.Exited+rep.Lost+rep.Killed != 0 {
		t.Fatalf("host 3 recovered again: %+v", rep)
	}
	if l := h3.next(); l != "ready" {
		t.Fatalf("host 3: %q", l)
	}
	if l := h3.next(); l != "idle" {
		t.Fatalf("host 3 reported after two restarts: %q", l)
	}
	h3.kill()

	// Exactly one completion per process, with the right end.
	code := func(c int) *int { return &c }
	want := map[string]struct {
		state  process.State
		code   *int
		reason string
		output string
	}{
		"short-ok":     {process.StateExited, code(0), process.ReasonExitWhileDown, "short-ok out"},
		"short-fail":   {process.StateExited, code(7), process.ReasonExitWhileDown, "short-fail out"},
		"short-killed": {process.StateLost, nil, process.ReasonGone, ""},
		"long-ok":      {process.StateExited, code(0), process.ReasonExit, "long-ok before\nlong-ok after"},
		"long-fail":    {process.StateExited, code(3), process.ReasonExit, ""},
		"long-killed":  {process.StateExited, nil, process.ReasonExitUnknown, ""},
	}
	for label, w := range want {
		p := procs[label]
		evs := events[p.id]
		if len(evs) != 1 {
			t.Fatalf("%s (%s): %d events, want exactly one completion: %+v", label, p.id, len(evs), evs)
		}
		ev := evs[0]
		if ev.Kind != process.EventCompletion || ev.State != w.state || ev.Reason != w.reason ||
			!sameCode(ev.ExitCode, w.code) || ev.Output != w.output || ev.Stamp != Stamp(label) || ev.Command == "" {
			t.Fatalf("%s: completion %+v, want state %s reason %s code %v output %q", label, ev, w.state, w.reason, fmtCode(w.code), w.output)
		}
	}
	// And the database agrees: one completion per process, acknowledged.
	db, err := store.Open(DBPath(dir), store.Options{})
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer db.Close()
	recs, err := process.ListEvents(context.Background(), db, "")
	if err != nil {
		t.Fatalf("%v", err)
	}
	if len(recs) != len(specs) {
		t.Fatalf("%d events in the queue, want %d", len(recs), len(specs))
	}
	for _, r := range recs {
		if r.QueueState != "done" || r.Attempts != 1 {
			t.Fatalf("event %d of %s: %s after %d attempts", r.Seq, r.ProcID, r.QueueState, r.Attempts)
		}
	}
}

func expectRecovered(h *host) process.RecoverReport {
	h.t.Helper()
	l := h.next()
	js, ok := strings.CutPrefix(l, "recovered ")
	if !ok {
		h.t.Fatalf("%s: expected recovered, got %q", h.name, l)
	}
	var rep process.RecoverReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		h.t.Fatalf("%s: %v", h.name, err)
	}
	return rep
}

func parseEvent(t TB, h *host, l string) process.Event {
	t.Helper()
	js, ok := strings.CutPrefix(l, "event ")
	if !ok {
		t.Fatalf("%s: expected event, got %q", h.name, l)
	}
	var ev process.Event
	if err := json.Unmarshal([]byte(js), &ev); err != nil {
		t.Fatalf("%s: %v", h.name, err)
	}
	return ev
}

// checkPS reads the listing and a log from this process while a host runs.
func checkPS(t TB, dir string, procs map[string]spawned) {
	t.Helper()
	db, err := store.Open(DBPath(dir), store.Options{})
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer db.Close()
	ctx := context.Background()
	list, err := process.ListProcesses(ctx, db, dir)
	if err != nil || len(list) != len(procs) {
		t.Fatalf("ps: %d entries, %v", len(list), err)
	}
	byID := map[string]process.Info{}
	for _, in := range list {
		byID[in.ID] = in
	}
	if in := byID[procs["long-ok"].id]; in.State != process.StateRunning || !in.Adopted || in.Stamp.Key != "agent:main:crashtest:dm:long-ok" {
		t.Fatalf("ps: the long process while host 2 runs: %+v", in)
	}
	var lost bool
	for _, in := range list {
		lost = lost || in.State == process.StateLost
	}
	if !lost {
		t.Fatalf("ps: no lost process while host 2 runs: %+v", list)
	}
	if ch, err := process.ReadLog(ctx, db, dir, procs["long-ok"].id, 0, 0); err != nil || string(ch.Data) != "long-ok before\n" {
		t.Fatalf("ps log: %q %v", ch.Data, err)
	}
}

// waitDead waits until pid is gone or a zombie (an orphan may stay a zombie if init does not
// reap it).
func waitDead(t TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		if i := bytes.LastIndexByte(b, ')'); i > 0 && len(b) > i+2 && b[i+2] == 'Z' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not end", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sameCode(a, b *int) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func fmtCode(c *int) string {
	if c == nil {
		return "unknown"
	}
	return fmt.Sprint(*c)
}
