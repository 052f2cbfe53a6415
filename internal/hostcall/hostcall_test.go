package hostcall

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// A plugin writes what people and the bot said, never the host's own system or notification
// entries (which the agent would take as trusted).
func TestPluginRoles(t *testing.T) {
	for in, want := range map[string]string{"": "user", "user": "user", "assistant": "assistant"} {
		if got, err := role(in); err != nil || got != want {
			t.Errorf("role(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"system", "notification", "tool", "User"} {
		if _, err := role(in); abi.CodeOf(err) != abi.CodeBadRequest {
			t.Errorf("role(%q): %v; want bad_request", in, err)
		}
	}
}

// A scheduler's target written as platform:chat[:thread] has no chat type (nor, on Slack, a
// workspace); the host takes them from the sessions it has for that chat, the most recently
// active (so a seed lands in the key the users' replies use), a migrated chat included. An unseen
// chat is a "dm"; an unseen Slack channel is an error naming what is missing.
func TestTargetCompletedFromKnownSessions(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(filepath.Join(t.TempDir(), "h.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)
	k, err := session.Open(ctx, db, session.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []abi.Source{
		{Platform: "telegram", Profile: "main", ChatType: abi.ChatForum, ChatID: "-1001", ThreadID: "42", UserID: "111"},
		{Platform: "telegram", Profile: "main", ChatType: abi.ChatGroup, ChatID: "-2002", UserID: "111"}, // per-user key
		{Platform: "slack", Profile: "main", ChatType: abi.ChatGroup, ScopeID: "T1", ChatID: "C9", UserID: "U1"},
		{Platform: "slack", Profile: "main", ChatType: abi.ChatDM, ScopeID: "T1", ChatID: "D5", UserID: "U1"},
		{Platform: "slack", Profile: "main", ChatType: abi.ChatGroup, ScopeID: "T2", ChatID: "C9", UserID: "U2"}, // later: wins
	} {
		now = now.Add(time.Minute)
		if _, err := k.Resolve(ctx, src, session.ResolveOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.AliasChat(ctx, "telegram", "main", "-1003", "-2002"); err != nil { // -2002 became -1003
		t.Fatal(err)
	}
	s := Sender{Kernel: k}
	type want struct{ chatType, scope string }
	for target, w := range map[abi.Source]want{
		{Platform: "telegram", Profile: "main", ChatID: "-1001", ThreadID: "42"}:  {abi.ChatForum, ""},
		{Platform: "telegram", Profile: "main", ChatID: "-1001"}:                  {abi.ChatForum, ""},
		{Platform: "telegram", Profile: "main", ChatID: "-1001", ThreadID: "7"}:   {abi.ChatForum, ""}, // a topic not seen yet
		{Platform: "telegram", Profile: "main", ChatID: "-2002", ThreadID: "111"}: {abi.ChatGroup, ""},
		{Platform: "telegram", Profile: "main", ChatID: "-2002"}:                  {abi.ChatGroup, ""},
		{Platform: "telegram", Profile: "main", ChatID: "-1003"}:                  {abi.ChatGroup, ""}, // the migrated group
		{Platform: "telegram", Profile: "main", ChatID: "-200"}:                   {abi.ChatDM, ""},    // a prefix of -2002 is another chat
		{Platform: "telegram", Profile: "main", ChatID: "555"}:                    {abi.ChatDM, ""},
		{Platform: "telegram", Profile: "work", ChatID: "-1001"}:                  {abi.ChatDM, ""}, // another profile's sessions
		{Platform: "slack", Profile: "main", ChatID: "C9"}:                        {abi.ChatGroup, "T2"},
		{Platform: "slack", Profile: "main", ChatID: "C9", ScopeID: "T1"}:         {abi.ChatGroup, "T1"},
		{Platform: "slack", Profile: "main", ChatID: "D5"}:                        {abi.ChatDM, "T1"},
	} {
		got, err := s.complete(ctx, target)
		if err != nil || got.ChatType != w.chatType || got.ScopeID != w.scope || got.ChatID != target.ChatID {
			t.Errorf("%+v: %+v %v, want %s in %q", target, got, err, w.chatType, w.scope)
		}
	}
	given := abi.Source{Platform: "telegram", Profile: "main", ChatType: abi.ChatChannel, ChatID: "-1001"}
	if got, err := s.complete(ctx, given); err != nil || got != given {
		t.Fatalf("a target with its chat type changed: %+v %v", got, err)
	}
	_, err = s.complete(ctx, abi.Source{Platform: "slack", Profile: "main", ChatID: "C404"})
	if abi.CodeOf(err) != abi.CodeNotFound || !strings.Contains(err.Error(), "workspace") {
		t.Fatalf("an unseen Slack channel: %v", err)
	}
}

// A scheduler answered "pending" asks later what became of its send (hermes_send with
// delivery_id): still pending, delivered, failed with the reason, or stale for one the guard
// dropped; nothing is sent. Another plugin's or profile's delivery, or an unknown id, is not
// found, and a query that names a chat or a text is refused.
func TestOutcomeOfAnEarlierSend(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(filepath.Join(t.TempDir(), "h.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	k, err := session.Open(ctx, db, session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := delivery.Open(ctx, db, k, nil, delivery.Options{}) // not started: nothing is sent
	if err != nil {
		t.Fatal(err)
	}
	s := Sender{Kernel: k, Ledger: l}
	cron := plugin.Caller{Plugin: "cron", Profile: "main", Kind: abi.KindScheduler}
	row := func(origin, profile string, state delivery.State, reason string) string {
		t.Helper()
		id, err := l.Record(ctx, delivery.Message{Plugin: "telegram", Profile: profile, Key: "agent:" + profile + ":telegram:dm:5",
			Target: abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: "5"}, Text: "hi", Kind: delivery.KindScheduled, Origin: origin}, state, reason)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	ask := func(c plugin.Caller, id string) (abi.HostSendReply, error) {
		return s.HostSend(ctx, c, abi.HostSendRequest{Target: abi.Source{Platform: "telegram"}, DeliveryID: id})
	}
	pending, delivered := row("cron", "main", delivery.Pending, ""), row("cron", "main", delivery.Delivered, "")
	failed, dropped := row("cron", "main", delivery.Failed, "permanent: chat not found"), row("cron", "main", delivery.Dropped, "stale: user_boundary")
	for id, want := range map[string]string{pending: "pending", delivered: "delivered", failed: "failed"} {
		if got, err := ask(cron, id); err != nil || got.State != want || got.DeliveryID != id {
			t.Errorf("%s: %+v %v, want %s", want, got, err, want)
		}
	}
	if got, _ := ask(cron, failed); got.Reason != "permanent: chat not found" {
		t.Errorf("failed: reason %q", got.Reason)
	}
	if _, err := ask(cron, dropped); abi.CodeOf(err) != abi.CodeStale || !strings.Contains(err.Error(), "user_boundary") {
		t.Errorf("dropped: %v, want stale", err)
	}
	other, otherProfile := row("othercron", "main", delivery.Delivered, ""), row("cron", "work", delivery.Delivered, "")
	for _, id := range []string{other, otherProfile, "dlv_nosuch"} {
		if _, err := ask(cron, id); abi.CodeOf(err) != abi.CodeNotFound {
			t.Errorf("%s: %v, want not_found", id, err)
		}
	}
	if _, err := s.HostSend(ctx, cron, abi.HostSendRequest{Target: abi.Source{Platform: "telegram", ChatID: "5"}, Text: "again", DeliveryID: delivered}); abi.CodeOf(err) != abi.CodeBadRequest {
		t.Errorf("a query with a chat and a text: %v, want bad_request", err)
	}
	if rows, _ := l.List(ctx, delivery.Filter{}); len(rows) != 6 {
		t.Errorf("the ledger holds %d rows, want the 6 recorded (a query sends nothing)", len(rows))
	}
}

// unsent is a transport for a ledger that is never started: rows are recorded, nothing is sent.
type unsent struct{}

func (unsent) Reserve(context.Context, string) (delivery.Sender, error) {
	return nil, errors.New("this ledger does not send")
}
func (unsent) Limit(string) (abi.MessageLimit, error) { return abi.MessageLimit{}, nil }

// At start-up the scheduler may load, and send a catch-up, before the platform's plugin has
// loaded: while the host is still loading plugins the send waits for it (within the call's
// deadline) instead of failing "no plugin serves". Once nothing is loading, an unserved platform
// is not found at once.
func TestSendWaitsForThePluginsToLoad(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(filepath.Join(t.TempDir(), "h.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	k, err := session.Open(ctx, db, session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := delivery.Open(ctx, db, k, unsent{}, delivery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	loaded, asked := false, 0
	s := Sender{Kernel: k, Ledger: l, Wait: time.Millisecond,
		Route: func(platform, profile string) (string, bool) {
			mu.Lock()
			defer mu.Unlock()
			if asked++; asked == 3 {
				loaded = true // telegram.wasm has loaded
			}
			return "telegram", loaded && platform == "telegram"
		},
		Loading: func() []string {
			mu.Lock()
			defer mu.Unlock()
			if loaded {
				return nil
			}
			return []string{"telegram.wasm"}
		}}
	cron := plugin.Caller{Plugin: "cron", Profile: "main", Kind: abi.KindScheduler}
	req := abi.HostSendRequest{Target: abi.Source{Platform: "telegram", ChatID: "5"}, Text: "catch-up"}
	got, err := s.HostSend(ctx, cron, req)
	if err != nil || got.State != "pending" || got.DeliveryID == "" {
		t.Fatalf("a send while telegram.wasm loads: %+v %v, want it recorded once telegram serves", got, err)
	}
	if rows, _ := l.List(ctx, delivery.Filter{}); len(rows) != 1 || rows[0].Plugin != "telegram" {
		t.Fatalf("ledger rows %+v", rows)
	}
	req.Target.Platform = "echo"
	if _, err := s.HostSend(ctx, cron, req); abi.CodeOf(err) != abi.CodeNotFound {
		t.Fatalf("an unserved platform once nothing loads: %v, want not_found", err)
	}
	mu.Lock()
	loaded, asked = false, -1000
	mu.Unlock()
	short, cancel := context.WithTimeout(ctx, 120*time.Millisecond)
	defer cancel()
	if _, err := s.HostSend(short, cron, req); abi.CodeOf(err) != abi.CodeUnavailable || !strings.Contains(err.Error(), "still loading") {
		t.Fatalf("the deadline ends the wait: %v, want unavailable", err)
	}
}
