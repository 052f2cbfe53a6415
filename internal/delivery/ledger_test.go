package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// platform is an in-process stand-in for a platform plugin, recording what it was asked to send
// (the end-to-end tests drive real Wasm plugins; these test the ledger's logic).
type platform struct {
	mu      sync.Mutex
	sent    []abi.OutboundMessage
	at      []time.Time
	answers []func(abi.OutboundMessage) (*abi.SendResult, error) // scripted, FIFO; then success
	block   chan chan struct{}                                   // if set, Send announces itself and waits
	limit   abi.MessageLimit
	gone    bool
}

func (p *platform) Send(ctx context.Context, plugin, profile string, m abi.OutboundMessage) (*abi.SendResult, error) {
	if p.block != nil {
		release := make(chan struct{})
		p.block <- release
		<-release
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.at = append(p.at, time.Now())
	if len(p.answers) > 0 {
		f := p.answers[0]
		p.answers = p.answers[1:]
		res, err := f(m)
		if err != nil || res.Error != nil {
			return res, err
		}
		if len(res.MessageIDs) > 0 { // a scripted success
			p.sent = append(p.sent, m)
			return res, nil
		}
	}
	p.sent = append(p.sent, m)
	return &abi.SendResult{MessageIDs: []string{fmt.Sprint(len(p.sent))}}, nil
}

func (p *platform) Reserve(_ context.Context, plugin string) (Sender, error) {
	return direct{p.Send, plugin}, nil
}

// direct is a Sender over a test platform's Send; there is nothing to reserve.
type direct struct {
	send   func(ctx context.Context, plugin, profile string, m abi.OutboundMessage) (*abi.SendResult, error)
	plugin string
}

func (d direct) Send(ctx context.Context, profile string, m abi.OutboundMessage) (*abi.SendResult, error) {
	return d.send(ctx, d.plugin, profile, m)
}

func (d direct) Release() {}

func (p *platform) Limit(string) (abi.MessageLimit, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	if p.gone {
		err = errors.New("plugin chat is not loaded")
	}
	if p.limit.Max == 0 {
		return abi.MessageLimit{Max: 1000, Unit: abi.UnitCodePoint}, err
	}
	return p.limit, err
}

func (p *platform) texts() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, m := range p.sent {
		out = append(out, m.Text)
	}
	return out
}

type fixture struct {
	t      testing.TB
	k      *session.Kernel
	l      *Ledger
	p      *platform
	cancel context.CancelFunc
	mu     sync.Mutex
	final  map[string]Row
	cond   *sync.Cond
}

func newFixture(t testing.TB, p *platform, opt Options) *fixture {
	t.Helper()
	return newFixtureOn(t, storetest.Default(t), p, opt)
}

// newFixtureOn is newFixture on backend b.
func newFixtureOn(t testing.TB, b storetest.Backend, p *platform, opt Options) *fixture {
	t.Helper()
	db := b.Open(t)
	k, err := session.Open(context.Background(), db, session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, k: k, p: p, final: map[string]Row{}}
	f.cond = sync.NewCond(&f.mu)
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Backoff == 0 {
		opt.Backoff = 10 * time.Millisecond
	}
	opt.Observer = func(r Row) {
		f.mu.Lock()
		if r.State.Final() {
			f.final[r.ID] = r
		}
		f.cond.Broadcast()
		f.mu.Unlock()
	}
	f.l, err = Open(context.Background(), db, k, p, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	if _, err := f.l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); f.l.Stop() })
	return f
}

// waitFinal waits until the row id is final and returns it.
func (f *fixture) waitFinal(id string) Row {
	f.t.Helper()
	done := make(chan Row, 1)
	go func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for {
			if r, ok := f.final[id]; ok {
				done <- r
				return
			}
			f.cond.Wait()
		}
	}()
	select {
	case r := <-done:
		return r
	case <-time.After(20 * time.Second):
		f.t.Fatalf("row %s never became final", id)
		return Row{}
	}
}

var chat = abi.Source{Platform: "echo", Profile: "main", ChatType: abi.ChatDM, ChatID: "42", UserID: "u1"}

// resolve creates (or gets) the chat's session and returns a stamp for work started now.
func (f *fixture) stamp() session.Stamp {
	f.t.Helper()
	key, _ := f.k.Key(chat)
	var st session.Stamp
	err := f.k.WithBoundary(context.Background(), key, func(b *session.Boundary) error {
		if _, err := b.Resolve(chat, session.ResolveOptions{}); err != nil {
			return err
		}
		var err error
		st, err = b.Stamp(chat)
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

func (f *fixture) msg(st session.Stamp, text string, guard GuardMode) Message {
	return Message{Plugin: "echo", Profile: "main", Key: st.Key, Target: abi.OutboundMessage{ChatID: chat.ChatID},
		Text: text, Kind: KindReply, Guard: guard, Stamp: st, Generation: st.Generation, Transcript: true}
}

func (f *fixture) transcript(id string) []string {
	msgs, err := f.k.Transcript(context.Background(), id, 100)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		out = append(out, m.Role+":"+m.Text)
	}
	return out
}

func TestDeliverAppendsToTranscript(t *testing.T) {
	f := newFixture(t, &platform{}, Options{})
	st := f.stamp()
	id, err := f.l.Enqueue(context.Background(), f.msg(st, "hello", GuardWork))
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitFinal(id)
	if r.State != Delivered || r.SessionID != st.SessionID || len(r.MessageIDs) != 1 {
		t.Fatalf("row %+v", r)
	}
	if got := f.transcript(st.SessionID); len(got) != 1 || got[0] != "assistant:hello" {
		t.Fatalf("transcript %q", got)
	}
	w, err := f.l.Wait(context.Background(), id)
	if err != nil || w.State != Delivered {
		t.Fatalf("wait %+v %v", w, err)
	}
}

func TestLongMessagesAreSplitAndSentInOrder(t *testing.T) {
	p := &platform{limit: abi.MessageLimit{Max: 40, Unit: abi.UnitCodePoint}}
	f := newFixture(t, p, Options{})
	st := f.stamp()
	text := strings.Repeat("word ", 30) // 150 code points
	id, _ := f.l.Enqueue(context.Background(), f.msg(st, text, GuardLineage))
	r, err := f.l.Wait(context.Background(), id)
	if err != nil || r.State != Delivered {
		t.Fatalf("%+v %v", r, err)
	}
	got := p.texts()
	if len(got) < 4 {
		t.Fatalf("parts %q", got)
	}
	for i, s := range got {
		if !strings.HasSuffix(s, fmt.Sprintf("(%d/%d)", i+1, len(got))) || len([]rune(s)) > 40 {
			t.Fatalf("part %d %q", i, s)
		}
	}
}

func TestStaleAfterNewIsDroppedAndRecorded(t *testing.T) {
	p := &platform{}
	f := newFixture(t, p, Options{})
	st := f.stamp()
	if _, err := f.k.Reset(context.Background(), st.Key, ""); err != nil {
		t.Fatal(err)
	}
	id, _ := f.l.Enqueue(context.Background(), f.msg(st, "old output", GuardLineage))
	r := f.waitFinal(id)
	if r.State != Dropped || !strings.Contains(r.Reason, session.ReasonUserBoundary) || len(p.texts()) != 0 {
		t.Fatalf("row %+v, sent %q", r, p.texts())
	}
	rows, _ := f.l.List(context.Background(), Filter{State: Dropped})
	if len(rows) != 1 || rows[0].ID != id {
		t.Fatalf("dropped list %+v", rows)
	}
}

func TestStopSupersedesWorkButNotLineage(t *testing.T) {
	p := &platform{}
	f := newFixture(t, p, Options{})
	st := f.stamp()
	if _, err := f.k.Stop(context.Background(), st.Key); err != nil {
		t.Fatal(err)
	}
	turn, _ := f.l.Enqueue(context.Background(), f.msg(st, "turn answer", GuardWork))
	proc, _ := f.l.Enqueue(context.Background(), f.msg(st, "process done", GuardLineage))
	if r := f.waitFinal(turn); r.State != Dropped || !strings.Contains(r.Reason, session.ReasonSuperseded) {
		t.Fatalf("turn answer after /stop: %+v", r)
	}
	if r := f.waitFinal(proc); r.State != Delivered {
		t.Fatalf("completion after /stop: %+v", r)
	}
}

func TestCompressionDeliversToContinuation(t *testing.T) {
	f := newFixture(t, &platform{}, Options{})
	st := f.stamp()
	route, err := f.k.Compress(context.Background(), st.Key, st.SessionID, "summary")
	if err != nil {
		t.Fatal(err)
	}
	id, _ := f.l.Enqueue(context.Background(), f.msg(st, "done", GuardLineage))
	r := f.waitFinal(id)
	if r.State != Delivered || r.SessionID != route.SessionID || route.SessionID == st.SessionID {
		t.Fatalf("row %+v, route %+v", r, route)
	}
	if got := f.transcript(route.SessionID); got[len(got)-1] != "assistant:done" {
		t.Fatalf("continuation transcript %q", got)
	}
}

func TestRetryAfterBlocksTheChat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &platform{}
		p.answers = append(p.answers, func(abi.OutboundMessage) (*abi.SendResult, error) {
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Code: "flood", RetryAfterMs: 300}}, nil
		})
		f := newFixture(t, p, Options{})
		st := f.stamp()
		start := time.Now()
		a, _ := f.l.Enqueue(context.Background(), f.msg(st, "first", GuardNone))
		b, _ := f.l.Enqueue(context.Background(), f.msg(st, "second", GuardNone))
		ra, rb := f.waitFinal(a), f.waitFinal(b)
		if ra.State != Delivered || rb.State != Delivered || ra.Attempts != 2 {
			t.Fatalf("%+v %+v", ra, rb)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		// The flood answer came first; nothing reached the platform again before retry_after.
		if len(p.at) != 3 || p.at[1].Sub(start) < 300*time.Millisecond || p.at[2].Before(p.at[1]) {
			t.Fatalf("send times %v (start %v)", p.at, start)
		}
		if got := []string{p.sent[0].Text, p.sent[1].Text}; got[0] != "first" || got[1] != "second" {
			t.Fatalf("order %q", got)
		}
	})
}

func TestPermanentFailureAndMigration(t *testing.T) {
	p := &platform{}
	p.answers = append(p.answers,
		func(abi.OutboundMessage) (*abi.SendResult, error) {
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Code: "chat_not_found", Message: "no"}}, nil
		},
		func(abi.OutboundMessage) (*abi.SendResult, error) {
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Code: "migrated", MigrateToChatID: "-100777"}}, nil
		})
	f := newFixture(t, p, Options{})
	st := f.stamp()
	a, _ := f.l.Enqueue(context.Background(), f.msg(st, "a", GuardNone))
	if r := f.waitFinal(a); r.State != Failed || !strings.Contains(r.Reason, "chat_not_found") {
		t.Fatalf("%+v", r)
	}
	b, _ := f.l.Enqueue(context.Background(), f.msg(st, "b", GuardNone))
	if r := f.waitFinal(b); r.State != Delivered || r.Target.ChatID != "-100777" {
		t.Fatalf("%+v", r)
	}
	// Later messages to the old chat id go to the new one.
	c, _ := f.l.Enqueue(context.Background(), f.msg(st, "c", GuardNone))
	if r := f.waitFinal(c); r.Target.ChatID != "-100777" {
		t.Fatalf("%+v", r)
	}
}

func TestOutcomeUnknownIsNotRetried(t *testing.T) {
	p := &platform{}
	p.answers = append(p.answers, func(abi.OutboundMessage) (*abi.SendResult, error) {
		return nil, fmt.Errorf("%w: plugin crashed mid-send", ErrOutcomeUnknown)
	})
	f := newFixture(t, p, Options{})
	id, _ := f.l.Enqueue(context.Background(), f.msg(f.stamp(), "x", GuardNone))
	if r := f.waitFinal(id); r.State != Failed || r.Attempts != 1 {
		t.Fatalf("%+v", r)
	}
}

func TestSendingRowsAreReconciledNotResent(t *testing.T) {
	p := &platform{}
	f := newFixture(t, p, Options{})
	st := f.stamp()
	// Simulate a crash between "sending" and the platform's answer.
	f.cancel()
	f.l.Stop()
	m := f.msg(st, "in flight", GuardNone)
	id, err := f.l.insert(context.Background(), nil, m, []string{m.Text}, Sending, "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := Open(context.Background(), f.l.db, f.k, p, Options{Logger: slog.New(slog.DiscardHandler)})
	rec, err := l2.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Stop()
	if len(rec) != 1 || rec[0].ID != id || rec[0].State != Failed || rec[0].Reason != ReasonInterrupted {
		t.Fatalf("reconciled %+v", rec)
	}
	if len(p.texts()) != 0 {
		t.Fatal("an in-flight message was resent")
	}
}

// The two orders of a delivery and a /new on one key, forced with barriers.
func TestBoundaryOrders(t *testing.T) {
	t.Run("delivery-first", func(t *testing.T) {
		p := &platform{block: make(chan chan struct{})}
		f := newFixture(t, p, Options{})
		st := f.stamp()
		id, _ := f.l.Enqueue(context.Background(), f.msg(st, "answer", GuardWork))
		release := <-p.block // the send is in progress, inside the boundary
		resetDone := make(chan session.Route, 1)
		go func() {
			r, _ := f.k.Reset(context.Background(), st.Key, "")
			resetDone <- r
		}()
		// The reset cannot complete while the send holds the boundary.
		select {
		case <-resetDone:
			t.Fatal("/new overtook a send in progress")
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		r := f.waitFinal(id)
		newRoute := <-resetDone
		if r.State != Delivered || r.SessionID != st.SessionID || newRoute.SessionID == st.SessionID {
			t.Fatalf("row %+v route %+v", r, newRoute)
		}
		if len(f.transcript(newRoute.SessionID)) != 0 {
			t.Fatal("the old answer leaked into the new session")
		}
	})
	t.Run("reset-first", func(t *testing.T) {
		p := &platform{}
		f := newFixture(t, p, Options{})
		st := f.stamp()
		inReset := make(chan struct{})
		finishReset := make(chan struct{})
		go f.k.WithBoundary(context.Background(), st.Key, func(b *session.Boundary) error {
			close(inReset)
			<-finishReset
			_, err := b.Reset("")
			return err
		})
		<-inReset
		id, _ := f.l.Enqueue(context.Background(), f.msg(st, "answer", GuardWork))
		close(finishReset)
		r := f.waitFinal(id)
		if r.State != Dropped || len(p.texts()) != 0 {
			t.Fatalf("row %+v sent %q", r, p.texts())
		}
	})
}

// TestUpdateCommitsWithTheCallersChange: rows written in a unit of work (store.Update) commit or
// roll back with the caller's own statements, and nothing is sent or observed before the commit.
func TestUpdateCommitsWithTheCallersChange(t *testing.T) {
	p := &platform{}
	f := newFixture(t, p, Options{})
	st := f.stamp()
	ctx := context.Background()
	if _, err := f.l.db.Exec(`CREATE TABLE caller_state (v TEXT)`); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("the caller's change failed")
	err := store.Update(ctx, f.l.db, store.PathLedger, func(tx *store.Tx) error {
		if _, err := f.l.EnqueueTx(ctx, tx, f.msg(st, "never sent", GuardNone)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO caller_state VALUES ('rolled back')`); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("Update = %v", err)
	}
	var sent, dropped string
	err = store.Update(ctx, f.l.db, store.PathLedger, func(tx *store.Tx) error {
		var err error
		if sent, err = f.l.EnqueueTx(ctx, tx, f.msg(st, "sent", GuardNone)); err != nil {
			return err
		}
		if dropped, err = f.l.RecordTx(ctx, tx, f.msg(st, "recorded", GuardLineage), Dropped, "cancelled"); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO caller_state VALUES ('committed')`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitFinal(sent); r.State != Delivered {
		t.Fatalf("sent row %+v", r)
	}
	rows, err := f.l.List(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]State{}
	for _, r := range rows {
		states[r.Target.Text] = r.State
	}
	if len(rows) != 2 || states["recorded"] != Dropped || states["sent"] != Delivered {
		t.Fatalf("ledger %v (id %s)", states, dropped)
	}
	var n int
	f.l.db.QueryRow(`SELECT COUNT(*) FROM caller_state`).Scan(&n)
	if n != 1 || strings.Join(p.texts(), "|") != "sent" {
		t.Fatalf("caller rows %d, platform got %q", n, p.texts())
	}
}

// TestFailedAttemptsAreLogged: each failed attempt is logged with its reason as it happens (a
// plugin whose output is over the cap used to fail silently until the last attempt).
func TestFailedAttemptsAreLogged(t *testing.T) {
	p := &platform{}
	for range 2 {
		p.answers = append(p.answers, func(abi.OutboundMessage) (*abi.SendResult, error) {
			return nil, errors.New("send output of 10485760 bytes exceeds the cap of 4194304")
		})
	}
	var logs syncBuffer
	f := newFixture(t, p, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	id, _ := f.l.Enqueue(context.Background(), f.msg(f.stamp(), "hello", GuardNone))
	if r := f.waitFinal(id); r.State != Delivered || r.Attempts != 3 {
		t.Fatalf("%+v", r)
	}
	if n := strings.Count(logs.String(), "delivery attempt failed; will retry"); n != 2 || !strings.Contains(logs.String(), "exceeds the cap") {
		t.Fatalf("%d failed attempts logged:\n%s", n, logs.String())
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A seed lands in the session the send delivered to, in the send's critical section: in a fresh
// chat the session is created; a pinned (owned) send that is stale seeds nothing; a failed send
// seeds nothing.
func TestSeedFollowsTheDelivery(t *testing.T) {
	p := &platform{}
	f := newFixture(t, p, Options{MaxAttempts: 1})
	key, _ := f.k.Key(chat)
	seeded := func(text string) Message {
		return Message{Plugin: "echo", Profile: "main", Key: key, Kind: KindScheduled, Text: text, Seed: "[Cron delivery] " + text,
			Target: abi.OutboundMessage{ChatType: chat.ChatType, ChatID: chat.ChatID, UserID: chat.UserID}}
	}
	// No session yet: the seed creates it.
	id, _ := f.l.Enqueue(context.Background(), seeded("first"))
	r := f.waitFinal(id)
	if r.State != Delivered || r.SessionID == "" {
		t.Fatalf("row %+v", r)
	}
	if got := f.transcript(r.SessionID); len(got) != 1 || got[0] != "user:[Cron delivery] first" {
		t.Fatalf("transcript %q", got)
	}
	// Pinned to that session, after /new: dropped, and neither session gets the seed.
	st := f.stamp()
	if _, err := f.k.Reset(context.Background(), key, ""); err != nil {
		t.Fatal(err)
	}
	m := seeded("pinned")
	m.Guard, m.Stamp = GuardOwned, st
	id, _ = f.l.Enqueue(context.Background(), m)
	if r := f.waitFinal(id); r.State != Dropped {
		t.Fatalf("pinned after /new: %+v", r)
	}
	cur, _, _ := f.k.Current(context.Background(), key)
	if got := f.transcript(cur.SessionID); len(got) != 0 {
		t.Fatalf("the new session got %q", got)
	}
	if got := f.transcript(st.SessionID); len(got) != 1 {
		t.Fatalf("the old session got %q", got)
	}
	// A refused send seeds nothing.
	p.answers = append(p.answers, func(abi.OutboundMessage) (*abi.SendResult, error) {
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Message: "chat not found"}}, nil
	})
	id, _ = f.l.Enqueue(context.Background(), seeded("refused"))
	if r := f.waitFinal(id); r.State != Failed {
		t.Fatalf("refused: %+v", r)
	}
	if got := f.transcript(cur.SessionID); len(got) != 0 {
		t.Fatalf("a refused send seeded %q", got)
	}
}

// The cron seed (a pinned scheduler send with a seed) racing a guarded delivery (a process
// notification stamped with the same session) and a /new, in both orders, under
// testing/synctest: synctest.Wait returns only when every goroutine of the bubble is blocked,
// so "the /new is parked on the boundary lock" and "the lane is parked on it" are barriers, not
// sleeps. The invariant, whatever the order: the seed is in a session exactly when the cron
// message was delivered, and then in the session the ledger delivered it to; the conversation
// /new started never holds the seed or the notification; nothing is sent twice.
func TestCronSeedRacingGuardedDeliveryAndNew(t *testing.T) {
	const seed = "[Cron delivery: standup]\nstand up"
	type outcome struct{ cron, notification State }
	for name, want := range map[string]outcome{
		"cron-sending-then-new":   {cron: Delivered, notification: Dropped},
		"new-then-cron":           {cron: Dropped, notification: Dropped},
		"notice-sending-then-new": {cron: Dropped, notification: Delivered},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &platform{block: make(chan chan struct{})}
				f := newFixture(t, p, Options{})
				st := f.stamp()
				cronMsg := Message{Plugin: "echo", Profile: "main", Key: st.Key, Kind: KindScheduled, Text: "stand up", Seed: seed,
					Target: abi.OutboundMessage{ChatType: chat.ChatType, ChatID: chat.ChatID, UserID: chat.UserID},
					Guard:  GuardOwned, Stamp: st}
				notice := f.msg(st, "build finished", GuardLineage)
				reset := func() {
					if _, err := f.k.Reset(context.Background(), st.Key, ""); err != nil {
						t.Error(err)
					}
				}
				var cronID, noticeID string
				switch name {
				case "cron-sending-then-new":
					cronID, _ = f.l.Enqueue(context.Background(), cronMsg)
					release := <-p.block // the cron send holds the boundary
					go reset()
					noticeID, _ = f.l.Enqueue(context.Background(), notice)
					synctest.Wait() // /new is parked on the boundary lock, before the notification
					close(release)
				case "new-then-cron":
					inReset, finish := make(chan struct{}), make(chan struct{})
					go f.k.WithBoundary(context.Background(), st.Key, func(b *session.Boundary) error {
						close(inReset)
						<-finish
						_, err := b.Reset("")
						return err
					})
					<-inReset
					cronID, _ = f.l.Enqueue(context.Background(), cronMsg)
					noticeID, _ = f.l.Enqueue(context.Background(), notice)
					synctest.Wait() // the lane is parked on the lock /new holds
					close(finish)
				case "notice-sending-then-new":
					noticeID, _ = f.l.Enqueue(context.Background(), notice)
					release := <-p.block // the notification's send holds the boundary
					cronID, _ = f.l.Enqueue(context.Background(), cronMsg)
					go reset()
					synctest.Wait() // /new is parked on the lock; the cron row waits in the lane
					close(release)
				}
				cronRow, noticeRow := f.waitFinal(cronID), f.waitFinal(noticeID)
				if cronRow.State != want.cron || noticeRow.State != want.notification {
					t.Fatalf("cron %s (%s), notification %s (%s); want %s, %s", cronRow.State, cronRow.Reason,
						noticeRow.State, noticeRow.Reason, want.cron, want.notification)
				}
				cur, _, _ := f.k.Current(context.Background(), st.Key)
				if cur.SessionID == st.SessionID {
					t.Fatal("/new did not happen")
				}
				// The invariant.
				seeded := map[string]bool{}
				for _, id := range []string{st.SessionID, cur.SessionID} {
					for _, m := range f.transcript(id) {
						if m == "user:"+seed {
							seeded[id] = true
						}
						if id == cur.SessionID {
							t.Errorf("the conversation /new started holds %q", m)
						}
					}
				}
				switch {
				case cronRow.State == Delivered && (!seeded[cronRow.SessionID] || len(seeded) != 1 || cronRow.SessionID != st.SessionID):
					t.Errorf("delivered to %s, seeded in %v", cronRow.SessionID, seeded)
				case cronRow.State != Delivered && len(seeded) != 0:
					t.Errorf("not delivered, yet seeded in %v", seeded)
				}
				sent := map[string]int{}
				for _, s := range p.texts() {
					sent[s]++
				}
				if sent["stand up"] != boolInt(want.cron == Delivered) || sent["build finished"] != boolInt(want.notification == Delivered) {
					t.Errorf("sent %v", sent)
				}
			})
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestListFilters: the operator's filters (uncertain, kind, origin) pick exactly their rows.
func TestListFilters(t *testing.T) {
	p := &platform{}
	p.answers = append(p.answers, func(abi.OutboundMessage) (*abi.SendResult, error) {
		return nil, fmt.Errorf("%w: plugin crashed mid-send", ErrOutcomeUnknown)
	}, func(abi.OutboundMessage) (*abi.SendResult, error) {
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Code: "blocked", Message: "the bot was blocked"}}, nil
	})
	f := newFixture(t, p, Options{})
	st := f.stamp()
	uncertain, _ := f.l.Enqueue(context.Background(), f.msg(st, "maybe sent", GuardNone))
	f.waitFinal(uncertain)
	refused, _ := f.l.Enqueue(context.Background(), f.msg(st, "refused", GuardNone))
	f.waitFinal(refused)
	notice := f.msg(st, "proc notice", GuardLineage)
	notice.Kind, notice.Origin = KindNotification, "proc_0123456789ab"
	dropped, err := f.l.Record(context.Background(), notice, Dropped, "stale: user_boundary")
	if err != nil {
		t.Fatal(err)
	}
	again := f.msg(st, "sent again", GuardNone)
	again.Link = uncertain
	linked, err := f.l.Record(context.Background(), again, Failed, "test")
	if err != nil {
		t.Fatal(err)
	}
	other := f.msg(st, "elsewhere", GuardNone)
	other.Key += "2" // a key the first is a prefix of
	elsewhere, err := f.l.Record(context.Background(), other, Failed, "test")
	if err != nil {
		t.Fatal(err)
	}
	ids := func(f Filter, l *Ledger) []string {
		rows, err := l.List(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rows {
			out = append(out, r.Group)
		}
		return out
	}
	for name, tc := range map[string]struct {
		f    Filter
		want []string
	}{
		"uncertain": {Filter{Uncertain: true}, []string{uncertain}},
		"failed":    {Filter{State: Failed}, []string{elsewhere, linked, refused, uncertain}},
		"group":     {Filter{Group: refused}, []string{refused}},
		"link":      {Filter{Link: uncertain}, []string{linked}},
		"kind":      {Filter{Kind: KindNotification}, []string{dropped}},
		"origin":    {Filter{Origin: "proc_0123456789ab"}, []string{dropped}},
		"no origin": {Filter{Origin: "proc_0123456789"}, nil},
	} {
		if got := ids(tc.f, f.l); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
	// Key is the key exactly, KeyPrefix any key it starts.
	if got := ids(Filter{Key: st.Key}, f.l); slices.Contains(got, elsewhere) || !slices.Contains(got, linked) || !slices.Contains(got, dropped) {
		t.Errorf("key %s: %v", st.Key, got)
	}
	if got := ids(Filter{KeyPrefix: st.Key}, f.l); !slices.Contains(got, elsewhere) || !slices.Contains(got, linked) {
		t.Errorf("key prefix %s: %v", st.Key, got)
	}
	rows, _ := f.l.List(context.Background(), Filter{State: Failed})
	for _, r := range rows {
		if r.Uncertain() != (r.Group == uncertain) {
			t.Errorf("%s (%s): Uncertain() = %v", r.Group, r.Reason, r.Uncertain())
		}
	}
}

// A send refused because the group became a supergroup: the message follows the chat, and the
// supergroup's messages continue the group's conversation (the kernel learns the alias).
func TestMigrationCarriesTheConversation(t *testing.T) {
	p := &platform{}
	p.answers = append(p.answers, func(abi.OutboundMessage) (*abi.SendResult, error) {
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Code: "migrated", MigrateToChatID: "-1004001"}}, nil
	})
	f := newFixture(t, p, Options{})
	group := abi.Source{Platform: "telegram", Profile: "main", ChatType: abi.ChatGroup, ChatID: "-4001", UserID: "111"}
	key, _ := f.k.Key(group)
	var st session.Stamp
	f.k.WithBoundary(context.Background(), key, func(b *session.Boundary) error {
		b.Resolve(group, session.ResolveOptions{})
		var err error
		st, err = b.Stamp(group)
		return err
	})
	id, _ := f.l.Enqueue(context.Background(), Message{Plugin: "telegram", Profile: "main", Key: key,
		Target: abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: "-4001"}, Text: "done", Kind: KindNotification,
		Guard: GuardLineage, Stamp: st, Transcript: true})
	if r := f.waitFinal(id); r.State != Delivered || r.Target.ChatID != "-1004001" || r.SessionID != st.SessionID {
		t.Fatalf("%+v", r)
	}
	super := group
	super.ChatID = "-1004001"
	if k, _ := f.k.Key(super); k != key {
		t.Fatalf("the supergroup keys as %s, want the group's %s", k, key)
	}
	res, err := f.k.Resolve(context.Background(), super, session.ResolveOptions{})
	if err != nil || res.SessionID != st.SessionID {
		t.Fatalf("the supergroup resolved %+v %v, want session %s", res, err, st.SessionID)
	}
}

// MigrateChat (a migration announced by the platform's service message) re-addresses what is
// still pending for the old chat, even a row waiting out the old chat's flood control.
func TestMigrateChatReaddressesOpenRows(t *testing.T) {
	p := &platform{}
	p.answers = append(p.answers, func(abi.OutboundMessage) (*abi.SendResult, error) {
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Code: "rate_limited", RetryAfterMs: 3_600_000}}, nil
	})
	f := newFixture(t, p, Options{})
	st := f.stamp()
	id, _ := f.l.Enqueue(context.Background(), f.msg(st, "waiting", GuardNone))
	for { // until the 429 is recorded: the row waits out the old chat's flood control
		rows, _ := f.l.List(context.Background(), Filter{State: Pending})
		if len(rows) == 1 && rows[0].Attempts == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	f.l.MigrateChat(context.Background(), "echo", "main", chat.ChatID, "-100999")
	if r := f.waitFinal(id); r.State != Delivered || r.Target.ChatID != "-100999" {
		t.Fatalf("%+v", r)
	}
	later, _ := f.l.Enqueue(context.Background(), f.msg(st, "later", GuardNone))
	if r := f.waitFinal(later); r.Target.ChatID != "-100999" {
		t.Fatalf("%+v", r)
	}
}

// A plugin that sent a message to another thread than asked (a deleted topic) says so; the
// ledger records where it went.
func TestThreadActuallyUsedIsRecorded(t *testing.T) {
	p := &platform{}
	none := ""
	p.answers = append(p.answers, func(abi.OutboundMessage) (*abi.SendResult, error) {
		return &abi.SendResult{MessageIDs: []string{"9"}, ThreadID: &none}, nil
	})
	f := newFixture(t, p, Options{})
	st := f.stamp()
	m := f.msg(st, "into the topic", GuardNone)
	m.Target.ThreadID = "77"
	id, _ := f.l.Enqueue(context.Background(), m)
	if r := f.waitFinal(id); r.State != Delivered || r.Target.ThreadID != "" {
		t.Fatalf("%+v", r)
	}
	rows, err := f.l.List(context.Background(), Filter{KeyPrefix: st.Key})
	if err != nil || len(rows) != 1 || rows[0].Target.ThreadID != "" {
		t.Fatalf("stored %+v %v", rows, err)
	}
}

// The store suite, on both backends: a message split in parts and the chat's next message are
// sent in order through a flood wait (which postpones the whole lane); List filters by key
// prefix and by uncertain outcome, newest first; a chat migration recorded twice (then
// changed) re-addresses later messages, also for a ledger opened afterwards; and a ledger
// started over pending rows finds their lanes in the database and sends them.
func TestStoreSuite(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx, cancelAll := context.WithTimeout(context.Background(), time.Minute) // Wait gives up
		defer cancelAll()
		p := &platform{limit: abi.MessageLimit{Max: 12, Unit: abi.UnitCodePoint}}
		p.answers = append(p.answers, func(abi.OutboundMessage) (*abi.SendResult, error) {
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Code: "flood", RetryAfterMs: 50}}, nil
		})
		f := newFixtureOn(t, b, p, Options{})
		st := f.stamp()
		msg := func(text string) Message {
			m := f.msg(st, text, GuardNone)
			m.Transcript = false
			return m
		}
		a, err := f.l.Enqueue(ctx, msg("one two three four five"))
		if err != nil {
			t.Fatal(err)
		}
		bid, err := f.l.Enqueue(ctx, msg("after"))
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range []string{a, bid} {
			if r, err := f.l.Wait(ctx, g); err != nil || r.State != Delivered {
				t.Fatalf("%s: %+v %v", g, r, err)
			}
		}
		sent := p.texts()
		if len(sent) < 3 || sent[len(sent)-1] != "after" || !strings.HasPrefix(sent[0], "one") {
			t.Fatalf("sent %q", sent)
		}
		rows, err := f.l.List(ctx, Filter{KeyPrefix: st.Key})
		if err != nil || len(rows) != len(sent) || rows[0].Group != bid || rows[len(rows)-1].Group != a || rows[len(rows)-1].Attempts != 2 {
			t.Fatalf("listed %+v %v", rows, err)
		}
		if rows, err := f.l.List(ctx, Filter{KeyPrefix: st.Key + "x"}); err != nil || len(rows) != 0 {
			t.Fatalf("other prefix: %+v %v", rows, err)
		}

		p.mu.Lock()
		p.answers = append(p.answers, func(abi.OutboundMessage) (*abi.SendResult, error) {
			return nil, fmt.Errorf("%w: plugin crashed mid-send", ErrOutcomeUnknown)
		})
		p.mu.Unlock()
		maybe, _ := f.l.Enqueue(ctx, msg("maybe"))
		if r, _ := f.l.Wait(ctx, maybe); r.State != Failed || !r.Uncertain() {
			t.Fatalf("uncertain send: %+v", r)
		}
		if rows, err := f.l.List(ctx, Filter{Uncertain: true}); err != nil || len(rows) != 1 || rows[0].Group != maybe {
			t.Fatalf("uncertain rows %+v %v", rows, err)
		}

		f.l.MigrateChat(ctx, "echo", "main", chat.ChatID, "-100999")
		f.l.MigrateChat(ctx, "echo", "main", chat.ChatID, "-100999")
		f.l.MigrateChat(ctx, "echo", "main", chat.ChatID, "-100777")
		moved, _ := f.l.Enqueue(ctx, msg("moved"))
		if r, _ := f.l.Wait(ctx, moved); r.State != Delivered || r.Target.ChatID != "-100777" {
			t.Fatalf("after the migration: %+v", r)
		}

		// A restart: the first ledger stops before the second opens. Left running, its sweeper
		// may send the new pending row itself (any ledger on the database sends what is due),
		// as it once did in make test.
		f.l.Stop()
		p2 := &platform{}
		l2, err := Open(ctx, f.l.db, f.k, p2, Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		pending, _ := l2.Enqueue(ctx, msg("pending at start"))
		if got := p2.texts(); len(got) != 0 {
			t.Fatalf("sent before Start: %q", got)
		}
		ctx2, cancel := context.WithCancel(ctx)
		defer func() { cancel(); l2.Stop() }()
		if _, err := l2.Start(ctx2); err != nil {
			t.Fatal(err)
		}
		if r, err := l2.Wait(ctx, pending); err != nil || r.State != Delivered || r.Target.ChatID != "-100777" {
			t.Fatalf("pending at start: %+v %v", r, err)
		}
		if got := p2.texts(); !slices.Equal(got, []string{"pending at start"}) {
			t.Fatalf("second ledger sent %q", got)
		}
	})
}

// Lanes are per session key: a send that hangs in one thread of a chat (a conversation of its
// own) does not hold back another thread's; a platform's flood control, though, is the chat's,
// and holds every thread of it.
func TestLanesPerSessionFloodPerChat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &platform{block: make(chan chan struct{}, 4)}
		f := newFixture(t, p, Options{})
		msg := func(thread, text string) Message {
			return Message{Plugin: "echo", Profile: "main", Key: "echo:main:group:G:" + thread,
				Target: abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: "G", ThreadID: thread}, Text: text, Kind: KindReply}
		}
		a, _ := f.l.Enqueue(context.Background(), msg("A", "slow"))
		releaseA := <-p.block // thread A's send is in flight, and hangs
		b, _ := f.l.Enqueue(context.Background(), msg("B", "quick"))
		select {
		case release := <-p.block:
			close(release) // thread B's send went out while A's hangs
		case <-time.After(time.Minute):
			t.Fatal("thread B waited behind thread A's send")
		}
		if r := f.waitFinal(b); r.State != Delivered {
			t.Fatalf("%+v", r)
		}
		close(releaseA)
		f.waitFinal(a)

		// A 429 with retry_after in thread A holds thread B too.
		p.mu.Lock()
		p.block = nil
		p.answers = append(p.answers, func(abi.OutboundMessage) (*abi.SendResult, error) {
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, Code: "rate_limited", RetryAfterMs: 5000}}, nil
		})
		p.mu.Unlock()
		start := time.Now()
		c, _ := f.l.Enqueue(context.Background(), msg("A", "flooded"))
		for { // until the 429 is recorded
			if rows, _ := f.l.List(context.Background(), Filter{State: Pending}); len(rows) == 1 && rows[0].Attempts == 1 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		d, _ := f.l.Enqueue(context.Background(), msg("B", "after the flood"))
		rc, rd := f.waitFinal(c), f.waitFinal(d)
		p.mu.Lock()
		at := p.at[len(p.at)-1]
		p.mu.Unlock()
		if rc.State != Delivered || rd.State != Delivered || at.Sub(start) < 5*time.Second || rd.Attempts != 1 {
			t.Fatalf("thread B's message went out %v after thread A's 429 with retry_after 5s: %+v", at.Sub(start), rd)
		}
	})
}

// A message about a subject (Message.About) is dropped, not sent, when the subject was withdrawn
// before its claim: the check is in the claim, inside the key's boundary, right before the send.
// Here the lane waits for the boundary (the test holds it) while the withdrawal commits; once the
// boundary is free, the part is dropped with the withdrawal's reason. A message about another
// subject, and one withdrawn only after it was sent, are delivered; on both backends.
func TestWithdrawnSubjectIsDroppedAtTheClaim(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		p := &platform{}
		f := newFixtureOn(t, b, p, Options{})
		st := f.stamp()
		about := func(text, subject string) Message {
			m := f.msg(st, text, GuardLineage)
			m.About = subject
			return m
		}
		withdraw := func(subject string) {
			t.Helper()
			if err := store.Update(ctx, f.l.db, store.PathProcesses, func(tx *store.Tx) error {
				return tx.Withdraw(ctx, subject, "the agent already read the result of "+subject, time.Now().UnixMilli())
			}); err != nil {
				t.Fatal(err)
			}
		}

		sent, err := f.l.Enqueue(ctx, about("sent before", "proc_a"))
		if err != nil {
			t.Fatal(err)
		}
		if r := f.waitFinal(sent); r.State != Delivered {
			t.Fatalf("before the withdrawal: %+v", r)
		}
		withdraw("proc_a") // after its send: changes nothing

		hold, release := make(chan struct{}), make(chan struct{})
		go f.k.WithBoundary(ctx, st.Key, func(*session.Boundary) error { close(hold); <-release; return nil })
		<-hold
		moot, err := f.l.Enqueue(ctx, about("moot", "proc_b"))
		if err != nil {
			t.Fatal(err)
		}
		other, err := f.l.Enqueue(ctx, about("other", "proc_c"))
		if err != nil {
			t.Fatal(err)
		}
		withdraw("proc_b") // while the lane waits for the boundary
		close(release)
		if r := f.waitFinal(moot); r.State != Dropped || r.Reason != "suppressed: the agent already read the result of proc_b" || r.Attempts != 0 {
			t.Fatalf("the withdrawn message: %+v", r)
		}
		if r := f.waitFinal(other); r.State != Delivered {
			t.Fatalf("the message about another subject: %+v", r)
		}
		if got := p.texts(); !slices.Equal(got, []string{"sent before", "other"}) {
			t.Fatalf("sent %q", got)
		}
		if r, _ := f.l.Wait(ctx, sent); r.State != Delivered {
			t.Fatalf("the message sent before its withdrawal: %+v", r)
		}
	})
}

// A process's notice queued by a version before Message.About (its origin the process id) is
// about the process once the ledger is migrated: withdrawn, it is dropped, not sent; on both
// backends.
func TestNoticeQueuedBeforeAboutIsStillWithdrawn(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		db := b.Open(t)
		about := slices.IndexFunc(migrations, func(m store.Migration) bool { return strings.Contains(m.SQLite, "ADD COLUMN about") })
		if err := store.Migrate(ctx, db, "delivery", migrations[:about]); err != nil {
			t.Fatal(err)
		}
		key := "agent:main:echo:dm:42"
		now := time.Now().UnixMilli()
		if _, err := db.ExecContext(ctx, `INSERT INTO deliveries (id, grp, part, parts, plugin, profile, lane, chat_id,
			session_key, target, kind, state, origin, created_at, updated_at)
			VALUES ('dlv_old', 'dlv_old', 1, 1, 'echo', 'main', $1, '42', $2, '{"chat_id":"42","text":"old notice"}', 'notification', 'pending', 'proc_old', $3, $4)`,
			key, key, now, now); err != nil {
			t.Fatal(err)
		}
		if err := store.Update(ctx, db, store.PathProcesses, func(tx *store.Tx) error {
			return tx.Withdraw(ctx, "proc_old", "the agent already read the result of proc_old", now)
		}); err != nil {
			t.Fatal(err)
		}
		db.Close()
		p := &platform{}
		f := newFixtureOn(t, b, p, Options{})
		if r := f.waitFinal("dlv_old"); r.State != Dropped || r.About != "proc_old" || !strings.HasPrefix(r.Reason, "suppressed: ") {
			t.Fatalf("the old notice: %+v", r)
		}
		if got := p.texts(); len(got) != 0 {
			t.Fatalf("sent %q", got)
		}
	})
}
