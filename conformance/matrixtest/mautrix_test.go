package matrixtest

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// The fake is checked against mautrix-go, a client written against real homeservers: what it
// decodes from the fake's answers is what a real client sees.

func client(t *testing.T, s *Server, user, token string) *mautrix.Client {
	t.Helper()
	c, err := mautrix.NewClient(s.URL(), id.UserID(user), token)
	if err != nil {
		t.Fatal(err)
	}
	c.Client = s.Client()
	c.DefaultHTTPRetries = 0
	return c
}

func TestMautrixWhoamiSyncReceiveSend(t *testing.T) {
	s := New(t)
	ann := s.AddUser("@ann:hermes.test", "Ann")
	room := s.CreateRoom("Ops", ann)
	bot := client(t, s, DefaultBotUserID, DefaultBotToken)
	ctx := context.Background()

	who, err := bot.Whoami(ctx)
	if err != nil || who.UserID != DefaultBotUserID || who.DeviceID != DefaultDeviceID {
		t.Fatalf("whoami: %+v %v", who, err)
	}
	first, err := bot.SyncRequest(ctx, 0, "", "", false, event.PresenceOnline)
	if err != nil {
		t.Fatal(err)
	}
	joined := first.Rooms.Join[id.RoomID(room.ID)]
	if joined == nil || joined.Summary.JoinedMemberCount == nil || *joined.Summary.JoinedMemberCount != 2 {
		t.Fatalf("initial sync: room %s missing or wrong summary: %+v", room.ID, joined)
	}
	var sawName bool
	for _, e := range append(joined.State.Events, joined.Timeline.Events...) {
		if e.Type == event.StateRoomName {
			sawName = true
		}
	}
	if !sawName {
		t.Fatal("initial sync carries no m.room.name")
	}

	// A long poll returns when ann speaks; mautrix decodes her mention.
	done := make(chan *mautrix.RespSync, 1)
	go func() {
		r, err := bot.SyncRequest(ctx, 20000, first.NextBatch, "", false, event.PresenceOnline)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	if err := s.WaitSyncing(DefaultBotToken, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	said := room.Say(ann, Message{Body: "Hermes: hello", Mentions: []string{DefaultBotUserID}})
	var next *mautrix.RespSync
	select {
	case next = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the long poll did not return on a new message")
	}
	evs := next.Rooms.Join[id.RoomID(room.ID)].Timeline.Events
	if len(evs) != 1 || evs[0].ID != id.EventID(said.ID) || evs[0].Sender != id.UserID(ann) {
		t.Fatalf("timeline: %+v", evs)
	}
	if err := evs[0].Content.ParseRaw(evs[0].Type); err != nil {
		t.Fatal(err)
	}
	msg := evs[0].Content.AsMessage()
	if msg.Body != "Hermes: hello" || msg.Mentions == nil || len(msg.Mentions.UserIDs) != 1 || msg.Mentions.UserIDs[0] != DefaultBotUserID {
		t.Fatalf("content: %+v mentions %+v", msg, msg.Mentions)
	}

	// Send; the same transaction id again is the same event, posted once.
	content := &event.MessageEventContent{MsgType: event.MsgText, Body: "hi ann", Mentions: &event.Mentions{}}
	r1, err := bot.SendMessageEvent(ctx, id.RoomID(room.ID), event.EventMessage, content, mautrix.ReqSendEvent{TransactionID: "hermes-dlv_1"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := bot.SendMessageEvent(ctx, id.RoomID(room.ID), event.EventMessage, content, mautrix.ReqSendEvent{TransactionID: "hermes-dlv_1"})
	if err != nil || r2.EventID != r1.EventID {
		t.Fatalf("retry with the same txn id: %v %v, want %v", r2, err, r1.EventID)
	}
	if got := room.Posted(""); len(got) != 1 || got[0] != "hi ann" {
		t.Fatalf("posted %q, want one message", got)
	}
	reqs := s.Requests(EndpointSend)
	if len(reqs) != 2 || reqs[0].Dedup || !reqs[1].Dedup || reqs[0].Txn != "hermes-dlv_1" {
		t.Fatalf("send requests: %+v", reqs)
	}
	// Another txn id is another message; the sender's own echo carries its transaction id.
	if _, err := bot.SendMessageEvent(ctx, id.RoomID(room.ID), event.EventMessage, content, mautrix.ReqSendEvent{TransactionID: "hermes-dlv_2"}); err != nil {
		t.Fatal(err)
	}
	echo, err := bot.SyncRequest(ctx, 0, next.NextBatch, "", false, event.PresenceOnline)
	if err != nil {
		t.Fatal(err)
	}
	got := echo.Rooms.Join[id.RoomID(room.ID)].Timeline.Events
	if len(got) != 2 || got[0].Unsigned.TransactionID != "hermes-dlv_1" || got[1].Unsigned.TransactionID != "hermes-dlv_2" {
		t.Fatalf("own echo: %+v", got)
	}
	annSees, err := client(t, s, ann, s.TokenOf(ann)).SyncRequest(ctx, 0, next.NextBatch, "", false, event.PresenceOnline)
	if err != nil {
		t.Fatal(err)
	}
	if e := annSees.Rooms.Join[id.RoomID(room.ID)].Timeline.Events; len(e) != 2 || e[0].Unsigned.TransactionID != "" {
		t.Fatalf("another user sees the bot's txn id: %+v", e)
	}
}

// A send whose answer is lost after the effect, retried by mautrix with the same transaction id,
// is one event; so is a retry after a 5xx that followed the effect.
func TestMautrixRetryAfterLostAnswerIsOneEvent(t *testing.T) {
	s := New(t)
	ann := s.AddUser("@ann:hermes.test", "Ann")
	room := s.CreateRoom("Ops", ann)
	bot := client(t, s, DefaultBotUserID, DefaultBotToken)
	ctx := context.Background()
	content := &event.MessageEventContent{MsgType: event.MsgText, Body: "once"}

	s.InjectFault(EndpointSend, AfterEffect(ServerError(502)))
	_, err := bot.SendMessageEvent(ctx, id.RoomID(room.ID), event.EventMessage, content, mautrix.ReqSendEvent{TransactionID: "t1"})
	var he mautrix.HTTPError
	if !errors.As(err, &he) || he.Response == nil || he.Response.StatusCode != http.StatusBadGateway {
		t.Fatalf("first attempt: %v, want a 502", err)
	}
	s.InjectFault(EndpointSend, AfterEffect(ConnectionReset()))
	if _, err := bot.SendMessageEvent(ctx, id.RoomID(room.ID), event.EventMessage, content, mautrix.ReqSendEvent{TransactionID: "t1"}); err == nil {
		t.Fatal("reset answered as a success")
	}
	r, err := bot.SendMessageEvent(ctx, id.RoomID(room.ID), event.EventMessage, content, mautrix.ReqSendEvent{TransactionID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := room.BotMessages(); len(got) != 1 || got[0].ID != string(r.EventID) {
		t.Fatalf("%d events after three attempts with one txn id", len(got))
	}
}

// 429 M_LIMIT_EXCEEDED carries retry_after_ms as mautrix reads it; an expired token is
// M_UNKNOWN_TOKEN; a sync gap is limited with prev_batch, and /messages from prev_batch back to
// the old since token returns exactly the events the gap hid.
func TestMautrixErrorsAndGaps(t *testing.T) {
	s := New(t, WithTimelineLimit(3))
	ann := s.AddUser("@ann:hermes.test", "Ann")
	room := s.CreateRoom("Ops", ann)
	bot := client(t, s, DefaultBotUserID, DefaultBotToken)
	ctx := context.Background()

	s.InjectFault(EndpointSend, LimitExceeded(1500))
	_, err := bot.SendText(ctx, id.RoomID(room.ID), "limited")
	var he mautrix.HTTPError
	if !errors.As(err, &he) || he.RespError == nil || he.RespError.ErrCode != "M_LIMIT_EXCEEDED" ||
		he.RespError.ExtraData["retry_after_ms"] != float64(1500) || he.Response.Header.Get("Retry-After") != "2" {
		t.Fatalf("429: %#v", err)
	}
	if !errors.Is(err, mautrix.MLimitExceeded) {
		t.Fatalf("429 is not mautrix.MLimitExceeded: %v", err)
	}
	if n := len(room.BotMessages()); n != 0 {
		t.Fatalf("a refused send posted %d events", n)
	}

	first, err := bot.SyncRequest(ctx, 0, "", "", false, event.PresenceOnline)
	if err != nil {
		t.Fatal(err)
	}
	var said []*Event
	for _, b := range []string{"one", "two", "three", "four", "five"} {
		said = append(said, room.Say(ann, Message{Body: b}))
	}
	gap, err := bot.SyncRequest(ctx, 0, first.NextBatch, "", false, event.PresenceOnline)
	if err != nil {
		t.Fatal(err)
	}
	tl := gap.Rooms.Join[id.RoomID(room.ID)].Timeline
	if !tl.Limited || len(tl.Events) != 3 || tl.Events[0].ID != id.EventID(said[2].ID) {
		t.Fatalf("gap: limited %v, %d events", tl.Limited, len(tl.Events))
	}
	back, err := bot.Messages(ctx, id.RoomID(room.ID), tl.PrevBatch, first.NextBatch, mautrix.DirectionBackward, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Chunk) != 2 || back.Chunk[0].ID != id.EventID(said[1].ID) || back.Chunk[1].ID != id.EventID(said[0].ID) || back.End != "" {
		t.Fatalf("/messages back to since: %d events, end %q", len(back.Chunk), back.End)
	}

	s.ExpireToken(DefaultBotToken)
	_, err = bot.SyncRequest(ctx, 0, gap.NextBatch, "", false, event.PresenceOnline)
	if !errors.Is(err, mautrix.MUnknownToken) {
		t.Fatalf("expired token: %v, want M_UNKNOWN_TOKEN", err)
	}
}

// A state event that falls into a gap is reported in the room's state section, as Synapse does.
func TestMautrixStateInGap(t *testing.T) {
	s := New(t, WithTimelineLimit(2))
	ann := s.AddUser("@ann:hermes.test", "Ann")
	room := s.CreateRoom("Ops", ann)
	bot := client(t, s, DefaultBotUserID, DefaultBotToken)
	ctx := context.Background()
	first, err := bot.SyncRequest(ctx, 0, "", "", false, event.PresenceOnline)
	if err != nil {
		t.Fatal(err)
	}
	room.Encrypt(ann)
	for _, b := range []string{"a", "b", "c"} {
		room.Say(ann, Message{Body: b})
	}
	gap, err := bot.SyncRequest(ctx, 0, first.NextBatch, "", false, event.PresenceOnline)
	if err != nil {
		t.Fatal(err)
	}
	j := gap.Rooms.Join[id.RoomID(room.ID)]
	if len(j.State.Events) != 1 || j.State.Events[0].Type != event.StateEncryption {
		t.Fatalf("state of the gap: %+v", j.State.Events)
	}
}

// An invitation arrives in rooms.invite with the room's stripped state; joining it with
// mautrix makes the room a joined one; typing is recorded; a held answer goes when released.
func TestMautrixInviteJoinTypingHold(t *testing.T) {
	s := New(t)
	ann := s.AddUser("@ann:hermes.test", "Ann")
	room := s.CreateInvite("Plain", ann, false)
	secret := s.CreateInvite("Secret", ann, true)
	bot := client(t, s, DefaultBotUserID, DefaultBotToken)
	ctx := context.Background()
	first, err := bot.SyncRequest(ctx, 0, "", "", false, event.PresenceOnline)
	if err != nil {
		t.Fatal(err)
	}
	inv := first.Rooms.Invite[id.RoomID(secret.ID)]
	if inv == nil || len(first.Rooms.Invite) != 2 {
		t.Fatalf("invites: %+v", first.Rooms.Invite)
	}
	var enc bool
	for _, e := range inv.State.Events {
		enc = enc || e.Type == event.StateEncryption
	}
	if !enc {
		t.Fatal("the encrypted room's invite state has no m.room.encryption")
	}
	earlier := room.Say(ann, Message{Body: "said before the bot joined"})
	if _, err := bot.JoinRoomByID(ctx, id.RoomID(room.ID)); err != nil {
		t.Fatal(err)
	}
	if room.Membership(DefaultBotUserID) != "join" {
		t.Fatal("not joined")
	}
	next, err := bot.SyncRequest(ctx, 0, first.NextBatch, "", false, event.PresenceOnline)
	if err != nil || next.Rooms.Join[id.RoomID(room.ID)] == nil {
		t.Fatalf("the joined room is not in the next sync: %v", err)
	}
	// Newly joined: the timeline reaches back before the join, as Synapse's does.
	var sawEarlier bool
	for _, e := range next.Rooms.Join[id.RoomID(room.ID)].Timeline.Events {
		sawEarlier = sawEarlier || e.ID == id.EventID(earlier.ID)
	}
	if !sawEarlier {
		t.Fatal("the newly joined room's timeline starts at the join")
	}
	if _, err := bot.UserTyping(ctx, id.RoomID(room.ID), true, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := room.Typing(); len(got) != 1 || !got[0] {
		t.Fatalf("typing: %v", got)
	}

	s.InjectFault(EndpointSend, Hold())
	done := make(chan error, 1)
	go func() {
		_, err := bot.SendText(ctx, id.RoomID(room.ID), "held")
		done <- err
	}()
	// Posted, and its answer held (Release before the hold is counted would release nothing).
	if err := s.Wait(10*time.Second, func() bool { return len(room.BotMessages()) == 1 && s.Held() == 1 }); err != nil {
		t.Fatalf("the held send was not posted first: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("answered before Release: %v", err)
	default:
	}
	s.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
