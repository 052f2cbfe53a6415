package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// poll keeps the profile's connection to Yuanbao and reads it for up to the requested wait:
// it connects (sign-token, WebSocket, AUTH_BIND) when there is no connection and the back-off
// allows, hands every push to the host (hermes_dispatch) and acknowledges it afterwards, pings
// every 30 s, sends typing heartbeats, and reports the connection's status.
func poll(c *sdk.Context, req *abi.PollRequest) (*abi.PollResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		return &abi.PollResult{BackoffMs: stoppedRecheck.Milliseconds(),
			Status: &abi.ProfileStatus{State: abi.StatusStopped, Message: "invalid configuration: " + strings.Join(p, "; ")}}, nil
	}
	st, err := loadState(c)
	if err != nil {
		return nil, err
	}
	s := &session{c: c, cfg: cfg, st: st, owner: true}
	s.saved, _ = json.Marshal(st)
	start := s.now()
	wait := min(max(time.Duration(req.WaitMs)*time.Millisecond, 0), maxPollWait)
	deadline := start.Add(wait)

	if st.Config != cfg.digest() {
		// A new configuration (or the first poll): the old connection is not this one's.
		if st.Conn != "" {
			c.WSClose(st.Conn, 1000, "configuration changed")
		}
		*st = connState{Config: cfg.digest()}
	}
	if st.Halt != nil && resumed(c, st.Halt) {
		c.Log(abi.LevelInfo, "the plugin was reloaded: trying Yuanbao again after the permanent close", "close_code", strconv.Itoa(st.Halt.Code))
		st.Halt, st.Attempt, st.RetryAt = nil, 0, 0
	}
	res := &abi.PollResult{}
	if st.Halt == nil {
		s.run(deadline, res)
	}
	if err := s.save(); err != nil {
		return nil, err
	}
	res.Events = s.returned
	res.Status = s.status()
	if st.Halt != nil {
		res.BackoffMs = haltRecheck.Milliseconds()
	}
	return res, nil
}

// resumed reports whether a reload or restart (configure) happened after the permanent close.
func resumed(c *sdk.Context, h *halt) bool {
	raw, found, err := c.KVGet(resumeKey)
	if err != nil || !found {
		return false
	}
	at, err := strconv.ParseInt(string(raw), 10, 64)
	return err == nil && at > h.At
}

// run is poll's loop until deadline.
func (s *session) run(deadline time.Time, res *abi.PollResult) {
	c, st := s.c, s.st
	if !s.flushOwed() {
		res.BackoffMs = backoffFirst.Milliseconds()
		return
	}
	// Sends wait for this poll to store their answers rather than reading the socket themselves.
	c.KVSet(readerKey, []byte(strconv.FormatInt(deadline.Add(readerMargin).UnixMilli(), 10)))
	defer c.KVDelete(readerKey)
	for len(s.returned) == 0 && st.Halt == nil {
		if err := s.save(); err != nil {
			c.Log(abi.LevelError, "could not save the connection state", "error", err.Error())
		}
		now := s.now()
		if !now.Before(deadline) {
			return
		}
		if !st.Bound {
			if retry := time.UnixMilli(st.RetryAt); now.Before(retry) {
				res.BackoffMs = retry.Sub(now).Milliseconds()
				return
			}
			budget := deadline
			if b := now.Add(minConnectTime); b.After(budget) {
				budget = b
			}
			s.connect(budget)
			if st.Bound {
				// Bound: return, so that the host shows the profile connected now rather than
				// at the end of this poll's wait (the next poll follows at once).
				return
			}
			continue
		}
		next := s.nextTimer()
		if deadline.Before(next) {
			next = deadline
		}
		r, err := c.WSRecv(st.Conn, max(next.Sub(now), time.Millisecond), 32)
		if err != nil {
			if h, ok := closedBySend(c, st.Conn); ok && h.Code == 0 {
				s.drop(h.Reason) // the send closed it (replaceForPush)
			} else if ok {
				st.Conn = ""
				s.closed(h.Code, h.Reason)
			} else {
				s.drop("the connection is gone: " + err.Error())
			}
			continue
		}
		for _, f := range r.Frames {
			fr, err := parseFrame(f.Data)
			if err != nil {
				c.Log(abi.LevelWarn, "skipping an unreadable frame", "bytes", strconv.Itoa(len(f.Data)), "error", err.Error())
				continue
			}
			s.handle(fr)
		}
		if r.Closed {
			st.Conn = "" // the host has forgotten it
			s.closed(r.CloseCode, r.CloseReason)
			continue
		}
		s.timers()
	}
}

// closedBySend reads how a connection ended when a send, not the poll, read its close.
func closedBySend(c *sdk.Context, conn string) (halt, bool) {
	raw, found, err := c.KVGet(closedPrefix + conn)
	if err != nil || !found {
		return halt{}, false
	}
	c.KVDelete(closedPrefix + conn)
	var h halt
	return h, json.Unmarshal(raw, &h) == nil
}

// status reports the connection to the operator.
func (s *session) status() *abi.ProfileStatus {
	st := s.st
	switch {
	case st.Halt != nil:
		return &abi.ProfileStatus{State: abi.StatusStopped, Message: fmt.Sprintf(
			"Yuanbao closed the connection with code %d (%s) at %s: a permanent refusal, so it is not reconnecting; "+
				"fix the cause (credentials, another instance of this bot), then reload the plugin or restart hermes-host",
			st.Halt.Code, st.Halt.Reason, time.UnixMilli(st.Halt.At).UTC().Format(time.RFC3339))}
	case st.Bound:
		return &abi.ProfileStatus{State: abi.StatusOK, Message: "connected as " + s.botID() + " (connect id " + st.ConnectID + ")"}
	case st.LastError != "":
		in := time.UnixMilli(st.RetryAt).Sub(s.now()).Round(time.Second)
		return &abi.ProfileStatus{State: abi.StatusDegraded, Message: fmt.Sprintf(
			"not connected: %s; reconnect attempt %d in %v", st.LastError, st.Attempt+1, max(in, 0))}
	}
	return &abi.ProfileStatus{State: abi.StatusDegraded, Message: "connecting"}
}
