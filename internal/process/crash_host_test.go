// The process registry's crash-recovery scenario, played against a real host process that is
// killed with SIGKILL and started again.
//
// Two halves:
//
//   - Host (and MainFromEnv) is a minimal host: it opens the data directory, recovers, spawns the
//     processes it is told to, and acts as the delivery layer (claim, ack) for registry events,
//     reporting on stdout in a line protocol (below).
//   - Run is the driver: it starts a host, kills it with SIGKILL, lets some processes end while
//     no host runs, starts it again, and checks that every process is reported exactly once,
//     across two restarts.
//
// The host is this test binary re-executing itself (TestMain in crash_test.go calls MainFromEnv).
//
// Line protocol, one line per fact, on the host's stdout:
//
//	recovered {RecoverReport as JSON}
//	spawned LABEL ID PID
//	ready
//	event {process.Event as JSON}      printed after the event was acknowledged
//	idle                               printed once, the first time no event is left to claim

package process_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// Environment of a host started by Run.
const (
	EnvDataDir = "HERMES_CRASHTEST_DATADIR" // set: act as the crash-test host on this data directory
	EnvSpawn   = "HERMES_CRASHTEST_SPAWN"   // JSON list of SpawnSpec to spawn after recovery
)

// SpawnSpec is one process for the host to spawn.
type SpawnSpec struct {
	Label   string `json:"label"`
	Command string `json:"command"`
}

// DBPath is where the host keeps its database inside the data directory.
func DBPath(dataDir string) string { return filepath.Join(dataDir, "hermes.db") }

// MainFromEnv runs Host when EnvDataDir is set, until the process is killed or gets SIGTERM or
// SIGINT, and returns the exit code and true. It returns false at once otherwise.
func MainFromEnv() (code int, ran bool) {
	dir := os.Getenv(EnvDataDir)
	if dir == "" {
		return 0, false
	}
	var spawns []SpawnSpec
	if s := os.Getenv(EnvSpawn); s != "" {
		if err := json.Unmarshal([]byte(s), &spawns); err != nil {
			fmt.Fprintln(os.Stderr, "crashtest:", err)
			return 2, true
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := Host(ctx, dir, spawns, os.Stdout); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "crashtest:", err)
		return 1, true
	}
	return 0, true
}

// Stamp is the session stamp Host gives the process labelled label.
func Stamp(label string) session.Stamp {
	return session.Stamp{
		Key: "agent:main:crashtest:dm:" + label, SessionID: "S-" + label, Profile: "main", Generation: 1,
		Route: abi.Source{Platform: "crashtest", Profile: "main", ChatType: abi.ChatDM, ChatID: label},
	}
}

// Host recovers the registry in dataDir, spawns spawns, then claims and acknowledges events
// until ctx is done, reporting in the line protocol on out.
func Host(ctx context.Context, dataDir string, spawns []SpawnSpec, out io.Writer) error {
	db, err := store.Open(DBPath(dataDir), store.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	r, err := process.New(ctx, db, process.Options{DataDir: dataDir, PollInterval: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	defer r.Close()
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	rep, err := r.Recover(ctx)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(rep)
	say("recovered %s", b)
	for _, s := range spawns {
		res, err := r.Spawn(ctx, process.SpawnRequest{Command: s.Command, Stamp: Stamp(s.Label), NotifyOnComplete: true})
		if err != nil {
			return fmt.Errorf("spawn %s: %w", s.Label, err)
		}
		say("spawned %s %s %d", s.Label, res.ID, res.PID)
	}
	say("ready")

	q := r.Queue()
	idle := false
	for {
		claims, err := q.Claim(ctx, 64, 30*time.Second)
		if err != nil {
			return err
		}
		for _, c := range claims {
			if err := q.Confirm(ctx, c.Seq, c.Token); err != nil {
				continue // consumed meanwhile: not delivered
			}
			if err := q.Ack(ctx, c.Seq, c.Token, "delivered"); err != nil {
				return err
			}
			b, _ := json.Marshal(c.Event)
			say("event %s", b)
		}
		if len(claims) > 0 {
			continue
		}
		if !idle {
			idle = true
			say("idle")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.Wake():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// lines reads a host's stdout into a channel.
func lines(r io.Reader) <-chan string {
	ch := make(chan string, 256)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}
