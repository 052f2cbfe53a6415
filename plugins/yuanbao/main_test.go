//go:build !wasip1

package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance/fakeclock"
	ybt "github.com/hermes-host/hermes-host/conformance/yuanbaotest"
	"github.com/hermes-host/hermes-host/conformance/yuanbaotest/ybpb"
	"github.com/hermes-host/hermes-host/internal/egress"
	"github.com/hermes-host/hermes-host/internal/kv"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
	"github.com/hermes-host/hermes-host/sdk/sdktest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

const pollWait = 2 * time.Second

var (
	// wait bounds a wait for the fake or the plugin (a broken run), stretched by the harness's
	// factor under load.
	wait = testdeadline.Scale(20 * time.Second)
	// sendTimeout is the send_timeout_ms TestSendOutcomes configures: an answer the fake gives at
	// once must come within it under the harness's load, so it scales too, staying under the
	// plugin's call deadline (10 s by default) with room for the late answer's extra wait.
	sendTimeout = min(testdeadline.Scale(1500*time.Millisecond), 6*time.Second)
)

var (
	ann   = ybt.User{ID: "u_ann", Nick: "Ann"}
	bob   = ybt.User{ID: "u_bob", Nick: "Bob"}
	team  = ybt.Group{Code: "g_team", Name: "Team"}
	owner = ybt.User{ID: ybt.DefaultOwner, Nick: "Owner"}
)

// host is a plugin under test with the host clock it sees: a clock that runs with the real one,
// so that a back-off the plugin asks for is waited out by moving the clock, not by sleeping.
type host struct {
	sdktest.Host
	clock    *fakeclock.Ahead
	ownClock bool // the host's clock is clock (no option set another)
}

// newHost starts the plugin natively or as Wasm against the given profiles. (These tests need
// the host, so this file builds only natively: the Wasm case is driven from here.) Unless an
// option sets the host clock, the host's clock is an Ahead one that pollUntil moves through
// back-offs.
func newHost(t *testing.T, mode string, profiles map[string]any, o ...func(*sdktest.Options)) *host {
	t.Helper()
	h := &host{clock: &fakeclock.Ahead{}}
	opts := sdktest.Options{Profiles: profiles, EgressExtra: []string{"127.0.0.1"}}
	for _, f := range o {
		f(&opts)
	}
	if opts.Now == nil {
		opts.Now, h.ownClock = h.clock.Now, true
	}
	if mode == "native" {
		h.Host = sdktest.Native(t, opts)
	} else {
		h.Host = sdktest.Wasm(t, wasmbuild.MustBuild(t, "."), opts)
	}
	return h
}

// waitOut lets the back-off a poll asked for pass: on the host's clock when the test owns it,
// else in real time (at most limit).
func (h *host) waitOut(res *abi.PollResult, limit time.Duration) {
	if res.BackoffMs <= 0 {
		return
	}
	d := time.Duration(res.BackoffMs) * time.Millisecond
	if h.ownClock {
		h.clock.Advance(d)
		return
	}
	time.Sleep(min(d, limit))
}

// each runs f natively and as Wasm, each time with a fresh fake. The Wasm run goes beside other
// tests (t.Parallel); native runs take turns (one SDK transport per process, sdktest.Native).
func each(t *testing.T, f func(t *testing.T, mode string, yb *ybt.Server)) {
	for _, mode := range []string{"native", "wasm"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f(t, mode, ybt.New(t))
		})
	}
}

// profile is a configuration pointing at the fake's default bot.
func profile(yb *ybt.Server, extra ...any) map[string]any {
	b := yb.Bot()
	cfg := map[string]any{"app_id": b.AppID(), "app_secret": b.Secret(), "api_domain": yb.URL(), "ws_url": yb.WSURL()}
	for i := 0; i+1 < len(extra); i += 2 {
		cfg[extra[i].(string)] = extra[i+1]
	}
	return cfg
}

func mustPoll(t *testing.T, h sdktest.Host, prof string) *abi.PollResult {
	t.Helper()
	res, err := h.Poll(prof, pollWait)
	if err != nil {
		t.Fatalf("poll: %v", err)
	}
	return res
}

// pollUntil polls until cond holds (at most 15 polls) and returns the events seen.
func pollUntil(t *testing.T, h *host, prof string, cond func(evs []abi.InboundEvent, res *abi.PollResult) bool) []abi.InboundEvent {
	t.Helper()
	var evs []abi.InboundEvent
	for i := 0; i < 15; i++ {
		res := mustPoll(t, h, prof)
		evs = append(evs, res.Events...)
		if cond(evs, res) {
			return evs
		}
		h.waitOut(res, 2*time.Second)
	}
	t.Fatalf("condition not met after 15 polls; events %+v", evs)
	return nil
}

func connected(evs []abi.InboundEvent, res *abi.PollResult) bool {
	return res.Status != nil && res.Status.State == abi.StatusOK
}

// sharedKV is a kv store that outlives the hosts using it: a "restarted" host gets the same one.
func sharedKV(t *testing.T) *kv.Store {
	db, err := store.Open(filepath.Join(t.TempDir(), "kv.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := kv.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ids(evs []abi.InboundEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

// poller polls in the background (Wasm hosts only: they serve calls concurrently, as serve
// does), collecting events, until the test ends.
type poller struct {
	mu     sync.Mutex
	events []abi.InboundEvent
	status *abi.ProfileStatus
	stop   chan struct{}
	done   chan struct{}
}

func startPoller(t *testing.T, h *host, prof string) *poller {
	p := &poller{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			default:
			}
			res, err := h.Poll(prof, pollWait)
			if err != nil {
				t.Errorf("background poll: %v", err)
				return
			}
			p.mu.Lock()
			p.events = append(p.events, res.Events...)
			p.status = res.Status
			p.mu.Unlock()
			if res.BackoffMs > 0 {
				select {
				case <-p.stop:
					return
				case <-time.After(min(time.Duration(res.BackoffMs)*time.Millisecond, time.Second)):
				}
			}
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *poller) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

func (p *poller) got() []abi.InboundEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]abi.InboundEvent(nil), p.events...)
}

func (p *poller) state() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status == nil {
		return ""
	}
	return p.status.State
}

func TestConnectReceiveAndSend(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, mode string, yb *ybt.Server) {
		bot := yb.Bot()
		h := newHost(t, mode, map[string]any{"main": profile(yb)})
		pollUntil(t, h, "main", connected)
		if bot.Binds() != 1 {
			t.Fatalf("binds %d", bot.Binds())
		}
		p := bot.DM(ann, "hello")
		evs := pollUntil(t, h, "main", func(evs []abi.InboundEvent, _ *abi.PollResult) bool { return len(evs) > 0 })
		ev := evs[0]
		if ev.ID != "msg:"+p.MsgID || ev.Kind != abi.EventMessage || ev.Text != "hello" || ev.Source.ChatType != abi.ChatDM ||
			ev.Source.ChatID != ann.ID || ev.Source.UserID != ann.ID || ev.Source.MessageID != p.MsgID {
			t.Fatalf("event %+v", ev)
		}
		// Acknowledged only at the next poll: the host records a returned batch before it polls again.
		if bot.Acked(p) != 0 {
			t.Fatal("push acknowledged before the host recorded it")
		}
		mustPoll(t, h, "main")
		// The poll wrote the acknowledgement; the fake reads it on its own time.
		if err := yb.Wait(wait, func() bool { return bot.Acked(p) > 0 }); err != nil || bot.Acked(p) != 1 {
			t.Fatalf("push acknowledged %d times after the next poll", bot.Acked(p))
		}
		res, err := h.Send("main", abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: ann.ID, Text: "hi Ann"})
		if err != nil || res.Error != nil || len(res.MessageIDs) != 1 {
			t.Fatalf("send: %+v %v", res, err)
		}
		if got := bot.SentTexts("dm", ann.ID); len(got) != 1 || got[0] != "hi Ann" {
			t.Fatalf("sent %q", got)
		}
		if v := yb.Violations(); len(v) != 0 {
			t.Fatalf("protocol violations: %q", v)
		}
		if !strings.HasPrefix(res.MessageIDs[0], "c2c_") {
			t.Fatalf("message id %q", res.MessageIDs[0])
		}
	})
}

func TestSignTokenRetriesAndCaches(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, mode string, yb *ybt.Server) {
		bot := yb.Bot()
		// 10099 twice: signed on the third try, 1 s apart (configure, which runs only in Wasm,
		// already signed the token there).
		if mode == "native" {
			yb.FailSign(ybt.SignFault{Code: ybt.RetryCode, Msg: "busy"}, ybt.SignFault{Code: ybt.RetryCode, Msg: "busy"})
		}
		h := newHost(t, mode, map[string]any{"main": profile(yb)})
		start := time.Now()
		pollUntil(t, h, "main", connected)
		signs := yb.SignRequests()
		if mode == "native" {
			if len(signs) != 3 || signs[2].Code != 0 || time.Since(start) < 2*time.Second {
				t.Fatalf("sign requests %d (last code %d) in %v", len(signs), signs[len(signs)-1].Code, time.Since(start))
			}
		} else if len(signs) != 1 {
			t.Fatalf("configure's token was not reused by the first connect: %d sign requests", len(signs))
		}
		for _, r := range signs {
			if r.Header.Get("X-Instance-Id") != "17" || r.AppKey != bot.AppID() || r.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("sign request %+v", r)
			}
		}
		// Reconnects present the cached token, as Yuanbao's public clients do (issue 29, item 7:
		// every reconnect signed a new one, and sign-token is rate limited).
		n := len(signs)
		for binds := 2; binds <= 3; binds++ {
			bot.Close(1012, "service restart")
			pollUntil(t, h, "main", func(_ []abi.InboundEvent, res *abi.PollResult) bool {
				return bot.Binds() == binds && connected(nil, res)
			})
		}
		if got := len(yb.SignRequests()); got != n {
			t.Fatalf("two reconnects made %d sign requests, want none (the token is valid for an hour)", got-n)
		}
	})
}

func TestSignTokenRefreshedEarly(t *testing.T) {
	t.Parallel()
	// A token valid for 30 s is within the 60 s refresh margin at once: the connect re-signs
	// rather than present a token about to expire.
	yb := ybt.New(t, ybt.WithTokenDuration(30*time.Second))
	h := newHost(t, "wasm", map[string]any{"main": profile(yb)})
	pollUntil(t, h, "main", connected)
	if n := len(yb.SignRequests()); n != 2 {
		t.Fatalf("%d sign requests, want configure's and a fresh one", n)
	}
}

func TestConfigureRejectsRefusedCredentials(t *testing.T) {
	t.Parallel()
	yb := ybt.New(t)
	wrong := profile(yb, "app_secret", "not-the-secret")
	h := newHost(t, "wasm", map[string]any{"good": profile(yb), "wrong": wrong, "bad": map[string]any{"app_id": "x", "app_secret": "y", "ws_url": "http://x"}})
	if _, err := h.Poll("wrong", pollWait); err == nil || !strings.Contains(err.Error(), "refused the credentials") || !strings.Contains(err.Error(), "40003") {
		t.Fatalf("wrong secret: %v", err)
	}
	if _, err := h.Poll("bad", pollWait); err == nil || !strings.Contains(err.Error(), "ws_url") {
		t.Fatalf("bad config: %v", err)
	}
	if strings.Contains(errString(h.Poll("wrong", pollWait)), "not-the-secret") {
		t.Fatal("the secret leaked into an error")
	}
	m := h.Manifest()
	if m.MessageLimit != (abi.MessageLimit{Max: 4000, Unit: abi.UnitCodePoint}) || !m.Has(abi.CapPoll) || m.Platform != "yuanbao" {
		t.Fatalf("manifest %+v", m)
	}
}

func errString(_ any, err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestAuthBindFailuresBackOff(t *testing.T) {
	t.Parallel()
	yb := ybt.New(t)
	bot := yb.Bot()
	bot.ScriptAuth(ybt.AuthRefuse, ybt.AuthRefuse, ybt.AuthSilent, ybt.AuthOK)
	h := newHost(t, "native", map[string]any{"main": profile(yb)})
	var backoffs []int64
	var statuses []string
	for i := 0; i < 12 && bot.Binds() == 0; i++ {
		res := mustPoll(t, h, "main")
		if res.Status != nil {
			statuses = append(statuses, res.Status.State+": "+res.Status.Message)
		}
		if res.BackoffMs > 0 {
			backoffs = append(backoffs, res.BackoffMs)
			h.waitOut(res, time.Minute) // the back-off passes on the host's clock
		}
	}
	if bot.Binds() != 1 {
		t.Fatalf("never bound; statuses %q", statuses)
	}
	// 1 s, 2 s, 4 s: each failure doubles the wait (the answers are a little under, as time passes).
	if len(backoffs) != 3 || backoffs[0] > 1000 || backoffs[0] < 500 || backoffs[1] > 2000 || backoffs[1] < 1500 || backoffs[2] > 4000 || backoffs[2] < 3000 {
		t.Fatalf("back-offs %v", backoffs)
	}
	if !strings.Contains(statuses[0], "degraded: not connected: AUTH_BIND refused") || !strings.Contains(strings.Join(statuses, "\n"), "no answer to AUTH_BIND") {
		t.Fatalf("statuses %q", statuses)
	}
	if n := bot.Connections(); n != 4 {
		t.Fatalf("%d connections for 4 binds attempted", n)
	}
	// Each refused AUTH_BIND forgets the token (Yuanbao may have refused it), so the next
	// connect signs again; a bind without an answer keeps it.
	if n := len(yb.SignRequests()); n != 3 {
		t.Fatalf("%d sign requests for two refusals and a silence, want 3", n)
	}
}

func TestPermanentCloseStopsReconnecting(t *testing.T) {
	t.Parallel()
	yb := ybt.New(t)
	bot := yb.Bot()
	state := sdktest.NewState(t)
	h := newHost(t, "native", map[string]any{"main": profile(yb)}, func(o *sdktest.Options) { o.State = state })
	pollUntil(t, h, "main", connected)
	bot.Close(4013, "bot disabled")
	res := pollUntil(t, h, "main", func(_ []abi.InboundEvent, res *abi.PollResult) bool {
		return res.Status != nil && res.Status.State == abi.StatusStopped
	})
	_ = res
	// A stopped profile's poll comes back every second (issue 29, item 5: every minute), so a
	// reload's lifting of the stop takes effect at once.
	for i := 0; i < 3; i++ {
		r := mustPoll(t, h, "main")
		if r.Status.State != abi.StatusStopped || !strings.Contains(r.Status.Message, "4013") || r.BackoffMs <= 0 || r.BackoffMs > 1000 {
			t.Fatalf("poll after the permanent close: %+v %+v", r, r.Status)
		}
	}
	signs := len(yb.SignRequests())
	if bot.Binds() != 1 || bot.Connections() != 1 {
		t.Fatalf("reconnected after 4013: binds %d connections %d", bot.Binds(), bot.Connections())
	}
	if res, err := h.Send("main", abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: ann.ID, Text: "x"}); err != nil || res.Error == nil ||
		res.Error.Kind != abi.SendRetryable || res.Error.Code != "stopped" {
		t.Fatalf("send while stopped: %+v %v", res, err)
	}
	// A restart (a load of the plugin, which runs configure) lifts the stop: one reconnect.
	h = newHost(t, "wasm", map[string]any{"main": profile(yb)}, func(o *sdktest.Options) { o.State = state })
	pollUntil(t, h, "main", connected)
	if bot.Binds() != 2 {
		t.Fatalf("binds %d after the stop was lifted", bot.Binds())
	}
	// The stop forgot the token (the credentials may have been the cause): signed anew.
	if n := len(yb.SignRequests()) - signs; n != 1 {
		t.Fatalf("%d sign requests after the stop was lifted, want 1", n)
	}
}

// After a reconnect, the poll that binds returns at once with the profile connected, so the
// host shows the bound connection within a second; it showed "not connected" until the end of
// that poll's wait (issue 29, item 5: 16-25 s with the host's 25 s polls).
func TestStatusShowsTheBindAtOnce(t *testing.T) {
	each(t, func(t *testing.T, mode string, yb *ybt.Server) {
		bot := yb.Bot()
		h := newHost(t, mode, map[string]any{"main": profile(yb)})
		pollUntil(t, h, "main", connected)
		bot.Close(1012, "service restart")
		const long = 10 * time.Second
		for i := 0; i < 10 && bot.Binds() < 2; i++ {
			start := time.Now()
			res, err := h.Poll("main", long)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if bot.Binds() == 2 {
				if res.Status == nil || res.Status.State != abi.StatusOK || took > long/2 {
					t.Fatalf("the poll that bound returned after %v with status %+v, want at once and ok", took, res.Status)
				}
				t.Logf("the binding poll returned after %v", took.Round(time.Millisecond))
				return
			}
			time.Sleep(time.Duration(res.BackoffMs) * time.Millisecond)
		}
		t.Fatalf("never bound again: binds %d", bot.Binds())
	})
}

func TestMissedPongsReconnect(t *testing.T) {
	t.Parallel()
	yb := ybt.New(t)
	bot := yb.Bot()
	h := newHost(t, "native", map[string]any{"main": profile(yb)})
	advance := h.clock.Advance // the host clock runs ahead, so that pings fall due without waiting
	pollUntil(t, h, "main", connected)
	bot.SkipPongs(2)
	pings := func() int { return len(bot.Requests("ping")) }
	for i, step := range []time.Duration{31 * time.Second, 11 * time.Second, 31 * time.Second, 11 * time.Second} {
		advance(step)
		mustPoll(t, h, "main")
		if i < 3 && bot.Binds() != 1 {
			t.Fatalf("reconnected after step %d (%d pings)", i, pings())
		}
	}
	pollUntil(t, h, "main", func(_ []abi.InboundEvent, res *abi.PollResult) bool { return bot.Binds() == 2 && connected(nil, res) })
	if pings() != 2 {
		t.Fatalf("%d pings before the reconnect, want 2", pings())
	}
	// Pongs answered again: the connection stays.
	advance(31 * time.Second)
	mustPoll(t, h, "main")
	advance(11 * time.Second)
	mustPoll(t, h, "main")
	if bot.Binds() != 2 || pings() != 3 {
		t.Fatalf("binds %d pings %d", bot.Binds(), pings())
	}
}

func TestPushesDroppedMidwayAreNotLost(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, mode string, yb *ybt.Server) {
		bot := yb.Bot()
		h := newHost(t, mode, map[string]any{"main": profile(yb)})
		pollUntil(t, h, "main", connected)
		long := strings.Repeat("a long message ", 700) // over the fake's 4 KiB write buffer
		during := bot.DM(ann, long, ybt.DropWhilePushing(ybt.DropDuringPush))
		evs := pollUntil(t, h, "main", func(evs []abi.InboundEvent, _ *abi.PollResult) bool { return len(evs) > 0 })
		mustPoll(t, h, "main") // acknowledges what the last poll returned
		for deadline := time.Now().Add(wait); bot.Acked(during) < 1 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond) // the fake reads the acknowledgement on its own time
		}
		// The push cut in half never reached the plugin: it came once, after the reconnect.
		if len(evs) != 1 || evs[0].ID != "msg:"+during.MsgID || evs[0].Text != strings.TrimSpace(long) || bot.Binds() != 2 || bot.Acked(during) != 1 {
			t.Fatalf("events %v, binds %d, acks %d", ids(evs), bot.Binds(), bot.Acked(during))
		}
		// A push written whole before the drop may be read twice (before the drop, and again
		// after the reconnect, as it was never acknowledged): with the same id, which the host's
		// inbox deduplicates.
		after := bot.DM(bob, "second", ybt.DropWhilePushing(ybt.DropAfterPush))
		evs = pollUntil(t, h, "main", func(evs []abi.InboundEvent, res *abi.PollResult) bool {
			return bot.Binds() == 3 && connected(nil, res) && len(evs) > 0
		})
		mustPoll(t, h, "main")
		for _, e := range evs {
			if e.ID != "msg:"+after.MsgID {
				t.Fatalf("events %v", ids(evs))
			}
		}
		// The acknowledgement is a frame the fake reads on its own time after the poll that
		// wrote it returned: wait for it to arrive (polling on, as the host would).
		for deadline := time.Now().Add(wait); bot.Acked(after) < 1; mustPoll(t, h, "main") {
			if time.Now().After(deadline) {
				t.Fatal("the push dropped after writing was never acknowledged")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func TestRecallsBecomeRedactions(t *testing.T) {
	t.Parallel()
	yb := ybt.New(t)
	bot := yb.Bot()
	h := newHost(t, "native", map[string]any{"main": profile(yb)})
	pollUntil(t, h, "main", connected)
	dm := bot.DM(ann, "oops")
	grp := bot.GroupMention(team, bob, "secret")
	pollUntil(t, h, "main", func(evs []abi.InboundEvent, _ *abi.PollResult) bool { return len(evs) == 2 })
	bot.RecallDM(ann, dm.MsgID)
	// A group recall that names the message only by its sequence number, without the sender.
	bot.Push(&ybpb.InboundMessagePush{CallbackCommand: ybt.CallbackGroupRecall, GroupCode: team.Code,
		RecallMsgSeqList: []*ybpb.ImMsgSeq{{MsgSeq: uint64(grp.Msg.MsgSeq)}}})
	evs := pollUntil(t, h, "main", func(evs []abi.InboundEvent, _ *abi.PollResult) bool { return len(evs) == 2 })
	want := []abi.InboundEvent{
		{ID: "recall:" + dm.MsgID, Kind: abi.EventRedact, Source: abi.Source{ChatType: abi.ChatDM, ChatID: ann.ID, UserID: ann.ID, MessageID: dm.MsgID}},
		{ID: "recall:" + grp.MsgID, Kind: abi.EventRedact, Source: abi.Source{ChatType: abi.ChatGroup, ChatID: team.Code, UserID: bob.ID, MessageID: grp.MsgID}},
	}
	for i := range want {
		if evs[i].ID != want[i].ID || evs[i].Kind != want[i].Kind || evs[i].Source != want[i].Source {
			t.Fatalf("recall %d: %+v, want %+v", i, evs[i], want[i])
		}
	}
}

func TestJSONPushesThroughTheFake(t *testing.T) {
	t.Parallel()
	yb := ybt.New(t)
	bot := yb.Bot()
	h := newHost(t, "native", map[string]any{"main": profile(yb)})
	pollUntil(t, h, "main", connected)
	a := bot.GroupMention(team, ann, "snake", ybt.AsJSON())
	b := bot.DM(bob, "pascal", ybt.AsTIMJSON(), ybt.NoAck())
	evs := pollUntil(t, h, "main", func(evs []abi.InboundEvent, _ *abi.PollResult) bool { return len(evs) == 2 })
	if evs[0].ID != "msg:"+a.MsgID || evs[0].Text != "snake" || evs[0].Kind != abi.EventMessage || evs[0].Source.ChatID != team.Code ||
		evs[1].ID != "msg:"+b.MsgID || evs[1].Text != "pascal" || evs[1].Source.ChatID != bob.ID {
		t.Fatalf("events %+v", evs)
	}
	mustPoll(t, h, "main")
	yb.Wait(wait, func() bool { return bot.Acked(a) > 0 }) // the fake reads the acknowledgement on its own time
	if bot.Acked(a) != 1 || bot.Acked(b) != 0 {
		t.Fatalf("acks: need_ack %d, without %d", bot.Acked(a), bot.Acked(b))
	}
}

func sendTo(h sdktest.Host, msg abi.OutboundMessage) *abi.SendResult {
	res, err := h.Send("main", msg)
	if err != nil {
		return &abi.SendResult{Error: &abi.SendError{Kind: "call error", Message: err.Error()}}
	}
	return res
}

func TestSendOutcomes(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, mode string, yb *ybt.Server) {
		bot := yb.Bot()
		h := newHost(t, mode, map[string]any{"main": profile(yb, "send_timeout_ms", sendTimeout.Milliseconds())})
		pollUntil(t, h, "main", connected)
		dm := func(text string) abi.OutboundMessage {
			return abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: ann.ID, Text: text}
		}
		requests := func() int { return len(bot.Requests(ybt.CmdSendC2C)) }
		check := func(name string, res *abi.SendResult, kind, code string, want int) {
			t.Helper()
			if kind == "" && (res.Error != nil || len(res.MessageIDs) != 1) {
				t.Fatalf("%s: %+v %+v", name, res, res.Error)
			}
			if kind != "" && (res.Error == nil || res.Error.Kind != kind || (code != "" && res.Error.Code != code)) {
				t.Fatalf("%s: %+v, want %s %s", name, res.Error, kind, code)
			}
			if n := requests(); n != want {
				t.Fatalf("%s: %d send requests so far, want %d (never resent)", name, n, want)
			}
		}
		check("accepted", sendTo(h, dm("one")), "", "", 1)
		bot.FailSends(ybt.SendFault{Delay: sendTimeout + 1500*time.Millisecond})
		check("answer too late", sendTo(h, dm("late")), abi.SendUncertain, abi.CodeUncertain, 2)
		bot.FailSends(ybt.SendFault{Status: 7})
		check("status 7", sendTo(h, dm("refused")), abi.SendPermanent, "refused", 3)
		bot.FailSends(ybt.SendFault{Code: 9})
		check("code 9", sendTo(h, dm("refused too")), abi.SendPermanent, "refused", 4)
		check("4000 code points", sendTo(h, dm(strings.Repeat("😀", 4000))), "", "", 5)
		check("4001 code points", sendTo(h, dm(strings.Repeat("😀", 4001))), abi.SendPermanent, "message_too_long", 5)
		check("empty", sendTo(h, dm(" \n")), abi.SendPermanent, "empty_text", 5)
		if got := bot.SentTexts("dm", ann.ID); len(got) != 3 || got[0] != "one" || got[1] != "late" {
			t.Fatalf("posted %q", got[:min(len(got), 2)])
		}
		if n := len(bot.Refused()); n != 2 {
			t.Fatalf("%d refused", n)
		}
		// Groups: send_group_message, quoting the message answered.
		res := sendTo(h, abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: team.Code, Text: "in the group", ReplyTo: "msg-0042"})
		if g := bot.Sent("group", team.Code); res.Error != nil || len(g) != 1 || g[0].RefMsgID != "msg-0042" || g[0].From != bot.BotID() ||
			!strings.HasPrefix(res.MessageIDs[0], "grp_") {
			t.Fatalf("group send %+v: %+v", res, g)
		}
		// The socket drops after the request was written: uncertain; then not connected, until
		// the poll reconnects.
		bot.FailSends(ybt.SendFault{Drop: true})
		check("dropped after writing", sendTo(h, dm("dropped")), abi.SendUncertain, abi.CodeUncertain, 6)
		if res := sendTo(h, dm("while down")); res.Error == nil || res.Error.Kind != abi.SendRetryable || requests() != 6 {
			t.Fatalf("send while disconnected: %+v", res.Error)
		}
		pollUntil(t, h, "main", func(_ []abi.InboundEvent, res *abi.PollResult) bool { return bot.Binds() == 2 && connected(nil, res) })
		check("after the reconnect", sendTo(h, dm("back")), "", "", 7)
	})
}

func TestSendWhilePolling(t *testing.T) {
	t.Parallel()
	yb := ybt.New(t)
	bot := yb.Bot()
	h := newHost(t, "wasm", map[string]any{"main": profile(yb)})
	p := startPoller(t, h, "main")
	if err := yb.Wait(wait, func() bool { return p.state() == abi.StatusOK }); err != nil {
		t.Fatal(err)
	}
	// The poll reads the socket; sends find their answers where the poll stores them, and pushes
	// that arrive meanwhile reach the poll.
	for i := 0; i < 5; i++ {
		push := bot.DM(bob, "meanwhile "+strconv.Itoa(i))
		if res := sendTo(h, abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: ann.ID, Text: "reply " + strconv.Itoa(i)}); res.Error != nil {
			t.Fatalf("send %d: %+v", i, res.Error)
		}
		if err := yb.Wait(wait, func() bool {
			for _, e := range p.got() {
				if e.ID == "msg:"+push.MsgID {
					return true
				}
			}
			return false
		}); err != nil {
			t.Fatalf("push %d never reached the poll: %v", i, err)
		}
	}
	// A send may read the socket between two polls; a push it read costs one reconnect
	// (TestPushBetweenPollsReachesTheNextPoll).
	if got := bot.SentTexts("dm", ann.ID); len(got) != 5 || len(yb.Violations()) != 0 {
		t.Fatalf("sent %q, binds %d, violations %q", got, bot.Binds(), yb.Violations())
	}
}

// TestPushBetweenPollsReachesTheNextPoll: a push waits on the socket while no poll runs, and a
// send written then reads the socket for its answer. This host has no hermes_dispatch, so the
// send cannot hand the push over: it leaves it unacknowledged and replaces the connection, and
// Yuanbao delivers it again after the poll's bind. (Before, the push was lost until some later
// reconnect: "push 3 never reached the poll" in TestSendWhilePolling, once in CI.)
func TestPushBetweenPollsReachesTheNextPoll(t *testing.T) {
	t.Parallel()
	yb := ybt.New(t)
	bot := yb.Bot()
	h := newHost(t, "wasm", map[string]any{"main": profile(yb)})
	pollUntil(t, h, "main", connected) // the poll that binds returns at once, asking for no back-off
	push := bot.DM(bob, "between polls")
	if err := yb.Wait(wait, func() bool {
		for _, p := range bot.Pushes() {
			if p.MsgID == push.MsgID && p.Deliveries > 0 {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal("the push was never written to the connection")
	}
	sent := make(chan *abi.SendResult, 1)
	go func() { sent <- sendTo(h, abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: ann.ID, Text: "reply"}) }()
	if err := yb.Wait(wait, func() bool { return len(bot.SentTexts("dm", ann.ID)) == 1 }); err != nil {
		t.Fatal("the send never reached Yuanbao")
	}
	evs := pollUntil(t, h, "main", func(evs []abi.InboundEvent, _ *abi.PollResult) bool {
		return slices.Contains(ids(evs), "msg:"+push.MsgID)
	})
	if res := <-sent; res.Error != nil {
		t.Fatalf("send: %+v (events %q)", res.Error, ids(evs))
	}
}

func TestTypingHeartbeats(t *testing.T) {
	t.Parallel()
	yb := ybt.New(t)
	bot := yb.Bot()
	h := newHost(t, "wasm", map[string]any{"main": profile(yb)})
	p := startPoller(t, h, "main")
	if err := yb.Wait(wait, func() bool { return p.state() == abi.StatusOK }); err != nil {
		t.Fatal(err)
	}
	bot.GroupMention(team, ann, "what failed?")
	running := func() int {
		n := 0
		for _, hb := range bot.Heartbeats("group", team.Code) {
			if hb.Value == ybt.Running {
				n++
			}
		}
		return n
	}
	if err := yb.Wait(wait, func() bool { return running() >= 2 }); err != nil {
		t.Fatalf("RUNNING heartbeats: %d", running())
	}
	// The answer, in two parts: typing goes on after the first, ends after the second.
	for part := 1; part <= 2; part++ {
		res := sendTo(h, abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: team.Code, Text: "part " + strconv.Itoa(part), Part: part, Parts: 2})
		if res.Error != nil {
			t.Fatal(res.Error)
		}
	}
	var finish time.Time
	if err := yb.Wait(wait, func() bool {
		for _, hb := range bot.Heartbeats("group", team.Code) {
			if hb.Value == ybt.Finish {
				finish = hb.At
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal("no FINISH heartbeat after the answer")
	}
	if last := bot.Sent("group", team.Code); len(last) != 2 || finish.Before(last[1].At) {
		t.Fatalf("FINISH at %v, before the last part at %v", finish, last[len(last)-1].At)
	}
	// Heartbeats fall due on the host's clock: move it past two intervals, then wait for the poll
	// that returns a later push, which ran the timers at that time. None may be for the finished
	// chat.
	h.clock.Advance(2 * typingEvery)
	marker := bot.DM(bob, "after the answer")
	if err := yb.Wait(wait, func() bool {
		for _, e := range p.got() {
			if e.ID == "msg:"+marker.MsgID {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("the push after the answer never reached the poll: %v", err)
	}
	// The fake reads a connection's frames in order: once a later send is answered, every
	// heartbeat that poll wrote has been recorded.
	if res := sendTo(h, abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: ann.ID, Text: "a barrier"}); res.Error != nil {
		t.Fatal(res.Error)
	}
	for _, hb := range bot.Heartbeats("group", team.Code) {
		if hb.Value == ybt.Running && hb.At.After(finish) {
			t.Fatalf("RUNNING at %v after FINISH at %v", hb.At, finish)
		}
	}
}

// TestConnectionSurvivesCrashAndReload: the host owns the WebSocket, so an instance stopped in
// the middle of a poll, and a new version of the plugin, carry on with the same connection: no
// second AUTH_BIND.
func TestConnectionSurvivesCrashAndReload(t *testing.T) {
	t.Parallel()
	yb := ybt.New(t)
	bot := yb.Bot()
	ctx := context.Background()
	env := &plugin.Env{KV: sharedKV(t), Egress: egress.NewClient(egress.Limits{}), Logger: slog.New(slog.DiscardHandler)}
	t.Cleanup(env.Egress.Close)
	cfg, _ := json.Marshal(profile(yb))
	load := func(ldflags string) (*plugin.Runtime, *plugin.Plugin) {
		path, err := wasmbuild.BuildWith(".", ldflags)
		if err != nil {
			t.Fatal(err)
		}
		// The call deadline scales with the harness's factor: a describe that starts the guest's
		// runtime while every package runs at once took more than the default 10 s.
		rt, p, err := plugin.LoadFile(ctx, path, plugin.FileOptions{Profiles: map[string]json.RawMessage{"main": cfg}, Env: env, EgressExtra: []string{"127.0.0.1"},
			Limits: plugin.Limits{CallTimeout: testdeadline.Scale(10 * time.Second)}})
		if err != nil {
			t.Fatal(err)
		}
		return rt, p
	}
	pollFor := func(p *plugin.Plugin, cond func(evs []abi.InboundEvent, res *abi.PollResult) bool) []abi.InboundEvent {
		t.Helper()
		var evs []abi.InboundEvent
		for i := 0; i < 15; i++ {
			res, err := p.Poll(ctx, "main", pollWait)
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, res.Events...)
			if cond(evs, res) {
				return evs
			}
		}
		t.Fatalf("condition not met; events %v", ids(evs))
		return nil
	}
	rt1, p1 := load("")
	pollFor(p1, connected)

	// The instance is stopped while it waits in its poll (the call's context ends).
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := p1.Poll(cctx, "main", 10*time.Second)
	cancel()
	var crash *plugin.CrashError
	if !errors.As(err, &crash) {
		t.Fatalf("the stopped poll: %v", err)
	}
	m := bot.DM(ann, "after the crash")
	if evs := pollFor(p1, func(evs []abi.InboundEvent, _ *abi.PollResult) bool { return len(evs) > 0 }); evs[0].ID != "msg:"+m.MsgID {
		t.Fatalf("events %v", ids(evs))
	}
	// A new version of the plugin (a hot reload) takes over the connection.
	rt2, p2 := load("-X main.Version=2.0.0")
	rt1.Close()
	t.Cleanup(rt2.Close)
	m = bot.DM(ann, "after the reload")
	if evs := pollFor(p2, func(evs []abi.InboundEvent, _ *abi.PollResult) bool { return len(evs) > 0 }); evs[0].ID != "msg:"+m.MsgID || p2.Manifest().Version != "2.0.0" {
		t.Fatalf("events %v, version %s", ids(evs), p2.Manifest().Version)
	}
	if bot.Binds() != 1 || bot.Connections() != 1 {
		t.Fatalf("binds %d, connections %d: want the one connection throughout", bot.Binds(), bot.Connections())
	}
}
