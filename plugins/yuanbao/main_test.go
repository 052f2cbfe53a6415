//go:build !wasip1

package main

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	ybt "github.com/hermes-host/hermes-host/conformance/yuanbaotest"
	"github.com/hermes-host/hermes-host/internal/kv"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/sdk/sdktest"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

const (
	wait     = 20 * time.Second
	pollWait = 2 * time.Second
)

var (
	ann   = ybt.User{ID: "u_ann", Nick: "Ann"}
	bob   = ybt.User{ID: "u_bob", Nick: "Bob"}
	team  = ybt.Group{Code: "g_team", Name: "Team"}
	owner = ybt.User{ID: ybt.DefaultOwner, Nick: "Owner"}
)

// newHost starts the plugin natively or as Wasm against the given profiles. (These tests need
// the host, so this file builds only natively: the Wasm case is driven from here.)
func newHost(t *testing.T, mode string, profiles map[string]any, o ...func(*sdktest.Options)) sdktest.Host {
	t.Helper()
	opts := sdktest.Options{Profiles: profiles, EgressExtra: []string{"127.0.0.1"}}
	for _, f := range o {
		f(&opts)
	}
	if mode == "native" {
		return sdktest.Native(t, opts)
	}
	return sdktest.Wasm(t, wasmbuild.MustBuild(t, "."), opts)
}

// each runs f natively and as Wasm, each time with a fresh fake.
func each(t *testing.T, f func(t *testing.T, mode string, yb *ybt.Server)) {
	for _, mode := range []string{"native", "wasm"} {
		t.Run(mode, func(t *testing.T) { f(t, mode, ybt.New(t)) })
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
func pollUntil(t *testing.T, h sdktest.Host, prof string, cond func(evs []abi.InboundEvent, res *abi.PollResult) bool) []abi.InboundEvent {
	t.Helper()
	var evs []abi.InboundEvent
	for i := 0; i < 15; i++ {
		res := mustPoll(t, h, prof)
		evs = append(evs, res.Events...)
		if cond(evs, res) {
			return evs
		}
		if res.BackoffMs > 0 {
			time.Sleep(min(time.Duration(res.BackoffMs)*time.Millisecond, 2*time.Second))
		}
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

func startPoller(t *testing.T, h sdktest.Host, prof string) *poller {
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
		if bot.Acked(p) != 1 {
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
