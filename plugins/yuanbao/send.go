package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// How a send waits for its answer.
const (
	waitSlice      = 50 * time.Millisecond  // between looks at the answer while a poll reads
	readSlice      = 250 * time.Millisecond // one read of the socket when no poll reads
	notConnected   = 3 * time.Second        // retry_after while there is no connection
	stoppedForGood = time.Minute            // retry_after while the connection is stopped
)

// target is where a message goes: a private chat (account) or a group (group code).
func target(msg *abi.OutboundMessage) (chatType, chatID string) {
	switch {
	case msg.ChatType == abi.ChatGroup:
		return abi.ChatGroup, msg.ChatID
	case msg.ChatType == abi.ChatDM:
		return abi.ChatDM, msg.ChatID
	}
	// Addresses in the Python gateway's form ("group:<code>", "direct:<account>") are accepted too.
	if code, ok := strings.CutPrefix(msg.ChatID, "group:"); ok {
		return abi.ChatGroup, code
	}
	return abi.ChatDM, strings.TrimPrefix(msg.ChatID, "direct:")
}

// send transmits one message (or a typing heartbeat) and waits for Yuanbao's answer. It never
// retries: a request written without an answer in time is uncertain (Yuanbao may have posted
// it), and the host does not resend it.
func send(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		return failed(abi.SendPermanent, "bad_config", strings.Join(p, "; ")), nil
	}
	chatType, chatID := target(msg)
	switch {
	case chatID == "":
		return failed(abi.SendPermanent, "bad_request", "no chat to send to"), nil
	case msg.Action != "" && msg.Action != "typing":
		return failed(abi.SendPermanent, "unsupported_action", "chat action "+strconv.Quote(msg.Action)+" is not supported"), nil
	case msg.Action == "":
		if strings.TrimSpace(msg.Text) == "" {
			return failed(abi.SendPermanent, "empty_text", "Yuanbao refuses empty messages; not sent"), nil
		}
		if n := utf8.RuneCountInString(msg.Text); n > MaxText {
			return failed(abi.SendPermanent, "message_too_long", fmt.Sprintf("text of %d characters exceeds Yuanbao's %d; not sent", n, MaxText)), nil
		}
	}
	st, err := loadState(c)
	if err != nil {
		return nil, err
	}
	if st.Halt != nil {
		res := failed(abi.SendRetryable, "stopped", fmt.Sprintf("the connection to Yuanbao is stopped (close code %d); not sent", st.Halt.Code))
		res.Error.RetryAfterMs = stoppedForGood.Milliseconds()
		return res, nil
	}
	if st.Config != cfg.digest() || !st.Bound || st.Conn == "" {
		res := failed(abi.SendRetryable, "not_connected", "not connected to Yuanbao yet; not sent")
		res.Error.RetryAfterMs = notConnected.Milliseconds()
		return res, nil
	}
	s := &session{c: c, cfg: cfg, st: st}
	typingKey := chatKey(chatType, chatID)
	_, typing := st.Typing[typingKey]
	if msg.Action == "typing" {
		if err := s.heartbeat(chatType, chatID, heartbeatRun); err != nil {
			return failed(abi.SendRetryable, abi.CodeOf(err), err.Error()), nil
		}
		return &abi.SendResult{}, nil
	}

	f := &frame{Head: head{CmdType: cmdRequest, Module: moduleBot}}
	if chatType == abi.ChatGroup {
		id := randomID("grp_")
		f.Head.Cmd, f.Head.MsgID = cmdSendGroup, id
		req := sendGroup{MsgID: id, GroupCode: chatID, From: s.botID(), Random: strconv.FormatUint(uint64(randomUint32()), 10),
			Body: textBody(msg.Text), RefMsgID: msg.ReplyTo}
		f.Data = req.marshal()
	} else {
		id := randomID("c2c_")
		f.Head.Cmd, f.Head.MsgID = cmdSendC2C, id
		req := sendC2C{MsgID: id, To: chatID, From: s.botID(), Random: randomUint32(), Body: textBody(msg.Text)}
		f.Data = req.marshal()
	}
	final := msg.Parts <= 1 || msg.Part >= msg.Parts
	wait := waitPrefix + f.Head.MsgID
	if err := c.KVSet(wait, nil); err != nil {
		return nil, err
	}
	defer c.KVDelete(wait)
	if final && typing {
		// The poll stops this chat's RUNNING heartbeats; FINISH follows the answer.
		if now, err := c.Now(); err == nil {
			c.KVSet(donePrefix+typingKey, []byte(strconv.FormatInt(now.UnixMilli(), 10)))
		}
	}
	if err := s.write(f); err != nil {
		// Not written: nothing reached Yuanbao.
		res := failed(abi.SendRetryable, abi.CodeOf(err), "not sent: "+err.Error())
		res.Error.RetryAfterMs = notConnected.Milliseconds()
		return res, nil
	}
	ans, lost := s.await(wait, s.now().Add(cfg.sendTimeout()))
	if s.unrecorded && lost == "" {
		s.replaceForPush()
	}
	switch {
	case ans == nil && lost != "":
		return failed(abi.SendUncertain, abi.CodeUncertain, "written, then "+lost+" before Yuanbao answered; it may have been posted"), nil
	case ans == nil:
		return failed(abi.SendUncertain, abi.CodeUncertain, fmt.Sprintf("written, but Yuanbao did not answer within %v; it may have been posted", cfg.sendTimeout())), nil
	case ans.Status != 0 || ans.Code != 0:
		return failed(abi.SendPermanent, "refused", fmt.Sprintf("Yuanbao refused the message (status %d, code %d): %s", ans.Status, ans.Code, ans.Message)), nil
	}
	if final && typing {
		s.heartbeat(chatType, chatID, heartbeatDone)
	}
	return &abi.SendResult{MessageIDs: []string{f.Head.MsgID}}, nil
}

// await waits until the answer stored under key arrives (nil at until), reading the socket
// itself only while no poll does. lost says why the wait ended early: the connection went away.
func (s *session) await(key string, until time.Time) (ans *sendAnswer, lost string) {
	c := s.c
	for {
		if raw, found, err := c.KVGet(key); err == nil && found && len(raw) > 0 {
			var a sendAnswer
			if json.Unmarshal(raw, &a) == nil {
				return &a, ""
			}
		}
		now := s.now()
		if !now.Before(until) {
			return nil, ""
		}
		if s.pollReading(now) {
			time.Sleep(min(waitSlice, until.Sub(now)))
			continue
		}
		r, err := c.WSRecv(s.st.Conn, min(readSlice, until.Sub(now)), 32)
		if err != nil {
			return nil, "the connection was lost (" + err.Error() + ")"
		}
		for _, f := range r.Frames {
			if fr, err := parseFrame(f.Data); err == nil {
				s.handle(fr)
			}
		}
		if r.Closed {
			// The host has forgotten the connection; tell the poll how it ended.
			raw, _ := json.Marshal(halt{Code: r.CloseCode, Reason: r.CloseReason, At: now.UnixMilli()})
			c.KVSet(closedPrefix+s.st.Conn, raw)
			// Frames read before the close were handled: the answer may be among them.
			if raw, found, err := c.KVGet(key); err == nil && found && len(raw) > 0 {
				continue
			}
			return nil, fmt.Sprintf("the connection was closed (code %d)", r.CloseCode)
		}
	}
}

// replaceForPush closes the connection after a send read a push the host did not record: the
// push was not acknowledged, and Yuanbao delivers it again after the poll's next bind. The poll
// learns why the connection went (closed:<conn>, written before the close it will see).
func (s *session) replaceForPush() {
	conn := s.st.Conn
	raw, _ := json.Marshal(halt{Reason: "replaced to receive again a push a send read", At: s.now().UnixMilli()})
	s.c.KVSet(closedPrefix+conn, raw)
	s.c.WSClose(conn, 1000, "reconnecting")
}

// pollReading reports whether a poll is reading the socket now.
func (s *session) pollReading(now time.Time) bool {
	raw, found, err := s.c.KVGet(readerKey)
	if err != nil || !found {
		return false
	}
	until, err := strconv.ParseInt(string(raw), 10, 64)
	return err == nil && now.UnixMilli() < until
}

func failed(kind, code, message string) *abi.SendResult {
	return &abi.SendResult{Error: &abi.SendError{Kind: kind, Code: code, Message: message}}
}
