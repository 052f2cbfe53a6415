//go:build !wasip1

package main

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk/sdktest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// chat is the host side of the tests: it records hermes_send calls and answers them as told,
// runs "agent turns" by echoing the prompt, and holds the clock.
type chat struct {
	mu    sync.Mutex
	sent  []abi.HostSendRequest
	stale map[string]bool // pinned sessions that no longer own their chat
	fail  string          // answer sends with state "failed" and this reason
	crash bool            // the next send "kills the host" (the tick call fails mid-run)
	agent func(prompt string) (string, error)
	now   time.Time
	// pending answers sends "pending" (the host's wait for the outcome ran out) with ids
	// dlv_1, dlv_2…; outcomes is what the ledger says of each later: "delivered", "stale" or
	// "failed:REASON" (absent: still pending).
	pending  bool
	ids      int
	outcomes map[string]string
	asked    []string // the delivery ids asked about
}

func (c *chat) HostSend(_ context.Context, _ sdktest.Caller, req abi.HostSendRequest) (abi.HostSendReply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if req.DeliveryID != "" {
		c.asked = append(c.asked, req.DeliveryID)
		if req.Text != "" || req.Target.ChatID != "" {
			return abi.HostSendReply{}, abi.Errorf(abi.CodeBadRequest, "a query sends nothing")
		}
		switch o := c.outcomes[req.DeliveryID]; {
		case o == "":
			return abi.HostSendReply{DeliveryID: req.DeliveryID, State: "pending"}, nil
		case o == "stale":
			return abi.HostSendReply{}, &abi.Error{Code: abi.CodeStale, Message: "stale: user_boundary"}
		case strings.HasPrefix(o, "failed:"):
			return abi.HostSendReply{DeliveryID: req.DeliveryID, State: "failed", Reason: strings.TrimPrefix(o, "failed:")}, nil
		}
		return abi.HostSendReply{DeliveryID: req.DeliveryID, State: "delivered", MessageIDs: []string{"1"}}, nil
	}
	if req.PinSessionID != "" && c.stale[req.PinSessionID] {
		return abi.HostSendReply{}, &abi.Error{Code: abi.CodeStale, Message: "stale: user_boundary"}
	}
	c.sent = append(c.sent, req)
	if c.crash {
		c.crash = false
		runtime.Goexit() // the host died mid-send (deferred unlocks still run)
	}
	if c.fail != "" {
		return abi.HostSendReply{DeliveryID: "dlv_x", State: "failed", Reason: c.fail}, nil
	}
	if c.pending {
		c.ids++
		return abi.HostSendReply{DeliveryID: fmt.Sprintf("dlv_%d", c.ids), State: "pending"}, nil
	}
	return abi.HostSendReply{DeliveryID: "dlv_x", State: "delivered", MessageIDs: []string{"1"}}, nil
}

func (c *chat) AgentTurn(_ context.Context, _ sdktest.Caller, req abi.AgentRequest) (abi.AgentReply, error) {
	c.mu.Lock()
	f := c.agent
	c.mu.Unlock()
	if f == nil {
		return abi.AgentReply{Text: "agent says: " + req.Prompt}, nil
	}
	text, err := f(req.Prompt)
	return abi.AgentReply{Text: text}, err
}

func (c *chat) texts() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, s := range c.sent {
		out = append(out, s.Text)
	}
	return out
}

func (c *chat) clock() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *chat) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

var (
	t0    = time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)
	topic = abi.Source{Platform: "telegram", ChatType: abi.ChatForum, ChatID: "-1001", ThreadID: "42", UserID: "111"}
)

type fixture struct {
	t *testing.T
	h sdktest.Host
	c *chat
}

// hosts runs f against the plugin natively and as Wasm (the Wasm build proves the parser and
// the embedded time zone database work in the sandbox).
func hosts(t *testing.T, profile map[string]any, f func(t *testing.T, x *fixture)) {
	for _, mode := range []string{"native", "wasm"} {
		t.Run(mode, func(t *testing.T) {
			c := &chat{stale: map[string]bool{}, now: t0}
			o := sdktest.Options{Profiles: map[string]any{"main": profile}, Sender: c, Agents: c, Now: c.clock}
			var h sdktest.Host
			if mode == "native" {
				h = sdktest.Native(t, o)
			} else {
				h = sdktest.Wasm(t, wasmbuild.MustBuild(t, "."), o)
			}
			f(t, &fixture{t: t, h: h, c: c})
		})
	}
}

// tick runs a tick at now+d (and sets the host clock there).
func (x *fixture) tick(d time.Duration) *abi.TickResult {
	x.t.Helper()
	x.c.set(t0.Add(d))
	res, err := x.h.Tick("main", t0.Add(d))
	if err != nil {
		x.t.Fatalf("tick at +%v: %v", d, err)
	}
	return res
}

func (x *fixture) jobs(req abi.JobsRequest) ([]abi.Job, error) {
	res, err := x.h.Jobs("main", req)
	if err != nil {
		return nil, err
	}
	return res.Jobs, nil
}

func (x *fixture) add(spec abi.JobSpec, scope *abi.Source, session string) abi.Job {
	x.t.Helper()
	js, err := x.jobs(abi.JobsRequest{Op: abi.JobsAdd, Job: &spec, Scope: scope, ScopeSessionID: session, By: "telegram:111"})
	if err != nil {
		x.t.Fatalf("add %+v: %v", spec, err)
	}
	return js[0]
}

func (x *fixture) job(id string) abi.Job {
	x.t.Helper()
	js, err := x.jobs(abi.JobsRequest{Op: abi.JobsList})
	if err != nil {
		x.t.Fatal(err)
	}
	for _, j := range js {
		if j.ID == id {
			return j
		}
	}
	x.t.Fatalf("no job %s in %+v", id, js)
	return abi.Job{}
}

// A job created in a forum topic fires into that topic, pinned to the session it was created
// in, once per slot however often the host ticks; pause, resume, run_now and remove work from
// the chat that owns it and not from another.
func TestChatJobLifecycle(t *testing.T) {
	hosts(t, map[string]any{"timezone": "Europe/Berlin"}, func(t *testing.T, x *fixture) {
		j := x.add(abi.JobSpec{Schedule: "every 5m", Text: "stand up", Seed: true}, &topic, "sess-1")
		if j.Origin == nil || j.Origin.ThreadID != "42" || !*j.Pin || j.OriginSessionID != "sess-1" || j.Name != "stand up" ||
			j.CreatedBy != "telegram:111" || j.NextRunMs != t0.Add(5*time.Minute).UnixMilli() {
			t.Fatalf("added %+v", j)
		}
		if res := x.tick(time.Minute); res.NextTickMs != time.Minute.Milliseconds() {
			t.Fatalf("next tick in %d ms, want a minute (the longest wait)", res.NextTickMs)
		}
		if res := x.tick(4*time.Minute + 30*time.Second); res.NextTickMs != (30 * time.Second).Milliseconds() {
			t.Fatalf("next tick in %d ms, want the slot 30 s away", res.NextTickMs)
		}
		x.tick(5 * time.Minute)
		x.tick(5*time.Minute + time.Second) // the same slot again: nothing
		x.tick(6 * time.Minute)
		if got := x.c.texts(); len(got) != 1 {
			t.Fatalf("sent %q, want once", got)
		}
		s := x.c.sent[0]
		want := topic
		want.Profile = "main" // the host forces the caller's profile
		if s.Target != want || s.PinSessionID != "sess-1" || s.Seed != "[Cron delivery: stand up]\nstand up" {
			t.Fatalf("send %+v", s)
		}
		if j := x.job(j.ID); j.LastStatus != statusOK || j.Runs != 1 || j.NextRunMs != t0.Add(10*time.Minute).UnixMilli() {
			t.Fatalf("after the run %+v", j)
		}

		// Another chat sees nothing and cannot touch it.
		other := abi.Source{Platform: "telegram", ChatType: abi.ChatDM, ChatID: "999", UserID: "999"}
		if js, _ := x.jobs(abi.JobsRequest{Op: abi.JobsList, Scope: &other}); len(js) != 0 {
			t.Fatalf("another chat lists %+v", js)
		}
		for _, op := range []string{abi.JobsPause, abi.JobsRemove, abi.JobsRunNow} {
			if _, err := x.jobs(abi.JobsRequest{Op: op, ID: j.ID, Scope: &other}); abi.CodeOf(err) != abi.CodeNotFound {
				t.Fatalf("%s from another chat: %v", op, err)
			}
		}
		// Another topic of the same chat does see it.
		if js, _ := x.jobs(abi.JobsRequest{Op: abi.JobsList, Scope: &abi.Source{Platform: "telegram", ChatID: "-1001", ThreadID: "7"}}); len(js) != 1 {
			t.Fatalf("same chat, other topic: %+v", js)
		}

		if _, err := x.jobs(abi.JobsRequest{Op: abi.JobsPause, ID: j.ID, Scope: &topic, By: "telegram:111"}); err != nil {
			t.Fatal(err)
		}
		x.tick(10 * time.Minute)
		x.tick(20 * time.Minute)
		if n := len(x.c.texts()); n != 1 {
			t.Fatalf("a paused job sent (%d)", n)
		}
		x.c.set(t0.Add(21 * time.Minute))
		if _, err := x.jobs(abi.JobsRequest{Op: abi.JobsResume, ID: j.ID, Scope: &topic}); err != nil {
			t.Fatal(err)
		}
		// Resumed: the next slot, not the ones missed while paused.
		if j := x.job(j.ID); j.State != stateScheduled || j.NextRunMs != t0.Add(25*time.Minute).UnixMilli() {
			t.Fatalf("resumed %+v", j)
		}
		if _, err := x.jobs(abi.JobsRequest{Op: abi.JobsRunNow, ID: j.ID, Scope: &topic}); err != nil {
			t.Fatal(err)
		}
		x.tick(21 * time.Minute)
		x.tick(25 * time.Minute)
		if n := len(x.c.texts()); n != 3 {
			t.Fatalf("run_now and the next slot: %d sends, want 3", n)
		}
		if _, err := x.jobs(abi.JobsRequest{Op: abi.JobsRemove, ID: j.ID, Scope: &topic}); err != nil {
			t.Fatal(err)
		}
		x.tick(30 * time.Minute)
		if js, _ := x.jobs(abi.JobsRequest{Op: abi.JobsList}); len(js) != 0 || len(x.c.texts()) != 3 {
			t.Fatalf("after remove: jobs %+v, %d sends", js, len(x.c.texts()))
		}
	})
}

// Slots missed while the host was down run once (catch_up once, the default) or are skipped
// (catch_up skip); either way the job then continues on its schedule.
func TestCatchUp(t *testing.T) {
	hosts(t, map[string]any{}, func(t *testing.T, x *fixture) {
		once := x.add(abi.JobSpec{Schedule: "*/10 * * * *", Text: "once", Deliver: []string{"telegram:5"}}, nil, "")
		skip := x.add(abi.JobSpec{Schedule: "*/10 * * * *", Text: "skip", Deliver: []string{"telegram:6"}, CatchUp: "skip"}, nil, "")
		x.tick(10 * time.Minute) // both on time
		x.tick(58 * time.Minute) // down from 10 to 58: slots 20..50 missed, 50 is 8 min late (grace: 5)
		if got := counts(x.c.texts()); got != "once:2 skip:1" {
			t.Fatalf("sent %s, want once:2 (one catch-up) skip:1", got)
		}
		if j := x.job(skip.ID); j.LastStatus != statusMissed || !strings.Contains(j.LastError, "skipped 4 slot(s)") ||
			j.NextRunMs != t0.Add(time.Hour).UnixMilli() || j.FailureStreak != 0 {
			t.Fatalf("skip job %+v", j)
		}
		if j := x.job(once.ID); j.LastStatus != statusOK || j.NextRunMs != t0.Add(time.Hour).UnixMilli() || j.Runs != 2 {
			t.Fatalf("once job %+v", j)
		}
		// A late tick within the grace (half the period) still runs a skip job's slot.
		x.tick(64 * time.Minute)
		if got := counts(x.c.texts()); got != "once:3 skip:2" {
			t.Fatalf("within the grace: %s", got)
		}
	})
}

// After seven months of downtime each job catches up exactly once, for its latest slot, and then
// waits for its next slot: the catch-up is not repeated at later ticks (it used to be, once per
// 10 000 slots stepped), and the tick's work does not grow with the downtime.
func TestCatchUpAfterMonthsDown(t *testing.T) {
	hosts(t, map[string]any{"timezone": "Europe/Berlin"}, func(t *testing.T, x *fixture) {
		ids := map[string]string{}
		for _, j := range []struct{ text, schedule string }{{"minute", "* * * * *"}, {"five", "*/5 * * * *"}, {"daily", "daily at 7am"}} {
			ids[j.text] = x.add(abi.JobSpec{Schedule: j.schedule, Text: j.text, Deliver: []string{"telegram:5"}}, nil, "").ID
		}
		x.tick(5 * time.Minute)
		if got := counts(x.c.texts()); got != "five:1 minute:1" {
			t.Fatalf("on time: %s", got)
		}
		down := 213*24*time.Hour + 17*time.Minute + 30*time.Second // to 2027-01-09 12:17:30 UTC (13:17:30 CET)
		start := time.Now()
		x.tick(down)
		took := time.Since(start)
		x.tick(down + 20*time.Second)
		x.tick(down + 25*time.Second)
		if got := counts(x.c.texts()); got != "daily:1 five:2 minute:2" {
			t.Fatalf("after the downtime: %s, want one catch-up per job", got)
		}
		now := t0.Add(down)
		for text, want := range map[string]time.Time{"minute": now.Truncate(time.Minute).Add(time.Minute),
			"five": now.Truncate(5 * time.Minute).Add(5 * time.Minute), "daily": time.Date(2027, 1, 10, 6, 0, 0, 0, time.UTC)} {
			if j := x.job(ids[text]); j.NextRunMs != want.UnixMilli() || j.LastStatus != statusOK {
				t.Errorf("%s: next %v, last %q; want next %v", text, time.UnixMilli(j.NextRunMs).UTC(), j.LastStatus, want)
			}
		}
		t.Logf("the catch-up tick took %v", took)
		x.tick(down + time.Minute)
		if got := counts(x.c.texts()); got != "daily:1 five:2 minute:3" {
			t.Fatalf("the next minute: %s", got)
		}
	})
}

// A slot claimed before the host died mid-send is recorded as interrupted and never sent again.
// The "death" ends the tick's goroutine inside hermes_send (runtime.Goexit), so the plugin code
// after the send never runs, as under kill -9; natively only (the Wasm runtime's own crash path
// and a real kill -9 are covered by the conformance profile and internal/e2e).
func TestSlotAtMostOnceAcrossACrash(t *testing.T) {
	c := &chat{stale: map[string]bool{}, now: t0}
	x := &fixture{t: t, c: c, h: sdktest.Native(t, sdktest.Options{Profiles: map[string]any{"main": map[string]any{}}, Sender: c, Agents: c, Now: c.clock})}
	{
		j := x.add(abi.JobSpec{Schedule: "every 5m", Text: "tick", Deliver: []string{"telegram:5"}}, nil, "")
		x.c.crash = true
		x.c.set(t0.Add(5 * time.Minute))
		done := make(chan struct{})
		go func() {
			defer close(done)
			x.h.Tick("main", t0.Add(5*time.Minute))
			t.Error("the tick survived the host's death")
		}()
		<-done
		// "Restart": ticks at the same time and later.
		x.tick(5 * time.Minute)
		x.tick(6 * time.Minute)
		if n := len(x.c.texts()); n != 1 {
			t.Fatalf("the slot was sent %d times", n)
		}
		got := x.job(j.ID)
		if got.LastStatus != statusInterrupted || got.FailureStreak != 1 || !strings.Contains(got.LastError, "not repeated") {
			t.Fatalf("after the crash %+v", got)
		}
		x.tick(10 * time.Minute)
		if got := x.job(j.ID); len(x.c.texts()) != 2 || got.LastStatus != statusOK || got.FailureStreak != 0 {
			t.Fatalf("the next slot: %d sends, %+v", len(x.c.texts()), got)
		}
	}
}

// A job pinned to a conversation the user has left is recorded as stale, sends nothing and is
// paused; resuming it from its chat re-pins it to the current conversation.
func TestPinnedJobAfterNew(t *testing.T) {
	hosts(t, map[string]any{}, func(t *testing.T, x *fixture) {
		j := x.add(abi.JobSpec{Schedule: "every 5m", Text: "reminder", Seed: true}, &topic, "sess-old")
		x.c.stale["sess-old"] = true // the user sent /new
		x.tick(5 * time.Minute)
		got := x.job(j.ID)
		if len(x.c.texts()) != 0 || got.LastStatus != statusStale || got.State != statePaused || got.FailureStreak != 0 ||
			!strings.Contains(got.LastError, "stale") {
			t.Fatalf("sent %q, job %+v", x.c.texts(), got)
		}
		x.tick(10 * time.Minute)
		if len(x.c.texts()) != 0 {
			t.Fatal("a paused stale job sent")
		}
		x.c.set(t0.Add(11 * time.Minute))
		if _, err := x.jobs(abi.JobsRequest{Op: abi.JobsResume, ID: j.ID, Scope: &topic, ScopeSessionID: "sess-new"}); err != nil {
			t.Fatal(err)
		}
		x.tick(15 * time.Minute)
		if len(x.c.sent) != 1 || x.c.sent[0].PinSessionID != "sess-new" {
			t.Fatalf("after resume: %+v", x.c.sent)
		}
	})
}

// Prompt jobs run an agent turn; [SILENT] output sends nothing; a failed turn or send is
// recorded on the job with a failure streak.
func TestOutputsAndFailures(t *testing.T) {
	hosts(t, map[string]any{}, func(t *testing.T, x *fixture) {
		j := x.add(abi.JobSpec{Name: "report", Schedule: "every 5m", Prompt: "how is the build?", Deliver: []string{"telegram:5"}}, nil, "")
		x.tick(5 * time.Minute)
		if got := x.c.texts(); len(got) != 1 || got[0] != "Cronjob Response: report\n-------------\n\nagent says: how is the build?" {
			t.Fatalf("sent %q", got)
		}
		x.c.agent = func(string) (string, error) { return "[SILENT] nothing new", nil }
		x.tick(10 * time.Minute)
		if got := x.job(j.ID); len(x.c.texts()) != 1 || got.LastStatus != statusSilent {
			t.Fatalf("silent: %q %+v", x.c.texts(), got)
		}
		x.c.agent = func(string) (string, error) { return "", &abi.Error{Code: abi.CodeTimeout, Message: "model too slow"} }
		x.tick(15 * time.Minute)
		x.c.agent = nil
		x.c.fail = "permanent: chat not found"
		x.tick(20 * time.Minute)
		got := x.job(j.ID)
		if got.LastStatus != statusFailed || got.FailureStreak != 2 || !strings.Contains(got.LastError, "chat not found") {
			t.Fatalf("after two failures %+v", got)
		}
		x.c.fail = ""
		x.tick(25 * time.Minute)
		if got := x.job(j.ID); got.LastStatus != statusOK || got.FailureStreak != 0 || got.LastError != "" {
			t.Fatalf("after a success %+v", got)
		}
	})
}

// A run whose deliveries the host answered "pending" is recorded pending, and later ticks ask
// the host for the ledger's final outcome until it has one: the job then says ok, or
// delivery_failed with the reason (a failure streak), or stale (and pauses, having reached
// nobody). Asking sends nothing.
func TestPendingReconciledFromTheLedger(t *testing.T) {
	hosts(t, map[string]any{}, func(t *testing.T, x *fixture) {
		x.c.pending, x.c.outcomes = true, map[string]string{}
		j := x.add(abi.JobSpec{Schedule: "every 5m", Text: "slow", Deliver: []string{"telegram:5", "telegram:6"}}, nil, "")
		x.tick(5 * time.Minute)
		status := func() abi.Job { return x.job(j.ID) }
		if got := status(); got.LastStatus != statusPending || !strings.Contains(got.LastError, "2 delivery(ies) still pending") {
			t.Fatalf("after the run %+v", got)
		}
		x.tick(6 * time.Minute) // the ledger knows nothing yet
		x.c.outcomes["dlv_1"] = "delivered"
		x.tick(7 * time.Minute)
		if got := status(); got.LastStatus != statusPending || !strings.Contains(got.LastError, "1 delivery(ies) still pending") {
			t.Fatalf("one delivered, one pending: %+v", got)
		}
		x.c.outcomes["dlv_2"] = "failed:permanent: chat not found"
		x.tick(8 * time.Minute)
		if got := status(); got.LastStatus != statusFailed || got.FailureStreak != 1 || !strings.Contains(got.LastError, "telegram:6: failed: permanent: chat not found") {
			t.Fatalf("one failed in the ledger: %+v", got)
		}
		asked := len(x.c.asked)
		x.tick(9 * time.Minute) // settled: not asked again
		if len(x.c.asked) != asked || asked != 5 {
			t.Fatalf("asked %v", x.c.asked)
		}
		x.tick(10 * time.Minute)
		x.c.outcomes["dlv_3"], x.c.outcomes["dlv_4"] = "delivered", "delivered"
		x.tick(11 * time.Minute)
		if got := status(); got.LastStatus != statusOK || got.FailureStreak != 0 || got.LastError != "" {
			t.Fatalf("both delivered: %+v", got)
		}
		if n := len(x.c.sent); n != 4 {
			t.Fatalf("%d sends, want 4 (two runs, two targets; asking sends nothing)", n)
		}
		// A pinned delivery the ledger dropped as stale: the job pauses, as when the host says so at once.
		p := x.add(abi.JobSpec{Schedule: "every 5m", Text: "pinned"}, &topic, "sess-1") // at 11m: due at 16m
		x.tick(15 * time.Minute)                                                        // the first job: dlv_5, dlv_6
		x.tick(16 * time.Minute)                                                        // the pinned one: dlv_7
		x.c.outcomes["dlv_7"] = "stale"
		x.tick(17 * time.Minute)
		if got := x.job(p.ID); got.LastStatus != statusStale || got.State != statePaused {
			t.Fatalf("stale in the ledger: %+v (asked %v)", got, x.c.asked)
		}
	})
}

// Targets: origin, explicit chats, a bare platform (origin if on it, else its home), home;
// duplicates go out once, and the pin applies to the origin chat only.
func TestTargets(t *testing.T) {
	hosts(t, map[string]any{"home": map[string]any{"telegram": "-1009:3", "slack": "C42"}, "chat_targets": []string{"*"}}, func(t *testing.T, x *fixture) {
		x.add(abi.JobSpec{Schedule: "every 5m", Text: "t", Deliver: []string{"origin", "telegram:-1001:42", "telegram", "home", "telegram:-1001", "slack:C42"}}, &topic, "sess-1")
		x.tick(5 * time.Minute)
		var got []string
		for _, s := range x.c.sent {
			got = append(got, s.Target.Platform+":"+s.Target.ChatID+":"+s.Target.ThreadID+"/"+s.PinSessionID)
		}
		want := "telegram:-1001:42/sess-1,slack:C42:/,telegram:-1009:3/,telegram:-1001:/"
		if strings.Join(got, ",") != want {
			t.Fatalf("targets %s\nwant    %s", strings.Join(got, ","), want)
		}
		// Without an origin, the default is every home channel.
		x.c.sent = nil
		x.add(abi.JobSpec{Schedule: "every 5m", Text: "h"}, nil, "")
		x.tick(10 * time.Minute)
		if n := len(x.c.sent); n != 4+2 {
			t.Fatalf("%d sends, want 4 (first job) + 2 (home)", n)
		}
	})
}

// A job created from a chat delivers into that chat (any of its threads) and nowhere else unless
// the cron profile's chat_targets grants it: another chat, a home channel or a bare platform
// naming a home channel is refused (denied) without the grant; the operator's jobs are not
// limited. A grant taken back stops the deliveries it allowed.
func TestChatTargets(t *testing.T) {
	home := map[string]any{"telegram": "-1009:3", "slack": "C42"}
	hosts(t, map[string]any{"home": home}, func(t *testing.T, x *fixture) {
		for _, to := range [][]string{{"telegram:222"}, {"home"}, {"slack"}, {"telegram:-1009:3"}, {"origin", "telegram:-1002"}} {
			_, err := x.jobs(abi.JobsRequest{Op: abi.JobsAdd, Job: &abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: to}, Scope: &topic, ScopeSessionID: "s"})
			if abi.CodeOf(err) != abi.CodeDenied || !strings.Contains(err.Error(), "posts only into this chat") || !strings.Contains(err.Error(), "chat_targets") {
				t.Errorf("from a chat, to %v: %v, want denied", to, err)
			}
		}
		for _, to := range [][]string{nil, {"origin"}, {"telegram"}, {"telegram:-1001:7"}, {"telegram:-1001"}} {
			x.add(abi.JobSpec{Schedule: "every 5m", Text: "own", Deliver: to}, &topic, "s")
		}
		x.add(abi.JobSpec{Schedule: "every 5m", Text: "operator", Deliver: []string{"telegram:222", "home"}}, nil, "")
		x.tick(5 * time.Minute)
		var got []string
		for _, s := range x.c.sent {
			got = append(got, s.Text+">"+s.Target.ChatID+":"+s.Target.ThreadID)
		}
		sort.Strings(got)
		want := "operator>-1009:3,operator>222:,operator>C42:,own>-1001:,own>-1001:42,own>-1001:42,own>-1001:42,own>-1001:7"
		if strings.Join(got, ",") != want {
			t.Fatalf("sent %s\nwant %s", strings.Join(got, ","), want)
		}
	})
	// Granted: home and one other chat. Then the operator takes the grant back (the same kv
	// state under a new configuration): the next run posts into the chat only, and says why.
	st := sdktest.NewState(t)
	c := &chat{stale: map[string]bool{}, now: t0}
	native := func(t *testing.T, profile map[string]any) *fixture {
		return &fixture{t: t, c: c, h: sdktest.Native(t, sdktest.Options{Profiles: map[string]any{"main": profile}, State: st, Sender: c, Agents: c, Now: c.clock})}
	}
	var id string
	t.Run("granted", func(t *testing.T) {
		x := native(t, map[string]any{"home": home, "chat_targets": []string{"home", "telegram:222"}})
		for _, to := range [][]string{{"telegram:333"}, {"slack:C43"}, {"telegram:222:5", "telegram:223"}} {
			if _, err := x.jobs(abi.JobsRequest{Op: abi.JobsAdd, Job: &abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: to}, Scope: &topic}); abi.CodeOf(err) != abi.CodeDenied {
				t.Errorf("granted home and telegram:222, to %v: %v, want denied", to, err)
			}
		}
		id = x.add(abi.JobSpec{Schedule: "every 5m", Text: "granted", Deliver: []string{"home", "telegram:222:5", "origin"}}, &topic, "s").ID
		x.tick(5 * time.Minute)
		if n := len(x.c.sent); n != 4 {
			t.Fatalf("granted: %d sends, want 4 (two homes, 222, the origin)", n)
		}
	})
	t.Run("taken back", func(t *testing.T) {
		x := native(t, map[string]any{"home": home})
		x.c.sent = nil
		x.tick(10 * time.Minute)
		if len(x.c.sent) != 1 || x.c.sent[0].Target.ChatID != topic.ChatID {
			t.Fatalf("after the grant was taken back: %+v", x.c.sent)
		}
		if got := x.job(id); got.LastStatus != statusFailed || !strings.Contains(got.LastError, "chat_targets does not grant it") {
			t.Fatalf("after the grant was taken back: %+v", got)
		}
	})
}

// A target on a platform no plugin serves for the profile is refused when the job is created
// (the host says which platforms are served); an older host that does not say refuses nothing.
func TestUnservedPlatformRefused(t *testing.T) {
	hosts(t, map[string]any{"home": map[string]any{"telegram": "-1009:3", "slack": "C42"}}, func(t *testing.T, x *fixture) {
		served := []string{"telegram"}
		for _, to := range [][]string{{"slack:C1"}, {"home"}, {"slack"}, {"telegram:5", "yuanbao:7"}} {
			_, err := x.jobs(abi.JobsRequest{Op: abi.JobsAdd, Job: &abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: to}, Platforms: &served})
			if abi.CodeOf(err) != abi.CodeBadRequest || !strings.Contains(err.Error(), "no platform plugin serves") || !strings.Contains(err.Error(), "served: telegram") {
				t.Errorf("to %v: %v, want bad_request", to, err)
			}
		}
		none := []string{}
		if _, err := x.jobs(abi.JobsRequest{Op: abi.JobsAdd, Job: &abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: []string{"telegram:5"}}, Platforms: &none}); err == nil || !strings.Contains(err.Error(), "served: none") {
			t.Errorf("nothing served: %v", err)
		}
		if _, err := x.jobs(abi.JobsRequest{Op: abi.JobsAdd, Job: &abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: []string{"telegram:5", "telegram:-1009:3"}}, Platforms: &served}); err != nil {
			t.Errorf("served: %v", err)
		}
		x.add(abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: []string{"slack:C1"}}, nil, "") // an older host: not refused
	})
}

// What cannot run is refused when it is created, with a message the user can act on.
func TestRefusals(t *testing.T) {
	hosts(t, map[string]any{}, func(t *testing.T, x *fixture) {
		for _, c := range []struct {
			spec abi.JobSpec
			want string
		}{
			{abi.JobSpec{Schedule: "2026-06-10 11:50", Text: "x", Deliver: []string{"telegram:5"}}, "in the past"},
			{abi.JobSpec{Schedule: "every 5m", Deliver: []string{"telegram:5"}}, "text to send or a prompt"},
			{abi.JobSpec{Schedule: "every 5m", Text: "a", Prompt: "b", Deliver: []string{"telegram:5"}}, "not both"},
			{abi.JobSpec{Schedule: "every 5m", Text: "x"}, "nowhere to deliver"},
			{abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: []string{"Tele gram"}}, "target"},
			{abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: []string{"home"}}, "no home channel is configured"},
			{abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: []string{"telegram"}}, "no home channel is configured for telegram"},
			{abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: []string{"origin"}}, "not created from a chat"},
			{abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: []string{"telegram:5"}, TimeZone: "Moon/Base"}, "unknown time zone"},
			{abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: []string{"telegram:5"}, CatchUp: "always"}, "catch_up"},
			{abi.JobSpec{Schedule: "sometime", Text: "x", Deliver: []string{"telegram:5"}}, "not a schedule I understand"},
		} {
			_, err := x.jobs(abi.JobsRequest{Op: abi.JobsAdd, Job: &c.spec})
			if abi.CodeOf(err) != abi.CodeBadRequest || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%+v: %v, want bad_request saying %q", c.spec, err, c.want)
			}
		}
		// A one-shot a minute ago (within the grace) is accepted and runs at the next tick.
		x.add(abi.JobSpec{Schedule: "2026-06-10 11:59", Text: "just now", Deliver: []string{"telegram:5"}}, nil, "")
		x.tick(0)
		x.tick(time.Hour)
		if got := x.c.texts(); len(got) != 1 || got[0] != "just now" {
			t.Fatalf("sent %q", got)
		}
	})
}

// Jobs of the config file run like the others, keep their state in kv, and cannot be removed
// through the jobs export.
func TestConfigJobs(t *testing.T) {
	profile := map[string]any{"timezone": "Europe/Berlin", "jobs": []any{
		map[string]any{"name": "morning", "schedule": "daily at 7am", "text": "good morning", "deliver": "telegram:5, telegram:6"},
	}}
	hosts(t, profile, func(t *testing.T, x *fixture) {
		js, _ := x.jobs(abi.JobsRequest{Op: abi.JobsList})
		if len(js) != 1 || js[0].ID != "cfg-morning" || js[0].CreatedBy != "config" || js[0].Display != "cron 0 7 * * * (Europe/Berlin)" {
			t.Fatalf("config jobs %+v", js)
		}
		x.tick(0)
		x.tick(19 * time.Hour) // 07:00 CEST the next day is 05:00 UTC
		if got := x.c.texts(); len(got) != 2 || got[0] != "good morning" {
			t.Fatalf("sent %q", got)
		}
		if _, err := x.jobs(abi.JobsRequest{Op: abi.JobsRemove, ID: "cfg-morning"}); abi.CodeOf(err) != abi.CodeBadRequest {
			t.Fatalf("remove a config job: %v", err)
		}
		if j := x.job("cfg-morning"); j.Runs != 1 || j.LastStatus != statusOK {
			t.Fatalf("state %+v", j)
		}
	})
}

func TestConfigureReportsProblems(t *testing.T) {
	bad := profileConfig{TimeZone: "Nowhere/Land", CatchUp: "sometimes", Home: map[string]string{"telegram": ""}, ChatTargets: []string{"telegram", "Tele gram:1", "home", "slack:*"}}
	jobs := profileConfig{Jobs: []configJob{{Name: "a", Schedule: "every 5m", Text: "x", Deliver: []string{"telegram:1"}},
		{Name: "a", Schedule: "bad", Text: "x", Deliver: []string{"telegram:1"}}, {Schedule: "every 5m"}}}
	got := strings.Join(append(bad.problems(t0), jobs.problems(t0)...), "\n")
	if strings.Contains(got, "home\"") || strings.Contains(got, "slack:*") {
		t.Errorf("good chat_targets reported:\n%s", got)
	}
	for _, want := range []string{"unknown time zone", "catch_up", "home.telegram", "job a: the name is used twice", "not a schedule", "jobs[2]: name is required",
		`chat_targets: "telegram": write telegram:* for any telegram chat`, `chat_targets: "Tele gram:1"`} {
		if !strings.Contains(got, want) {
			t.Errorf("problems do not say %q:\n%s", want, got)
		}
	}
}

// counts summarizes texts as "a:2 b:1" (runs of several jobs in one tick have no fixed order).
func counts(texts []string) string {
	n := map[string]int{}
	for _, s := range texts {
		n[s]++
	}
	var out []string
	for k, v := range n {
		out = append(out, fmt.Sprintf("%s:%d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// The host never runs a changing jobs call while a tick of the same profile is in progress (a
// tick is blocked inside hermes_send here): an add waits for the tick, a list does not. Wasm
// only: the serialization is the runtime's.
func TestJobsWaitForTheTick(t *testing.T) {
	c := &chat{stale: map[string]bool{}, now: t0}
	send := make(chan struct{})
	blocking := &blockingChat{chat: c, entered: make(chan struct{}, 1), release: send}
	h := sdktest.Wasm(t, wasmbuild.MustBuild(t, "."), sdktest.Options{Profiles: map[string]any{"main": map[string]any{}},
		Sender: blocking, Agents: c, Now: c.clock})
	x := &fixture{t: t, h: h, c: c}
	x.add(abi.JobSpec{Schedule: "every 5m", Text: "slow", Deliver: []string{"telegram:5"}}, nil, "")
	c.set(t0.Add(5 * time.Minute))
	ticked := make(chan error, 1)
	go func() { _, err := h.Tick("main", t0.Add(5*time.Minute)); ticked <- err }()
	<-blocking.entered // the tick is inside hermes_send
	added := make(chan error, 1)
	go func() {
		_, err := h.Jobs("main", abi.JobsRequest{Op: abi.JobsAdd, Job: &abi.JobSpec{Schedule: "every 1h", Text: "x", Deliver: []string{"telegram:5"}}})
		added <- err
	}()
	if _, err := h.Jobs("main", abi.JobsRequest{Op: abi.JobsList}); err != nil {
		t.Fatalf("a list during the tick: %v", err)
	}
	select {
	case err := <-added:
		t.Fatalf("an add ran during the tick (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(send)
	if err := <-ticked; err != nil {
		t.Fatal(err)
	}
	if err := <-added; err != nil {
		t.Fatal(err)
	}
}

// blockingChat holds every send until release is closed.
type blockingChat struct {
	*chat
	entered chan struct{}
	release chan struct{}
}

func (b *blockingChat) HostSend(ctx context.Context, c sdktest.Caller, req abi.HostSendRequest) (abi.HostSendReply, error) {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.release
	return b.chat.HostSend(ctx, c, req)
}
