package yuanbao

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	ybt "github.com/hermes-host/hermes-host/conformance/yuanbaotest"
)

// --- connecting ---

// checkWrongSecret: configure signs a token, so a profile whose secret Yuanbao refuses is
// disabled at load with the reason, rather than failing quietly in every poll.
func (s *suite) checkWrongSecret() (string, error) {
	problems := s.p.Info().Profiles[profWrong]
	if len(problems) == 0 {
		return "", errors.New("a profile with a wrong app_secret was accepted: configure should sign a token")
	}
	return strings.Join(problems, "; "), nil
}

// checkConnect: the adapter signs a token (HMAC-SHA256 over nonce+timestamp+app_key+secret,
// Beijing time: the fake verifies both), opens one connection and sends AUTH_BIND before any
// other request.
func (s *suite) checkConnect() (string, error) {
	b := s.bot(profInbound)
	if err := s.connect(profInbound); err != nil {
		return "", err
	}
	var errs []error
	signed := 0
	for _, r := range s.yb.SignRequests() {
		if r.AppKey != b.AppID() {
			continue
		}
		if r.Code == 0 {
			signed++
		}
		if r.Header.Get("X-Instance-Id") != ybt.InstanceID {
			errs = append(errs, fmt.Errorf("sign-token without X-Instance-Id: %s", ybt.InstanceID))
		}
	}
	if signed == 0 {
		errs = append(errs, errors.New("no sign-token request the fake accepted"))
	}
	if v := s.yb.Violations(); len(v) > 0 {
		errs = append(errs, fmt.Errorf("protocol violations: %s", strings.Join(v, "; ")))
	}
	if b.Binds() != 1 || b.Connections() != 1 {
		errs = append(errs, fmt.Errorf("%d binds over %d connections, want one", b.Binds(), b.Connections()))
	}
	return fmt.Sprintf("%d token(s) signed, one connection bound", signed), errors.Join(errs...)
}

// --- inbound ---

// checkInbound: private messages are turns; in groups only mentions of the bot (a 1002
// mention element) and the owner's slash commands are, the rest is observed; quotes carry the
// quoted message's id.
func (s *suite) checkInbound() (string, error) {
	b := s.bot(profInbound)
	owner := ybt.User{ID: b.Owner(), Nick: "Owner"}
	pushes := []*ybt.Push{
		b.DM(ann, "hello"),
		b.GroupText(group, bob, "just chatting"),
		b.GroupMention(group, ann, "are you there?"),
		b.GroupText(group, owner, "/new"),
		b.GroupText(group, bob, "/new"),
		b.DM(bob, "about that", ybt.Quoting("msg-quoted", "the earlier text", "Ann")),
	}
	evs, err := s.pollUntil(profInbound, "six events", func(evs []abi.InboundEvent, _ *abi.PollResult) bool { return len(evs) >= len(pushes) })
	if err != nil {
		return "", err
	}
	want := []struct {
		name, kind, chatType, chatID, user string
	}{
		{"DM", abi.EventMessage, abi.ChatDM, ann.ID, ann.ID},
		{"group chatter", abi.EventObserve, abi.ChatGroup, group.Code, bob.ID},
		{"group mention", abi.EventMessage, abi.ChatGroup, group.Code, ann.ID},
		{"owner's command", abi.EventMessage, abi.ChatGroup, group.Code, owner.ID},
		{"someone else's command", abi.EventObserve, abi.ChatGroup, group.Code, bob.ID},
		{"quote", abi.EventMessage, abi.ChatDM, bob.ID, bob.ID},
	}
	var errs []error
	for i, w := range want {
		e := evs[i]
		if e.ID != "msg:"+pushes[i].MsgID || kindOf(e) != w.kind || e.Source.ChatType != w.chatType || e.Source.ChatID != w.chatID ||
			e.Source.UserID != w.user || e.Source.MessageID != pushes[i].MsgID {
			errs = append(errs, fmt.Errorf("%s: id %q kind %q chat %s/%s user %q message_id %q; want msg:%s %s %s/%s %s",
				w.name, e.ID, kindOf(e), e.Source.ChatType, e.Source.ChatID, e.Source.UserID, e.Source.MessageID,
				pushes[i].MsgID, w.kind, w.chatType, w.chatID, w.user))
		}
	}
	if t := evs[2].Text; strings.Contains(t, "@") || !strings.Contains(t, "are you there?") {
		errs = append(errs, fmt.Errorf("mention text %q: the bot's own mention should be dropped", t))
	}
	if evs[5].ReplyTo != "msg-quoted" {
		errs = append(errs, fmt.Errorf("quote: reply_to %q, want msg-quoted", evs[5].ReplyTo))
	}
	if len(evs) > len(want) {
		errs = append(errs, fmt.Errorf("extra events %v", eventIDs(evs[len(want):])))
	}
	return "message / observe / message / message / observe / quote", errors.Join(errs...)
}

// checkEcho: the bot's own messages are not events.
func (s *suite) checkEcho() (string, error) {
	b := s.bot(profInbound)
	b.DM(ybt.User{ID: b.BotID(), Nick: "me"}, "my own answer, echoed")
	marker := b.DM(ann, "after the echo")
	evs, err := s.pollUntil(profInbound, "the marker", func(evs []abi.InboundEvent, _ *abi.PollResult) bool { return len(evs) > 0 })
	if err != nil {
		return "", err
	}
	if len(evs) != 1 || evs[0].ID != "msg:"+marker.MsgID {
		return "", fmt.Errorf("events %v: the echo must be dropped", eventIDs(evs))
	}
	return "dropped", nil
}

// checkJSON: pushes whose data is JSON, in either spelling, are read like protobuf ones.
func (s *suite) checkJSON() (string, error) {
	b := s.bot(profInbound)
	a := b.GroupMention(group, ann, "snake case", ybt.AsJSON())
	c := b.DM(bob, "pascal case", ybt.AsTIMJSON())
	evs, err := s.pollUntil(profInbound, "two JSON pushes", func(evs []abi.InboundEvent, _ *abi.PollResult) bool { return len(evs) >= 2 })
	if err != nil {
		return "", err
	}
	if evs[0].ID != "msg:"+a.MsgID || kindOf(evs[0]) != abi.EventMessage || !strings.Contains(evs[0].Text, "snake case") ||
		evs[1].ID != "msg:"+c.MsgID || !strings.Contains(evs[1].Text, "pascal case") {
		return "", fmt.Errorf("events %v", eventIDs(evs))
	}
	return "snake_case and Tencent IM PascalCase", nil
}

// checkRecall: a recalled message becomes a redact event naming it.
func (s *suite) checkRecall() (string, error) {
	b := s.bot(profInbound)
	m := b.DM(ann, "oops, wrong chat")
	if _, err := s.pollUntil(profInbound, "the message", func(evs []abi.InboundEvent, _ *abi.PollResult) bool { return len(evs) > 0 }); err != nil {
		return "", err
	}
	b.RecallDM(ann, m.MsgID)
	evs, err := s.pollUntil(profInbound, "the recall", func(evs []abi.InboundEvent, _ *abi.PollResult) bool { return len(evs) > 0 })
	if err != nil {
		return "", err
	}
	e := evs[0]
	if e.Kind != abi.EventRedact || e.Source.MessageID != m.MsgID || e.Source.ChatID != ann.ID {
		return "", fmt.Errorf("recall became %s %+v, want a redact of %s", e.Kind, e.Source, m.MsgID)
	}
	return "redact " + m.MsgID, nil
}

// checkAcks: a push is acknowledged only once the host has recorded it: here (a host without a
// dispatch function) when the adapter is polled again after returning it.
func (s *suite) checkAcks() (string, error) {
	b := s.bot(profInbound)
	p := b.DM(ann, "acknowledge me")
	if _, err := s.pollUntil(profInbound, "the push", func(evs []abi.InboundEvent, _ *abi.PollResult) bool { return len(evs) > 0 }); err != nil {
		return "", err
	}
	// An acknowledgement the adapter sent with the event may still be on its way: give it time.
	if s.yb.Wait(2*time.Second, func() bool { return b.Acked(p) > 0 }) == nil {
		return "", errors.New("the push was acknowledged before the host recorded it (a crash now would lose it)")
	}
	if _, err := s.poll(profInbound); err != nil {
		return "", err
	}
	if err := s.yb.Wait(s.opts.Timeout, func() bool { return b.Acked(p) > 0 }); err != nil {
		return "", errors.New("the push was never acknowledged")
	}
	return "acknowledged at the next poll", nil
}

// --- sending ---

func (s *suite) send(msg abi.OutboundMessage) (*abi.SendResult, error) {
	start := time.Now()
	res, err := s.p.Send(s.ctx, profSend, msg)
	s.sendsMu.Lock()
	s.sends = append(s.sends, [2]time.Time{start, time.Now()})
	s.sendsMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	return res, nil
}

func sendRequests(b *ybt.Bot) int {
	return len(b.Requests(ybt.CmdSendC2C)) + len(b.Requests(ybt.CmdSendGroup))
}

// checkSend: a private message and a group reply (quoting the message answered) are sent and
// completed by their answers.
func (s *suite) checkSend() (string, error) {
	b := s.bot(profSend)
	if err := s.connect(profSend); err != nil {
		return "", err
	}
	res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: ann.ID, Text: "hello Ann"})
	if err != nil {
		return "", err
	}
	if res.Error != nil || len(res.MessageIDs) != 1 {
		return "", fmt.Errorf("DM: %+v", res.Error)
	}
	res, err = s.send(abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: group.Code, Text: "hello group", ReplyTo: "msg-asked"})
	if err != nil {
		return "", err
	}
	if res.Error != nil {
		return "", fmt.Errorf("group: %+v", res.Error)
	}
	dm, g := b.Sent("dm", ann.ID), b.Sent("group", group.Code)
	if len(dm) != 1 || dm[0].Text != "hello Ann" || len(g) != 1 || g[0].Text != "hello group" || g[0].RefMsgID != "msg-asked" ||
		dm[0].From != b.BotID() {
		var got []string
		for _, m := range append(dm, g...) {
			got = append(got, fmt.Sprintf("%s %s %q from %s quoting %q", m.ChatType, m.ChatID, m.Text, m.From, m.RefMsgID))
		}
		return "", fmt.Errorf("posted %s; want a DM to %s and a group message quoting msg-asked", strings.Join(got, ", "), ann.ID)
	}
	return "send_c2c_message and send_group_message (ref_msg_id)", nil
}

// checkLateAnswer: a send whose answer comes after the adapter stopped waiting is uncertain:
// not a success (it may not have been posted), not retryable (it may have been).
func (s *suite) checkLateAnswer() (string, error) {
	b := s.bot(profSend)
	b.FailSends(ybt.SendFault{Delay: sendTimeout*time.Millisecond + 2*time.Second})
	before := sendRequests(b)
	res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: ann.ID, Text: "answered late"})
	if err != nil {
		return "", err
	}
	if n := sendRequests(b) - before; n != 1 {
		return "", fmt.Errorf("%d requests for one message (resent inside send)", n)
	}
	if res.Error == nil || res.Error.Kind != abi.SendUncertain {
		return "", fmt.Errorf("answered %+v / %+v, want an uncertain failure", res.MessageIDs, res.Error)
	}
	return "uncertain", nil
}

// checkRefused: an answer with status or code ≠ 0 is a permanent failure.
func (s *suite) checkRefused() (string, error) {
	b := s.bot(profSend)
	b.FailSends(ybt.SendFault{Status: 5}, ybt.SendFault{Code: 7})
	for _, what := range []string{"status 5", "code 7"} {
		res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: ann.ID, Text: "refused"})
		if err != nil {
			return "", err
		}
		if res.Error == nil || res.Error.Kind != abi.SendPermanent {
			return "", fmt.Errorf("%s: %+v / %+v, want a permanent failure", what, res.MessageIDs, res.Error)
		}
	}
	return "permanent", nil
}

// checkLimit: 4000 code points are sent whole (astral characters count one); more are refused
// unsent.
func (s *suite) checkLimit() (string, error) {
	b := s.bot(profSend)
	before := sendRequests(b)
	res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: ann.ID, Text: strings.Repeat("😀", 4000)})
	if err != nil {
		return "", err
	}
	if res.Error != nil {
		return "", fmt.Errorf("4000 code points: %+v", res.Error)
	}
	res, err = s.send(abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: ann.ID, Text: strings.Repeat("😀", 4001)})
	if err != nil {
		return "", err
	}
	if res.Error == nil || res.Error.Kind != abi.SendPermanent || sendRequests(b)-before != 1 {
		return "", fmt.Errorf("4001 code points: %+v after %d requests", res.Error, sendRequests(b)-before)
	}
	return "4000 sent, 4001 refused unsent", nil
}

// --- the connection ---

// checkReconnect: after a transient close the adapter waits (back-off) and binds a new
// connection with the token it signed before, still valid: sign-token is rate limited
// (yuanbaotest.DefaultSignLimit), and a bot whose socket drops often must not sign each time.
func (s *suite) checkReconnect() (string, error) {
	b := s.bot(profConn)
	if err := s.connect(profConn); err != nil {
		return "", err
	}
	signs := func() int {
		n := 0
		for _, r := range s.yb.SignRequests() {
			if r.AppKey == b.AppID() && r.Code == 0 {
				n++
			}
		}
		return n
	}
	before := signs()
	closed := time.Now()
	b.Close(1012, "service restart")
	if _, err := s.pollUntil(profConn, "a new bind", func([]abi.InboundEvent, *abi.PollResult) bool { return b.Binds() == 2 && b.Connected() }); err != nil {
		return "", err
	}
	binds := b.Requests(ybt.CmdAuthBind)
	var errs []error
	if waited := binds[len(binds)-1].At.Sub(closed); waited < 900*time.Millisecond {
		errs = append(errs, fmt.Errorf("rebound %v after the close: no back-off", waited.Round(time.Millisecond)))
	}
	if n := signs() - before; n != 0 {
		errs = append(errs, fmt.Errorf("signed %d new token(s) to reconnect: keep the token until it expires", n))
	}
	return "rebound after a back-off with the cached token", errors.Join(errs...)
}

// checkDroppedPush: a push written just before the socket dropped is delivered again on the new
// connection (it was not acknowledged): every event for it carries the same id, so the host
// records one.
func (s *suite) checkDroppedPush() (string, error) {
	b := s.bot(profConn)
	p := b.DM(bob, "dropped with the socket", ybt.DropWhilePushing(ybt.DropAfterPush))
	evs, err := s.pollUntil(profConn, "the push after a reconnect", func(evs []abi.InboundEvent, _ *abi.PollResult) bool {
		return b.Binds() == 3 && b.Connected() && len(evs) > 0
	})
	if err != nil {
		return "", err
	}
	for _, e := range evs {
		if e.ID != "msg:"+p.MsgID {
			return "", fmt.Errorf("events %v", eventIDs(evs))
		}
	}
	// A later poll writes the acknowledgement (the host has recorded the event by then), and the
	// fake reads it on its own time: poll until it has, as the host would go on polling (one
	// poll that failed under load must not read as "never acknowledged").
	acked := func() bool { return b.Acked(p) > 0 }
	for deadline := time.Now().Add(s.opts.Timeout); !acked(); {
		if time.Now().After(deadline) {
			return "", errors.New("the redelivered push was never acknowledged")
		}
		s.poll(profConn)
		s.yb.Wait(500*time.Millisecond, acked)
	}
	return fmt.Sprintf("%d event(s), one id", len(evs)), nil
}

// checkPing: the adapter pings every 30 s (host clock) and replaces the connection after two
// pongs missed in a row.
func (s *suite) checkPing() (string, error) {
	b := s.bot(profPing)
	if err := s.connect(profPing); err != nil {
		return "", err
	}
	b.SkipPongs(2)
	pings := func() int { return len(b.Requests(ybt.CmdPing)) }
	for _, step := range []time.Duration{31 * time.Second, 11 * time.Second, 31 * time.Second, 11 * time.Second} {
		s.clock.Advance(step)
		if _, err := s.poll(profPing); err != nil {
			return "", err
		}
	}
	if pings() == 0 {
		return "", errors.New("no ping 30 s after binding")
	}
	if _, err := s.pollUntil(profPing, "a new connection after two missed pongs", func([]abi.InboundEvent, *abi.PollResult) bool {
		return b.Binds() == 2 && b.Connected()
	}); err != nil {
		return "", fmt.Errorf("%w (%d pings)", err, pings())
	}
	return fmt.Sprintf("%d pings, rebound after two missed pongs", pings()), nil
}

// checkPermanentClose: after a permanent close code (4013) the adapter does not reconnect, and
// tells the operator (a stopped status).
func (s *suite) checkPermanentClose() (string, error) {
	b := s.bot(profStop)
	if err := s.connect(profStop); err != nil {
		return "", err
	}
	b.Close(4013, "bot disabled")
	var last *abi.ProfileStatus
	for i := 0; i < 4; i++ {
		res, err := s.poll(profStop)
		if err != nil {
			return "", err
		}
		last = res.Status
		time.Sleep(min(time.Duration(res.BackoffMs)*time.Millisecond, 1500*time.Millisecond))
	}
	if b.Binds() != 1 || b.Connections() != 1 {
		return "", fmt.Errorf("reconnected after close code 4013 (%d binds)", b.Binds())
	}
	if last == nil || last.State != abi.StatusStopped {
		return "", fmt.Errorf("status %+v: want %q so that the operator sees it", last, abi.StatusStopped)
	}
	return "stopped: " + last.Message, nil
}

// checkReload: a reload of the adapter (a new version over the same host) keeps the host-owned
// connection: no new connection, no second AUTH_BIND.
func (s *suite) checkReload() (string, error) {
	b := s.bot(profInbound)
	binds, conns := b.Binds(), b.Connections()
	if _, err := s.load(); err != nil {
		return "", fmt.Errorf("reload: %w", err)
	}
	p := b.DM(ann, "after the reload")
	evs, err := s.pollUntil(profInbound, "the push after the reload", func(evs []abi.InboundEvent, _ *abi.PollResult) bool { return len(evs) > 0 })
	if err != nil {
		return "", err
	}
	if evs[0].ID != "msg:"+p.MsgID {
		return "", fmt.Errorf("events %v", eventIDs(evs))
	}
	if b.Binds() != binds || b.Connections() != conns {
		return "", fmt.Errorf("the reload bound again (%d binds, %d connections; before %d and %d): keep the connection id in the kv store",
			b.Binds(), b.Connections(), binds, conns)
	}
	return "same connection", nil
}

// fromSendGrace is how long after a send call returns the fake may still time a request the
// call wrote (the fake stamps a frame when its reader takes it).
const fromSendGrace = 250 * time.Millisecond

// checkPostsOnlyFromSend: every message request the fake received (send_c2c_message,
// send_group_message, in every check) arrived while the suite was calling the send export. The
// host cannot tell frames apart on the connection poll and send share (SPEC 5.4.1), so a message
// written from poll would reach the chat behind the host's boundary and ledger unseen.
func (s *suite) checkPostsOnlyFromSend() (string, error) {
	s.sendsMu.Lock()
	sends := append([][2]time.Time(nil), s.sends...)
	s.sendsMu.Unlock()
	n := 0
	for _, name := range append(profileNames, profWrong) {
		b := s.bot(name)
		for _, f := range append(b.Requests(ybt.CmdSendC2C), b.Requests(ybt.CmdSendGroup)...) {
			n++
			inSend := false
			for _, w := range sends {
				if !f.At.Before(w[0]) && !f.At.After(w[1].Add(fromSendGrace)) {
					inSend = true
					break
				}
			}
			if !inSend {
				return "", fmt.Errorf("profile %s wrote %s (msg_id %q) at %s, while no send was in progress: messages must go "+
					"through the host's send", name, f.Head.GetCmd(), f.Head.GetMsgId(), f.At.Format("15:04:05.000"))
			}
		}
	}
	if n == 0 {
		return "", errors.New("the fake received no message request at all")
	}
	return fmt.Sprintf("%d message requests, each during a send", n), nil
}
