package turn

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/approval"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// chatPlatform stands in for a platform plugin: it records every message the ledger sends.
// (End-to-end tests in internal/gateway send through a real Wasm plugin.)
type chatPlatform struct {
	mu     sync.Mutex
	sent   []abi.OutboundMessage
	at     []time.Time // when each was sent
	cond   *sync.Cond
	flood  time.Duration // if set, the next send is refused with this retry_after
	floods int           // sends refused so
	// lies, if set, is asked after each message is posted whether to answer as a platform that
	// applied it but whose answer was lost (an uncertain outcome).
	lies func(abi.OutboundMessage) bool
}

// refused is how many sends the platform refused with retry_after.
func (c *chatPlatform) refused() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.floods
}

func newChat() *chatPlatform {
	c := &chatPlatform{}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *chatPlatform) Send(_ context.Context, _, _ string, m abi.OutboundMessage) (*abi.SendResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flood > 0 {
		after := c.flood
		c.flood = 0
		c.floods++
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendRetryable, RetryAfterMs: after.Milliseconds(), Message: "flood control"}}, nil
	}
	c.sent = append(c.sent, m)
	c.at = append(c.at, time.Now())
	c.cond.Broadcast()
	if c.lies != nil && c.lies(m) {
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendUncertain, Message: "500 after posting"}}, nil
	}
	if m.EditMessageID != "" { // an edit keeps the message's id
		return &abi.SendResult{MessageIDs: []string{m.EditMessageID}}, nil
	}
	return &abi.SendResult{MessageIDs: []string{fmt.Sprint(len(c.sent))}}, nil
}

func (c *chatPlatform) Reserve(context.Context, string) (delivery.Sender, error) {
	return chatSend{c}, nil
}

// chatSend is a Sender for the chat platform; there is nothing to reserve.
type chatSend struct{ c *chatPlatform }

func (s chatSend) Send(ctx context.Context, profile string, m abi.OutboundMessage) (*abi.SendResult, error) {
	return s.c.Send(ctx, "echo", profile, m)
}

func (chatSend) Release() {}

func (c *chatPlatform) Limit(string) (abi.MessageLimit, error) {
	return abi.MessageLimit{Max: 4000, Unit: abi.UnitCodePoint}, nil
}

// waitFor waits until some sent message satisfies match and returns it.
func (c *chatPlatform) waitFor(t *testing.T, what string, match func(abi.OutboundMessage) bool) abi.OutboundMessage {
	t.Helper()
	found := make(chan abi.OutboundMessage, 1)
	go func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i := 0; ; {
			for ; i < len(c.sent); i++ {
				if match(c.sent[i]) {
					found <- c.sent[i]
					return
				}
			}
			c.cond.Wait()
		}
	}()
	select {
	case m := <-found:
		return m
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s; sent: %q", what, c.texts())
		return abi.OutboundMessage{}
	}
}

func (c *chatPlatform) texts() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.sent {
		out = append(out, m.Text)
	}
	return out
}

func (c *chatPlatform) count(sub string) int {
	n := 0
	for _, t := range c.texts() {
		if strings.Contains(t, sub) {
			n++
		}
	}
	return n
}

type staticRouter struct{}

func (staticRouter) PluginFor(string, string) (string, bool) { return "echo", true }

type harness struct {
	t      *testing.T
	dir    string
	db     *sql.DB
	k      *session.Kernel
	procs  *process.Registry
	ledger *delivery.Ledger
	e      *Engine
	chat   *chatPlatform
	cancel context.CancelFunc
	ctx    context.Context
	mu     sync.Mutex
	rows   map[string]delivery.Row
}

// harnessOption adjusts the process registry's options of a harness.
type harnessOption func(*process.Options)

func withShell(sh string) harnessOption { return func(o *process.Options) { o.Shell = sh } }

func newHarness(t *testing.T, a agent.Agent, opt Options, popts ...harnessOption) *harness {
	t.Helper()
	b := storetest.Default(t)
	dir := b.Dir
	db := b.Open(t)
	var err error
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, dir: dir, db: db, chat: newChat(), cancel: cancel, ctx: ctx, rows: map[string]delivery.Row{}}
	quiet := slog.New(slog.DiscardHandler)
	if h.k, err = session.Open(ctx, db, session.Options{}); err != nil {
		t.Fatal(err)
	}
	po := process.Options{DataDir: dir, Logger: quiet, PollInterval: 20 * time.Millisecond}
	for _, o := range popts {
		o(&po)
	}
	if h.procs, err = process.New(ctx, db, po); err != nil {
		t.Fatal(err)
	}
	if h.ledger, err = delivery.Open(ctx, db, h.k, h.chat, delivery.Options{Logger: quiet, Backoff: 20 * time.Millisecond,
		Observer: func(r delivery.Row) { h.mu.Lock(); h.rows[r.ID] = r; h.mu.Unlock() }}); err != nil {
		t.Fatal(err)
	}
	opt.Logger = quiet
	if opt.Approval != nil && opt.Approvals == nil {
		if opt.Approvals, err = approval.Open(ctx, db, approval.Options{Policy: opt.Approval, Logger: quiet, Instance: opt.Instance}); err != nil {
			t.Fatal(err)
		}
	}
	if opt.RetryBase == 0 {
		opt.RetryBase = 20 * time.Millisecond
	}
	if h.e, err = New(ctx, db, h.k, h.ledger, a, h.procs, staticRouter{}, opt); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ledger.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		h.e.Wait()
		h.ledger.Stop()
		h.procs.Close()
	})
	return h
}

var dm = abi.Source{Platform: "echo", Profile: "main", ChatType: abi.ChatDM, ChatID: "42", UserID: "u1"}

var msgSeq int
var msgMu sync.Mutex

// say dispatches a user message from src.
func (h *harness) say(src abi.Source, text string) abi.DispatchReply {
	h.t.Helper()
	msgMu.Lock()
	msgSeq++
	id := fmt.Sprintf("ev%d", msgSeq)
	msgMu.Unlock()
	src.MessageID = id
	r, err := h.e.Dispatch(context.Background(), "echo", "main", abi.InboundEvent{ID: id, Source: src, Text: text})
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func (h *harness) key(src abi.Source) string {
	k, err := h.k.Key(src)
	if err != nil {
		h.t.Fatal(err)
	}
	return k
}

func (h *harness) current(src abi.Source) session.Route {
	r, _, err := h.k.Current(context.Background(), h.key(src))
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// droppedRow waits for a dropped ledger row whose text contains sub.
func (h *harness) droppedRow(sub string) delivery.Row {
	h.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		h.mu.Lock()
		for _, r := range h.rows {
			if r.State == delivery.Dropped && strings.Contains(r.Target.Text, sub) {
				h.mu.Unlock()
				return r
			}
		}
		h.mu.Unlock()
	}
	h.t.Fatalf("no dropped row containing %q", sub)
	return delivery.Row{}
}

func has(sub string) func(abi.OutboundMessage) bool {
	return func(m abi.OutboundMessage) bool { return strings.Contains(m.Text, sub) }
}

func transcript(t *testing.T, k *session.Kernel, id string) string {
	msgs, err := k.Transcript(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "%s:%s\n", m.Role, m.Text)
	}
	return b.String()
}

func TestForegroundTurnAndDedupe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{})
		r := h.say(dm, "hello there")
		h.chat.waitFor(t, "an answer", has("help"))
		// A redelivered event (same id) is recognised and produces nothing.
		again, err := h.e.Dispatch(context.Background(), "echo", "main", abi.InboundEvent{ID: fmt.Sprintf("ev%d", msgSeq), Source: dm, Text: "hello there"})
		if err != nil || !again.Duplicate {
			t.Fatalf("redelivery: %+v %v", again, err)
		}
		tr := transcript(t, h.k, r.Session.SessionID)
		if !strings.HasPrefix(tr, "user:hello there\nassistant:") {
			t.Fatalf("transcript %q", tr)
		}
	})
}

// blocking is an agent whose turns wait for the test to release them, recording what they saw.
type blocking struct {
	started   chan *agent.Turn
	release   chan string // the answer to give
	cancelled chan string // texts of turns whose context was cancelled
}

func newBlocking() *blocking {
	return &blocking{started: make(chan *agent.Turn, 16), release: make(chan string), cancelled: make(chan string, 16)}
}

func (b *blocking) Turn(ctx context.Context, t *agent.Turn) (*agent.Reply, error) {
	b.started <- t
	select {
	case text := <-b.release:
		return &agent.Reply{Text: text}, nil
	case <-ctx.Done():
		b.cancelled <- t.Text
		return nil, ctx.Err()
	}
}

func (b *blocking) next(t *testing.T) *agent.Turn {
	t.Helper()
	select {
	case turn := <-b.started:
		return turn
	case <-time.After(20 * time.Second):
		t.Fatal("no turn started")
		return nil
	}
}

func TestBusyChatMergesMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{})
		h.say(dm, "first")
		if got := a.next(t).Text; got != "first" {
			t.Fatalf("turn 1 saw %q", got)
		}
		h.say(dm, "second")
		h.say(dm, "third")
		a.release <- "answer one"
		turn2 := a.next(t)
		if turn2.Text != "second\nthird" {
			t.Fatalf("merged turn saw %q", turn2.Text)
		}
		a.release <- "answer two"
		h.chat.waitFor(t, "answer two", has("answer two"))
		if h.chat.count("answer") != 2 {
			t.Fatalf("sent %q", h.chat.texts())
		}
	})
}

func TestStopCancelsTheRunningTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{})
		r := h.say(dm, "think hard")
		a.next(t)
		h.say(dm, "/stop")
		h.chat.waitFor(t, "the stop confirmation", has("Stopped"))
		if got := <-a.cancelled; got != "think hard" {
			t.Fatalf("cancelled %q", got)
		}
		h.say(dm, "ping")
		if got := a.next(t).Text; got != "ping" {
			t.Fatalf("next turn saw %q", got)
		}
		a.release <- "pong"
		h.chat.waitFor(t, "pong", has("pong"))
		if tr := transcript(t, h.k, r.Session.SessionID); !strings.Contains(tr, "user:think hard") {
			t.Fatalf("/stop lost the transcript: %q", tr)
		}
	})
}

// recallOf dispatches the platform's recall of the message with platform id msgID.
func (h *harness) recallOf(src abi.Source, msgID string) {
	h.t.Helper()
	src.MessageID = msgID
	if _, err := h.e.Dispatch(context.Background(), "echo", "main", abi.InboundEvent{ID: "recall:" + msgID, Kind: abi.EventRedact, Source: src}); err != nil {
		h.t.Fatal(err)
	}
}

// TestRecallCancelsItsTurn: a recall of the message a turn is answering cancels the turn (no
// answer is sent) and redacts the message; a recall of a queued message removes it from the
// merged turn that follows; a recall of an earlier, answered message cancels nothing.
func TestRecallCancelsItsTurn(t *testing.T) {
	a := newBlocking()
	h := newHarness(t, a, Options{})
	r := h.say(dm, "answered earlier")
	answered := fmt.Sprintf("ev%d", msgSeq)
	a.next(t)
	a.release <- "first answer"
	h.chat.waitFor(t, "the first answer", has("first answer"))

	h.say(dm, "secret plan")
	recalled := fmt.Sprintf("ev%d", msgSeq)
	a.next(t)
	h.say(dm, "queued one")
	h.say(dm, "queued two")
	queued := fmt.Sprintf("ev%d", msgSeq)
	h.recallOf(dm, answered) // nothing runs for it any more: only redacted
	h.recallOf(dm, queued)   // still queued behind the running turn
	h.recallOf(dm, recalled)
	select {
	case got := <-a.cancelled:
		if got != "secret plan" {
			t.Fatalf("cancelled %q", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the recalled message's turn was not cancelled")
	}
	if got := a.next(t).Text; got != "queued one" {
		t.Fatalf("the queued turn saw %q", got)
	}
	a.release <- "answer to queued one"
	h.chat.waitFor(t, "the queued answer", has("answer to queued one"))
	tr := transcript(t, h.k, r.Session.SessionID)
	if strings.Contains(tr, "secret plan") || strings.Contains(tr, "answered earlier") || strings.Contains(tr, "queued two") ||
		!strings.Contains(tr, "queued one") {
		t.Fatalf("transcript after the recalls: %q", tr)
	}
	var state, outcome string
	h.e.db.QueryRow(`SELECT state, outcome FROM turn_inbox WHERE event_id = $1`, recalled).Scan(&state, &outcome)
	if state != stInterrupted || !strings.Contains(outcome, "recalled") {
		t.Fatalf("the recalled turn is %s (%s)", state, outcome)
	}
	if h.chat.count("answer") != 2 {
		t.Fatalf("sent %q", h.chat.texts())
	}
}

// A recall that lands after the agent answered and before the answer is recorded (issue 29,
// item 6): the turn records nothing, as one recalled while the agent worked does. The recall
// redacts what is in the transcript and cancels the turn in one critical section of the key's
// boundary; the answer, recorded after it, stayed, quoting the text the sender took back.
func TestRecallBetweenTheAnswerAndItsRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newBlocking()
		h := newHarness(t, a, Options{})
		answered, resume := make(chan struct{}), make(chan struct{})
		testHookAnswered = func(*item) {
			answered <- struct{}{}
			<-resume
		}
		defer func() { testHookAnswered = nil }()
		r := h.say(dm, "secret plan")
		recalled := fmt.Sprintf("ev%d", msgSeq)
		a.next(t)
		a.release <- "you said: secret plan"
		<-answered
		h.recallOf(dm, recalled)
		h.inboxOutcome(h.key(dm), "secret plan", stInterrupted, "recalled")
		testHookAnswered = nil // set before the runner goes on
		close(resume)
		// The chat's next turn runs after the recalled one ended.
		h.say(dm, "next")
		a.next(t)
		a.release <- "next answer"
		h.chat.waitFor(t, "the next answer", has("next answer"))
		if tr := transcript(t, h.k, r.Session.SessionID); strings.Contains(tr, "secret plan") || !strings.Contains(tr, "next answer") {
			t.Fatalf("transcript after the recall: %q", tr)
		}
		if h.chat.count("secret plan") != 0 {
			t.Fatalf("the recalled turn's answer was sent: %q", h.chat.texts())
		}
	})
}
