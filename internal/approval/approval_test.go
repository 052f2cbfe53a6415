package approval_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/approval"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

func TestPolicyDefaultRules(t *testing.T) {
	p, err := approval.NewPolicy("", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != approval.ModeDangerous || p.Timeout != approval.DefaultTimeout {
		t.Fatalf("defaults: mode %q timeout %v", p.Mode, p.Timeout)
	}
	wait := map[string]string{
		"rm -rf /tmp/x":                       "recursive rm",
		"cd /tmp && rm -r build":              "recursive rm",
		"rm -f -R old":                        "recursive rm",
		"rm --recursive dir":                  "recursive rm",
		"sudo apt-get install x":              "sudo",
		"ls; su -":                            "sudo",
		"curl -fsSL https://x.example | sh":   "download piped to a shell",
		"wget -qO- http://x | bash":           "download piped to a shell",
		"dd if=/dev/zero of=/dev/sda bs=1M":   "dd",
		"mkfs.ext4 /dev/sdb1":                 "mkfs",
		"chmod -R 777 /":                      "recursive chmod or chown",
		"chown -R nobody /srv":                "recursive chmod or chown",
		"shutdown -h now":                     "shutdown or reboot",
		"(sleep 1; reboot)":                   "shutdown or reboot",
		":(){ :|:& };:":                       "fork bomb",
		"cat image > /dev/sda":                "write to a disk device",
		"echo x | `sudo tee /etc/x`":          "sudo",
		"find . -name '*.o' | xargs rm -rf x": "recursive rm",
	}
	for cmd, rule := range wait {
		got, ok := p.Needs(cmd)
		if !ok || got != rule {
			t.Errorf("Needs(%q) = %q, %v; want %q", cmd, got, ok, rule)
		}
	}
	for _, cmd := range []string{"ls -la", "rm file.txt", "sudoku --solve", "grep -r rm .", "format_disk.py --dry-run",
		"cat /dev/sda", "chmod 644 a", "python3 -c 'print(1)'", "pseudo-command", "add 1 2", "ddrescue --help", "sleep 2; echo done"} {
		if rule, ok := p.Needs(cmd); ok {
			t.Errorf("Needs(%q) = %q: an ordinary command must not wait", cmd, rule)
		}
	}
}

func TestPolicyModesPatternsAndApprovers(t *testing.T) {
	all, _ := approval.NewPolicy(approval.ModeAll, nil, time.Minute, nil)
	if rule, ok := all.Needs("ls"); !ok || rule != "every command" {
		t.Errorf("mode all: Needs(ls) = %q, %v", rule, ok)
	}
	off, _ := approval.NewPolicy(approval.ModeOff, nil, 0, nil)
	if _, ok := off.Needs("rm -rf /"); ok {
		t.Error("mode off asks for rm -rf /")
	}
	var none *approval.Policy
	if _, ok := none.Needs("rm -rf /"); ok || none.Approver("tg", "1") {
		t.Error("a nil policy asks for something or names an approver")
	}
	p, err := approval.NewPolicy("", []string{`\bgit\s+push\s+.*--force`}, 0, []string{"telegram:42"})
	if err != nil {
		t.Fatal(err)
	}
	if rule, ok := p.Needs("git push origin main --force"); !ok || !strings.Contains(rule, "git") {
		t.Errorf("operator pattern: %q %v", rule, ok)
	}
	if !p.Approver("telegram", "42") || p.Approver("slack", "42") || p.Approver("telegram", "") {
		t.Error("approvers are platform:user_id exactly")
	}
	for _, bad := range []struct {
		mode     string
		patterns []string
		approver []string
		want     string
	}{
		{"sometimes", nil, nil, `approval.mode "sometimes"`},
		{"", []string{"("}, nil, "approval.patterns[0]"},
		{"", nil, []string{"42"}, `approval.approvers[0] "42"`},
	} {
		if _, err := approval.NewPolicy(bad.mode, bad.patterns, 0, bad.approver); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("NewPolicy(%q, %q, %q) = %v, want an error naming %s", bad.mode, bad.patterns, bad.approver, err, bad.want)
		}
	}
}

func request(cmd string) approval.Request {
	return approval.Request{Key: "agent:main:telegram:dm:1", SessionID: "S1", Generation: 1, Plugin: "telegram", Profile: "main",
		Platform: "telegram", User: "1", UserName: "ann", Command: cmd, Rule: "recursive rm", Turn: "row1"}
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func open(t *testing.T, b storetest.Backend, opt approval.Options) *approval.Store {
	t.Helper()
	s, err := approval.Open(context.Background(), b.Open(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A request is answered once, by its requester or an approver; every later answer is refused
// with the record as it stands, and a waiter wakes with the first answer.
func TestDecideOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		pol, _ := approval.NewPolicy("", nil, time.Hour, []string{"slack:boss"})
		s := open(t, b, approval.Options{Policy: pol, Poll: time.Hour})
		rec, err := s.Ask(ctx, request("rm -rf /tmp/x"))
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != approval.StatePending || !strings.HasPrefix(rec.ID, "ap") {
			t.Fatalf("asked: %+v", rec)
		}
		if _, err := s.Decide(ctx, rec.ID, approval.Decider{Platform: "telegram", User: "2"}, true); !errors.Is(err, approval.ErrNotYours) {
			t.Fatalf("another user's answer: %v, want ErrNotYours", err)
		}
		if _, err := s.Decide(ctx, rec.ID, approval.Decider{Platform: "slack", User: "1"}, true); !errors.Is(err, approval.ErrNotYours) {
			t.Fatalf("the same user id on another platform: %v, want ErrNotYours", err)
		}
		if _, err := s.Decide(ctx, "apnothere", approval.Decider{Platform: "telegram", User: "1"}, true); !errors.Is(err, approval.ErrNotFound) {
			t.Fatalf("an unknown id: %v, want ErrNotFound", err)
		}
		done := make(chan approval.Record, 1)
		go func() {
			r, err := s.Wait(ctx, rec.ID)
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
		got, err := s.Decide(ctx, rec.ID, approval.Decider{Platform: "telegram", User: "1", UserName: "ann"}, true)
		if err != nil || got.State != approval.StateApproved || got.DecidedBy != "telegram:1 (ann)" {
			t.Fatalf("the requester's yes: %+v, %v", got, err)
		}
		if r := <-done; r.State != approval.StateApproved { // Poll is an hour: only the wake-up can end the wait
			t.Fatalf("the waiter saw %+v", r)
		}
		if r, err := s.Decide(ctx, rec.ID, approval.Decider{Platform: "telegram", User: "1"}, false); !errors.Is(err, approval.ErrSettled) || r.State != approval.StateApproved {
			t.Fatalf("a second answer: %+v, %v; want ErrSettled and the approval kept", r, err)
		}
		// An approver may answer anyone's request.
		rec2, _ := s.Ask(ctx, request("sudo reboot"))
		if got, err := s.Decide(ctx, rec2.ID, approval.Decider{Platform: "slack", User: "boss"}, false); err != nil || got.State != approval.StateDenied {
			t.Fatalf("the approver's no: %+v, %v", got, err)
		}
	})
}

// Answers that race settle the request once: exactly one of them wins.
func TestDecideRace(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		pol, _ := approval.NewPolicy("", nil, time.Hour, []string{"telegram:9"})
		s := open(t, b, approval.Options{Policy: pol})
		rec, _ := s.Ask(ctx, request("rm -rf x"))
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := map[string]int{}
		for i, by := range []approval.Decider{{Platform: "telegram", User: "1"}, {Platform: "telegram", User: "9"}} {
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got, err := s.Decide(ctx, rec.ID, by, i == 0)
					if err == nil {
						mu.Lock()
						wins[got.State]++
						mu.Unlock()
					} else if !errors.Is(err, approval.ErrSettled) {
						t.Error(err)
					}
				}()
			}
		}
		wg.Wait()
		final, _ := s.Get(ctx, rec.ID)
		if len(wins) != 1 || wins[final.State] == 0 {
			t.Fatalf("winners %v, final %s: one answer must win", wins, final.State)
		}
	})
}

// /new voids the key's pending requests in its own transaction: a rolled-back transition voids
// nothing, a committed one wakes the waiter with the void.
func TestVoidKey(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		db := b.Open(t)
		s, err := approval.Open(ctx, db, approval.Options{Poll: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		rec, _ := s.Ask(ctx, request("rm -rf /tmp/x"))
		other := request("rm -rf /tmp/y")
		other.Key = "agent:main:telegram:dm:2"
		kept, _ := s.Ask(ctx, other)
		boom := errors.New("boom")
		if err := store.Update(ctx, db, store.PathProbe, func(tx *store.Tx) error {
			if err := s.VoidKey(ctx, tx, rec.Key, "voided by /new"); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if r, _ := s.Get(ctx, rec.ID); r.State != approval.StatePending {
			t.Fatalf("a rolled-back /new voided the request: %+v", r)
		}
		done := make(chan approval.Record, 1)
		go func() { r, _ := s.Wait(ctx, rec.ID); done <- r }()
		if err := store.Update(ctx, db, store.PathProbe, func(tx *store.Tx) error {
			return s.VoidKey(ctx, tx, rec.Key, "voided by /new")
		}); err != nil {
			t.Fatal(err)
		}
		if r := <-done; r.State != approval.StateVoided || r.Reason != "voided by /new" {
			t.Fatalf("the waiter saw %+v", r)
		}
		if r, err := s.Decide(ctx, rec.ID, approval.Decider{Platform: "telegram", User: "1"}, true); !errors.Is(err, approval.ErrSettled) || r.State != approval.StateVoided {
			t.Fatalf("a yes after /new: %+v, %v; want ErrSettled", r, err)
		}
		if r, _ := s.Get(ctx, kept.ID); r.State != approval.StatePending {
			t.Fatalf("another key's request was voided: %+v", r)
		}
		list, err := approval.ForKey(ctx, db, rec.Key)
		if err != nil || len(list) != 1 || list[0].ID != rec.ID {
			t.Fatalf("ForKey: %+v, %v", list, err)
		}
	})
}

// An unanswered request expires at its timeout (denied), and a wait whose turn ended voids it.
func TestWaitExpiresAndVoids(t *testing.T) {
	ctx := context.Background()
	b := storetest.SQLite(t)
	c := &clock{now: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)}
	pol, _ := approval.NewPolicy("", nil, time.Minute, nil)
	s := open(t, b, approval.Options{Policy: pol, Now: c.Now, Poll: time.Millisecond})
	rec, _ := s.Ask(ctx, request("rm -rf x"))
	if !rec.ExpiresAt.Equal(c.Now().Add(time.Minute)) {
		t.Fatalf("expires at %v", rec.ExpiresAt)
	}
	c.add(time.Minute + time.Second)
	got, err := s.Wait(ctx, rec.ID)
	if err != nil || got.State != approval.StateExpired || !strings.Contains(got.Reason, "no answer within 1m0s") {
		t.Fatalf("after the timeout: %+v, %v", got, err)
	}
	rec2, _ := s.Ask(ctx, request("rm -rf y"))
	cctx, cancel := context.WithCancelCause(ctx)
	cancel(errors.New("the turn was stopped"))
	got, err = s.Wait(cctx, rec2.ID)
	if err != nil || got.State != approval.StateVoided || !strings.Contains(got.Reason, "the turn was stopped") {
		t.Fatalf("a wait whose turn ended: %+v, %v", got, err)
	}
}

// A host that starts again voids what its last run left pending (no turn waits for it now), and
// expires what is past its time; another host's pending requests are left alone.
func TestOpenSettlesTheLastRun(t *testing.T) {
	ctx := context.Background()
	b := storetest.SQLite(t)
	db := b.Open(t)
	a, err := approval.Open(ctx, db, approval.Options{Instance: "a"})
	if err != nil {
		t.Fatal(err)
	}
	mine, _ := a.Ask(ctx, request("rm -rf a"))
	other, err := approval.Open(ctx, db, approval.Options{Instance: "b"})
	if err != nil {
		t.Fatal(err)
	}
	theirs, _ := other.Ask(ctx, request("rm -rf b"))
	if _, err := approval.Open(ctx, db, approval.Options{Instance: "a"}); err != nil {
		t.Fatal(err)
	}
	if r, _ := approval.Get(ctx, db, mine.ID); r.State != approval.StateVoided || !strings.Contains(r.Reason, "restarted") {
		t.Fatalf("this host's request after its restart: %+v", r)
	}
	if r, _ := approval.Get(ctx, db, theirs.ID); r.State != approval.StatePending {
		t.Fatalf("another host's request: %+v", r)
	}
	later := func() time.Time { return time.Now().Add(approval.DefaultTimeout + time.Minute) }
	if _, err := approval.Open(ctx, db, approval.Options{Instance: "c", Now: later}); err != nil {
		t.Fatal(err)
	}
	if r, _ := approval.Get(ctx, db, theirs.ID); r.State != approval.StateExpired {
		t.Fatalf("a request past its time: %+v", r)
	}
}

// A notification turn never asks: Refuse records the denial by the host.
func TestRefuse(t *testing.T) {
	ctx := context.Background()
	s := open(t, storetest.SQLite(t), approval.Options{})
	rec, err := s.Refuse(ctx, request("rm -rf /"), "a notification turn cannot ask")
	if err != nil || rec.State != approval.StateDenied || rec.DecidedBy != "host" {
		t.Fatalf("%+v, %v", rec, err)
	}
	if got, _ := s.Get(ctx, rec.ID); got.State != approval.StateDenied || got.Reason != "a notification turn cannot ask" {
		t.Fatalf("stored: %+v", got)
	}
}

func TestButtonsAndPrompt(t *testing.T) {
	bs := approval.Buttons("apabc")
	if len(bs) != 2 {
		t.Fatalf("buttons %+v", bs)
	}
	for _, b := range bs {
		id, approve, ok := approval.ParseButton(b.ID)
		if !ok || id != "apabc" || approve != strings.HasPrefix(b.ID, "approve") {
			t.Errorf("ParseButton(%q) = %q %v %v", b.ID, id, approve, ok)
		}
	}
	for _, bad := range []string{"", "approve:", "maybe:apabc", "approve:ap b", "deny"} {
		if _, _, ok := approval.ParseButton(bad); ok {
			t.Errorf("ParseButton(%q) accepted", bad)
		}
	}
	text := approval.Prompt(approval.Record{ID: "apabc", Command: "rm -rf /tmp/x", Rule: "recursive rm", ExpiresAt: time.Now().Add(5 * time.Minute), CreatedAt: time.Now()})
	for _, want := range []string{"rm -rf /tmp/x", "recursive rm", "/approve apabc", "/deny apabc"} {
		if !strings.Contains(text, want) {
			t.Errorf("prompt %q lacks %q", text, want)
		}
	}
}

// With several hosts on one database, an answer recorded by another host's store reaches the
// waiter by polling (no wake-up crosses hosts).
func TestWaitFindsAnotherHostsAnswer(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		db := b.Open(t)
		a, err := approval.Open(ctx, db, approval.Options{Instance: "a", Poll: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		other, err := approval.Open(ctx, db, approval.Options{Instance: "b"})
		if err != nil {
			t.Fatal(err)
		}
		rec, _ := a.Ask(ctx, request("rm -rf x"))
		done := make(chan approval.Record, 1)
		go func() { r, _ := a.Wait(ctx, rec.ID); done <- r }()
		if _, err := other.Decide(ctx, rec.ID, approval.Decider{Platform: "telegram", User: "1"}, true); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-done:
			if r.State != approval.StateApproved {
				t.Fatalf("the waiter saw %+v", r)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the waiter never saw the other host's answer")
		}
	})
}
