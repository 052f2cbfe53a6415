package matrixtest

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// wireEvent is an event as the client-server API serves it.
func (e *Event) wire(forToken string) map[string]any {
	m := map[string]any{"event_id": e.ID, "type": e.Type, "sender": e.Sender, "content": e.Content,
		"origin_server_ts": e.TS, "room_id": e.RoomID}
	if e.StateKey != nil {
		m["state_key"] = *e.StateKey
	}
	unsigned := map[string]any{"age": time.Now().UnixMilli() - e.TS}
	if e.TxnID != "" && e.Token == forToken {
		unsigned["transaction_id"] = e.TxnID
	}
	m["unsigned"] = unsigned
	return m
}

// syncFilter is the part of an inline filter the server honours.
type syncFilter struct {
	Room struct {
		Timeline struct {
			Limit int `json:"limit"`
		} `json:"timeline"`
	} `json:"room"`
}

// sync answers /sync: with since, what happened after it, waiting up to the timeout for
// something; without, each joined room's state and latest events.
func (s *Server) sync(ctx context.Context, req *Request, filter string) (int, any) {
	u := s.user(req.Token)
	since := 0
	if req.Since != "" {
		n, ok := parseToken(req.Since)
		if !ok {
			return 400, &matrixError{status: 400, errcode: "M_INVALID_PARAM", msg: "Invalid since token"}
		}
		since = n
	}
	limit := 0
	if strings.HasPrefix(strings.TrimSpace(filter), "{") {
		var f syncFilter
		if json.Unmarshal([]byte(filter), &f) == nil {
			limit = f.Room.Timeline.Limit
		}
	}
	wait := min(time.Duration(max(req.Timeout, 0))*time.Millisecond, maxSyncWait)
	deadline := time.Now().Add(wait)
	for {
		s.mu.Lock()
		out, any := s.syncLocked(u, since, limit)
		ch := s.changed.C()
		s.mu.Unlock()
		if any || since == 0 || time.Now().After(deadline) {
			return 200, out
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 200, out
		case <-s.ctx.Done():
			t.Stop()
			return 200, out
		}
		t.Stop()
	}
}

// syncLocked builds the sync answer for u after since; any reports whether it has news.
// s.mu must be held.
func (s *Server) syncLocked(u *User, since, want int) (map[string]any, bool) {
	limit := s.limit
	if want > 0 && want < limit {
		limit = want
	}
	join, invite := map[string]any{}, map[string]any{}
	for _, r := range s.sortedRooms() {
		var fresh []*Event
		for _, e := range s.events {
			if e.RoomID == r.ID && e.Pos > since {
				fresh = append(fresh, e)
			}
		}
		switch r.members[u.ID] {
		case "join":
			if len(fresh) == 0 && since > 0 {
				continue
			}
			if since > 0 && s.joinedSinceLocked(u, r, since) {
				// Newly joined: the room as on an initial sync (its state, its latest events,
				// history before the join included), as Synapse answers.
				var all []*Event
				for _, e := range s.events {
					if e.RoomID == r.ID {
						all = append(all, e)
					}
				}
				join[r.ID] = s.joinedLocked(u, r, 0, all, limit)
				continue
			}
			join[r.ID] = s.joinedLocked(u, r, since, fresh, limit)
		case "invite":
			if len(fresh) == 0 {
				continue
			}
			var stripped []map[string]any
			for _, e := range s.currentStateLocked(r.ID, len(s.events)) {
				stripped = append(stripped, map[string]any{"type": e.Type, "state_key": *e.StateKey, "sender": e.Sender, "content": e.Content})
			}
			invite[r.ID] = map[string]any{"invite_state": map[string]any{"events": stripped}}
		}
	}
	out := map[string]any{"next_batch": token(len(s.events)), "rooms": map[string]any{"join": join, "invite": invite, "leave": map[string]any{}}}
	return out, len(join) > 0 || len(invite) > 0
}

func (s *Server) joinedLocked(u *User, r *Room, since int, fresh []*Event, limit int) map[string]any {
	timeline := fresh
	limited := false
	if len(timeline) > limit {
		timeline, limited = timeline[len(timeline)-limit:], true
	}
	start := len(s.events)
	if len(timeline) > 0 {
		start = timeline[0].Pos - 1
	}
	// State: on an initial sync the room's state before the timeline; on a gap, the state
	// events that fell into it.
	var state []map[string]any
	if since == 0 || limited {
		from := since
		for _, e := range s.currentStateLocked(r.ID, start) {
			if e.Pos > from || since == 0 {
				state = append(state, e.wire(u.Token))
			}
		}
	}
	events := make([]map[string]any, 0, len(timeline))
	memberChange := since == 0
	for _, e := range fresh {
		if e.Type == "m.room.member" {
			memberChange = true
		}
	}
	for _, e := range timeline {
		events = append(events, e.wire(u.Token))
	}
	room := map[string]any{
		"timeline": map[string]any{"events": events, "limited": limited, "prev_batch": token(start)},
		"state":    map[string]any{"events": state},
	}
	if memberChange {
		joined := 0
		for _, m := range r.members {
			if m == "join" {
				joined++
			}
		}
		room["summary"] = map[string]any{"m.joined_member_count": joined}
	}
	return room
}

// joinedSinceLocked reports whether u joined r after since (it was not joined at since).
func (s *Server) joinedSinceLocked(u *User, r *Room, since int) bool {
	was := ""
	for _, e := range s.events {
		if e.Pos > since {
			break
		}
		if e.RoomID == r.ID && e.Type == "m.room.member" && e.StateKey != nil && *e.StateKey == u.ID {
			was, _ = e.Content["membership"].(string)
		}
	}
	return was != "join"
}

// currentStateLocked is the room's state at position upto (inclusive): the latest event per
// (type, state key).
func (s *Server) currentStateLocked(room string, upto int) []*Event {
	latest := map[string]*Event{}
	var order []string
	for _, e := range s.events {
		if e.RoomID != room || e.StateKey == nil || e.Pos > upto {
			continue
		}
		k := e.Type + "\x00" + *e.StateKey
		if latest[k] == nil {
			order = append(order, k)
		}
		latest[k] = e
	}
	out := make([]*Event, 0, len(order))
	for _, k := range order {
		out = append(out, latest[k])
	}
	return out
}

func (s *Server) sortedRooms() []*Room {
	out := make([]*Room, 0, len(s.rooms))
	for i := 1; i <= len(s.rooms); i++ {
		for _, r := range s.rooms {
			if r.ID == roomID(i) {
				out = append(out, r)
			}
		}
	}
	return out
}

func roomID(n int) string { return "!room" + pad3(n) + ":" + DefaultServerName }

func pad3(n int) string {
	s := strconv.Itoa(n)
	for len(s) < 3 {
		s = "0" + s
	}
	return s
}

// messages answers /rooms/{room}/messages: events of the room from "from" towards "to" (dir b:
// backwards, newest first; f: forwards), at most limit (default 10).
func (s *Server) messages(req *Request, q url.Values) (int, any) {
	u := s.user(req.Token)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rooms[req.Room]
	if r == nil || r.members[u.ID] != "join" {
		return 403, &matrixError{status: 403, errcode: "M_FORBIDDEN", msg: "User " + u.ID + " not in room " + req.Room}
	}
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 {
		limit = 10
	}
	limit = min(limit, 100)
	dir := q.Get("dir")
	from, ok := parseToken(q.Get("from"))
	if q.Get("from") == "" {
		from, ok = len(s.events), true
		if dir == "f" {
			from = 0
		}
	}
	to, okTo := 0, true
	if q.Get("to") != "" {
		to, okTo = parseToken(q.Get("to"))
	}
	if !ok || !okTo || (dir != "b" && dir != "f") {
		return 400, &matrixError{status: 400, errcode: "M_INVALID_PARAM", msg: "Invalid pagination parameters"}
	}
	var chunk []map[string]any
	end := -1
	if dir == "b" {
		if q.Get("to") == "" {
			to = 0
		}
		for i := from; i > to && len(chunk) < limit; i-- {
			if e := s.events[i-1]; e.RoomID == r.ID {
				chunk = append(chunk, e.wire(u.Token))
				end = i - 1
			}
		}
		// More when some event of the room lies between to and end.
		more := false
		for i := end; i > to && end >= 0; i-- {
			if s.events[i-1].RoomID == r.ID {
				more = true
				break
			}
		}
		out := map[string]any{"start": q.Get("from"), "chunk": nonNil(chunk)}
		if more {
			out["end"] = token(end)
		}
		return 200, out
	}
	if q.Get("to") == "" {
		to = len(s.events)
	}
	for i := from + 1; i <= to && len(chunk) < limit; i++ {
		if e := s.events[i-1]; e.RoomID == r.ID {
			chunk = append(chunk, e.wire(u.Token))
			end = i
		}
	}
	out := map[string]any{"start": q.Get("from"), "chunk": nonNil(chunk)}
	if end >= 0 && end < to {
		out["end"] = token(end)
	}
	return 200, out
}

func nonNil(c []map[string]any) []map[string]any {
	if c == nil {
		return []map[string]any{}
	}
	return c
}
