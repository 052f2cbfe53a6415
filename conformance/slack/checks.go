package slack

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	st "github.com/hermes-host/hermes-host/conformance/slacktest"
)

// --- helpers ---

// recorded returns the events recorded for the message ts (any id), oldest first.
func (s *suite) recorded(ts string) []abi.InboundEvent {
	var out []abi.InboundEvent
	for _, ev := range s.record.got() {
		if ev.Source.MessageID == ts {
			out = append(out, ev)
		}
	}
	return out
}

// settle waits until the fake acknowledged or gave up on every event it queued.
func (s *suite) settle(f *st.Server) error {
	if err := f.WaitSettled(s.opts.Timeout); err != nil {
		return fmt.Errorf("the adapter did not acknowledge the events in time: %w", err)
	}
	return nil
}

// one returns the single event recorded for ts, or says why there is not exactly one.
func (s *suite) one(what, ts string) (abi.InboundEvent, error) {
	evs := s.recorded(ts)
	switch len(evs) {
	case 0:
		return abi.InboundEvent{}, fmt.Errorf("%s: no event", what)
	case 1:
		return evs[0], nil
	}
	var ids []string
	for _, e := range evs {
		ids = append(ids, e.ID)
	}
	return abi.InboundEvent{}, fmt.Errorf("%s: %d events with different ids %v (the host would start %d turns)", what, len(evs), ids, len(evs))
}

func kindOf(e abi.InboundEvent) string {
	if e.Kind == "" {
		return abi.EventMessage
	}
	return e.Kind
}

func (s *suite) send(msg abi.OutboundMessage) (*abi.SendResult, error) {
	if msg.ScopeID == "" {
		msg.ScopeID = st.DefaultTeamID
	}
	res, err := s.p.Send(s.ctx, profEvents, msg)
	if err != nil {
		return nil, fmt.Errorf("send failed at the host (a crash or the call deadline): %w", err)
	}
	return res, nil
}

// --- webhook ---

func (s *suite) checkURLVerification() (string, error) {
	if _, err := s.slack.VerifyURL(); err != nil {
		return "", err
	}
	return "challenge echoed", nil
}

// checkForgeries: each forged or altered request is refused with 401 and records nothing.
func (s *suite) checkForgeries() (string, error) {
	team := s.slack.Team()
	var errs []error
	for i, f := range st.Forgeries() {
		ts := fmt.Sprintf("1600000000.%06d", i+1)
		env := team.Envelope(st.Event{Type: "message", User: ann, Text: team.MentionText("forged"), Channel: general,
			ChannelType: "channel", TS: ts, EventTS: ts, Team: team.ID})
		d, err := s.slack.Forge(f, env)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%v: %w", f, err))
		case d.Status != 401:
			errs = append(errs, fmt.Errorf("%v: answered %d %s, want 401", f, d.Status, d.Err))
		}
		if evs := s.recorded(ts); len(evs) > 0 {
			errs = append(errs, fmt.Errorf("%v: accepted as %s", f, evs[0].ID))
		}
	}
	return fmt.Sprintf("%d forgeries refused with 401", len(st.Forgeries())), errors.Join(errs...)
}

// checkRetries: an event whose first delivery never reached the adapter arrives as Slack's retry
// and must be accepted; retries of an event already accepted carry the same id.
func (s *suite) checkRetries() (string, error) {
	team := s.slack.Team()
	s.hook.loseNext("first delivery lost")
	lost := team.DM(ann, "first delivery lost")
	if err := s.slack.WaitAcked(s.opts.Timeout, lost.EventIDs...); err != nil {
		return "", fmt.Errorf("an event whose first delivery failed was never accepted on retry (retries dropped?): %w", err)
	}
	if _, err := s.one("retried event", lost.TS); err != nil {
		return "", err
	}
	p := team.DM(ann, "retry me")
	if err := s.slack.WaitAcked(s.opts.Timeout, p.EventIDs...); err != nil {
		return "", err
	}
	for i := 0; i < 2; i++ {
		d, err := s.slack.Retry(p.EventIDs[0], "http_timeout")
		if err != nil {
			return "", err
		}
		if !d.OK() {
			return "", fmt.Errorf("retry %d answered %d %s, want a 2xx (the event was recorded)", i+1, d.Status, d.Err)
		}
	}
	ev, err := s.one("three deliveries of one event", p.TS)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("retries accepted, one id %s", ev.ID), nil
}

// --- inbound ---

// checkDoubleDelivery: a mention arrives as "message" and "app_mention" (two event ids): one
// event id for the host, one turn.
func (s *suite) checkDoubleDelivery() (string, error) {
	m := s.slack.Team().Mention(general, ann, "are you there?")
	if err := s.slack.WaitAcked(s.opts.Timeout, m.EventIDs...); err != nil {
		return "", err
	}
	ev, err := s.one("message + app_mention", m.TS)
	if err != nil {
		return "", err
	}
	if kindOf(ev) != abi.EventMessage {
		return "", fmt.Errorf("the mention is a %q event, want a turn", ev.Kind)
	}
	return "one id: " + ev.ID, nil
}

// checkWorkspaces: the same channel id in two workspaces gives two scopes; the sender and the
// workspace reach the host (allow-lists name them).
func (s *suite) checkWorkspaces() (string, error) {
	one, two := s.slack.Team(), s.slack.Team(secondTeam)
	a := one.Mention(general, ann, "from the first workspace")
	b := two.Mention(general, ann, "from the second workspace")
	if err := s.slack.WaitAcked(s.opts.Timeout, append(a.EventIDs, b.EventIDs...)...); err != nil {
		return "", err
	}
	var errs []error
	for _, c := range []struct {
		team string
		p    st.Posted
	}{{one.ID, a}, {two.ID, b}} {
		ev, err := s.one("mention in "+c.team, c.p.TS)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ev.Source.ScopeID != c.team || ev.Source.ChatID != general || ev.Source.UserID != ann {
			errs = append(errs, fmt.Errorf("mention in %s: scope_id %q chat_id %q user_id %q, want %s %s %s",
				c.team, ev.Source.ScopeID, ev.Source.ChatID, ev.Source.UserID, c.team, general, ann))
		}
	}
	return "scope_id = team id, user_id = Slack user id", errors.Join(errs...)
}

// checkThreads: unmentioned channel chatter is not a turn; a top-level mention starts a thread
// (its own session); a mention inside a thread belongs to that thread; a DM is a turn.
func (s *suite) checkThreads() (string, error) {
	team := s.slack.Team()
	chatter := team.Say(general, bob, "lunch anyone?")
	if err := s.settle(s.slack); err != nil {
		return "", err
	}
	top := team.Mention(general, ann, "summarise the incident")
	inThread := team.MentionReply(general, chatter.TS, ann, "what about lunch?")
	dm := team.DM(ann, "a private question")
	if err := s.settle(s.slack); err != nil {
		return "", err
	}
	var errs []error
	for _, ev := range s.recorded(chatter.TS) {
		if kindOf(ev) == abi.EventMessage {
			errs = append(errs, fmt.Errorf("unmentioned channel message: a turn (want observe, or nothing)"))
		} else if ev.Source.ThreadID != "" {
			errs = append(errs, fmt.Errorf("unmentioned top-level message: thread_id %q", ev.Source.ThreadID))
		}
	}
	if ev, err := s.one("top-level mention", top.TS); err != nil {
		errs = append(errs, err)
	} else if kindOf(ev) != abi.EventMessage || ev.Source.ThreadID != top.TS || ev.Source.ChatType == abi.ChatDM {
		errs = append(errs, fmt.Errorf("top-level mention: kind %q chat_type %q thread_id %q, want a turn in thread %s",
			ev.Kind, ev.Source.ChatType, ev.Source.ThreadID, top.TS))
	}
	if ev, err := s.one("mention in a thread", inThread.TS); err != nil {
		errs = append(errs, err)
	} else if kindOf(ev) != abi.EventMessage || ev.Source.ThreadID != chatter.TS {
		errs = append(errs, fmt.Errorf("mention in a thread: kind %q thread_id %q, want a turn in thread %s", ev.Kind, ev.Source.ThreadID, chatter.TS))
	}
	if ev, err := s.one("DM", dm.TS); err != nil {
		errs = append(errs, err)
	} else if kindOf(ev) != abi.EventMessage || ev.Source.ChatType != abi.ChatDM || ev.Source.ThreadID != "" {
		errs = append(errs, fmt.Errorf("DM: kind %q chat_type %q thread_id %q, want a dm turn", ev.Kind, ev.Source.ChatType, ev.Source.ThreadID))
	}
	a := team.AssistantThreadStarted(ann, general)
	if err := s.settle(s.slack); err != nil {
		return "", err
	}
	seeded := false
	for _, ev := range s.record.got() {
		if ev.Kind == abi.EventSeed && ev.Source.ThreadID == a.TS && ev.Source.ChatType == abi.ChatDM {
			seeded = true
		}
	}
	if !seeded {
		errs = append(errs, errors.New("assistant_thread_started: no seed event for the thread"))
	}
	return "chatter observed, mentions threaded, DM a turn, assistant thread seeded", errors.Join(errs...)
}

// checkOwnMessages: Slack delivers the bot's own posts as message events; they are not turns.
func (s *suite) checkOwnMessages() (string, error) {
	res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: general, Text: "my own words"})
	if err != nil {
		return "", err
	}
	if res.Error != nil {
		return "", fmt.Errorf("send: %+v", res.Error)
	}
	if err := s.settle(s.slack); err != nil {
		return "", err
	}
	for _, m := range s.slack.Posted(st.DefaultTeamID, general, "-") {
		if m.Text == "my own words" {
			for _, ev := range s.recorded(m.TS) {
				if kindOf(ev) == abi.EventMessage {
					return "", fmt.Errorf("the bot's own post became a turn (%s): a loop", ev.ID)
				}
			}
		}
	}
	return "bot_id messages skipped", nil
}

// --- send ---

// checkSendThread: a reply with thread_id goes into that thread; without, to the channel.
func (s *suite) checkSendThread() (string, error) {
	team := s.slack.Team()
	root := team.Say(general, ann, "a thread root")
	res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: general, ThreadID: root.TS, Text: "in the thread"})
	if err != nil {
		return "", err
	}
	if res.Error != nil {
		return "", fmt.Errorf("send: %+v", res.Error)
	}
	if got := s.slack.PostedTexts(team.ID, general, root.TS); len(got) != 1 || got[0] != "in the thread" {
		return "", fmt.Errorf("thread %s holds %q (thread_ts dropped?)", root.TS, got)
	}
	if len(res.MessageIDs) != 1 || res.MessageIDs[0] == "" {
		return "", fmt.Errorf("message_ids %v, want the ts", res.MessageIDs)
	}
	// The second workspace's channel of the same id, with that workspace's token.
	res, err = s.send(abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: general, ScopeID: secondTeam, Text: "second workspace"})
	if err != nil {
		return "", err
	}
	if res.Error != nil {
		return "", fmt.Errorf("send to the second workspace: %+v", res.Error)
	}
	if got := s.slack.Posted(secondTeam, general, "-"); len(got) != 1 || got[0].Token != secondToken {
		return "", fmt.Errorf("second workspace holds %d posts (wrong token?)", len(got))
	}
	return "thread_ts set; workspace token chosen by scope_id", nil
}

// checkLongText: text within the manifest's limit that Slack's escaping of & and < takes past
// Slack's 40,000 characters arrives whole: split into posts Slack does not truncate.
func (s *suite) checkLongText() (string, error) {
	// 12,600 characters, 42,000 once escaped (each "&<b>&\n" is 20): over Slack's limit, within
	// any sensible message_limit, and small enough to stay quick under load.
	text := strings.Repeat("&<b>&\n", min(s.p.Manifest().MessageLimit.Max, 12600)/6)
	before := len(s.slack.AllPosted())
	res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: general, Text: text})
	if err != nil {
		return "", err
	}
	if res.Error != nil {
		return "", fmt.Errorf("send: %+v", res.Error)
	}
	posts := s.slack.AllPosted()[before:]
	var b strings.Builder
	for _, m := range posts {
		if m.Truncated {
			return "", fmt.Errorf("Slack truncated a post of %d characters at %d", len([]rune(m.Text)), st.MaxTextLength)
		}
		b.WriteString(strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&").Replace(m.Text))
	}
	if b.String() != text {
		return "", fmt.Errorf("the %d posts hold %d characters of the %d sent", len(posts), len([]rune(b.String())), len([]rune(text)))
	}
	return fmt.Sprintf("%d characters in %d posts", len([]rune(text)), len(posts)), nil
}

// checkRateLimit: a 429 with Retry-After, and an HTTP 200 {"ok":false,"error":"ratelimited"}
// with Retry-After (Slack sends both), are retryable after that long, with no retry inside send.
func (s *suite) checkRateLimit() (string, error) {
	var errs []error
	for _, c := range []struct {
		f    st.Fault
		want int64
	}{{st.RateLimited(7), 7000}, {st.RateLimited(1).WithStatus(http.StatusOK), 1000}} {
		before := len(s.slack.Requests("chat.postMessage"))
		s.slack.InjectFault("chat.postMessage", c.f)
		res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: general, Text: "rate limited"})
		if err != nil {
			return "", err
		}
		if n := len(s.slack.Requests("chat.postMessage")) - before; n != 1 {
			errs = append(errs, fmt.Errorf("%v: %d chat.postMessage requests, want 1 (the host owns retries)", c.f, n))
		}
		if e := res.Error; e == nil || e.Kind != abi.SendRetryable || e.RetryAfterMs != c.want {
			errs = append(errs, fmt.Errorf("%v: answer %+v, want retryable with retry_after_ms %d", c.f, res.Error, c.want))
		}
	}
	return "429 and 200 ratelimited: retryable after Retry-After", errors.Join(errs...)
}

// checkNotExecuted: an error Slack documents as not executed (a 503 whose body says
// service_unavailable, request_timeout) is retryable, not uncertain: nothing was posted, and an
// uncertain answer would leave the user without a reply. The host retries, not send.
func (s *suite) checkNotExecuted() (string, error) {
	var errs []error
	for _, f := range []st.Fault{st.Error("service_unavailable").WithStatus(http.StatusServiceUnavailable), st.Error("request_timeout")} {
		before, posted := len(s.slack.Requests("chat.postMessage")), len(s.slack.AllPosted())
		s.slack.InjectFault("chat.postMessage", f)
		res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: general, Text: "not executed? " + f.String()})
		if err != nil {
			return "", err
		}
		if n := len(s.slack.Requests("chat.postMessage")) - before; n != 1 || len(s.slack.AllPosted()) != posted {
			errs = append(errs, fmt.Errorf("%v: %d requests, %d posts, want 1 and none (the host owns retries)", f, n, len(s.slack.AllPosted())-posted))
		}
		if res.Error == nil || res.Error.Kind != abi.SendRetryable {
			errs = append(errs, fmt.Errorf("%v: answer %+v, want retryable", f, res.Error))
		}
	}
	return "service_unavailable (503) and request_timeout: retryable", errors.Join(errs...)
}

// checkUncertain: the message was posted, then the answer was a 5xx, a reset or a body cut
// short: the outcome is uncertain, and the message is not sent again.
func (s *suite) checkUncertain() (string, error) {
	var errs []error
	for _, f := range []st.Fault{st.AfterEffect(st.ServerError(502)), st.AfterEffect(st.ConnectionReset()), st.AfterEffect(st.Truncated())} {
		before, posted := len(s.slack.Requests("chat.postMessage")), len(s.slack.AllPosted())
		s.slack.InjectFault("chat.postMessage", f)
		res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: general, Text: "posted? " + f.String()})
		if err != nil {
			errs = append(errs, fmt.Errorf("%v: %w", f, err))
			continue
		}
		if n := len(s.slack.Requests("chat.postMessage")) - before; n != 1 {
			errs = append(errs, fmt.Errorf("%v: %d requests, %d posts (resent inside send)", f, n, len(s.slack.AllPosted())-posted))
		}
		if res.Error == nil || res.Error.Kind != abi.SendUncertain {
			errs = append(errs, fmt.Errorf("%v: answer %+v, want uncertain (a retry would post it twice)", f, res.Error))
		}
	}
	return "5xx, reset and cut body after posting: uncertain", errors.Join(errs...)
}

// checkRefusals: Slack's ok:false refusals are permanent, with Slack's error as the code.
func (s *suite) checkRefusals() (string, error) {
	var errs []error
	for _, c := range []struct {
		chat, code string
	}{{"C0NOWHERE1", "channel_not_found"}} {
		res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: c.chat, Text: "x"})
		if err != nil {
			return "", err
		}
		if res.Error == nil || res.Error.Kind != abi.SendPermanent || res.Error.Code != c.code {
			errs = append(errs, fmt.Errorf("%s: answer %+v, want permanent %s", c.code, res.Error, c.code))
		}
	}
	s.slack.InjectFault("chat.postMessage", st.Error("invalid_auth"))
	res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: general, Text: "x"})
	if err != nil {
		return "", err
	}
	if res.Error == nil || res.Error.Kind != abi.SendPermanent {
		errs = append(errs, fmt.Errorf("invalid_auth: answer %+v, want permanent", res.Error))
	}
	return "permanent, with Slack's code", errors.Join(errs...)
}

// checkTimeout: a post whose answer never comes must end inside the plugin, under the call
// deadline, as uncertain: not as a call killed by the host.
func (s *suite) checkTimeout() (string, error) {
	s.slack.InjectFault("chat.postMessage", st.NoAnswer())
	start := time.Now()
	res, err := s.p.Send(s.ctx, profEvents, abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: general, ScopeID: st.DefaultTeamID, Text: "into the void"})
	took := time.Since(start)
	if err != nil {
		return "", fmt.Errorf("after %v the host ended the call (%v): the adapter's HTTP timeout exceeds its call deadline", took.Round(time.Millisecond), err)
	}
	if res.Error == nil || res.Error.Kind != abi.SendUncertain {
		return "", fmt.Errorf("answer %+v after %v, want uncertain", res.Error, took.Round(time.Millisecond))
	}
	return fmt.Sprintf("uncertain after %v", took.Round(100*time.Millisecond)), nil
}

// checkTyping: "typing" in an assistant thread is assistant.threads.setStatus with channel_id and
// thread_ts.
func (s *suite) checkTyping() (string, error) {
	team := s.slack.Team()
	a := team.AssistantThreadStarted(bob, general)
	dm := team.AddDM(bob)
	res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: dm, ThreadID: a.TS, Action: "typing"})
	if err != nil {
		return "", err
	}
	if res.Error != nil {
		return "", fmt.Errorf("typing: %+v", res.Error)
	}
	for _, st := range s.slack.Statuses() {
		if st.Channel == dm && st.ThreadTS == a.TS && st.Status != "" {
			return "status " + st.Status, nil
		}
	}
	return "", fmt.Errorf("no assistant thread status set for %s/%s (requests %d)", dm, a.TS, len(s.slack.Requests("assistant.threads.setStatus")))
}

// --- Socket Mode ---

// pollSocket polls the Socket Mode profile until cond holds (at most 30 polls or the timeout).
// Events returned from poll count as recorded when poll returns, as the host records them then.
func (s *suite) pollSocket(what string, cond func() bool) error {
	deadline := time.Now().Add(s.opts.Timeout)
	for i := 0; i < 30 && !cond() && time.Now().Before(deadline); i++ {
		res, err := s.p.Poll(s.ctx, profSocket, 500*time.Millisecond)
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		for _, ev := range res.Events {
			s.record.note(ev)
		}
	}
	if !cond() {
		return fmt.Errorf("%s: not within %d polls", what, 30)
	}
	return nil
}

// checkSocketAck: every events_api frame is acknowledged only after the host recorded its event
// (hermes_dispatch, or returned from poll and recorded before the next poll).
func (s *suite) checkSocketAck() (string, error) {
	team := s.sock.Team()
	a := team.DM(ann, "over the socket")
	b := team.Mention(general, ann, "mention over the socket")
	ids := append(a.EventIDs, b.EventIDs...)
	acked := func() bool {
		for _, id := range ids {
			if !s.sock.Acked(id) {
				return false
			}
		}
		return true
	}
	if err := s.pollSocket("events acknowledged", acked); err != nil {
		return "", err
	}
	var errs []error
	for _, p := range []st.Posted{a, b} {
		ev, err := s.one("socket event", p.TS)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.record.mu.Lock()
		first := s.record.first[ev.ID]
		s.record.mu.Unlock()
		for _, ack := range s.sock.SocketAcks() {
			if contains(p.EventIDs, ack.EventID) && ack.Time.Before(first) {
				errs = append(errs, fmt.Errorf("event %s acknowledged %v before the host recorded it: a crash in between loses it",
					ack.EventID, first.Sub(ack.Time).Round(time.Microsecond)))
			}
		}
	}
	return "acknowledged after dispatch", errors.Join(errs...)
}

// checkSocketReconnect: after a disconnect frame the adapter opens a new connection; an event
// cut off with its connection comes again and is one event.
func (s *suite) checkSocketReconnect() (string, error) {
	team := s.sock.Team()
	_, before := s.sock.SocketConns()
	s.sock.Disconnect("warning", 300*time.Millisecond)
	p := team.DM(ann, "after the disconnect")
	reconnected := func() bool { open, opened := s.sock.SocketConns(); return open > 0 && opened > before }
	if err := s.pollSocket("a new connection after disconnect", func() bool { return s.sock.Acked(p.EventIDs[0]) && reconnected() }); err != nil {
		_, opened := s.sock.SocketConns()
		return "", fmt.Errorf("%w (%d connections opened in all)", err, opened)
	}
	// An event handled, whose acknowledgement is lost with the connection: Slack sends it again
	// in a new envelope on the next connection.
	s.sock.LoseAcks(1)
	q := team.DM(ann, "handled, ack lost")
	lost := func() bool {
		for _, a := range s.sock.SocketAcks() {
			if a.Lost && a.EventID == q.EventIDs[0] {
				return true
			}
		}
		return false
	}
	if err := s.pollSocket("the event handled", lost); err != nil {
		return "", err
	}
	s.sock.DropSockets()
	if err := s.pollSocket("the event sent again", func() bool { return s.sock.Acked(q.EventIDs[0]) }); err != nil {
		return "", err
	}
	if _, err := s.one("an event sent again after its ack was lost", q.TS); err != nil {
		return "", err
	}
	_, opened := s.sock.SocketConns()
	return fmt.Sprintf("%d connections, the resent event recorded once", opened), nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
