package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/internal/e2e/e2etest"
	"github.com/hermes-host/hermes-host/internal/store"
)

var chaosFor = flag.Duration("chaos", 30*time.Second, "how long TestChaosKill9 drives the host before it lets it settle")

// TestChaosKill9 drives the real binary with many chats at once (short background processes,
// /new and /compress at random, plain messages) while killing it with SIGKILL at random moments
// and starting it again on the same data directory. Messages are posted as a platform would:
// until the webhook answers 200, redelivering the same event id after a failure. Then the host
// settles, and a checker reads what reached the platform (the echo fake) and the host's
// database, and requires:
//
//   - 0 lost inbound messages: every accepted event has an inbox row that ended (done, failed,
//     interrupted or dropped, with its outcome), none left queued or running;
//   - 0 duplicates: no delivery reached the platform twice, no event has two inbox rows, no
//     completion was delivered twice;
//   - 0 deliveries into a left session: a delivered notification went to the session that
//     started its process or that session's compression continuation, and went out before the
//     user left it;
//   - 0 silent drops: every process completion was delivered, or has exactly one drop record
//     (or, for a send the platform may have taken when the host died, a failed record), and
//     nothing the ledger dropped reached the platform.
//
// The whole run is bounded to about three minutes.
func TestChaosKill9(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	if testing.Short() {
		t.Skip("chaos run skipped in -short mode")
	}
	fake := echotest.New()
	defer fake.Close()
	h := newHost(t, fake)
	c := &chaos{h: h, addr: h.addr, accepted: map[string]string{}}
	seed := rand.Uint64()
	t.Logf("seed %d, %v of chaos", seed, *chaosFor)

	const chats = 10
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range chats {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.chat(fmt.Sprintf("c%d", i), rand.New(rand.NewPCG(seed, uint64(i))), stop)
		}()
	}
	// The killer runs on the test goroutine (starting the host may fail the test).
	rng := rand.New(rand.NewPCG(seed, 1000))
	kills := 0
	for end := time.Now().Add(*chaosFor); time.Now().Before(end); {
		time.Sleep(time.Duration(2000+rng.IntN(4000)) * time.Millisecond)
		c.setAddr("")
		syscall.Kill(h.pid, syscall.SIGKILL)
		h.stop()
		kills++
		time.Sleep(time.Duration(rng.IntN(800)) * time.Millisecond) // processes end while it is down
		h.start()
		c.setAddr(h.addr)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d kills, %d messages accepted", kills, len(c.accepted))

	db, err := store.Open(filepath.Join(h.data, "hermes.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	settle(t, db, time.Minute)
	h.kill9()
	checkChaos(t, db, fake, c.accepted)
}

// chaos is the platform side of the run.
type chaos struct {
	h        *host
	mu       sync.Mutex
	addr     string            // "" while the host is down
	accepted map[string]string // event id → text, once the webhook answered 200
}

func (c *chaos) setAddr(a string) {
	c.mu.Lock()
	c.addr = a
	c.mu.Unlock()
}

// chat sends random messages for one chat until stop.
func (c *chaos) chat(chat string, rng *rand.Rand, stop chan struct{}) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(100+rng.IntN(500)) * time.Millisecond):
		}
		c.post(chat, fmt.Sprintf("%s-m%d", chat, n), chaosText(rng, chat, n), stop)
	}
}

// chaosText is a chat's n-th message in a chaos run: a short background process (45%), /new or
// /compress (15% each), or a plain message.
func chaosText(rng *rand.Rand, chat string, n int) string {
	switch r := rng.IntN(100); {
	case r < 45:
		return fmt.Sprintf("run sleep 0.%d; echo OUT-%s-%d", 1+rng.IntN(9), chat, n)
	case r < 60:
		return "/new"
	case r < 75:
		return "/compress"
	default:
		return fmt.Sprintf("hello %s %d", chat, n)
	}
}

// post delivers one event as a platform does: again and again, with the same id, until the
// webhook answers 200 (the host may have recorded it before it died; the id makes that safe).
func (c *chaos) post(chat, id, text string, stop chan struct{}) {
	body, _ := json.Marshal(map[string]string{"id": id, "chat_id": chat, "user_id": "u-" + chat, "text": text})
	client := &http.Client{Timeout: 10 * time.Second}
	var giveUp time.Time
	for {
		c.mu.Lock()
		addr := c.addr
		c.mu.Unlock()
		if addr != "" {
			resp, err := client.Post("http://"+addr+"/hooks/echo/main", "application/json", strings.NewReader(string(body)))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					c.mu.Lock()
					c.accepted[id] = text
					c.mu.Unlock()
					return
				}
			}
		}
		select {
		case <-stop:
			// The run is over but this event was never accepted: keep trying for a while (the
			// host is up for good now), or it would count as lost for the wrong reason.
			if giveUp.IsZero() {
				giveUp = time.Now().Add(time.Minute)
			} else if time.Now().After(giveUp) {
				return
			}
		default:
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settle waits until the host has nothing left to do: no open turn, no undelivered process
// event, no message waiting, no process running.
func settle(t *testing.T, db *sql.DB, limit time.Duration) {
	t.Helper()
	var open, events, waiting, running int
	// Settled is nothing to do at three looks in a row: a process's end and the notification
	// turn it queues are two steps, and a single look can fall between them.
	quiet := 0
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		// A query that fails (a busy store) is not a settled world: try again.
		err := errors.Join(
			db.QueryRow(`SELECT COUNT(*) FROM turn_inbox WHERE state IN ('received', 'queued', 'running')`).Scan(&open),
			db.QueryRow(`SELECT COUNT(*) FROM process_events WHERE state IN ('pending', 'claimed')`).Scan(&events),
			// A notice whose owner is unverifiable (its continuation was left) is retried with
			// backoff for minutes before it is dropped; it is recorded, with the reason, meanwhile.
			db.QueryRow(`SELECT COUNT(*) FROM deliveries WHERE state IN ('pending', 'sending')
			AND NOT (state = 'pending' AND reason LIKE 'unverifiable:%')`).Scan(&waiting),
			db.QueryRow(`SELECT COUNT(*) FROM processes WHERE state IN ('starting', 'running')`).Scan(&running))
		// A process recorded lost while its host was paused may still run there: its end comes
		// as a correction (and a notification turn) later.
		lost, lerr := e2etest.LostButRunning(db)
		running += lost
		if err = errors.Join(err, lerr); err != nil {
			t.Logf("settle: %v", err)
			quiet = 0
			continue
		}
		if open+events+waiting+running != 0 {
			quiet = 0
			continue
		}
		if quiet++; quiet == 3 {
			return
		}
	}
	logOpenTurns(t, db)
	t.Errorf("the host did not settle: %d open turns, %d undelivered events, %d messages waiting, %d processes running",
		open, events, waiting, running)
	rows, err := db.Query(`SELECT id, kind, state, reason, attempts, next_at, origin FROM deliveries WHERE state IN ('pending', 'sending')`)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, kind, state, reason, origin string
		var attempts int
		var next int64
		rows.Scan(&id, &kind, &state, &reason, &attempts, &next, &origin)
		t.Logf("waiting: %s %s %s (%s) attempts %d, next in %v, from %s", id, kind, state, reason, attempts,
			time.Until(time.UnixMilli(next)).Round(time.Second), origin)
	}
}

// logOpenTurns logs the inbox rows that have not ended, for the failure report.
func logOpenTurns(t *testing.T, db *sql.DB) {
	t.Helper()
	rows, err := db.Query(`SELECT id, kind, state, owner, outcome, session_key, text, updated_at FROM turn_inbox
		WHERE state IN ('received', 'queued', 'running')`)
	if err != nil {
		t.Logf("open turns: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, kind, state, owner, outcome, key, text string
		var updated int64
		rows.Scan(&id, &kind, &state, &owner, &outcome, &key, &text, &updated)
		t.Logf("open turn: %s %s %s owner %q (%s) key %s, updated %v ago: %q", id, kind, state, owner, outcome, key,
			time.Since(time.UnixMilli(updated)).Round(time.Millisecond), text)
	}
}

// checkChaos is the checker: see TestChaosKill9.
func checkChaos(t *testing.T, db *sql.DB, fake *echotest.Server, accepted map[string]string) {
	t.Helper()
	ctx := context.Background()
	count := func(q string, args ...any) int {
		var n int
		if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	report := map[string]int{}

	// Lost inbound messages.
	lost := 0
	for id, text := range accepted {
		var state, outcome string
		err := db.QueryRowContext(ctx, `SELECT state, outcome FROM turn_inbox WHERE event_id = $1`, id).Scan(&state, &outcome)
		switch {
		case err != nil:
			lost++
			t.Errorf("lost: %s %q has no inbox row (%v)", id, text, err)
		case state == "received" || state == "queued" || state == "running":
			lost++
			t.Errorf("lost: %s %q never ended (%s)", id, text, state)
		default:
			report["inbox "+state]++
		}
	}

	// Duplicates.
	dups := count(`SELECT COUNT(*) FROM (SELECT event_id FROM turn_inbox WHERE event_id IS NOT NULL GROUP BY plugin, profile, event_id HAVING COUNT(*) > 1)`)
	platform := fake.Messages()
	seen := map[string]int{}
	for _, m := range platform {
		seen[m.DeliveryID]++
	}
	for id, n := range seen {
		if n > 1 {
			dups++
			t.Errorf("duplicate: delivery %s reached the platform %d times", id, n)
		}
		if a := fake.Attempts(id); a > 1 {
			dups++
			t.Errorf("duplicate: delivery %s was sent %d times", id, a)
		}
	}

	// What reached the platform was meant to: nothing dropped was sent.
	for _, m := range platform {
		var state, reason string
		if err := db.QueryRowContext(ctx, `SELECT state, reason FROM deliveries WHERE id = $1`, m.DeliveryID).Scan(&state, &reason); err != nil {
			t.Errorf("the platform got %s (%q), which the ledger does not know: %v", m.DeliveryID, m.Text, err)
			continue
		}
		if state == "dropped" || state == "pending" {
			t.Errorf("the platform got %s (%q) but the ledger says %s (%s)", m.DeliveryID, m.Text, state, reason)
		}
	}

	cdups, silent, left := checkCompletions(t, db, report)
	dups += cdups
	t.Logf("checker: %d lost, %d duplicates, %d into a left session, %d silent drops; %v; %d platform messages",
		lost, dups, left, silent, report, len(platform))
	if report["completion delivered"] == 0 || report["completion dropped (recorded)"] == 0 {
		t.Errorf("the run exercised too little: %v", report)
	}
}

// checkCompletions checks every process completion in db: exactly one terminal record, and a
// delivery only into the session that started the process (or its compression continuation),
// before the user left it. It counts outcomes into report and returns the duplicates, silent
// drops and deliveries into a left session it found (each also reported with t.Errorf).
func checkCompletions(t *testing.T, db *sql.DB, report map[string]int) (dups, silent, left int) {
	t.Helper()
	ctx := context.Background()
	// Every completion: exactly one terminal record, and a delivery only into the session that
	// started the process (or its compression continuation), before the user left it.
	type fate struct{ delivered, dropped, failed, retrying int }
	fates := map[string]*fate{}
	rows, err := db.QueryContext(ctx, `SELECT proc_id FROM process_events WHERE kind = 'completion' AND state != 'suppressed'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		rows.Scan(&p)
		fates[p] = &fate{}
	}
	rows.Close()
	// A process another host recorded as lost (its host stopped, or was paused past its lease)
	// and whose real end its host reconciled later has two notices by design: "lost", then one
	// correction. Those are allowed one record more.
	corrected := map[string]bool{}
	rows, err = db.QueryContext(ctx, `SELECT proc_id FROM process_events WHERE kind = 'correction' AND state != 'suppressed'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		rows.Scan(&p)
		corrected[p] = true
	}
	rows.Close()
	note := func(proc, state string) {
		f := fates[proc]
		if f == nil {
			return
		}
		switch state {
		case "delivered":
			f.delivered++
		case "dropped":
			f.dropped++
		case "failed":
			f.failed++
		case "pending":
			f.retrying++ // settle waited for everything else: an unverifiable owner, retried
		}
	}
	type deliveredNote struct{ proc, row, into string }
	var delivered []deliveredNote
	rows, err = db.QueryContext(ctx, `SELECT origin, state, id, session_id FROM deliveries WHERE origin LIKE 'proc_%'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var origin, state, id, into string
		rows.Scan(&origin, &state, &id, &into)
		note(origin, state)
		if state == "delivered" {
			delivered = append(delivered, deliveredNote{origin, id, into})
		}
	}
	rows.Close()
	rows, err = db.QueryContext(ctx, `SELECT i.event_id, d.state, d.id, d.session_id FROM turn_inbox i
		JOIN deliveries d ON i.outcome LIKE '%answered ' || d.grp AND d.part = 1
		WHERE i.kind = 'notification'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var event, state, id, into string
		rows.Scan(&event, &state, &id, &into)
		proc, _, _ := strings.Cut(event, "#")
		note(proc, state)
		if state == "delivered" {
			delivered = append(delivered, deliveredNote{proc, id, into})
		}
	}
	rows.Close()
	for proc, f := range fates {
		n := f.delivered + f.dropped + f.failed + f.retrying
		if corrected[proc] {
			if n != 2 {
				dups++
				t.Errorf("the lost notice and the correction of %s have %d records (%d delivered, %d dropped, %d failed), want one each",
					proc, n, f.delivered, f.dropped, f.failed)
			}
			report["lost, then corrected"]++
			continue
		}
		switch {
		case n == 1 && f.delivered == 1:
			report["completion delivered"]++
		case n == 1 && f.dropped == 1:
			report["completion dropped (recorded)"]++
		case n == 1 && f.failed == 1:
			report["completion failed (recorded)"]++
		case n == 1:
			report["completion unverifiable, retried (recorded)"]++
		case n == 0:
			silent++
			t.Errorf("silent drop: the completion of %s has no record", proc)
		default:
			dups++
			t.Errorf("duplicate: the completion of %s has %d delivered, %d dropped, %d failed records", proc, f.delivered, f.dropped, f.failed)
		}
	}
	for _, d := range delivered {
		if msg := intoLeftSession(ctx, db, d.proc, d.row, d.into); msg != "" {
			left++
			t.Errorf("delivered into a left session: %s (row %s): %s", d.proc, d.row, msg)
		}
	}
	return dups, silent, left
}

// intoLeftSession returns why delivering proc's notice (ledger row) into session into broke the
// promise, or "": into must be the session that started the process or its compression
// continuation, and the notice must have been recorded delivered no later than into ended at a
// user boundary.
func intoLeftSession(ctx context.Context, db *sql.DB, proc, row, into string) string {
	var stamped string
	if err := db.QueryRowContext(ctx, `SELECT session_id FROM processes WHERE id = $1`, proc).Scan(&stamped); err != nil {
		return "process: " + err.Error()
	}
	for s, hops := stamped, 0; ; hops++ {
		if s == into {
			break
		}
		var child string
		err := db.QueryRowContext(ctx, `SELECT id FROM sessions WHERE parent_session_id = $1 AND created_by = 'compression'
			ORDER BY rowid DESC LIMIT 1`, s).Scan(&child)
		if err != nil || hops > 100 {
			return fmt.Sprintf("session %s is not %s or its compression continuation", into, stamped)
		}
		s = child
	}
	var ended sql.NullInt64
	var reason string
	var at int64
	db.QueryRowContext(ctx, `SELECT ended_at, COALESCE(end_reason, '') FROM sessions WHERE id = $1`, into).Scan(&ended, &reason)
	db.QueryRowContext(ctx, `SELECT updated_at FROM deliveries WHERE id = $1`, row).Scan(&at)
	if ended.Valid && reason != "compression" && reason != "" && at > ended.Int64 {
		return fmt.Sprintf("delivered at %d, after %s ended %s at %d", at, into, reason, ended.Int64)
	}
	return ""
}
