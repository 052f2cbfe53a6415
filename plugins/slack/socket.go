package main

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Timing of poll.
const (
	idlePoll       = 10 * time.Minute // events mode: poll has nothing to do
	backoffFailure = 3 * time.Second  // network trouble, 5xx, a refused dispatch
	backoffRefused = time.Minute      // token rejected, egress denied: needs the operator
	maxSocketWait  = 25 * time.Second // one receive's wait
)

// Socket Mode state in the kv store, per app token: the host-owned connection's id (it
// outlives instances), and acknowledgements owed for events returned (not dispatched) by the
// previous poll.
func connKey(cfg *Config) string { return "socket:" + keyOf(cfg.AppToken) }
func owedKey(cfg *Config) string { return "socket_acks:" + keyOf(cfg.AppToken) }

// frame is a Socket Mode message from Slack.
type frame struct {
	Type         string          `json:"type"`
	EnvelopeID   string          `json:"envelope_id"`
	Payload      json.RawMessage `json:"payload"`
	Reason       string          `json:"reason"`
	RetryAttempt int             `json:"retry_attempt"`
	RetryReason  string          `json:"retry_reason"`
}

// owed is the acknowledgements a poll still owes Slack.
type owed struct {
	Conn      string   `json:"conn"`
	Envelopes []string `json:"envelopes"`
}

// poll receives events over Socket Mode (mode socket); in events mode it has nothing to do.
//
// Each events_api frame is handed to the host with hermes_dispatch (recorded durably and
// deduplicated by id) and only then acknowledged by its envelope_id, so an event is never
// acknowledged before it is safe: a crash in between makes Slack send it again, and the host
// ignores the repeat. On a disconnect frame, or when the connection is gone (closed by Slack,
// or unknown to a restarted host), the connection is forgotten and the next poll opens another
// with apps.connections.open.
func poll(c *sdk.Context, req *abi.PollRequest) (*abi.PollResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		c.Log(abi.LevelError, "invalid configuration", "problems", joinProblems(p))
		return backoff(backoffRefused), nil
	}
	if cfg.Mode != ModeSocket {
		return backoff(idlePoll), nil
	}
	conn, err := currentConn(c, cfg)
	if err != nil {
		return nil, err
	}
	if conn != "" {
		payOwed(c, cfg, conn)
	} else if conn, err = connect(c, cfg); err != nil {
		return socketFailure(c, "cannot open a Socket Mode connection", err), nil
	}
	wait := min(time.Duration(max(req.WaitMs, 0))*time.Millisecond, maxSocketWait)
	rr, err := c.WSRecv(conn, wait, 16)
	if err != nil {
		// The host no longer knows the connection (it restarted, or the peer closed it).
		c.Log(abi.LevelInfo, "Socket Mode connection lost; reconnecting", "error", err.Error())
		forget(c, cfg)
		return &abi.PollResult{}, nil
	}
	out := &abi.PollResult{}
	reconnect := rr.Closed
	var toAck, returned []string // acknowledged now; owed until the host recorded the events
	for _, f := range rr.Frames {
		var fr frame
		if err := json.Unmarshal(f.Data, &fr); err != nil {
			c.Log(abi.LevelWarn, "Socket Mode: unreadable frame skipped", "error", err.Error())
			continue
		}
		switch fr.Type {
		case "hello":
			c.Log(abi.LevelInfo, "Socket Mode connected")
		case "disconnect":
			c.Log(abi.LevelInfo, "Slack asks to reconnect", "reason", fr.Reason)
			reconnect = true
		case "events_api":
			ev, err := socketEvent(c, cfg, &fr)
			if err != nil {
				// Not acknowledged: Slack sends it again; nothing after it is acknowledged either.
				ackAll(c, conn, toAck)
				return socketFailure(c, "the host could not record the event", err), nil
			}
			if ev != nil {
				out.Events = append(out.Events, *ev)
				returned = append(returned, fr.EnvelopeID)
			} else {
				toAck = append(toAck, fr.EnvelopeID)
			}
		case "interactive":
			// A button press: dispatched, then acknowledged (Slack shows an error to the user
			// without the acknowledgement within 3 s).
			evs, err := socketInteraction(c, &fr)
			if err != nil {
				ackAll(c, conn, toAck)
				return socketFailure(c, "the host could not record the button press", err), nil
			}
			if len(evs) > 0 {
				out.Events = append(out.Events, evs...)
				returned = append(returned, fr.EnvelopeID)
			} else {
				toAck = append(toAck, fr.EnvelopeID)
			}
		default:
			// slash_commands: not handled, but acknowledged so Slack stops asking.
			c.Log(abi.LevelDebug, "Socket Mode: frame type not handled", "type", fr.Type)
			if fr.EnvelopeID != "" {
				toAck = append(toAck, fr.EnvelopeID)
			}
		}
	}
	ackAll(c, conn, toAck)
	if len(out.Events) > 0 {
		// A host without a turn engine: the events are returned, and acknowledged at the start
		// of the next poll, which the host makes only after recording them (SPEC §2.5).
		raw, _ := json.Marshal(owed{Conn: conn, Envelopes: returned})
		if err := c.KVSet(owedKey(cfg), raw); err != nil {
			return nil, err
		}
	}
	if reconnect {
		c.WSClose(conn, 1000, "reconnecting")
		forget(c, cfg)
	}
	return out, nil
}

// socketEvent maps one events_api frame and dispatches its event. It returns the event only
// when the host has no dispatch function (then poll returns it); nil otherwise, meaning the
// frame can be acknowledged.
func socketEvent(c *sdk.Context, cfg *Config, fr *frame) (*abi.InboundEvent, error) {
	env, err := parseEnvelope(fr.Payload)
	if err != nil || env.Type != "event_callback" {
		c.Log(abi.LevelWarn, "Socket Mode: payload skipped", "envelope_id", fr.EnvelopeID, "error", errText(err))
		return nil, nil
	}
	if fr.RetryAttempt > 0 {
		c.Log(abi.LevelDebug, "Socket Mode: Slack retry (deduplicated by the host)", "event_id", env.EventID,
			"retry", strconv.Itoa(fr.RetryAttempt), "reason", fr.RetryReason)
	}
	ev, err := inbound(c, cfg, env)
	if err != nil {
		c.Log(abi.LevelWarn, "Socket Mode: malformed event skipped", "event_id", env.EventID, "error", err.Error())
		return nil, nil
	}
	if ev == nil {
		return nil, nil
	}
	if _, err := c.Dispatch(*ev); err != nil {
		if abi.CodeOf(err) == abi.CodeUnavailable {
			return ev, nil
		}
		return nil, err
	}
	return nil, nil
}

// socketInteraction maps one interactive frame (its payload is the JSON an Interactivity
// Request URL receives) and dispatches its events. It returns them only when the host has no
// dispatch function; nil otherwise, meaning the frame can be acknowledged.
func socketInteraction(c *sdk.Context, fr *frame) ([]abi.InboundEvent, error) {
	evs, skip, err := mapInteraction(fr.Payload)
	if err != nil {
		c.Log(abi.LevelWarn, "Socket Mode: malformed interactive payload skipped", "envelope_id", fr.EnvelopeID, "error", err.Error())
		return nil, nil
	}
	if skip != "" {
		c.Log(abi.LevelDebug, "Socket Mode: interactive payload skipped", "reason", skip)
	}
	for i, ev := range evs {
		if _, err := c.Dispatch(ev); err != nil {
			if abi.CodeOf(err) == abi.CodeUnavailable {
				return evs[i:], nil
			}
			return nil, err
		}
	}
	return nil, nil
}

// connect opens a Socket Mode connection: apps.connections.open with the app-level token, then
// the WebSocket through the host, whose id is kept in the kv store.
func connect(c *sdk.Context, cfg *Config) (string, error) {
	a := newAPI(c, cfg)
	var open struct {
		URL string `json:"url"`
	}
	if err := a.do("apps.connections.open", cfg.AppToken, struct{}{}, &open); err != nil {
		return "", err
	}
	if open.URL == "" {
		return "", abi.Errorf(abi.CodeInternal, "apps.connections.open answered without a url")
	}
	conn, err := c.WSOpen(&abi.WSOpenRequest{URL: open.URL, TimeoutMs: min(time.Until(a.deadline), httpTimeout).Milliseconds()})
	if err != nil {
		return "", err
	}
	if err := c.KVSet(connKey(cfg), []byte(conn)); err != nil {
		c.WSClose(conn, 1000, "")
		return "", err
	}
	return conn, nil
}

func currentConn(c *sdk.Context, cfg *Config) (string, error) {
	raw, found, err := c.KVGet(connKey(cfg))
	if err != nil || !found {
		return "", err
	}
	return string(raw), nil
}

func forget(c *sdk.Context, cfg *Config) {
	if err := c.KVDelete(connKey(cfg)); err != nil {
		c.Log(abi.LevelWarn, "cannot forget the Socket Mode connection", "error", err.Error())
	}
}

// payOwed acknowledges the events the previous poll returned, now that the host recorded them.
func payOwed(c *sdk.Context, cfg *Config, conn string) {
	raw, found, err := c.KVGet(owedKey(cfg))
	if err != nil || !found {
		return
	}
	var o owed
	if json.Unmarshal(raw, &o) == nil && o.Conn == conn {
		ackAll(c, conn, o.Envelopes)
	}
	c.KVDelete(owedKey(cfg))
}

// ackAll acknowledges envelopes. A lost acknowledgement makes Slack send the event again, which
// the host ignores as a duplicate.
func ackAll(c *sdk.Context, conn string, envelopes []string) {
	for _, id := range envelopes {
		if id == "" {
			continue
		}
		data, _ := json.Marshal(map[string]string{"envelope_id": id})
		if err := c.WSSend(conn, abi.WSFrame{Data: data}); err != nil {
			c.Log(abi.LevelWarn, "Socket Mode: acknowledgement not sent; Slack will resend the event", "envelope_id", id, "error", err.Error())
		}
	}
}

// socketFailure logs a failure and answers with a back-off suited to it.
func socketFailure(c *sdk.Context, what string, err error) *abi.PollResult {
	wait := backoffFailure
	var ae *apiError
	if (asAPIError(err, &ae) && ae.r.JSON && authErrors[ae.r.Error]) || abi.CodeOf(err) == abi.CodeDenied {
		wait = backoffRefused
	} else if asAPIError(err, &ae) && ae.r.RetryAfter > 0 {
		wait = ae.r.RetryAfter
	}
	level := abi.LevelWarn
	if wait == backoffRefused {
		level = abi.LevelError
	}
	c.Log(level, what, "error", err.Error(), "backoff_ms", strconv.FormatInt(wait.Milliseconds(), 10))
	return backoff(wait)
}

func backoff(d time.Duration) *abi.PollResult { return &abi.PollResult{BackoffMs: d.Milliseconds()} }
