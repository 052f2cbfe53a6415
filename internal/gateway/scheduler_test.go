package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

// A scheduler plugin (ticker.wasm) sends into an echo chat through hermes_send with a seed: the
// message is delivered through echo.wasm, and the chat's session holds the seed.
func TestSchedulerSendWithSeed(t *testing.T) {
	t.Parallel()
	w := newWorldWith(t, map[string]extraPlugin{"ticker": {dir: "testdata/ticker", config: map[string]any{
		"platform": "echo", "chat_id": "77", "text": "cron says hi", "seed": "[Cron delivery: nightly]", "round": "1"}}})
	w.wait("the scheduled message", func(m echotest.Message) bool { return m.ChatID == "77" && m.Text == "cron says hi" })
	var outcome struct {
		Reply abi.HostSendReply
		Error *abi.Error
	}
	for deadline := time.Now().Add(testdeadline.Scale(30 * time.Second)); ; time.Sleep(20 * time.Millisecond) {
		b, found, _ := w.g.kv.Get(context.Background(), "ticker", "main", "done:1")
		if found {
			json.Unmarshal(b, &outcome)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the ticker never recorded an outcome")
		}
	}
	if outcome.Error != nil || outcome.Reply.State != "delivered" || len(outcome.Reply.MessageIDs) != 1 {
		t.Fatalf("outcome %+v", outcome)
	}
	key, _ := w.g.kernel.Key(abi.Source{Platform: "echo", Profile: "main", ChatType: abi.ChatDM, ChatID: "77"})
	cur, _, _ := w.g.kernel.Current(context.Background(), key)
	tr, _ := w.g.kernel.Transcript(context.Background(), cur.SessionID, 0)
	// The seed is the transcript's record of the delivery (as the Python gateway's mirror).
	if len(tr) != 1 || tr[0].Text != "[Cron delivery: nightly]" {
		t.Fatalf("transcript %+v", tr)
	}
}

// A scheduler send pinned to a session the user has left is refused as stale and never sent.
func TestSchedulerPinnedSendIsStaleAfterNew(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.say("78", "", "hi")
	w.wait("hello", func(m echotest.Message) bool { return m.ChatID == "78" })
	key, _ := w.g.kernel.Key(src("78", ""))
	old, _, _ := w.g.kernel.Current(context.Background(), key)
	caller := plugin.Caller{Plugin: "ticker", Kind: abi.KindScheduler, Profile: "main"}
	req := abi.HostSendRequest{Target: abi.Source{Platform: "echo", ChatType: abi.ChatDM, ChatID: "78", UserID: "u1"}, Text: "pinned reminder", PinSessionID: old.SessionID}
	if r, err := w.g.env.Sender.HostSend(context.Background(), caller, req); err != nil || r.State != "delivered" {
		t.Fatalf("pinned send to the live session: %+v %v", r, err)
	}
	w.say("78", "", "/new")
	w.wait("the /new confirmation", func(m echotest.Message) bool { return strings.Contains(m.Text, "New conversation") })
	_, err := w.g.env.Sender.HostSend(context.Background(), caller, req)
	if abi.CodeOf(err) != abi.CodeStale {
		t.Fatalf("pinned send after /new: %v", err)
	}
	if w.fake.Count("pinned reminder") != 1 {
		t.Fatal("a stale pinned send reached the chat")
	}
}

// A cron seed racing a guarded delivery on one key, both orders: the boundary serializes them,
// and both land in the same (current) session in the order they took the lock.
func TestSeedRacingGuardedDelivery(t *testing.T) {
	t.Parallel()
	for _, deliveryFirst := range []bool{true, false} {
		name := "seed-first"
		if deliveryFirst {
			name = "delivery-first"
		}
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			w.say("79", "", "hi")
			w.wait("hello", func(m echotest.Message) bool { return m.ChatID == "79" })
			s := src("79", "")
			key, _ := w.g.kernel.Key(s)
			caller := plugin.Caller{Plugin: "ticker", Kind: abi.KindScheduler, Profile: "main"}
			seed := func() {
				if _, err := w.g.env.Sender.HostSend(context.Background(), caller, abi.HostSendRequest{
					Target: abi.Source{Platform: "echo", ChatType: abi.ChatDM, ChatID: "79", UserID: "u1"}, Text: "cron text", Seed: "[Cron delivery: x]"}); err != nil {
					t.Error(err)
				}
			}
			if deliveryFirst {
				// The notification's send is in progress (the platform answers slowly) while the
				// seed arrives: the seed waits for the boundary.
				w.fake.Fail(echotest.Fault{Delay: 300 * time.Millisecond})
				w.spawn(s, "echo race-output", nil)
				w.fake.WaitAttempt(testdeadline.Scale(30 * time.Second))
				seed()
			} else {
				seed()
				w.spawn(s, "echo race-output", nil)
			}
			w.wait("the notification", notice("race-output"))
			w.wait("the cron text", func(m echotest.Message) bool { return m.Text == "cron text" })
			cur, _, _ := w.g.kernel.Current(context.Background(), key)
			var roles []string
			for deadline := time.Now().Add(testdeadline.Scale(30 * time.Second)); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				tr, _ := w.g.kernel.Transcript(context.Background(), cur.SessionID, 0)
				roles = roles[:0]
				for _, m := range tr[2:] { // after "hi" and its answer
					switch {
					case strings.Contains(m.Text, "race-output"):
						// The notification turn records its input and its answer together.
						if len(roles) == 0 || roles[len(roles)-1] != "notification" {
							roles = append(roles, "notification")
						}
					case strings.HasPrefix(m.Text, "[Cron delivery"):
						roles = append(roles, "seed")
					}
				}
				if len(roles) == 2 {
					break
				}
			}
			want := "seed,notification"
			if deliveryFirst {
				want = "notification,seed"
			}
			if strings.Join(roles, ",") != want {
				t.Fatalf("transcript order %v, want %s", roles, want)
			}
			_ = session.EndReset
		})
	}
}
