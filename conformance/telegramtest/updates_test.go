package telegramtest

import (
	"slices"
	"testing"
	"time"
)

func TestOffsetConfirmation(t *testing.T) {
	s := New(t)
	b := s.Bot()
	u1, u2, u3 := b.PrivateText(ada, "1"), b.PrivateText(ada, "2"), b.PrivateText(ada, "3")
	if u2.UpdateID != u1.UpdateID+1 || u3.UpdateID != u2.UpdateID+1 {
		t.Fatalf("update ids not sequential: %d %d %d", u1.UpdateID, u2.UpdateID, u3.UpdateID)
	}
	// Without an offset, unconfirmed updates come back again.
	for range 2 {
		if got := ids(updates(t, api(t, s, DefaultToken, "getUpdates", nil))); !slices.Equal(got, []int64{u1.UpdateID, u2.UpdateID, u3.UpdateID}) {
			t.Fatalf("got %v", got)
		}
	}
	// limit
	if got := ids(updates(t, api(t, s, DefaultToken, "getUpdates", map[string]any{"limit": 2}))); len(got) != 2 {
		t.Fatalf("limit 2: %v", got)
	}
	// offset = id+1 confirms everything before it.
	got := ids(updates(t, api(t, s, DefaultToken, "getUpdates", map[string]any{"offset": u2.UpdateID})))
	if !slices.Equal(got, []int64{u2.UpdateID, u3.UpdateID}) || b.Confirmed() != u1.UpdateID {
		t.Fatalf("offset: %v, confirmed %d", got, b.Confirmed())
	}
	// Confirmed updates are gone even without an offset.
	if got := ids(updates(t, api(t, s, DefaultToken, "getUpdates", nil))); got[0] != u2.UpdateID {
		t.Fatalf("after confirm: %v", got)
	}
	// A negative offset keeps only the last -offset updates.
	b.PrivateText(ada, "4")
	got = ids(updates(t, api(t, s, DefaultToken, "getUpdates", map[string]any{"offset": -1})))
	if len(got) != 1 || got[0] != u3.UpdateID+1 || len(b.Pending()) != 1 {
		t.Fatalf("negative offset: %v, pending %v", got, b.Pending())
	}
	// Offset past everything confirms all.
	if got := updates(t, api(t, s, DefaultToken, "getUpdates", map[string]any{"offset": u3.UpdateID + 2})); len(got) != 0 {
		t.Fatalf("got %v", got)
	}
	if b.Confirmed() != u3.UpdateID+1 {
		t.Fatalf("confirmed %d", b.Confirmed())
	}
	if err := b.WaitConfirmed(u3.UpdateID+1, wait); err != nil {
		t.Fatal(err)
	}
}

func TestLongPollWakesOnInject(t *testing.T) {
	s := New(t) // real seconds: a 30 s poll must be woken, not timed out
	b := s.Bot()
	start := time.Now()
	done := async(s, DefaultToken, "getUpdates", map[string]any{"timeout": 30})
	if err := b.WaitPolling(wait); err != nil {
		t.Fatal(err)
	}
	u := b.PrivateText(ada, "wake up")
	select {
	case r := <-done:
		got := updates(t, r)
		if len(got) != 1 || got[0].UpdateID != u.UpdateID || got[0].Message.Text != "wake up" {
			t.Fatalf("got %+v", got)
		}
		if el := time.Since(start); el > 20*time.Second {
			t.Fatalf("long poll not woken: %v", el)
		}
	case <-time.After(wait):
		t.Fatal("long poll did not return after an inject")
	}
	if b.Polling() {
		t.Fatal("poll still parked")
	}
}

func TestLongPollTimesOut(t *testing.T) {
	s := New(t, WithSecond(5*time.Millisecond))
	start := time.Now()
	got := updates(t, api(t, s, DefaultToken, "getUpdates", map[string]any{"timeout": 4}))
	if len(got) != 0 {
		t.Fatalf("got %v", got)
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Fatalf("returned after %v, before the timeout", el)
	}
}

func TestSecondPollerConflict(t *testing.T) {
	s := New(t)
	b := s.Bot()
	first := async(s, DefaultToken, "getUpdates", map[string]any{"timeout": 30})
	if err := b.WaitPolling(wait); err != nil {
		t.Fatal(err)
	}
	second := async(s, DefaultToken, "getUpdates", map[string]any{"timeout": 30})
	// The earlier request is the one terminated.
	select {
	case r := <-first:
		mustFail(t, r, 409, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running")
	case <-time.After(wait):
		t.Fatal("first poller not terminated")
	}
	if err := b.WaitPolling(wait); err != nil {
		t.Fatal(err)
	}
	b.PrivateText(ada, "for the survivor")
	select {
	case r := <-second:
		if got := updates(t, r); len(got) != 1 {
			t.Fatalf("second got %v", got)
		}
	case <-time.After(wait):
		t.Fatal("second poller not woken")
	}
}

func TestGetUpdatesWhileWebhookSet(t *testing.T) {
	s := New(t)
	b := s.Bot()
	parked := async(s, DefaultToken, "getUpdates", map[string]any{"timeout": 30})
	if err := b.WaitPolling(wait); err != nil {
		t.Fatal(err)
	}
	mustOK(t, api(t, s, DefaultToken, "setWebhook", map[string]any{"url": "http://127.0.0.1:1/hook"}), nil)
	const desc = "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"
	select {
	case r := <-parked:
		mustFail(t, r, 409, desc)
	case <-time.After(wait):
		t.Fatal("parked poll not ended by setWebhook")
	}
	mustFail(t, api(t, s, DefaultToken, "getUpdates", nil), 409, desc)
	r := api(t, s, DefaultToken, "deleteWebhook", nil)
	mustOK(t, r, nil)
	if r.Description != "Webhook was deleted" {
		t.Fatalf("deleteWebhook: %s", r.Raw)
	}
	mustOK(t, api(t, s, DefaultToken, "getUpdates", nil), nil)
}

func TestAllowedUpdates(t *testing.T) {
	s := New(t)
	b := s.Bot()
	m := b.PrivateText(ada, "original")
	b.EditText(ada.ID, m.Message.MessageID, "edited")
	got := updates(t, api(t, s, DefaultToken, "getUpdates", map[string]any{"allowed_updates": []string{"edited_message"}}))
	if len(got) != 1 || got[0].EditedMessage == nil || got[0].EditedMessage.Text != "edited" || got[0].EditedMessage.EditDate == 0 {
		t.Fatalf("got %+v", got)
	}
}

func TestCloseEndsParkedPoll(t *testing.T) {
	s := New(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Client().Post(s.BotURL(DefaultToken)+"/getUpdates?timeout=60", "", nil)
	}()
	if err := s.Bot().WaitPolling(wait); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	for _, ch := range []chan struct{}{done, closed} {
		select {
		case <-ch:
		case <-time.After(wait):
			t.Fatal("Close did not end a parked long poll")
		}
	}
}

// Parked polls of two bots must not wake each other in a loop.
func TestParkedPollsDoNotSpin(t *testing.T) {
	const work = "987654321:work-profile-token"
	s := New(t, WithBot(work, "work_bot"))
	for _, tok := range []string{DefaultToken, work} {
		async(s, tok, "getUpdates", map[string]any{"timeout": 30})
	}
	for _, tok := range []string{DefaultToken, work} {
		if err := s.BotByToken(tok).WaitPolling(wait); err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	before := s.changes
	s.mu.Unlock()
	s.AddGroup(groupID, "wake everyone once")
	s.Wait(100*time.Millisecond, func() bool { return false })
	s.mu.Lock()
	after := s.changes
	s.mu.Unlock()
	if after-before > 5 {
		t.Fatalf("%d state changes after one event: parked polls are spinning", after-before)
	}
}
