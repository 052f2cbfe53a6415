package main

import (
	"hash/fnv"
	"strconv"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Threads the bot follows (follow_threads): once it was mentioned in a channel thread, later
// replies there are turns without a new mention. They are remembered in a fixed number of kv
// slots, by a hash of the thread: the store stays bounded (the host caps a plugin's keys), and a
// thread whose slot another thread took later needs a mention again.
const followSlots = 4096

func followKey(t threadRef) (key, value string) {
	value = t.Team + "/" + t.Channel + "/" + t.Thread
	h := fnv.New32a()
	h.Write([]byte(value))
	return "follow:" + strconv.Itoa(int(h.Sum32()%followSlots)), value
}

// followed reports whether the bot follows the thread.
func followed(c *sdk.Context, team, channel, thread string) bool {
	key, value := followKey(threadRef{team, channel, thread})
	got, found, err := c.KVGet(key)
	return err == nil && found && string(got) == value
}

// follow remembers a thread the bot was mentioned in.
func follow(c *sdk.Context, t threadRef) error {
	key, value := followKey(t)
	if got, found, err := c.KVGet(key); err == nil && found && string(got) == value {
		return nil
	}
	return c.KVSet(key, []byte(value))
}

// Messages the bot posted with blocks (buttons), which its edits must carry blocks for, are
// remembered the same way, in their own slots: a message whose slot another took is edited
// with text alone, and Slack then keeps showing its old blocks.
const blockSlots = 4096

func blocksKey(channel, ts string) (key, value string) {
	value = channel + "/" + ts
	h := fnv.New32a()
	h.Write([]byte(value))
	return "blocks:" + strconv.Itoa(int(h.Sum32()%blockSlots)), value
}

// remember notes that the message ts of channel carries blocks.
func remember(c *sdk.Context, channel, ts string) {
	key, value := blocksKey(channel, ts)
	if err := c.KVSet(key, []byte(value)); err != nil {
		c.Log(abi.LevelWarn, "cannot remember a message with buttons; an edit may leave them", "error", err.Error())
	}
}

// hasBlocks reports whether the message ts of channel was posted with blocks.
func hasBlocks(c *sdk.Context, channel, ts string) bool {
	key, value := blocksKey(channel, ts)
	got, found, err := c.KVGet(key)
	return err == nil && found && string(got) == value
}
