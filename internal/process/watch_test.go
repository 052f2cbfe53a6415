package process

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestWatchLimiterWindowsAndStrikes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var w watchLimiter

	if w.offer(at(0)) != deliverMatch {
		t.Fatal("first match not delivered")
	}
	w.deliver(at(0))
	// Inside the 15 s window: suppressed; the first suppression is strike 1.
	for _, s := range []float64{1, 5, 14.9} {
		if v := w.offer(at(s)); v != suppressMatch {
			t.Fatalf("t=%v: %v", s, v)
		}
	}
	if w.strikes != 1 || w.suppressed != 3 {
		t.Fatalf("strikes %d suppressed %d", w.strikes, w.suppressed)
	}
	// The window ends at 15 s exactly.
	if w.offer(at(15)) != deliverMatch {
		t.Fatal("not delivered after the window")
	}
	if n, _ := w.deliver(at(15)); n != 3 {
		t.Fatalf("suppressed before = %d", n)
	}
	// A clean window (no suppression) resets the consecutive strikes.
	if w.offer(at(40)) != deliverMatch || w.strikes != 0 {
		t.Fatalf("clean window did not reset strikes: %d", w.strikes)
	}
	w.deliver(at(40))
	// Three consecutive struck windows disable.
	w.offer(at(41)) // strike 1
	w.offer(at(42)) // same window: still strike 1
	w.offer(at(56))
	w.deliver(at(56))
	w.offer(at(57)) // strike 2
	w.offer(at(72))
	w.deliver(at(72))
	if v := w.offer(at(73)); v != disableWatch {
		t.Fatalf("third strike: %v (strikes %d)", v, w.strikes)
	}
}

func TestWatchLimiterLifetimeCap(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var w watchLimiter
	for i := 0; i < watchMaxLifetime; i++ {
		now := t0.Add(time.Duration(i) * time.Minute)
		if w.offer(now) != deliverMatch {
			t.Fatalf("match %d not delivered", i+1)
		}
		if _, capped := w.deliver(now); capped != (i == watchMaxLifetime-1) {
			t.Fatalf("match %d: capped=%v", i+1, capped)
		}
	}
}

func TestBreakerTripsOnceAndReleasesOnce(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var b breaker
	o := tripOrigin{id: "proc_x"}
	for i := 0; i < globalMaxInWindow; i++ {
		if ok, ev := b.admit(t0.Add(time.Duration(i)*100*time.Millisecond), o); !ok || ev != nil {
			t.Fatalf("match %d refused", i+1)
		}
	}
	ok, ev := b.admit(t0.Add(2*time.Second), o)
	if ok || ev == nil || ev.Kind != EventOverflowTripped || ev.ProcID != "proc_x" {
		t.Fatalf("16th match: ok=%v ev=%+v", ok, ev)
	}
	for _, s := range []int{3, 20, 31} { // 30 s of drops from the trip at 2 s
		if !b.blocked(t0.Add(time.Duration(s) * time.Second)) {
			t.Fatalf("not blocked at %ds", s)
		}
		if b.release(t0.Add(time.Duration(s)*time.Second)) != nil {
			t.Fatalf("released early at %ds", s)
		}
	}
	rel := b.release(t0.Add(32 * time.Second))
	if rel == nil || rel.Kind != EventOverflowRelease || !strings.Contains(rel.Message, "4 matches were dropped") {
		t.Fatalf("release %+v", rel)
	}
	if b.release(t0.Add(40*time.Second)) != nil || b.blocked(t0.Add(40*time.Second)) {
		t.Fatal("released twice or still blocked")
	}
	// Matches spread out over more than the window never trip.
	var c breaker
	for i := 0; i < 100; i++ {
		if ok, _ := c.admit(t0.Add(time.Duration(i)*700*time.Millisecond), o); !ok {
			t.Fatalf("spread match %d tripped", i)
		}
	}
}

// A real process printing matches, with the clock under the test's control: rate limit, strikes,
// watch_disabled once, notify-on-complete takes over.
func TestWatchPatternsEndToEnd(t *testing.T) {
	clk := newFakeClock()
	e := newEnv(t, Options{Now: clk.Now})
	ctx := context.Background()
	g := make([]string, 4)
	open := make([]func(), 4)
	for i := range g {
		g[i], open[i] = e.gate(fmt.Sprint(i))
	}
	res := e.spawn(SpawnRequest{WatchPatterns: []string{"ERROR", "FATAL"}, Command: `echo boot; echo "ERROR 1"; echo "ERROR 2"; echo "FATAL 3"; ` +
		waitGate(g[0]) + `echo "ERROR 4"; echo "ERROR 5"; ` +
		waitGate(g[1]) + `echo "ERROR 6"; echo "ERROR 7"; ` +
		waitGate(g[2]) + `echo "ERROR 8"; ` + waitGate(g[3]) + `exit 0`})
	if res.NotifyOnComplete {
		t.Fatal("notify set without being asked")
	}
	seen := func(line string) {
		waitFor(t, line, func() bool {
			st, err := e.r.Poll(ctx, res.ID)
			return err == nil && strings.Contains(st.Output, line)
		})
	}
	kinds := func() []string {
		var out []string
		for _, r := range e.events(res.ID) {
			s := string(r.Kind)
			if r.Kind == EventWatchMatch {
				s = fmt.Sprintf("match(%s,+%d)", r.Output[strings.LastIndexByte(r.Output, '\n')+1:], r.Suppressed)
			}
			out = append(out, s)
		}
		return out
	}
	seen("FATAL 3")
	clk.Advance(16 * time.Second)
	open[0]()
	seen("ERROR 5")
	clk.Advance(16 * time.Second)
	open[1]()
	seen("ERROR 7")
	clk.Advance(16 * time.Second)
	open[2]()
	seen("ERROR 8")
	open[3]()
	e.waitEnd(res.ID)

	got := strings.Join(kinds(), " ")
	want := "match(ERROR 1,+0) match(ERROR 4,+2) match(ERROR 6,+1) watch_disabled completion"
	if got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	recs := e.events(res.ID)
	if first := recs[0]; first.Pattern != "ERROR" || first.Output != "boot\nERROR 1" || first.Stamp != testStamp("S1") {
		t.Fatalf("first match %+v", first.Event)
	}
	if dis := recs[3]; !strings.Contains(dis.Message, "3 consecutive") || !dis.Notify {
		t.Fatalf("watch_disabled %+v", dis.Event)
	}
	if c := recs[4]; !c.Notify {
		t.Fatal("notify-on-complete did not take over")
	}
	if row := e.row(res.ID); !row.WatchDisabled || !row.NotifyOnComplete || row.WatchMatches != 3 {
		t.Fatalf("checkpoint %+v", row)
	}
}

// Global breaker across processes: one tripped, drops for 30 s, one released, then matches flow.
func TestWatchOverflowAcrossProcesses(t *testing.T) {
	clk := newFakeClock()
	e := newEnv(t, Options{Now: clk.Now})
	g1, open1 := e.gate("1")
	g2, open2 := e.gate("2")
	n := globalMaxInWindow + 2
	var ids []string
	for i := 0; i < n; i++ {
		cmd := waitGate(g1) + "echo HIT; sleep 300"
		if i == 0 {
			cmd = waitGate(g1) + "echo HIT; " + waitGate(g2) + "echo HIT again; sleep 300"
		}
		res := e.spawn(SpawnRequest{WatchPatterns: []string{"HIT"}, Command: cmd})
		ids = append(ids, res.ID)
	}
	open1()
	all := func() []Record {
		recs, err := e.r.Queue().Events(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	count := func(k EventKind) int {
		c := 0
		for _, r := range all() {
			if r.Kind == k {
				c++
			}
		}
		return c
	}
	waitFor(t, "all first matches read", func() bool {
		for _, id := range ids {
			st, _ := e.r.Poll(context.Background(), id)
			if !strings.Contains(st.Output, "HIT") {
				return false
			}
		}
		return true
	})
	e.flush()
	if m, tr := count(EventWatchMatch), count(EventOverflowTripped); m != globalMaxInWindow || tr != 1 {
		t.Fatalf("matches %d tripped %d, want %d and 1", m, tr, globalMaxInWindow)
	}
	clk.Advance(globalCooldown + time.Second)
	waitFor(t, "released", func() bool { return count(EventOverflowRelease) == 1 })
	open2()
	waitFor(t, "matches flow again", func() bool { return count(EventWatchMatch) == globalMaxInWindow+1 })
	if tr, rel := count(EventOverflowTripped), count(EventOverflowRelease); tr != 1 || rel != 1 {
		t.Fatalf("tripped %d released %d", tr, rel)
	}
}

// A line read after the process ended never produces a match.
func TestNoWatchMatchAfterExit(t *testing.T) {
	e := newEnv(t, Options{PollInterval: time.Hour}) // nothing reads output before the end
	res := e.spawn(SpawnRequest{WatchPatterns: []string{"HIT"}, Command: "echo HIT; echo HIT"})
	<-e.r.lookup(res.ID).done // not Poll: Poll reads output (and matches) while running
	recs := e.events(res.ID)
	if len(recs) != 1 || recs[0].Kind != EventCompletion || recs[0].Output != "HIT\nHIT" {
		t.Fatalf("events %+v", recs)
	}
}
