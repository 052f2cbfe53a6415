package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash/fnv"
	"strconv"

	"github.com/hermes-host/hermes-host/sdk"
)

// roomInfo is what the plugin remembers of a room between polls, in the kv store (one key per
// room): sync sends a room's state only when it changes.
type roomInfo struct {
	Known     bool   `json:"known,omitempty"` // seen in a sync before (a room new to the plugin was just joined)
	Name      string `json:"name,omitempty"`
	Members   int    `json:"members,omitempty"`   // m.joined_member_count, 0 when unknown
	Encrypted bool   `json:"encrypted,omitempty"` // an m.room.encryption state event was seen
	Told      bool   `json:"told,omitempty"`      // the encryption notice was posted (send)
	Logged    bool   `json:"logged,omitempty"`    // the encryption was logged (poll)
}

func roomKey(room string) string {
	if len(room) <= 200 {
		return "room:" + room
	}
	sum := sha256.Sum256([]byte(room))
	return "room#" + hex.EncodeToString(sum[:16])
}

func loadRoom(c *sdk.Context, room string) roomInfo {
	var r roomInfo
	if raw, found, err := c.KVGet(roomKey(room)); err == nil && found {
		json.Unmarshal(raw, &r)
	}
	return r
}

func saveRoom(c *sdk.Context, room string, r roomInfo) error {
	raw, _ := json.Marshal(r)
	return c.KVSet(roomKey(room), raw)
}

// chatType is "dm" for a room of two joined members, "group" otherwise (unknown included: a
// group needs a mention, so a room misread as one loses nothing but an unmentioned turn).
func (r roomInfo) chatType() string {
	if r.Members == 2 {
		return "dm"
	}
	return "group"
}

// Threads the bot follows and messages it sent, remembered in a fixed number of kv slots each,
// by a hash: the store stays bounded (the host caps a plugin's keys), and a thread or message
// whose slot another took later is forgotten (a mention is then needed again).
const slots = 2048

func slotKey(kind, value string) string {
	h := fnv.New32a()
	h.Write([]byte(value))
	return kind + ":" + strconv.Itoa(int(h.Sum32()%slots))
}

func remembered(c *sdk.Context, kind, value string) bool {
	got, found, err := c.KVGet(slotKey(kind, value))
	return err == nil && found && string(got) == value
}

func remember(c *sdk.Context, kind, value string) error {
	if remembered(c, kind, value) {
		return nil
	}
	return c.KVSet(slotKey(kind, value), []byte(value))
}

// Slot kinds.
const (
	slotFollow = "follow" // room + " " + thread root: a thread the bot follows
	slotOwn    = "own"    // an event id the bot sent
)
