package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// notices records what the gate asked to send (the gateway wires the delivery ledger here; the
// end-to-end tests check that path).
type notices struct {
	mu   sync.Mutex
	sent []string
	fail error
}

func (n *notices) Notice(ctx context.Context, plugin, profile string, src abi.Source, text, origin string) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fail != nil {
		return "", n.fail
	}
	n.sent = append(n.sent, src.ChatID+": "+text)
	return fmt.Sprintf("dlv_%d", len(n.sent)), nil
}

func (n *notices) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.sent)
}

type fixture struct {
	g   *Gate
	n   *notices
	reg *prometheus.Registry
	now time.Time
	seq int
}

func newGate(t *testing.T, policies map[string]map[string]Policy, opt Options) *fixture {
	t.Helper()
	db := storetest.Default(t).Open(t)
	var err error
	f := &fixture{n: &notices{}, reg: prometheus.NewRegistry(), now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	opt.Policies, opt.Notifier, opt.Registerer = policies, f.n, f.reg
	opt.Now = func() time.Time { return f.now }
	opt.Logger = slog.New(slog.DiscardHandler)
	if f.g, err = Open(context.Background(), db, opt); err != nil {
		t.Fatal(err)
	}
	return f
}

// event builds a message event with a fresh id.
func (f *fixture) event(chatType, chat, user, text string) abi.InboundEvent {
	f.seq++
	return abi.InboundEvent{ID: fmt.Sprintf("u%d", f.seq), Text: text,
		Source: abi.Source{Platform: "telegram", Profile: "main", ChatType: chatType, ChatID: chat, UserID: user, UserName: "n" + user}}
}

func (f *fixture) admit(t *testing.T, ev abi.InboundEvent) Decision {
	t.Helper()
	d, err := f.g.Admit(context.Background(), "telegram", "main", ev)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (f *fixture) refused(reason string) float64 {
	var m dto.Metric
	f.g.refused.WithLabelValues("telegram", "main", reason).Write(&m)
	return m.GetCounter().GetValue()
}

// TestUnknownDMGetsOnePairingCode: with no policy at all, an unknown user's DM is refused and
// answered with one pairing code; further messages and a replay of the same event get nothing
// more; after approval the user is admitted (without tools), after revocation refused again.
func TestUnknownDMGetsOnePairingCode(t *testing.T) {
	ctx := context.Background()
	f := newGate(t, nil, Options{})
	first := f.event(abi.ChatDM, "111", "111", "sh id")
	if d := f.admit(t, first); d.Verdict != Refuse || d.Reason != ReasonPairingSent {
		t.Fatalf("first DM: %+v", d)
	}
	if f.n.count() != 1 || !strings.Contains(f.n.sent[0], "pairing code") {
		t.Fatalf("notices %q", f.n.sent)
	}
	f.admit(t, first) // the platform delivers the same update again
	if d := f.admit(t, f.event(abi.ChatDM, "111", "111", "hello?")); d.Reason != ReasonPairingPending {
		t.Fatalf("second DM: %+v", d)
	}
	if f.n.count() != 1 {
		t.Fatalf("answered twice: %q", f.n.sent)
	}
	if f.refused(ReasonPairingSent) != 1 || f.refused(ReasonPairingPending) != 1 {
		t.Fatalf("metrics: sent %v pending %v", f.refused(ReasonPairingSent), f.refused(ReasonPairingPending))
	}
	entries, err := ListLog(ctx, f.g.db, LogFilter{})
	if err != nil || len(entries) != 2 {
		t.Fatalf("log %+v %v", entries, err)
	}
	if e := entries[1]; e.Reason != ReasonPairingSent || e.Text != "sh id" || !strings.Contains(e.Detail, "sent as dlv_1") {
		t.Fatalf("log row %+v", e)
	}

	pending, _, err := f.g.Pairing(ctx)
	if err != nil || len(pending) != 1 || pending[0].UserID != "111" {
		t.Fatalf("pending %+v %v", pending, err)
	}
	if _, err := f.g.Approve(ctx, "WRONGCOD"); !errors.Is(err, ErrNoCode) {
		t.Fatalf("wrong code: %v", err)
	}
	a, err := f.g.Approve(ctx, strings.ToLower(pending[0].Code))
	if err != nil || a.UserID != "111" || a.Source.ChatID != "111" || a.Tools == nil || len(a.Tools) != 0 {
		t.Fatalf("approve %+v %v (want no tools, said as [])", a, err)
	}
	if f.n.count() != 2 || !strings.Contains(f.n.sent[1], "approved") {
		t.Fatalf("approval notice %q", f.n.sent)
	}
	if d := f.admit(t, f.event(abi.ChatDM, "111", "111", "sh id")); d.Verdict != Allow {
		t.Fatalf("approved user: %+v", d)
	}
	if sh, pr := f.g.Tools(ctx, "telegram", "main", abi.Source{ChatType: abi.ChatDM, ChatID: "111", UserID: "111"}); sh || pr {
		t.Fatal("tools granted without a policy granting them")
	}
	// Approval is per plugin and profile.
	if d, _ := f.g.Admit(ctx, "telegram", "work", f.event(abi.ChatDM, "111", "111", "x")); d.Verdict != Refuse {
		t.Fatalf("approved in another profile: %+v", d)
	}
	if _, err := f.g.Approve(ctx, pending[0].Code); !errors.Is(err, ErrNoCode) {
		t.Fatalf("a code works once: %v", err)
	}

	revoked, err := f.g.Revoke(ctx, "111", "", "")
	if err != nil || len(revoked) != 1 {
		t.Fatalf("revoke %+v %v", revoked, err)
	}
	if _, err := f.g.Revoke(ctx, "111", "", ""); !errors.Is(err, ErrNotApproved) {
		t.Fatalf("second revoke: %v", err)
	}
	if d := f.admit(t, f.event(abi.ChatDM, "111", "111", "sh id")); d.Verdict != Refuse {
		t.Fatalf("revoked user: %+v", d)
	}
	entries, _ = ListLog(ctx, f.g.db, LogFilter{Limit: 3})
	var verdicts []string
	for _, e := range entries {
		verdicts = append(verdicts, e.Verdict+"/"+e.Reason)
	}
	// After revocation the user is a stranger again: a fresh code.
	if strings.Join(verdicts[:2], " ") != "refuse/pairing_code_sent revoked/operator" {
		t.Fatalf("log after revoke: %v", verdicts)
	}
}

// TestPairingIsRateLimited: one code per user per lifetime, a cap of open codes per profile, and
// a new code once the old one expired.
// TestApprovalSaysWhichToolsItGrants: the pending code and the approval name the tools the
// profile grants, so the operator knows what approving gives (a shell, here).
func TestApprovalSaysWhichToolsItGrants(t *testing.T) {
	ctx := context.Background()
	f := newGate(t, map[string]map[string]Policy{"telegram": {"main": {Pairing: true, Shell: true, Processes: true}}}, Options{})
	f.admit(t, f.event(abi.ChatDM, "222", "222", "hi"))
	pending, _, err := f.g.Pairing(ctx)
	if err != nil || len(pending) != 1 || !slices.Equal(pending[0].Tools, []string{"shell", "processes"}) {
		t.Fatalf("pending %+v %v", pending, err)
	}
	a, err := f.g.Approve(ctx, pending[0].Code)
	if err != nil || !slices.Equal(a.Tools, []string{"shell", "processes"}) {
		t.Fatalf("approved %+v %v", a, err)
	}
	_, approved, err := f.g.Pairing(ctx)
	if err != nil || len(approved) != 1 || !slices.Equal(approved[0].Tools, []string{"shell", "processes"}) {
		t.Fatalf("approved list %+v %v", approved, err)
	}
}

func TestPairingIsRateLimited(t *testing.T) {
	f := newGate(t, nil, Options{MaxPending: 2, PairingTTL: time.Hour})
	for _, u := range []string{"1", "2", "3"} {
		f.admit(t, f.event(abi.ChatDM, u, u, "hi"))
		f.admit(t, f.event(abi.ChatDM, u, u, "hi again"))
	}
	if f.n.count() != 2 || f.refused(ReasonPairingLimit) != 2 || f.refused(ReasonPairingPending) != 2 {
		t.Fatalf("sent %d, limit %v, pending %v", f.n.count(), f.refused(ReasonPairingLimit), f.refused(ReasonPairingPending))
	}
	f.now = f.now.Add(time.Hour)
	f.admit(t, f.event(abi.ChatDM, "1", "1", "an hour later"))
	if f.n.count() != 3 {
		t.Fatalf("no new code after expiry: %d", f.n.count())
	}
	// A code that could not be sent is withdrawn, so the next message tries again.
	f.n.fail = errors.New("ledger down")
	f.admit(t, f.event(abi.ChatDM, "3", "3", "hi"))
	f.n.fail = nil
	f.admit(t, f.event(abi.ChatDM, "3", "3", "hi"))
	if f.n.count() != 4 {
		t.Fatalf("a withdrawn code blocked the next one: %d", f.n.count())
	}
}

// TestGroups: a group must be listed; in it, only its admitted members start turns (a mention
// required by default); a user admitted in chat A is not admitted in chat B; members who are not
// admitted get nothing, or are observed where configured.
func TestGroups(t *testing.T) {
	ctx := context.Background()
	f := newGate(t, map[string]map[string]Policy{"telegram": {"main": {
		Users: []string{"ann"}, Pairing: true,
		Groups: map[string]Group{
			"A": {Users: []string{"ann", "bob"}, RequireMention: true},
			"B": {Users: []string{"cy"}},
			"C": {RequireMention: false, Observe: true}, // the profile's users
		},
		Shell: true, Processes: true,
	}}}, Options{})
	mention := func(ev abi.InboundEvent) abi.InboundEvent { ev.Mentioned = true; return ev }
	observe := func(ev abi.InboundEvent) abi.InboundEvent { ev.Kind = abi.EventObserve; return ev }
	addressed := func(ev abi.InboundEvent, why string) abi.InboundEvent { ev.Addressed = why; return ev }
	for _, tc := range []struct {
		name   string
		ev     abi.InboundEvent
		want   string
		reason string
	}{
		{"member, mentioned", mention(f.event(abi.ChatGroup, "A", "bob", "sh id")), Allow, ""},
		{"member, not mentioned", f.event(abi.ChatGroup, "A", "bob", "chatter"), Observe, ""},
		{"member in a thread the plugin follows", addressed(f.event(abi.ChatGroup, "A", "bob", "more"), abi.AddressedThread), Allow, ""},
		{"member's command, unmentioned", addressed(f.event(abi.ChatGroup, "A", "bob", "/new"), abi.AddressedCommand), Allow, ""},
		{"stranger in a thread the plugin follows", addressed(f.event(abi.ChatGroup, "A", "eve", "more"), abi.AddressedThread), Refuse, ReasonUnknownUser},
		{"member, observed chatter", observe(f.event(abi.ChatGroup, "A", "bob", "chatter")), Allow, ""},
		{"stranger in A", mention(f.event(abi.ChatGroup, "A", "eve", "sh id")), Refuse, ReasonUnknownUser},
		{"stranger's chatter in A", observe(f.event(abi.ChatGroup, "A", "eve", "chatter")), Refuse, ReasonUnknownUser},
		{"ann in B", mention(f.event(abi.ChatGroup, "B", "ann", "sh id")), Refuse, ReasonUnknownUser},
		{"cy in B", f.event(abi.ChatGroup, "B", "cy", "sh id"), Allow, ""},
		{"ann in C (profile user)", f.event(abi.ChatGroup, "C", "ann", "sh id"), Allow, ""},
		{"stranger in C (observed)", f.event(abi.ChatGroup, "C", "eve", "sh id"), Observe, ReasonObserved},
		{"stranger's chatter in C", observe(f.event(abi.ChatGroup, "C", "eve", "x")), Allow, ""},
		{"unlisted group", mention(f.event(abi.ChatGroup, "Z", "ann", "sh id")), Refuse, ReasonUnknownChat},
		{"forum topic of A", mention(f.event(abi.ChatForum, "A", "ann", "sh id")), Allow, ""},
		{"stranger's DM: no pairing in groups, but a code in DMs", f.event(abi.ChatDM, "eve", "eve", "hi"), Refuse, ReasonPairingSent},
	} {
		if d := f.admit(t, tc.ev); d.Verdict != tc.want || d.Reason != tc.reason {
			t.Errorf("%s: %+v, want %s %s", tc.name, d, tc.want, tc.reason)
		}
	}
	if f.n.count() != 1 {
		t.Fatalf("group refusals answered: %q", f.n.sent)
	}
	if f.refused(ReasonUnknownUser) != 4 || f.refused(ReasonUnknownChat) != 1 || f.refused(ReasonObserved) != 1 {
		t.Fatalf("metrics %v %v %v", f.refused(ReasonUnknownUser), f.refused(ReasonUnknownChat), f.refused(ReasonObserved))
	}
	tools := func(chat, user string) bool {
		sh, pr := f.g.Tools(ctx, "telegram", "main", abi.Source{ChatType: abi.ChatGroup, ChatID: chat, UserID: user})
		return sh && pr
	}
	if !tools("A", "bob") || tools("B", "ann") || tools("Z", "ann") || tools("C", "eve") {
		t.Fatal("tools reach a sender who is not admitted there")
	}
}

// TestCronGrant: /cron is a grant like the tools: only where the profile lists it, and only for
// senders admitted in the chat they use it from.
func TestCronGrant(t *testing.T) {
	ctx := context.Background()
	f := newGate(t, map[string]map[string]Policy{"telegram": {
		"main": {Users: []string{"ann"}, Groups: map[string]Group{"A": {Users: []string{"bob"}}}, Cron: true},
		"work": {AllowAll: true, Shell: true, Processes: true},
	}}, Options{})
	may := func(profile, chatType, chat, user string) bool {
		return f.g.MayManageJobs(ctx, "telegram", profile, abi.Source{ChatType: chatType, ChatID: chat, UserID: user})
	}
	if !may("main", abi.ChatDM, "ann", "ann") || !may("main", abi.ChatGroup, "A", "bob") {
		t.Fatal("admitted senders of a profile granting cron may not manage jobs")
	}
	if may("main", abi.ChatDM, "eve", "eve") || may("main", abi.ChatGroup, "A", "ann") || may("main", abi.ChatGroup, "Z", "bob") {
		t.Fatal("cron reaches a sender who is not admitted there")
	}
	if may("work", abi.ChatDM, "ann", "ann") {
		t.Fatal("cron granted by a profile that lists only shell and processes")
	}
	if sh, pr := f.g.Tools(ctx, "telegram", "main", abi.Source{ChatType: abi.ChatDM, ChatID: "ann", UserID: "ann"}); sh || pr {
		t.Fatal("the cron grant gave tools")
	}
}

// TestAllowAllIsExplicit: allow_all admits every DM and every group (mention rule kept); a
// redaction passes everywhere, a seed only where its sender is admitted.
func TestAllowAllIsExplicit(t *testing.T) {
	f := newGate(t, map[string]map[string]Policy{"telegram": {"main": {AllowAll: true}, "closed": {}}}, Options{})
	if d := f.admit(t, f.event(abi.ChatDM, "x", "x", "hi")); d.Verdict != Allow {
		t.Fatalf("DM %+v", d)
	}
	ev := f.event(abi.ChatGroup, "G", "x", "hi")
	if d := f.admit(t, ev); d.Verdict != Observe {
		t.Fatalf("unmentioned group message %+v", d)
	}
	ev.Mentioned = true
	if d := f.admit(t, ev); d.Verdict != Allow {
		t.Fatalf("mentioned group message %+v", d)
	}
	ctx := context.Background()
	seed := f.event(abi.ChatDM, "x", "x", "")
	seed.Kind = abi.EventSeed
	if d, _ := f.g.Admit(ctx, "telegram", "closed", seed); d.Verdict != Refuse || f.n.count() != 0 {
		t.Fatalf("a stranger's seed: %+v (notices %d)", d, f.n.count())
	}
	redact := f.event(abi.ChatGroup, "G", "", "")
	redact.Kind = abi.EventRedact
	if d, _ := f.g.Admit(ctx, "telegram", "closed", redact); d.Verdict != Allow {
		t.Fatalf("redact %+v", d)
	}
}

// TestConcurrentFirstMessages: many first messages from one unknown user at once produce one
// code and one notice.
func TestConcurrentFirstMessages(t *testing.T) {
	f := newGate(t, nil, Options{})
	var wg sync.WaitGroup
	evs := make([]abi.InboundEvent, 8)
	for i := range evs {
		evs[i] = f.event(abi.ChatDM, "1", "1", "hi")
	}
	for _, ev := range evs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.g.Admit(context.Background(), "telegram", "main", ev); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if f.n.count() != 1 || f.refused(ReasonPairingSent) != 1 || f.refused(ReasonPairingPending) != 7 {
		t.Fatalf("notices %d, sent %v, pending %v", f.n.count(), f.refused(ReasonPairingSent), f.refused(ReasonPairingPending))
	}
}

func TestLogIsBounded(t *testing.T) {
	f := newGate(t, nil, Options{LogRows: 100})
	for i := 0; i < 300; i++ {
		f.admit(t, f.event(abi.ChatGroup, "G", "u", "x"))
	}
	var n int
	f.g.db.QueryRow(`SELECT COUNT(*) FROM auth_log`).Scan(&n)
	if n > 100+64 {
		t.Fatalf("%d rows kept", n)
	}
	if e, _ := ListLog(context.Background(), f.g.db, LogFilter{Limit: 1 << 30}); len(e) > MaxList {
		t.Fatalf("unbounded read: %d", len(e))
	}
}

// The store suite, on both backends: an event id is logged once however often it is replayed
// (the log's insert ignores a duplicate and reports it), and approving a user who is already
// approved updates the approval instead of failing on its key.
func TestStoreSuite(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		db := b.Open(t)
		now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		g, err := Open(ctx, db, Options{Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		ev := abi.InboundEvent{ID: "u1", Text: "hi", Source: abi.Source{ChatType: abi.ChatGroup, ChatID: "G", UserID: "7"}}
		for i, want := range []bool{true, false, false} {
			fresh, err := g.record(ctx, "telegram", "main", ev, Refuse, ReasonUnknownUser, "")
			if err != nil || fresh != want {
				t.Fatalf("record %d: fresh %v, %v; want %v", i, fresh, err, want)
			}
		}
		// Without an id every refusal is logged.
		for range 2 {
			if fresh, err := g.record(ctx, "telegram", "main", abi.InboundEvent{Text: "x"}, Refuse, ReasonUnknownUser, ""); err != nil || !fresh {
				t.Fatalf("record without id: %v %v", fresh, err)
			}
		}
		entries, err := ListLog(ctx, db, LogFilter{Plugin: "telegram"})
		if err != nil || len(entries) != 3 || entries[2].EventID != "u1" || entries[0].Seq <= entries[2].Seq {
			t.Fatalf("log %+v, %v", entries, err)
		}

		dm := abi.InboundEvent{ID: "u2", Source: abi.Source{ChatType: abi.ChatDM, ChatID: "8", UserID: "8", UserName: "eight"}}
		if d, err := g.Admit(ctx, "telegram", "main", dm); err != nil || d.Reason != ReasonPairingSent {
			t.Fatalf("first DM: %+v %v", d, err)
		}
		pending, _, err := ListPairing(ctx, db, now)
		if err != nil || len(pending) != 1 {
			t.Fatalf("pending %+v %v", pending, err)
		}
		if _, err := ApproveCode(ctx, db, pending[0].Code, now); err != nil {
			t.Fatal(err)
		}
		// A second code for the same user (as a host that had not yet seen the approval could
		// have given), approved later: one approval, the newer one.
		later := now.Add(time.Minute)
		if _, err := db.ExecContext(ctx, `INSERT INTO auth_pairing (code, plugin, profile, user_id, user_name, source, created_at, expires_at)
			VALUES ('SECONDCD', 'telegram', 'main', '8', 'eight', '{}', $1, $2)`, later.UnixMilli(), later.Add(time.Hour).UnixMilli()); err != nil {
			t.Fatal(err)
		}
		if _, err := ApproveCode(ctx, db, "secondcd", later); err != nil {
			t.Fatal(err)
		}
		_, approved, err := ListPairing(ctx, db, later)
		if err != nil || len(approved) != 1 || approved[0].Code != "SECONDCD" || !approved[0].ApprovedAt.Equal(later) {
			t.Fatalf("approved %+v %v", approved, err)
		}
		if ok, err := isApproved(ctx, db, "telegram", "main", "8"); err != nil || !ok {
			t.Fatalf("approved: %v %v", ok, err)
		}
	})
}
