package discord

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	dt "github.com/hermes-host/hermes-host/conformance/discordtest"
)

// --- helpers ---

func (s *suite) wait(what string, cond func() bool) error {
	if err := s.d.Wait(s.opts.Timeout, cond); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// one waits for the single event of a Discord message and returns it, or says why there is not
// exactly one.
func (s *suite) one(what string, m *dt.Message) (abi.InboundEvent, error) {
	if err := s.wait(what+": no event", func() bool { return len(s.record.of(m.ID)) > 0 }); err != nil {
		return abi.InboundEvent{}, err
	}
	// A second event with another id would come right behind the first.
	time.Sleep(50 * time.Millisecond)
	evs := s.record.of(m.ID)
	if len(evs) != 1 {
		var ids []string
		for _, e := range evs {
			ids = append(ids, e.ID)
		}
		return abi.InboundEvent{}, fmt.Errorf("%s: %d events with different ids %v (the host would start %d turns)", what, len(evs), ids, len(evs))
	}
	return evs[0], nil
}

func kindOf(e abi.InboundEvent) string {
	if e.Kind == "" {
		return abi.EventMessage
	}
	return e.Kind
}

func (s *suite) send(msg abi.OutboundMessage) (*abi.SendResult, error) {
	if msg.ChatType == "" {
		msg.ChatType = abi.ChatGroup
	}
	if msg.ScopeID == "" && msg.ChatType != abi.ChatDM {
		msg.ScopeID = s.d.Guild()
	}
	res, err := s.p.Send(s.ctx, profMain, msg)
	if err != nil {
		return nil, fmt.Errorf("send failed at the host (a crash or the call deadline): %w", err)
	}
	return res, nil
}

func (s *suite) requests(op, channel string) int {
	n := 0
	for _, r := range s.d.Requests(op) {
		if r.ChannelID == channel {
			n++
		}
	}
	return n
}

// --- configure and connect ---

func (s *suite) checkWrongToken() (string, error) {
	problems := s.p.Info().Profiles[profWrong]
	if len(problems) == 0 {
		return "", errors.New("a profile with a token Discord refuses was accepted: configure should ask GET /users/@me")
	}
	return strings.Join(problems, "; "), nil
}

// checkIdentify: the adapter connects and IDENTIFYs with the intents it needs: guild messages,
// direct messages and message content (without which guild messages arrive with empty content).
func (s *suite) checkIdentify() (string, error) {
	if err := s.wait("the adapter never completed IDENTIFY", func() bool {
		return slices.ContainsFunc(s.d.Identifies(), func(i dt.Identify) bool { return i.Accepted }) && s.d.Delivered()
	}); err != nil {
		return "", err
	}
	var errs []error
	id := s.d.Identifies()[0]
	for _, in := range []struct {
		bit  int64
		name string
	}{{dt.IntentGuilds, "GUILDS"}, {dt.IntentGuildMessages, "GUILD_MESSAGES"}, {dt.IntentDirectMessages, "DIRECT_MESSAGES"},
		{dt.IntentMessageContent, "MESSAGE_CONTENT"}} {
		if id.Intents&in.bit == 0 {
			errs = append(errs, fmt.Errorf("intent %s missing (intents %d)", in.name, id.Intents))
		}
	}
	if v := s.d.Violations(); len(v) > 0 {
		errs = append(errs, fmt.Errorf("protocol violations: %s", strings.Join(v, "; ")))
	}
	return fmt.Sprintf("intents %d", id.Intents), errors.Join(errs...)
}

// --- inbound ---

// checkInbound: a mention in a channel is a turn, chatter is observed; a thread is keyed as its
// channel and the thread; a reply to the bot's message is addressed; after a mention in a
// thread, the thread needs none; a DM is a turn. Each event's id is the message's.
func (s *suite) checkInbound() (string, error) {
	s.d.AddThread(general, threadA, "ideas")
	res, err := s.send(abi.OutboundMessage{ChatID: general, Text: "the bot speaking"})
	if err != nil {
		return "", err
	}
	if res.Error != nil || len(res.MessageIDs) != 1 {
		return "", fmt.Errorf("a plain send failed: %+v", res)
	}
	g := s.d.Guild()
	msgs := []*dt.Message{
		s.d.Say(general, dt.Bob, "just chatting"),
		s.d.Mention(general, dt.Ann, "are you there?"),
		s.d.Mention(threadA, dt.Ann, "in the thread"),
		s.d.Say(threadA, dt.Ann, "and without a mention"),
		s.d.Reply(general, dt.Bob, res.MessageIDs[0], "thanks, bot"),
		s.d.DM(dt.Bob, "a private word"),
	}
	dm := s.d.DMChannel(dt.Bob)
	want := []struct {
		name, kind, chatType, chat, thread, scope, user, addressed string
		mentioned                                                  bool
	}{
		{"chatter", abi.EventObserve, abi.ChatGroup, general, "", g, dt.Bob.ID, "", false},
		{"mention", abi.EventMessage, abi.ChatGroup, general, "", g, dt.Ann.ID, "", true},
		{"mention in a thread", abi.EventMessage, abi.ChatGroup, general, threadA, g, dt.Ann.ID, "", true},
		{"followed thread", abi.EventMessage, abi.ChatGroup, general, threadA, g, dt.Ann.ID, abi.AddressedThread, false},
		{"reply to the bot", abi.EventMessage, abi.ChatGroup, general, "", g, dt.Bob.ID, abi.AddressedReply, false},
		{"DM", abi.EventMessage, abi.ChatDM, dm, "", "", dt.Bob.ID, "", false},
	}
	var errs []error
	for i, w := range want {
		e, err := s.one(w.name, msgs[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		src := e.Source
		if e.ID != "msg:"+msgs[i].ID || kindOf(e) != w.kind || src.ChatType != w.chatType || src.ChatID != w.chat ||
			src.ThreadID != w.thread || src.ScopeID != w.scope || src.UserID != w.user || src.MessageID != msgs[i].ID ||
			e.Addressed != w.addressed || e.Mentioned != w.mentioned {
			errs = append(errs, fmt.Errorf("%s: id %q kind %q chat %s/%s thread %q scope %q user %q message_id %q addressed %q mentioned %v; "+
				"want msg:%s %s %s/%s thread %q scope %q user %s addressed %q mentioned %v", w.name, e.ID, kindOf(e),
				src.ChatType, src.ChatID, src.ThreadID, src.ScopeID, src.UserID, src.MessageID, e.Addressed, e.Mentioned,
				msgs[i].ID, w.kind, w.chatType, w.chat, w.thread, w.scope, w.user, w.addressed, w.mentioned))
		}
	}
	if evs := s.record.of(msgs[1].ID); len(evs) == 1 && (strings.Contains(evs[0].Text, "<@") || !strings.Contains(evs[0].Text, "are you there?")) {
		errs = append(errs, fmt.Errorf("mention text %q: the bot's own mention should be dropped", evs[0].Text))
	}
	if evs := s.record.of(msgs[4].ID); len(evs) == 1 && evs[0].ReplyTo != res.MessageIDs[0] {
		errs = append(errs, fmt.Errorf("reply: reply_to %q, want %s", evs[0].ReplyTo, res.MessageIDs[0]))
	}
	return "observe / mention / thread / followed thread / reply / DM", errors.Join(errs...)
}

// checkOwnMessages: the bot's own messages (Discord sends them back over the Gateway) and other
// bots' are not events.
func (s *suite) checkOwnMessages() (string, error) {
	res, err := s.send(abi.OutboundMessage{ChatID: random, Text: "my own words"})
	if err != nil {
		return "", err
	}
	if res.Error != nil || len(res.MessageIDs) != 1 {
		return "", fmt.Errorf("send: %+v", res)
	}
	other := s.d.Say(random, dt.OtherBot, "<@"+s.d.BotUser().ID+"> beep, I am a bot too")
	marker := s.d.Say(random, dt.Ann, "after the bots")
	if _, err := s.one("the marker", marker); err != nil {
		return "", err
	}
	var errs []error
	for _, id := range []string{res.MessageIDs[0], other.ID} {
		if evs := s.record.of(id); len(evs) > 0 {
			errs = append(errs, fmt.Errorf("message %s (from a bot) became %d events", id, len(evs)))
		}
	}
	return "skipped", errors.Join(errs...)
}

// --- the Gateway ---

// checkHeartbeats: the adapter heartbeats at the announced interval with its sequence.
func (s *suite) checkHeartbeats() (string, error) {
	before := len(s.d.Heartbeats())
	if err := s.wait("heartbeats", func() bool { return len(s.d.Heartbeats()) >= before+3 }); err != nil {
		return "", err
	}
	hb := s.d.Heartbeats()
	last := hb[len(hb)-1]
	if last.Seq == nil || *last.Seq <= 0 {
		return "", errors.New("heartbeats carry no sequence (d: null) after events were received")
	}
	return fmt.Sprintf("%d heartbeats, last with seq %d", len(hb), *last.Seq), nil
}

// checkSeqAfterRecording: when the host cannot record an event, the adapter must not advance
// its sequence past it: the next RESUME replays it and it is recorded once.
func (s *suite) checkSeqAfterRecording() (string, error) {
	if err := s.wait("connected", s.d.Delivered); err != nil {
		return "", err
	}
	resumes := len(s.d.Resumes())
	s.record.refuseNext(1)
	m := s.d.DM(dt.Ann, "record me, eventually")
	if _, err := s.one("an event the host failed to record the first time", m); err != nil {
		return "", fmt.Errorf("%w: the sequence was committed before the host recorded the event, so it is lost", err)
	}
	return fmt.Sprintf("recorded after %d resume(s)", len(s.d.Resumes())-resumes), nil
}

// checkDropResumes: after the connection is cut, the adapter RESUMEs (no new IDENTIFY): what
// was dispatched meanwhile is replayed and recorded once, and so is an event cut off right after
// it was written.
func (s *suite) checkDropResumes() (string, error) {
	if err := s.wait("connected", s.d.Delivered); err != nil {
		return "", err
	}
	identifies, resumes := len(s.d.Identifies()), len(s.d.Resumes())
	s.d.DropConnections()
	a := s.d.Mention(general, dt.Ann, "while the connection was down")
	b := s.d.DM(dt.Bob, "me too")
	var errs []error
	for _, m := range []*dt.Message{a, b} {
		if _, err := s.one(m.Content, m); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.wait("connected", s.d.Delivered); err != nil {
		return "", err
	}
	s.d.DropAfterNext()
	c := s.d.DM(dt.Ann, "cut off right after this")
	if _, err := s.one("an event cut off with its connection", c); err != nil {
		errs = append(errs, err)
	}
	// The connection was cut right after the event: the adapter reconnects after reading it.
	s.wait("a connection after the second drop", func() bool {
		return len(s.d.Resumes())+len(s.d.Identifies()) >= resumes+identifies+2 && s.d.Delivered()
	})
	if n := len(s.d.Identifies()) - identifies; n > 0 {
		errs = append(errs, fmt.Errorf("%d new IDENTIFYs: a drop must be resumed (RESUME with session_id and seq), not a new session", n))
	}
	accepted := 0
	for _, r := range s.d.Resumes()[resumes:] {
		if r.Accepted {
			accepted++
		}
	}
	if accepted < 2 {
		errs = append(errs, fmt.Errorf("%d RESUMEs accepted after two drops", accepted))
	}
	return fmt.Sprintf("%d resumes, each event once", accepted), errors.Join(errs...)
}

// checkZombie: when Discord stops acknowledging heartbeats, the adapter closes the connection
// (not with 1000 or 1001, which end the session) and resumes.
func (s *suite) checkZombie() (string, error) {
	if err := s.wait("connected", s.d.Delivered); err != nil {
		return "", err
	}
	identifies, resumes := len(s.d.Identifies()), len(s.d.Resumes())
	start := time.Now()
	s.d.Zombie()
	m := s.d.DM(dt.Ann, "said to a zombie")
	if err := s.wait("a RESUME after heartbeats went unacknowledged", func() bool {
		return slices.ContainsFunc(s.d.Resumes()[resumes:], func(r dt.Resume) bool { return r.Accepted })
	}); err != nil {
		return "", fmt.Errorf("%w (the zombied connection was never replaced, or its RESUME refused: %+v)", err, s.d.Resumes()[resumes:])
	}
	took := time.Since(start)
	if _, err := s.one("the message dispatched to the zombie", m); err != nil {
		return "", err
	}
	if n := len(s.d.Identifies()) - identifies; n > 0 {
		return "", fmt.Errorf("%d new IDENTIFYs after a zombie: resume instead", n)
	}
	return fmt.Sprintf("resumed %v after the last ACK (interval %v)", took.Round(10*time.Millisecond), heartbeat), nil
}

// checkReconnect: op 7 is answered by reconnecting and resuming.
func (s *suite) checkReconnect() (string, error) {
	if err := s.wait("connected", s.d.Delivered); err != nil {
		return "", err
	}
	identifies, resumes := len(s.d.Identifies()), len(s.d.Resumes())
	s.d.RequestReconnect()
	if err := s.wait("a RESUME after op 7", func() bool {
		return slices.ContainsFunc(s.d.Resumes()[resumes:], func(r dt.Resume) bool { return r.Accepted })
	}); err != nil {
		return "", err
	}
	m := s.d.DM(dt.Bob, "after op 7")
	if _, err := s.one("a message after op 7", m); err != nil {
		return "", err
	}
	if n := len(s.d.Identifies()) - identifies; n > 0 {
		return "", fmt.Errorf("%d new IDENTIFYs after op 7: resume instead", n)
	}
	return "resumed", nil
}

// checkInvalidSession: a RESUME refused with op 9 d=false is followed by a fresh IDENTIFY (and
// so is op 9 d=false on an open connection); the new session works.
func (s *suite) checkInvalidSession() (string, error) {
	if err := s.wait("connected", s.d.Delivered); err != nil {
		return "", err
	}
	identifies := len(s.d.Identifies())
	s.d.ExpireSession()
	s.d.DropConnections()
	if err := s.wait("a fresh IDENTIFY after the RESUME was refused", func() bool {
		return len(s.d.Identifies()) > identifies && s.d.Delivered()
	}); err != nil {
		return "", err
	}
	m := s.d.DM(dt.Ann, "in the new session")
	if _, err := s.one("a message of the new session", m); err != nil {
		return "", err
	}
	s.d.InvalidSession(false)
	if err := s.wait("a fresh IDENTIFY after op 9", func() bool {
		return len(s.d.Identifies()) > identifies+1 && s.d.Delivered()
	}); err != nil {
		return "", err
	}
	n := s.d.DM(dt.Bob, "in the third session")
	if _, err := s.one("a message of the third session", n); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d identifies in all", len(s.d.Identifies())), nil
}

// --- sending ---

// checkSendThread: a message for a thread is posted into the thread (a channel of its own), as a
// reply to the message it answers.
func (s *suite) checkSendThread() (string, error) {
	m := s.d.Mention(threadA, dt.Ann, "answer me here")
	res, err := s.send(abi.OutboundMessage{ChatID: general, ThreadID: threadA, Text: "here is the answer", ReplyTo: m.ID})
	if err != nil {
		return "", err
	}
	if res.Error != nil || len(res.MessageIDs) != 1 {
		return "", fmt.Errorf("send: %+v", res)
	}
	posts := s.d.Posted(threadA)
	if len(posts) == 0 || posts[len(posts)-1].ID != res.MessageIDs[0] {
		return "", fmt.Errorf("nothing posted into the thread (general has %d posts)", len(s.d.Posted(general)))
	}
	if p := posts[len(posts)-1]; p.ReplyTo != m.ID {
		return "", fmt.Errorf("posted without message_reference to %s", m.ID)
	}
	return "posted into the thread, replying", nil
}

// checkNoPings: text the agent or a process wrote may contain @everyone, @here or mention
// tokens; allowed_mentions must keep them from notifying anyone.
func (s *suite) checkNoPings() (string, error) {
	text := "@everyone @here <@" + dt.Ann.ID + "> <@&" + role + "> process output"
	res, err := s.send(abi.OutboundMessage{ChatID: random, Text: text})
	if err != nil {
		return "", err
	}
	if res.Error != nil {
		return "", fmt.Errorf("send: %+v", res.Error)
	}
	posts := s.d.Posted(random)
	p := posts[len(posts)-1]
	if p.Pinged.Any() {
		return "", fmt.Errorf("the message pinged %+v (allowed_mentions %s)", p.Pinged, p.AllowedMentions)
	}
	return "allowed_mentions " + string(p.AllowedMentions), nil
}

// checkRateLimit: a 429 for the route and the global limit are retryable after retry_after;
// the host owns retries, so one request each.
func (s *suite) checkRateLimit() (string, error) {
	var errs []error
	for _, c := range []struct {
		f    dt.Fault
		want int64
	}{{dt.RateLimited(2500 * time.Millisecond), 2500}, {dt.GlobalRateLimited(1200 * time.Millisecond), 1200}} {
		before := s.requests(dt.OpCreate, faulty)
		s.d.InjectFault(dt.OpCreate, c.f)
		res, err := s.send(abi.OutboundMessage{ChatID: faulty, Text: "rate limited " + c.f.String()})
		if err != nil {
			return "", err
		}
		if n := s.requests(dt.OpCreate, faulty) - before; n != 1 {
			errs = append(errs, fmt.Errorf("%v: %d requests, want 1 (the host owns retries)", c.f, n))
		}
		if e := res.Error; e == nil || e.Kind != abi.SendRetryable || e.RetryAfterMs < c.want || e.RetryAfterMs > c.want+1000 {
			errs = append(errs, fmt.Errorf("%v: answer %+v, want retryable with retry_after_ms %d", c.f, res.Error, c.want))
		}
		time.Sleep(time.Duration(c.want) * time.Millisecond) // let the limit pass for the checks after
	}
	return "route and global 429: retryable after retry_after", errors.Join(errs...)
}

// checkBucket: an answer that says the bucket is exhausted (X-RateLimit-Remaining: 0) holds the
// route until X-RateLimit-Reset-After: the next message is retryable without a request, which
// Discord would answer 429 (and counts against the bot; too many get its IP banned).
func (s *suite) checkBucket() (string, error) {
	hits := s.d.RateLimitHits()
	first, err := s.send(abi.OutboundMessage{ChatID: limited, Text: "the bucket's one message"})
	if err != nil {
		return "", err
	}
	if first.Error != nil {
		return "", fmt.Errorf("first send: %+v", first.Error)
	}
	second, err := s.send(abi.OutboundMessage{ChatID: limited, Text: "one too many"})
	if err != nil {
		return "", err
	}
	var errs []error
	if n := s.d.RateLimitHits() - hits; n > 0 {
		errs = append(errs, fmt.Errorf("%d requests into the exhausted bucket (answered 429)", n))
	}
	if e := second.Error; e == nil || e.Kind != abi.SendRetryable || e.RetryAfterMs <= 0 || e.RetryAfterMs > 3000 {
		errs = append(errs, fmt.Errorf("second send: %+v, want retryable with retry_after_ms until the bucket resets (≤ 3000)", second.Error))
	}
	if len(errs) == 0 {
		time.Sleep(time.Duration(second.Error.RetryAfterMs) * time.Millisecond)
		third, err := s.send(abi.OutboundMessage{ChatID: limited, Text: "after the reset"})
		if err != nil {
			return "", err
		}
		if third.Error != nil {
			errs = append(errs, fmt.Errorf("after retry_after the bucket should take a message: %+v", third.Error))
		}
	}
	return "held until the reset, then sent", errors.Join(errs...)
}

// checkUncertain: the message was posted, then the answer was a 5xx, a reset or a body cut
// short: the outcome is uncertain, and the message is not sent again. A 5xx from the front end
// is uncertain too (it may have passed the request on).
func (s *suite) checkUncertain() (string, error) {
	var errs []error
	for _, f := range []dt.Fault{dt.AfterEffect(dt.ServerError(500)), dt.AfterEffect(dt.ConnectionReset()), dt.AfterEffect(dt.Truncated()), dt.ServerError(502)} {
		before := s.requests(dt.OpCreate, faulty)
		s.d.InjectFault(dt.OpCreate, f)
		res, err := s.send(abi.OutboundMessage{ChatID: faulty, Text: "posted? " + f.String()})
		if err != nil {
			errs = append(errs, fmt.Errorf("%v: %w", f, err))
			continue
		}
		if n := s.requests(dt.OpCreate, faulty) - before; n != 1 {
			errs = append(errs, fmt.Errorf("%v: %d requests (resent inside send: a duplicate in the chat)", f, n))
		}
		if res.Error == nil || res.Error.Kind != abi.SendUncertain {
			errs = append(errs, fmt.Errorf("%v: answer %+v, want uncertain (a retry would post it twice)", f, res.Error))
		}
	}
	return "5xx, reset and cut body: uncertain, sent once", errors.Join(errs...)
}

// checkTimeout: a post whose answer never comes ends inside the plugin, under the call
// deadline, as uncertain.
func (s *suite) checkTimeout() (string, error) {
	s.d.InjectFault(dt.OpCreate, dt.NoAnswer())
	start := time.Now()
	res, err := s.send(abi.OutboundMessage{ChatID: faulty, Text: "into the void"})
	took := time.Since(start)
	if err != nil {
		return "", fmt.Errorf("after %v: %w: the adapter's HTTP timeout exceeds its call deadline", took.Round(time.Millisecond), err)
	}
	if res.Error == nil || res.Error.Kind != abi.SendUncertain {
		return "", fmt.Errorf("answer %+v after %v, want uncertain", res.Error, took.Round(time.Millisecond))
	}
	return fmt.Sprintf("uncertain after %v", took.Round(100*time.Millisecond)), nil
}

// checkRefusals: Discord's refusals (an unknown channel, a missing permission) are permanent.
func (s *suite) checkRefusals() (string, error) {
	var errs []error
	res, err := s.send(abi.OutboundMessage{ChatID: nowhere, Text: "x"})
	if err != nil {
		return "", err
	}
	if res.Error == nil || res.Error.Kind != abi.SendPermanent {
		errs = append(errs, fmt.Errorf("unknown channel: %+v, want permanent", res.Error))
	}
	s.d.InjectFault(dt.OpCreate, dt.APIError(403, 50013, "Missing Permissions"))
	res, err = s.send(abi.OutboundMessage{ChatID: faulty, Text: "x"})
	if err != nil {
		return "", err
	}
	if res.Error == nil || res.Error.Kind != abi.SendPermanent {
		errs = append(errs, fmt.Errorf("missing permissions: %+v, want permanent", res.Error))
	}
	return "permanent", errors.Join(errs...)
}

// checkLimit: a message of 2000 characters (the host splits at the manifest's limit) is posted
// whole.
func (s *suite) checkLimit() (string, error) {
	text := strings.Repeat("é", dt.MaxContent-1) + "!"
	res, err := s.send(abi.OutboundMessage{ChatID: random, Text: text})
	if err != nil {
		return "", err
	}
	if res.Error != nil {
		return "", fmt.Errorf("send: %+v", res.Error)
	}
	posts := s.d.Posted(random)
	if p := posts[len(posts)-1]; p.Content != text {
		return "", fmt.Errorf("posted %d characters, want the %d sent", len([]rune(p.Content)), dt.MaxContent)
	}
	return "2000 characters in one message", nil
}

// checkEdit: an edit (streaming) changes the bot's message, with allowed_mentions too.
func (s *suite) checkEdit() (string, error) {
	res, err := s.send(abi.OutboundMessage{ChatID: random, Text: "first draft"})
	if err != nil {
		return "", err
	}
	if res.Error != nil || len(res.MessageIDs) != 1 {
		return "", fmt.Errorf("send: %+v", res)
	}
	ed, err := s.send(abi.OutboundMessage{ChatID: random, Text: "final @everyone", EditMessageID: res.MessageIDs[0]})
	if err != nil {
		return "", err
	}
	if ed.Error != nil {
		return "", fmt.Errorf("edit: %+v", ed.Error)
	}
	for _, p := range s.d.Posted(random) {
		if p.ID == res.MessageIDs[0] {
			if p.Content != "final @everyone" || p.Edits != 1 {
				return "", fmt.Errorf("message after the edit: %q, %d edits", p.Content, p.Edits)
			}
			if p.Pinged.Any() {
				return "", fmt.Errorf("the edit pinged %+v", p.Pinged)
			}
			return "edited in place", nil
		}
	}
	return "", errors.New("the edited message is gone")
}

// checkPollErrors: no poll failed at the host (a crash, an export error, the deadline).
func (s *suite) checkPollErrors() (string, error) {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	if len(s.pollErrs) > 0 {
		return "", fmt.Errorf("%d polls failed: %s", len(s.pollErrs), strings.Join(s.pollErrs[:min(len(s.pollErrs), 3)], "; "))
	}
	return "every poll answered", nil
}
