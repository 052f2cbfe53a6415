package session

import "github.com/hermes-host/hermes-host/abi"

// Stamp records which conversation started a piece of background work (a process, a scheduled
// send). It is taken at spawn time, inside the key's boundary, and travels with every event the
// work produces, so the delivery path can tell whether that conversation still owns the chat.
//
// A zero SessionID means the event is unstamped (recovered from an old checkpoint): it is
// delivered by route, as before stamping existed.
type Stamp struct {
	Key        string     `json:"key"`        // session key, e.g. agent:main:telegram:dm:123
	SessionID  string     `json:"session_id"` // physical session that spawned the work
	Profile    string     `json:"profile"`
	Generation int64      `json:"generation"` // the key's generation when the work started
	Route      abi.Source `json:"route"`      // platform, chat type, chat, thread and user of the spawner
}

// Stamped reports whether s carries a spawning session.
func (s Stamp) Stamped() bool { return s.SessionID != "" }
