package matrix

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	mt "github.com/hermes-host/hermes-host/conformance/matrixtest"
)

// --- polling ---

// checkHistory: what was said before the profile's first sync is history, not answered; what
// is said after it is.
func (s *suite) checkHistory() (string, error) {
	hs := s.hs[profPoll]
	room := hs.CreateRoom("History", ann, bob)
	old := room.Say(ann, mt.Message{Body: "said before the bot started"})
	if err := s.settle(profPoll); err != nil {
		return "", err
	}
	if n := s.record.times(old.ID); n != 0 {
		return "", fmt.Errorf("a message from before the first sync was dispatched %d times: history must not start turns", n)
	}
	fresh := room.Say(ann, mt.Message{Body: "said after the start"})
	if err := s.pollUntil(profPoll, fresh.ID); err != nil {
		return "", err
	}
	return "initial sync learnt the room; the next message recorded", nil
}

// checkSinceAfterRecord: when the host cannot record the events (dispatch fails), the since
// token stays: the next sync asks from the same token and the events come again, once recorded.
func (s *suite) checkSinceAfterRecord() (string, error) {
	hs := s.hs[profPoll]
	room := hs.CreateRoom("Record", ann, bob)
	if err := s.settle(profPoll); err != nil {
		return "", err
	}
	before := len(hs.Requests(mt.EndpointSync))
	ev := room.Say(ann, mt.Message{Body: "record me"})
	s.record.failNext(1)
	if _, err := s.poll(profPoll); err != nil {
		return "", err
	}
	if n := s.record.times(ev.ID); n != 0 {
		return "", errors.New("the failing dispatch recorded the event")
	}
	if err := s.pollUntil(profPoll, ev.ID); err != nil {
		return "", fmt.Errorf("after the host failed to record: %w (the since token advanced past an event the host never recorded)", err)
	}
	syncs := hs.Requests(mt.EndpointSync)[before:]
	if len(syncs) < 2 || syncs[1].Since != syncs[0].Since {
		return "", fmt.Errorf("the sync after the failed dispatch asked since %q, the failed one since %q: want the same token", since(syncs, 1), since(syncs, 0))
	}
	return "the failed batch came again from the same since token", nil
}

func since(rs []mt.Request, i int) string {
	if i < len(rs) {
		return rs[i].Since
	}
	return "(none)"
}

// checkRestart: the adapter is reloaded over the same kv store: what was said while it was down
// comes once, and nothing recorded before comes again.
func (s *suite) checkRestart() (string, error) {
	hs := s.hs[profPoll]
	room := hs.CreateRoom("Restart", ann, bob)
	if err := s.settle(profPoll); err != nil {
		return "", err
	}
	first := room.Say(ann, mt.Message{Body: "before the restart"})
	if err := s.pollUntil(profPoll, first.ID); err != nil {
		return "", err
	}
	s.p.Close()
	s.p = nil
	down := room.Say(ann, mt.Message{Body: "while the bot was down"})
	if _, err := s.load(); err != nil {
		return "", fmt.Errorf("reload: %w", err)
	}
	if err := s.pollUntil(profPoll, down.ID); err != nil {
		return "", fmt.Errorf("after the restart: %w (the since token was lost?)", err)
	}
	if _, err := s.poll(profPoll); err != nil {
		return "", err
	}
	if n := s.record.times(first.ID); n != 1 {
		return "", fmt.Errorf("the message recorded before the restart was dispatched %d times (replayed)", n)
	}
	return "since token kept in the kv store", nil
}

// checkGap: the homeserver cuts a busy room's timeline to 3 events (limited: true); the adapter
// fills the gap from /messages and every message is recorded, in order.
func (s *suite) checkGap() (string, error) {
	hs := s.hs[profPoll]
	room := hs.CreateRoom("Busy", ann, bob)
	if err := s.settle(profPoll); err != nil {
		return "", err
	}
	hs.SetTimelineLimit(3)
	defer hs.SetTimelineLimit(mt.DefaultTimelineLimit)
	var ids []string
	for i := 1; i <= 8; i++ {
		ids = append(ids, room.Say(ann, mt.Message{Body: fmt.Sprintf("burst %d", i)}).ID)
	}
	if err := s.pollUntil(profPoll, ids...); err != nil {
		return "", fmt.Errorf("a limited timeline: %w", err)
	}
	var order []string
	s.record.mu.Lock()
	for _, e := range s.record.events {
		if strings.HasPrefix(e.Text, "burst ") {
			order = append(order, e.ID)
		}
	}
	s.record.mu.Unlock()
	if strings.Join(order, ",") != strings.Join(ids, ",") {
		return "", fmt.Errorf("recorded in order %v, want %v", order, ids)
	}
	return "8 messages through a 3-event timeline, in order", nil
}

// checkInvite: an invitation to an unencrypted room is accepted, and what was said there before
// the bot joined is history; an invitation to an encrypted room is not accepted.
func (s *suite) checkInvite() (string, error) {
	hs := s.hs[profPoll]
	if err := s.settle(profPoll); err != nil {
		return "", err
	}
	plain := hs.CreateInvite("Invited", ann, false)
	before := plain.Say(ann, mt.Message{Body: "Hermes: said before the bot joined", Mentions: []string{mt.DefaultBotUserID}})
	secret := hs.CreateInvite("Secret invite", ann, true)
	for i := 0; i < maxPolls && plain.Membership(mt.DefaultBotUserID) != "join"; i++ {
		if _, err := s.poll(profPoll); err != nil {
			return "", err
		}
	}
	if plain.Membership(mt.DefaultBotUserID) != "join" {
		return "", errors.New("the invitation to an unencrypted room was never accepted")
	}
	after := plain.Say(ann, mt.Message{Body: "Hermes: now you are here", Mentions: []string{mt.DefaultBotUserID}})
	if err := s.pollUntil(profPoll, after.ID); err != nil {
		return "", err
	}
	switch {
	case s.record.times(before.ID) != 0:
		return "", errors.New("a message from before the bot joined was dispatched: history must not start turns")
	case secret.Membership(mt.DefaultBotUserID) == "join":
		return "", errors.New("joined an end-to-end encrypted room, which it cannot read")
	}
	return "joined the plain room, not the encrypted one; history before the join skipped", nil
}

// checkExpiredToken: a token the homeserver no longer knows (M_UNKNOWN_TOKEN) stops the profile
// with a back-off, as a typed result, not an error.
func (s *suite) checkExpiredToken() (string, error) {
	hs := s.hs[profPoll]
	hs.ExpireToken(mt.DefaultBotToken)
	defer hs.RestoreToken(mt.DefaultBotToken)
	res, err := s.p.Poll(s.ctx, profPoll, pollWait)
	switch {
	case err != nil:
		return "", fmt.Errorf("poll failed as a call (a crash counts against the breaker): %w", err)
	case res.Status == nil || res.Status.State != abi.StatusStopped:
		return "", fmt.Errorf("status %+v, want stopped: the operator must log the bot in again", res.Status)
	case res.BackoffMs < 10_000:
		return "", fmt.Errorf("backoff_ms %d: a rejected token must not be hammered", res.BackoffMs)
	}
	return fmt.Sprintf("stopped (%s), backoff_ms %d", res.Status.Message, res.BackoffMs), nil
}

// --- inbound ---

// checkInbound: group rooms and DMs, threads as sessions, mentions by m.mentions and by body.
func (s *suite) checkInbound() (string, error) {
	hs := s.hs[profInbound]
	group := hs.CreateRoom("Ops", ann, bob)
	dm := hs.CreateRoom("", ann)
	if err := s.settle(profInbound); err != nil {
		return "", err
	}
	chatter := group.Say(bob, mt.Message{Body: "just chatting", NoMentions: true})
	mention := group.Say(ann, mt.Message{Body: "Hermes: help", Mentions: []string{mt.DefaultBotUserID}})
	inThread := group.Say(ann, mt.Message{Body: "and in the thread", Thread: mention.ID, Fallback: mention.ID, NoMentions: true})
	legacy := group.Say(bob, mt.Message{Body: "hey Hermes, status?"}) // no m.mentions: the body decides
	other := group.Say(bob, mt.Message{Body: "Hermes is a god", Mentions: []string{ann}})
	direct := dm.Say(ann, mt.Message{Body: "hello there"})
	ids := []string{chatter.ID, mention.ID, inThread.ID, legacy.ID, other.ID, direct.ID}
	if err := s.pollUntil(profInbound, ids...); err != nil {
		return "", err
	}
	want := []struct {
		id, what, kind, chatType, thread string
		mentioned                        bool
	}{
		{chatter.ID, "unmentioned chatter", abi.EventObserve, abi.ChatGroup, "", false},
		{mention.ID, "a top-level mention", abi.EventMessage, abi.ChatGroup, mention.ID, true},
		{inThread.ID, "a message in the mention's thread", abi.EventMessage, abi.ChatGroup, mention.ID, false},
		{legacy.ID, "a body mention without m.mentions", abi.EventMessage, abi.ChatGroup, legacy.ID, true},
		{other.ID, "the name in the body with m.mentions naming someone else", abi.EventObserve, abi.ChatGroup, "", false},
		{direct.ID, "a DM", abi.EventMessage, abi.ChatDM, "", false},
	}
	var errs []error
	for _, w := range want {
		e, _ := s.record.byID(w.id)
		kind := e.Kind
		if kind == "" {
			kind = abi.EventMessage
		}
		switch {
		case kind != w.kind:
			errs = append(errs, fmt.Errorf("%s: kind %q, want %q", w.what, kind, w.kind))
		case e.Source.ChatType != w.chatType:
			errs = append(errs, fmt.Errorf("%s: chat_type %q, want %q", w.what, e.Source.ChatType, w.chatType))
		case w.kind == abi.EventMessage && e.Source.ThreadID != w.thread:
			errs = append(errs, fmt.Errorf("%s: thread_id %q, want %q", w.what, e.Source.ThreadID, w.thread))
		case e.Mentioned != w.mentioned:
			errs = append(errs, fmt.Errorf("%s: mentioned %v, want %v", w.what, e.Mentioned, w.mentioned))
		case e.Source.UserID == "" || e.Source.ChatID == "" || e.Source.MessageID != w.id:
			errs = append(errs, fmt.Errorf("%s: source %+v lacks user_id, chat_id or message_id", w.what, e.Source))
		}
	}
	return "observe, mention → thread session, thread follow, body fallback, DM", errors.Join(errs...)
}

// checkReplyToBot: a reply to one of the bot's messages, without a mention, addresses it.
func (s *suite) checkReplyToBot() (string, error) {
	hs := s.hs[profInbound]
	room := hs.CreateRoom("Replies", ann, bob)
	if err := s.settle(profInbound); err != nil {
		return "", err
	}
	res, err := s.p.Send(s.ctx, profInbound, abi.OutboundMessage{ChatID: room.ID, Text: "I said something", DeliveryID: "dlv_reply_1"})
	if err != nil || res.Error != nil || len(res.MessageIDs) != 1 {
		return "", fmt.Errorf("send: %+v %v", res, err)
	}
	if _, err := s.poll(profInbound); err != nil { // the bot's own echo
		return "", err
	}
	reply := room.Say(bob, mt.Message{Body: "what do you mean?", ReplyTo: res.MessageIDs[0], NoMentions: true})
	if err := s.pollUntil(profInbound, reply.ID); err != nil {
		return "", err
	}
	e, _ := s.record.byID(reply.ID)
	if k := e.Kind; k != "" && k != abi.EventMessage || !e.Mentioned && e.Addressed == "" {
		return "", fmt.Errorf("a reply to the bot is %q, mentioned %v, addressed %q: want a message addressed to it", e.Kind, e.Mentioned, e.Addressed)
	}
	return "addressed " + e.Addressed, nil
}

// checkOwn: the bot's own messages come back in the sync and are never events.
func (s *suite) checkOwn() (string, error) {
	hs := s.hs[profInbound]
	room := hs.CreateRoom("Own", ann, bob)
	if err := s.settle(profInbound); err != nil {
		return "", err
	}
	res, err := s.p.Send(s.ctx, profInbound, abi.OutboundMessage{ChatID: room.ID, Text: "Hermes: talking to myself", DeliveryID: "dlv_own_1"})
	if err != nil || res.Error != nil || len(res.MessageIDs) != 1 {
		return "", fmt.Errorf("send: %+v %v", res, err)
	}
	after := room.Say(ann, mt.Message{Body: "next", NoMentions: true})
	if err := s.pollUntil(profInbound, after.ID); err != nil {
		return "", err
	}
	if n := s.record.times(res.MessageIDs[0]); n != 0 {
		return "", fmt.Errorf("the bot's own message was dispatched %d times", n)
	}
	return "skipped", nil
}

// --- sending ---

func (s *suite) send(msg abi.OutboundMessage) (*abi.SendResult, error) {
	return s.p.Send(s.ctx, profSend, msg)
}

func (s *suite) sendRoom(name string) *mt.Room { return s.hs[profSend].CreateRoom(name, ann, bob) }

// checkSendThread: a message for a thread carries the m.thread relation to its root.
func (s *suite) checkSendThread() (string, error) {
	room := s.sendRoom("Thread")
	root := room.Say(ann, mt.Message{Body: "Hermes: root", Mentions: []string{mt.DefaultBotUserID}})
	res, err := s.send(abi.OutboundMessage{ChatID: room.ID, ChatType: abi.ChatGroup, ThreadID: root.ID, Text: "in the thread", DeliveryID: "dlv_thread_1"})
	if err != nil || res.Error != nil {
		return "", fmt.Errorf("send: %+v %v", res, err)
	}
	if got := room.Posted(root.ID); len(got) != 1 || got[0] != "in the thread" {
		return "", fmt.Errorf("thread %s holds %q, main timeline %q", root.ID, got, room.Posted(""))
	}
	if len(res.MessageIDs) != 1 || !strings.HasPrefix(res.MessageIDs[0], "$") {
		return "", fmt.Errorf("message ids %v, want the event id", res.MessageIDs)
	}
	return "m.thread relation, event id " + res.MessageIDs[0], nil
}

// checkNoPing: whatever the text says (@room, a user's MXID), a sent message pings nobody.
func (s *suite) checkNoPing() (string, error) {
	room := s.sendRoom("Pings")
	text := "build log: @room deploy done, cc " + ann + " and @Ann"
	res, err := s.send(abi.OutboundMessage{ChatID: room.ID, Text: text, DeliveryID: "dlv_ping_1"})
	if err != nil || res.Error != nil {
		return "", fmt.Errorf("send: %+v %v", res, err)
	}
	msgs := room.BotMessages()
	if len(msgs) != 1 {
		return "", fmt.Errorf("%d messages posted", len(msgs))
	}
	if pings := s.hs[profSend].Pings(msgs[0]); len(pings) > 0 {
		return "", fmt.Errorf("the message pings %v: send \"m.mentions\": {} so process output never notifies @room or a user", pings)
	}
	if msgs[0].Body() != text {
		return "", fmt.Errorf("body %q, want the text unchanged", msgs[0].Body())
	}
	return "m.mentions {}: @room and MXIDs in the text ping nobody", nil
}

// checkTxn: the transaction id comes from the delivery id: a resend of one delivery (the host's
// retry) repeats it and the homeserver posts once; another delivery gets another.
func (s *suite) checkTxn() (string, error) {
	room := s.sendRoom("Txn")
	hs := s.hs[profSend]
	before := len(hs.Requests(mt.EndpointSend))
	msg := abi.OutboundMessage{ChatID: room.ID, Text: "exactly once", DeliveryID: "dlv_txn_1"}
	a, err := s.send(msg)
	if err != nil || a.Error != nil {
		return "", fmt.Errorf("send: %+v %v", a, err)
	}
	b, err := s.send(msg)
	if err != nil || b.Error != nil {
		return "", fmt.Errorf("resend: %+v %v", b, err)
	}
	c, err := s.send(abi.OutboundMessage{ChatID: room.ID, Text: "exactly once", DeliveryID: "dlv_txn_2"})
	if err != nil || c.Error != nil {
		return "", fmt.Errorf("another delivery: %+v %v", c, err)
	}
	reqs := hs.Requests(mt.EndpointSend)[before:]
	if len(reqs) != 3 {
		return "", fmt.Errorf("%d send requests, want 3", len(reqs))
	}
	switch {
	case reqs[0].Txn != reqs[1].Txn:
		return "", fmt.Errorf("one delivery sent with txn ids %q and %q: a retry must repeat the transaction id", reqs[0].Txn, reqs[1].Txn)
	case reqs[2].Txn == reqs[0].Txn:
		return "", fmt.Errorf("two deliveries share txn id %q: the second is swallowed by the homeserver", reqs[0].Txn)
	case len(room.BotMessages()) != 2:
		return "", fmt.Errorf("%d messages posted, want 2", len(room.BotMessages()))
	case len(a.MessageIDs) != 1 || len(b.MessageIDs) != 1 || a.MessageIDs[0] != b.MessageIDs[0]:
		return "", fmt.Errorf("the resend answered %v, the first %v: want the same event", b.MessageIDs, a.MessageIDs)
	}
	return "txn " + reqs[0].Txn + " repeated, deduplicated by the homeserver", nil
}

// checkLostAnswer: the message is posted, then the answer is lost (a 502 from the proxy, a
// reset, a body cut short). The adapter answers retryable (its transaction id makes the retry
// safe) or uncertain (never resent); the suite then plays the host: a retryable failure is sent
// again with the same delivery id. The room holds the message once either way. Without a
// delivery id (an older host) the answer must be uncertain.
func (s *suite) checkLostAnswer() (string, error) {
	hs := s.hs[profSend]
	room := s.sendRoom("Lost")
	cases := []struct {
		name  string
		fault mt.Fault
	}{
		{"HTML 502 after the effect", mt.AfterEffect(mt.ServerError(502))},
		{"JSON 500 after the effect", mt.AfterEffect(mt.Error(500, "M_UNKNOWN"))},
		{"connection reset after the effect", mt.AfterEffect(mt.ConnectionReset())},
		{"body cut short after the effect", mt.AfterEffect(mt.Truncated())},
	}
	var errs []error
	kinds := map[string]int{}
	for i, c := range cases {
		text := "lost: " + c.name
		msg := abi.OutboundMessage{ChatID: room.ID, Text: text, DeliveryID: fmt.Sprintf("dlv_lost_%d", i)}
		hs.InjectFault(mt.EndpointSend, c.fault.ForRoom(room.ID))
		res, err := s.send(msg)
		for try := 0; err == nil && res.Error != nil && res.Error.Kind == abi.SendRetryable && try < 3; try++ {
			res, err = s.send(msg) // the host's retry: the same delivery id
		}
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: send failed as a call: %w", c.name, err))
			continue
		case res.Error != nil && res.Error.Kind != abi.SendUncertain:
			errs = append(errs, fmt.Errorf("%s: finally %s %s", c.name, res.Error.Kind, res.Error.Code))
		case res.Error != nil:
			kinds["uncertain"]++
		default:
			kinds["delivered on retry"]++
		}
		if n := count(room.Posted(""), text); n != 1 {
			errs = append(errs, fmt.Errorf("%s: posted %d times", c.name, n))
		}
	}
	// No delivery id: nothing makes a resend safe.
	hs.InjectFault(mt.EndpointSend, mt.AfterEffect(mt.ServerError(502)).ForRoom(room.ID))
	res, err := s.send(abi.OutboundMessage{ChatID: room.ID, Text: "lost without a delivery id"})
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("without a delivery id: %w", err))
	case res.Error == nil || res.Error.Kind != abi.SendUncertain:
		errs = append(errs, fmt.Errorf("without a delivery id a 502 after the effect answered %+v, want uncertain: the host's resend would carry a new transaction id", res.Error))
	}
	return fmt.Sprintf("each posted once (%v); without a delivery id uncertain", kinds), errors.Join(errs...)
}

func count(texts []string, text string) int {
	n := 0
	for _, t := range texts {
		if t == text {
			n++
		}
	}
	return n
}

// checkRateLimit: 429 M_LIMIT_EXCEEDED is retryable after retry_after_ms; send does not retry.
func (s *suite) checkRateLimit() (string, error) {
	hs := s.hs[profSend]
	room := s.sendRoom("Limit")
	hs.InjectFault(mt.EndpointSend, mt.LimitExceeded(2500).ForRoom(room.ID))
	before := len(hs.Requests(mt.EndpointSend))
	res, err := s.send(abi.OutboundMessage{ChatID: room.ID, Text: "limited", DeliveryID: "dlv_limit_1"})
	switch {
	case err != nil:
		return "", err
	case res.Error == nil:
		return "", errors.New("a 429 was reported delivered")
	case res.Error.Kind != abi.SendRetryable || res.Error.RetryAfterMs != 2500:
		return "", fmt.Errorf("429 mapped to %s retry_after_ms %d, want retryable 2500", res.Error.Kind, res.Error.RetryAfterMs)
	}
	if n := len(hs.Requests(mt.EndpointSend)) - before; n != 1 {
		return "", fmt.Errorf("%d requests: send must not retry or sleep (the host does)", n)
	}
	return "retryable, retry_after_ms 2500, 1 request", nil
}

// checkRefusals: not in the room (403 M_FORBIDDEN) and a rejected token are permanent, with
// the errcode, and the token never appears in a message.
func (s *suite) checkRefusals() (string, error) {
	hs := s.hs[profSend]
	room := s.sendRoom("Refusals")
	var errs []error
	for _, c := range []struct {
		name string
		msg  abi.OutboundMessage
		prep func()
		code string
	}{
		{"not in the room", abi.OutboundMessage{ChatID: "!nowhere:hermes.test", Text: "hello?", DeliveryID: "dlv_ref_1"}, func() {}, "M_FORBIDDEN"},
		{"token rejected", abi.OutboundMessage{ChatID: room.ID, Text: "hello?", DeliveryID: "dlv_ref_2"},
			func() { hs.ExpireToken(mt.DefaultBotToken) }, "M_UNKNOWN_TOKEN"},
	} {
		c.prep()
		res, err := s.send(c.msg)
		hs.RestoreToken(mt.DefaultBotToken)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		case res.Error == nil:
			errs = append(errs, fmt.Errorf("%s: reported delivered", c.name))
		case res.Error.Kind != abi.SendPermanent || !strings.Contains(res.Error.Code+res.Error.Message, c.code):
			errs = append(errs, fmt.Errorf("%s: %s %s %q, want permanent naming %s", c.name, res.Error.Kind, res.Error.Code, res.Error.Message, c.code))
		case strings.Contains(res.Error.Message, mt.DefaultBotToken):
			errs = append(errs, fmt.Errorf("%s: the access token leaked into the error message", c.name))
		}
	}
	return "permanent with the errcode", errors.Join(errs...)
}

// callTimeout is the call deadline the suite's runtime enforces.
func (s *suite) callTimeout() time.Duration {
	if s.opts.CallTimeout > 0 {
		return s.opts.CallTimeout
	}
	return 10 * time.Second
}

// checkSlow: an answer that comes 2 s after the call deadline (the message is posted at once)
// is a typed result, not a deadline crash; the host's retry with the same delivery id posts
// nothing more.
func (s *suite) checkSlow() (string, error) {
	hs := s.hs[profSend]
	room := s.sendRoom("Slow")
	hs.InjectFault(mt.EndpointSend, mt.Slow(s.callTimeout()+2*time.Second).ForRoom(room.ID))
	msg := abi.OutboundMessage{ChatID: room.ID, Text: "slow answer", DeliveryID: "dlv_slow_1"}
	start := time.Now()
	res, err := s.send(msg)
	took := time.Since(start).Round(100 * time.Millisecond)
	switch {
	case err != nil:
		return "", fmt.Errorf("send answered late failed as a call (a crash counts against the breaker): %w", err)
	case !s.p.Active():
		return "", errors.New("the plugin is no longer active")
	case res.Error == nil:
		return "", fmt.Errorf("reported delivered after %v although no answer came", took)
	case res.Error.Kind == abi.SendPermanent:
		return "", fmt.Errorf("permanent after %v: the message was posted", took)
	}
	kind := res.Error.Kind
	if kind == abi.SendRetryable {
		if res, err = s.send(msg); err != nil || res.Error != nil {
			return "", fmt.Errorf("the retry: %+v %v", res, err)
		}
	}
	if n := count(room.Posted(""), "slow answer"); n != 1 {
		return "", fmt.Errorf("posted %d times", n)
	}
	return fmt.Sprintf("%s after %v (deadline %v), posted once", kind, took, s.callTimeout()), nil
}

// checkEdit: an edit is an m.replace event whose m.new_content holds the text, and pings nobody.
func (s *suite) checkEdit() (string, error) {
	room := s.sendRoom("Edit")
	res, err := s.send(abi.OutboundMessage{ChatID: room.ID, Text: "draft", DeliveryID: "dlv_edit_1"})
	if err != nil || res.Error != nil || len(res.MessageIDs) != 1 {
		return "", fmt.Errorf("send: %+v %v", res, err)
	}
	id := res.MessageIDs[0]
	ed, err := s.send(abi.OutboundMessage{ChatID: room.ID, Text: "final @room", EditMessageID: id})
	if err != nil || ed.Error != nil {
		return "", fmt.Errorf("edit: %+v %v", ed, err)
	}
	msgs := room.BotMessages()
	last := msgs[len(msgs)-1]
	rel, _ := last.Content["m.relates_to"].(map[string]any)
	nc, _ := last.Content["m.new_content"].(map[string]any)
	switch {
	case len(msgs) != 2 || rel["rel_type"] != "m.replace" || rel["event_id"] != id:
		return "", fmt.Errorf("the edit is %v", last.Content)
	case nc["body"] != "final @room":
		return "", fmt.Errorf("m.new_content %v", nc)
	case len(s.hs[profSend].Pings(last)) > 0:
		return "", fmt.Errorf("the edit pings %v", s.hs[profSend].Pings(last))
	}
	return "m.replace with m.new_content", nil
}

// checkEncrypted: in a room that turned on end-to-end encryption, sends are refused
// (permanent) and the room gets one notice, however many sends come.
func (s *suite) checkEncrypted() (string, error) {
	hs := s.hs[profSend]
	room := s.sendRoom("Secret")
	if err := s.settle(profSend); err != nil {
		return "", err
	}
	room.Encrypt(ann)
	if _, err := s.poll(profSend); err != nil { // the adapter learns the room's state
		return "", err
	}
	var errs []error
	for i := 1; i <= 3; i++ {
		res, err := s.send(abi.OutboundMessage{ChatID: room.ID, Text: "process output", DeliveryID: fmt.Sprintf("dlv_e2e_%d", i)})
		switch {
		case err != nil:
			errs = append(errs, err)
		case res.Error == nil || res.Error.Kind != abi.SendPermanent:
			errs = append(errs, fmt.Errorf("send %d into an encrypted room: %+v, want permanent", i, res))
		}
	}
	msgs := room.BotMessages()
	if len(msgs) != 1 {
		errs = append(errs, fmt.Errorf("%d messages in the encrypted room, want one notice", len(msgs)))
	} else if count(room.Posted(""), "process output") != 0 {
		errs = append(errs, errors.New("the plaintext message was posted into the encrypted room"))
	}
	_ = hs
	return "refused, one notice", errors.Join(errs...)
}
