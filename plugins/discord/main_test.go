//go:build !wasip1

package main

import (
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	dt "github.com/hermes-host/hermes-host/conformance/discordtest"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
	"github.com/hermes-host/hermes-host/sdk/sdktest"
)

func nativeHost(t *testing.T, d *dt.Server, o sdktest.Options) sdktest.Host {
	t.Helper()
	o.Profiles = map[string]any{"main": map[string]any{"bot_token": d.Token(), "api_base": d.APIURL(), "gateway_url": d.GatewayURL()}}
	o.EgressAlias = map[string]string{d.RESTAddr(): "discord.com", d.GatewayAddr(): "gateway.discord.gg"}
	return sdktest.Native(t, o)
}

// pollFor polls until cond holds, collecting the events poll returned.
func pollFor(t *testing.T, h sdktest.Host, what string, cond func(evs []abi.InboundEvent) bool) []abi.InboundEvent {
	t.Helper()
	var evs []abi.InboundEvent
	deadline := time.Now().Add(testdeadline.Scale(10 * time.Second))
	for time.Now().Before(deadline) {
		res, err := h.Poll("main", 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, res.Events...)
		if cond(evs) {
			return evs
		}
		if res.BackoffMs > 0 {
			time.Sleep(min(time.Duration(res.BackoffMs)*time.Millisecond, 500*time.Millisecond))
		}
	}
	t.Fatalf("%s: not within the deadline (events %+v)", what, evs)
	return nil
}

// Without hermes_dispatch (a host without a turn engine) events are returned from poll, and
// their sequence is committed at the next poll, which the host makes only after recording
// them: the RESUME after a drop then carries it, and nothing comes twice.
func TestReturnedEventsCommittedAtTheNextPoll(t *testing.T) {
	d := dt.New(t, dt.WithHeartbeatInterval(time.Second))
	h := nativeHost(t, d, sdktest.Options{})
	pollFor(t, h, "connected", func([]abi.InboundEvent) bool { return d.Delivered() })
	m := d.DM(dt.Ann, "returned, not dispatched")
	evs := pollFor(t, h, "the event", func(evs []abi.InboundEvent) bool { return len(evs) > 0 })
	if len(evs) != 1 || evs[0].ID != "msg:"+m.ID {
		t.Fatalf("events %+v", evs)
	}
	d.DropConnections()
	after := d.DM(dt.Bob, "after the drop")
	evs = pollFor(t, h, "the event after the drop", func(evs []abi.InboundEvent) bool { return len(evs) > 0 })
	if len(evs) != 1 || evs[0].ID != "msg:"+after.ID {
		t.Fatalf("events after the drop %+v: the first was replayed, or the second lost", evs)
	}
	r := d.Resumes()
	if len(r) != 1 || !r[0].Accepted || len(d.Identifies()) != 1 {
		t.Fatalf("resumes %+v, identifies %d", r, len(d.Identifies()))
	}
}

// A send carries a nonce from the host's delivery id with enforce_nonce: Discord keeps one
// message for two requests with it (a safety net under the host's rule of never resending).
func TestSendNonceFromDeliveryID(t *testing.T) {
	d := dt.New(t)
	d.AddChannel(d.Guild(), "5000000000000000001", "general")
	h := nativeHost(t, d, sdktest.Options{})
	msg := abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: "5000000000000000001", Text: "once", DeliveryID: "dlv_1", Part: 1, Parts: 1}
	var ids []string
	for range 2 {
		res, err := h.Send("main", msg)
		if err != nil || res.Error != nil {
			t.Fatalf("%+v %v", res, err)
		}
		ids = append(ids, res.MessageIDs...)
	}
	if posts := d.Posted("5000000000000000001"); len(posts) != 1 || len(ids) != 2 || ids[0] != ids[1] || posts[0].Nonce == "" {
		t.Fatalf("posts %+v, ids %v", posts, ids)
	}
	msg.Part = 2
	if res, _ := h.Send("main", msg); res == nil || res.Error != nil || res.MessageIDs[0] == ids[0] {
		t.Fatalf("part 2 is another message: %+v", res)
	}
}

// A refused token (close 4004) stops the profile for good, shown to the operator, until a
// reload (configure) lifts it.
func TestRefusedTokenStops(t *testing.T) {
	d := dt.New(t)
	h := sdktest.Native(t, sdktest.Options{
		Profiles:    map[string]any{"main": map[string]any{"bot_token": "revoked", "api_base": d.APIURL(), "gateway_url": d.GatewayURL()}},
		EgressAlias: map[string]string{d.RESTAddr(): "discord.com", d.GatewayAddr(): "gateway.discord.gg"},
	})
	var status *abi.ProfileStatus
	pollFor(t, h, "stopped", func([]abi.InboundEvent) bool {
		res, err := h.Poll("main", 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		status = res.Status
		return status != nil && status.State == abi.StatusStopped
	})
	before := len(d.Identifies())
	for range 3 {
		h.Poll("main", 100*time.Millisecond)
	}
	if len(d.Identifies()) != before {
		t.Fatalf("identified again after 4004: %d", len(d.Identifies())-before)
	}
	t.Log(status.Message)
}

// A thread the plugin did not hear created is looked up (GET /channels/{id}, once, then cached);
// one listed in GUILD_CREATE needs no lookup. Either way its messages are keyed as the parent
// channel and the thread.
func TestThreadLookup(t *testing.T) {
	const general, quiet, listed = "5000000000000000001", "5000000000000000002", "5000000000000000003"
	d := dt.New(t)
	d.AddChannel(d.Guild(), general, "general")
	h := nativeHost(t, d, sdktest.Options{})
	pollFor(t, h, "connected", func([]abi.InboundEvent) bool { return d.Delivered() })
	lookups := func(id string) int { return len(d.Requests("GET /channels/" + id)) }

	d.AddThreadUnannounced(general, quiet, "quiet")
	for _, text := range []string{"first", "second"} {
		m := d.Mention(quiet, dt.Ann, text)
		evs := pollFor(t, h, "the mention in the unannounced thread", func(evs []abi.InboundEvent) bool { return len(evs) > 0 })
		if src := evs[0].Source; evs[0].ID != "msg:"+m.ID || src.ChatID != general || src.ThreadID != quiet {
			t.Fatalf("event %+v: want chat %s thread %s", evs[0], general, quiet)
		}
	}
	if n := lookups(quiet); n != 1 {
		t.Fatalf("%d lookups of the unannounced thread, want 1 (then the cache)", n)
	}

	d.AddThreadUnannounced(general, listed, "listed")
	d.InvalidSession(false) // the next session's GUILD_CREATE lists the thread
	pollFor(t, h, "a new session", func([]abi.InboundEvent) bool { return len(d.Identifies()) == 2 && d.Delivered() })
	m := d.Mention(listed, dt.Bob, "third")
	evs := pollFor(t, h, "the mention in the listed thread", func(evs []abi.InboundEvent) bool { return len(evs) > 0 })
	if src := evs[0].Source; evs[0].ID != "msg:"+m.ID || src.ChatID != general || src.ThreadID != listed || lookups(listed) != 0 {
		t.Fatalf("event %+v after %d lookups: want chat %s thread %s from GUILD_CREATE", evs[0], lookups(listed), general, listed)
	}
}
