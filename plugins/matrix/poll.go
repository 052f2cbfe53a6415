package main

import (
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Back-offs: the host polls again after this long.
const (
	backoffFailure  = 3 * time.Second // network trouble, 5xx, malformed answers
	backoffRefused  = time.Minute     // token rejected, egress denied: needs the operator
	minPollInterval = time.Second     // never short-poll faster than this
	backfillPages   = 3               // /messages pages fetched to fill one room's gap
	backfillPage    = 100             // events per page
)

// syncFilter is the inline filter of every sync after the first: more timeline per room than the
// default 10 (so fewer gaps), of the room state only what the plugin reads, no presence or
// account data. firstFilter is the first sync's: it only learns the rooms, so one event of
// timeline each keeps the answer small for an account in many rooms (the host caps an answer
// at 8 MiB).
const (
	syncFilter  = `{"room":{"timeline":{"limit":50},"state":{"types":["m.room.encryption","m.room.name"]}},"presence":{"not_types":["*"]},"account_data":{"not_types":["*"]}}`
	firstFilter = `{"room":{"timeline":{"limit":1},"state":{"types":["m.room.encryption","m.room.name"]}},"presence":{"not_types":["*"]},"account_data":{"not_types":["*"]}}`
)

// Cursor keys in the kv store, per access token. The committed since token is what /sync is
// called with; the pending one is the next_batch of the batch the previous poll returned,
// committed at the start of the next poll (SPEC §2.5).
func sinceKey(cfg *Config) string   { return "since:" + cfg.tokenKey() }
func pendingKey(cfg *Config) string { return "since_next:" + cfg.tokenKey() }

// poll long-polls /sync and hands the new events to the host.
func poll(c *sdk.Context, req *abi.PollRequest) (*abi.PollResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		c.Log(abi.LevelError, "invalid configuration", "problems", strings.Join(p, "; "))
		return stopped(backoffRefused, "invalid configuration: "+strings.Join(p, "; ")), nil
	}
	wait := min(time.Duration(max(req.WaitMs, 0))*time.Millisecond, maxLongPoll)
	a := newAPI(c, cfg, wait+pollSlack)

	// The host calls poll again only after it recorded the previous batch: its token can be
	// committed now.
	since, err := commitSince(c, cfg)
	if err != nil {
		return nil, err
	}
	me, err := a.me()
	if err != nil {
		return failure(a, "cannot learn the bot's identity (whoami)", err), nil
	}
	q := url.Values{"filter": {firstFilter}, "set_presence": {"offline"}}
	if since != "" {
		q.Set("filter", syncFilter)
		q.Set("since", since)
		// Keep the long poll inside the budget with the HTTP margin.
		q.Set("timeout", strconv.FormatInt(max(min(wait, a.left()-syncMargin-time.Second), 0).Milliseconds(), 10))
	} else {
		q.Set("timeout", "0")
	}
	var res syncResponse
	if err := a.do("GET", clientAPI+"/sync", q, nil, &res, a.left()); err != nil {
		return failure(a, "sync failed", err), nil
	}
	if res.NextBatch == "" {
		return failure(a, "sync failed", abi.Errorf(abi.CodeInternal, "the answer has no next_batch")), nil
	}
	events := collect(a, me, res, since)
	out := &abi.PollResult{Events: events, Status: &abi.ProfileStatus{State: abi.StatusOK}}
	if len(events) == 0 && wait < minPollInterval {
		out.BackoffMs = (minPollInterval - wait).Milliseconds()
	}
	joinInvites(a, res)
	if dispatched, err := dispatchAll(c, events); err != nil {
		return failure(a, "the host could not record the events", err), nil
	} else if dispatched || len(events) == 0 {
		// Recorded (or nothing to record): the token moves on.
		out.Events = nil
		if res.NextBatch != since {
			if err := c.KVSet(sinceKey(cfg), []byte(res.NextBatch)); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	// Handed back to the host, which records them before the next poll commits the token.
	if err := c.KVSet(pendingKey(cfg), []byte(res.NextBatch)); err != nil {
		return nil, err
	}
	return out, nil
}

// commitSince makes the pending token the committed one and returns the committed token ("":
// none yet, the next sync is the profile's first).
func commitSince(c *sdk.Context, cfg *Config) (string, error) {
	pending, found, err := c.KVGet(pendingKey(cfg))
	if err != nil {
		return "", err
	}
	if found {
		if err := c.KVSet(sinceKey(cfg), pending); err != nil {
			return "", err
		}
		if err := c.KVDelete(pendingKey(cfg)); err != nil {
			return "", err
		}
	}
	raw, found, err := c.KVGet(sinceKey(cfg))
	if err != nil || !found {
		return "", err
	}
	return string(raw), nil
}

// dispatchAll hands events to the host one by one. It reports false (and dispatches nothing)
// when the host offers no dispatch function; then the events are returned from poll instead.
func dispatchAll(c *sdk.Context, events []abi.InboundEvent) (bool, error) {
	for i, ev := range events {
		if _, err := c.Dispatch(ev); err != nil {
			if i == 0 && abi.CodeOf(err) == abi.CodeUnavailable {
				return false, nil
			}
			return true, err
		}
	}
	return len(events) > 0, nil
}

// collect reads a sync answer: it updates what the plugin knows of each room, fills gaps, and
// maps the timelines to events. The first sync (no since) only learns the rooms.
func collect(a *api, me identity, res syncResponse, since string) []abi.InboundEvent {
	c, cfg := a.c, a.cfg
	opts := mapOptions{Me: me, RequireMention: cfg.requireMention(), ReplyInThread: cfg.replyInThread(),
		FollowThreads: cfg.followThreads(),
		Followed:      func(room, thread string) bool { return remembered(c, slotFollow, room+" "+thread) },
		Own:           func(id string) bool { return remembered(c, slotOwn, id) }}
	var events []abi.InboundEvent
	skipped := 0
	for _, room := range sortedKeys(res.Rooms.Join) {
		jr := res.Rooms.Join[room]
		before := loadRoom(c, room)
		info := before
		if jr.Summary.Joined != nil {
			info.Members = *jr.Summary.Joined
		}
		timeline := jr.Timeline.Events
		// A room the plugin has not seen was just joined: what was said there before the bot's
		// join is history, neither filled in nor answered.
		fresh := !before.Known && since != ""
		if jr.Timeline.Limited && since != "" && !fresh {
			timeline = append(backfill(a, room, jr.Timeline.PrevBatch, since), timeline...)
		}
		joinedAt := -1
		if fresh {
			for i, ev := range timeline {
				if ev.Type == "m.room.member" && ev.StateKey != nil && *ev.StateKey == me.UserID && membership(ev) == "join" {
					joinedAt = i
				}
			}
		}
		info.Known = true
		for _, ev := range jr.State.Events {
			learnState(&info, ev)
		}
		for i, ev := range timeline {
			if ev.StateKey != nil {
				learnState(&info, ev)
				continue
			}
			if since == "" || i < joinedAt {
				skipped++
				continue
			}
			if info.Encrypted && ev.Type == "m.room.message" && ev.Sender != me.UserID {
				c.Log(abi.LevelDebug, "skipping a plaintext message in an encrypted room", "room", room, "event_id", ev.EventID)
				continue
			}
			m := mapEvent(room, info, ev, opts)
			if m.Own != "" {
				remember(c, slotOwn, m.Own)
			}
			if m.Follow != "" && cfg.followThreads() {
				remember(c, slotFollow, room+" "+m.Follow)
			}
			if m.Event == nil {
				c.Log(abi.LevelDebug, "skipping event", "room", room, "event_id", ev.EventID, "reason", m.Skip)
				continue
			}
			events = append(events, *m.Event)
		}
		if info.Encrypted && !info.Logged {
			c.Log(abi.LevelWarn, "room is end-to-end encrypted: this plugin does not support encryption, so its messages are ignored "+
				"and the first message the host sends there is replaced by a notice saying so", "room", room, "name", info.Name)
			info.Logged = true
		}
		if info != before {
			saveRoom(c, room, info)
		}
	}
	if skipped > 0 {
		c.Log(abi.LevelInfo, "messages from before the bot joined or started are not answered",
			"rooms", strconv.Itoa(len(res.Rooms.Join)), "skipped", strconv.Itoa(skipped))
	}
	return events
}

func membership(ev rawEvent) string {
	var c struct {
		Membership string `json:"membership"`
	}
	json.Unmarshal(ev.Content, &c)
	return c.Membership
}

// learnState applies a state event to what the plugin knows of the room.
func learnState(info *roomInfo, ev rawEvent) {
	switch ev.Type {
	case "m.room.encryption":
		info.Encrypted = true
	case "m.room.name":
		var c struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(ev.Content, &c) == nil {
			info.Name = c.Name
		}
	}
}

// backfill fetches the events a limited timeline left out: /messages backwards from the
// timeline's prev_batch to the previous sync's token, at most backfillPages pages, oldest
// first. What it cannot fetch is logged as a gap.
func backfill(a *api, room, from, since string) []rawEvent {
	var got []rawEvent
	for page := 0; page < backfillPages && from != ""; page++ {
		var res struct {
			Chunk []rawEvent `json:"chunk"`
			End   string     `json:"end"`
		}
		q := url.Values{"dir": {"b"}, "from": {from}, "to": {since}, "limit": {strconv.Itoa(backfillPage)}}
		if err := a.do("GET", clientAPI+"/rooms/"+url.PathEscape(room)+"/messages", q, nil, &res, 5*time.Second); err != nil {
			a.c.Log(abi.LevelWarn, "a sync gap could not be filled: messages in it are missed", "room", room, "error", a.scrub(err.Error()))
			break
		}
		got = append(got, res.Chunk...)
		if res.End == "" || len(res.Chunk) == 0 {
			from = ""
			break
		}
		from = res.End
		if page == backfillPages-1 {
			a.c.Log(abi.LevelWarn, "a sync gap is longer than the plugin fills: older messages in it are missed",
				"room", room, "filled", strconv.Itoa(len(got)))
		}
	}
	for i, j := 0, len(got)-1; i < j; i, j = i+1, j-1 {
		got[i], got[j] = got[j], got[i]
	}
	return got
}

// joinInvites accepts invitations to unencrypted rooms (auto_join); an invitation to an
// encrypted room is left pending and logged.
func joinInvites(a *api, res syncResponse) {
	for _, room := range sortedKeys(res.Rooms.Invite) {
		encrypted := false
		for _, ev := range res.Rooms.Invite[room].InviteState.Events {
			encrypted = encrypted || ev.Type == "m.room.encryption"
		}
		switch {
		case encrypted:
			a.c.Log(abi.LevelWarn, "not joining an end-to-end encrypted room: this plugin does not support encryption", "room", room)
		case !a.cfg.autoJoin():
			a.c.Log(abi.LevelInfo, "invited to a room; auto_join is off", "room", room)
		default:
			if err := a.do("POST", clientAPI+"/rooms/"+url.PathEscape(room)+"/join", nil, struct{}{}, nil, 5*time.Second); err != nil {
				a.c.Log(abi.LevelWarn, "could not join a room the bot was invited to", "room", room, "error", a.scrub(err.Error()))
				continue
			}
			a.c.Log(abi.LevelInfo, "joined a room on invitation", "room", room)
		}
	}
}

// failure logs a failed request and answers with a back-off and status suited to it.
func failure(a *api, what string, err error) *abi.PollResult {
	wait := backoffFailure
	var me *matrixError
	msg := what + ": " + a.scrub(err.Error())
	switch {
	case errors.As(err, &me) && me.unauthorized():
		a.c.Log(abi.LevelError, what+": the homeserver rejected the access token; log the bot in again and update access_token",
			"error", a.scrub(err.Error()))
		return stopped(backoffRefused, "the access token was rejected ("+me.r.Errcode+"): update access_token")
	case errors.As(err, &me) && me.r.RetryAfter > 0:
		wait = me.r.RetryAfter
	case abi.CodeOf(err) == abi.CodeDenied:
		a.c.Log(abi.LevelError, what, "error", a.scrub(err.Error()))
		return stopped(backoffRefused, msg)
	}
	a.c.Log(abi.LevelWarn, what, "error", a.scrub(err.Error()), "backoff_ms", strconv.FormatInt(wait.Milliseconds(), 10))
	return &abi.PollResult{BackoffMs: wait.Milliseconds(), Status: &abi.ProfileStatus{State: abi.StatusDegraded, Message: msg}}
}

func stopped(d time.Duration, msg string) *abi.PollResult {
	return &abi.PollResult{BackoffMs: d.Milliseconds(), Status: &abi.ProfileStatus{State: abi.StatusStopped, Message: msg}}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
