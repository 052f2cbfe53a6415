package turn

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/session"
)

var (
	newRaceRuns     = flag.Int("newrace", 250, "runs of TestNewRaceAccountsForEveryCompletion (-newrace 1000 for a deeper run)")
	newRaceParallel = flag.Int("newrace.parallel", 16, "runs of TestNewRaceAccountsForEveryCompletion at once")
)

// TestNewRaceAccountsForEveryCompletion races /new against a background process's completion,
// newRaceRuns times (250 by default; make test runs them in about 30 s), each in a chat of its own so the runs overlap: the
// process ends after a random delay (sometimes at once) and /new comes after another, so the
// /new lands before the process ends, while its event is picked up, while its notification turn
// is queued or running, while the answer waits in the ledger, or after delivery. Half of the
// processes notify the agent (a notification turn), half send a text notice.
//
// The invariant, checked on the durable records: every process completion is delivered exactly
// once, into the conversation that started it, or has exactly one drop record; nothing is left
// open. The test logs how often each outcome occurred.
func TestNewRaceAccountsForEveryCompletion(t *testing.T) {
	runs := *newRaceRuns
	if testing.Short() {
		runs = min(runs, 100)
	}
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{}, withShell("/bin/sh"))
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		procs = map[string]session.Stamp{} // process id → its stamp
		errs  []error
		slots = make(chan struct{}, *newRaceParallel)
	)
	start := time.Now()
	for i := range runs {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			src := abi.Source{Platform: "echo", Profile: "main", ChatType: abi.ChatDM, ChatID: fmt.Sprintf("race%d", i), UserID: "u1"}
			// /new lands at a random stage of the completion's path: before the process ends,
			// after it ended, once its event is claimed, once it is handed on (a notification turn
			// queued or running, a notice waiting), or after delivery; each with a little jitter,
			// so the stage boundaries themselves are raced too. Stages, not absolute delays: the
			// path's speed depends on the machine.
			cmd := "true"
			if d := rng.IntN(20); d > 0 {
				cmd = fmt.Sprintf("sleep 0.%03d", d)
			}
			p, err := h.trySpawn(src, cmd, i%2 == 0)
			if err == nil {
				h.reach(p.ID, p.Stamp.Key, rng.IntN(5))
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
				_, err = h.e.Dispatch(context.Background(), "echo", "main", abi.InboundEvent{ID: fmt.Sprintf("new%d", i), Source: src, Text: "/new"})
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			procs[p.ID] = p.Stamp
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d runs failed to start, first: %v", len(errs), errs[0])
	}
	h.quiesce(t, 2*time.Minute)
	counts := h.checkCompletionInvariant(t, procs)
	t.Logf("%d runs in %v: %v", runs, time.Since(start).Round(time.Millisecond), counts)
	if len(counts) < 3 {
		t.Errorf("the race hit too few interleavings: %v", counts)
	}
}

// reach waits until proc's completion got to stage: 0 started, 1 ended, 2 event claimed, 3 event
// handed on, 4 a notice or answer was delivered into key. Every stage comes (nothing else
// happens in the chat before the /new); the deadline only bounds a broken run. The checks are
// cheap (memory, one indexed row): polling must not become the test's main cost.
func (h *harness) reach(proc, key string, stage int) {
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); stage > 0 && time.Now().Before(deadline); {
		switch stage {
		case 1:
			if st, err := h.procs.Poll(ctx, proc); err == nil && st.State.Final() {
				return
			}
		case 2, 3:
			var q string
			h.e.db.QueryRow(`SELECT state FROM process_events WHERE proc_id = ? AND kind = 'completion'`, proc).Scan(&q)
			if (stage == 2 && q != "" && q != "pending") || (stage == 3 && q == "done") {
				return
			}
		case 4:
			h.mu.Lock()
			for _, r := range h.rows {
				if r.Key == key && r.State == delivery.Delivered {
					h.mu.Unlock()
					return
				}
			}
			h.mu.Unlock()
		}
		time.Sleep(3 * time.Millisecond)
	}
}

// quiesce waits until every process event is final, no turn is open and no message is waiting.
func (h *harness) quiesce(t *testing.T, limit time.Duration) {
	t.Helper()
	var open, events, sending int
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		db := h.e.db
		db.QueryRow(`SELECT COUNT(*) FROM turn_inbox WHERE state IN ('received', 'queued', 'running')`).Scan(&open)
		db.QueryRow(`SELECT COUNT(*) FROM process_events WHERE state IN ('pending', 'claimed')`).Scan(&events)
		db.QueryRow(`SELECT COUNT(*) FROM deliveries WHERE state IN ('pending', 'sending')`).Scan(&sending)
		var running int
		db.QueryRow(`SELECT COUNT(*) FROM processes WHERE state IN ('starting', 'running')`).Scan(&running)
		if open+events+sending+running == 0 {
			return
		}
	}
	t.Fatalf("not quiescent: %d open turns, %d undelivered events, %d messages waiting", open, events, sending)
}

// checkCompletionInvariant asserts, from the durable records alone, that each process's
// completion was delivered exactly once into the conversation that started it or has exactly
// one drop record, and returns how often each outcome occurred.
func (h *harness) checkCompletionInvariant(t *testing.T, procs map[string]session.Stamp) map[string]int {
	t.Helper()
	db := h.e.db
	type fate struct {
		delivered, dropped []string // ledger row ids
		where              []string // sessions delivered into
		reasons            []string
	}
	fates := map[string]*fate{}
	for id := range procs {
		fates[id] = &fate{}
	}
	note := func(proc, id, state, reason, sid string) {
		f := fates[proc]
		if f == nil {
			return
		}
		switch state {
		case "delivered":
			f.delivered, f.where = append(f.delivered, id), append(f.where, sid)
		case "dropped":
			f.dropped, f.reasons = append(f.dropped, id), append(f.reasons, reason)
		default:
			t.Errorf("%s: notification %s ended %s (%s)", proc, id, state, reason)
		}
	}
	// Text notices and drop records name the process as their origin.
	rows, err := db.Query(`SELECT id, origin, state, reason, session_id FROM deliveries WHERE origin LIKE 'proc_%'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, origin, state, reason, sid string
		if err := rows.Scan(&id, &origin, &state, &reason, &sid); err != nil {
			t.Fatal(err)
		}
		note(origin, id, state, reason, sid)
	}
	rows.Close()
	// A notification turn's answer belongs to the inbox rows of the turn (event proc_…#seq), whose
	// outcome names the ledger message.
	rows, err = db.Query(`SELECT i.event_id, d.id, d.state, d.reason, d.session_id FROM turn_inbox i
		JOIN deliveries d ON i.outcome LIKE '%answered ' || d.grp
		WHERE i.kind = 'notification'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var event, id, state, reason, sid string
		if err := rows.Scan(&event, &id, &state, &reason, &sid); err != nil {
			t.Fatal(err)
		}
		proc, _, _ := strings.Cut(event, "#")
		note(proc, id, state, reason, sid)
	}
	rows.Close()
	counts := map[string]int{}
	bad := 0
	for proc, f := range fates {
		switch {
		case len(f.delivered) == 1 && len(f.dropped) == 0:
			counts["delivered"]++
			if f.where[0] != procs[proc].SessionID {
				bad++
				t.Errorf("%s delivered into %s, not the session that started it (%s)", proc, f.where[0], procs[proc].SessionID)
			}
		case len(f.delivered) == 0 && len(f.dropped) == 1:
			counts["dropped "+reasonClass(f.reasons[0])]++
		default:
			bad++
			if bad <= 10 {
				t.Errorf("%s: delivered %v, drop records %v (%q)", proc, f.delivered, f.dropped, f.reasons)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d completions broke the invariant", bad, len(fates))
	}
	return counts
}

// reasonClass shortens a drop reason to its kind, for the tally.
func reasonClass(r string) string {
	for _, p := range []string{"stale: user_boundary", "stale: superseded", "cancelled by /new", "interrupted by /new", "unverifiable"} {
		if strings.HasPrefix(r, p) {
			return p
		}
	}
	if i := strings.IndexAny(r, "(:"); i > 0 {
		return r[:i]
	}
	return r
}
