package main

import (
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// This file turns Gateway dispatches into abi.InboundEvents. It is pure (no host calls): what it
// needs from the kv store (whether a channel is a thread, which threads the bot follows) comes
// in mapOptions, so it is unit-tested and fuzzed natively.

// user is a message's author, or a user it mentions.
type user struct {
	ID         string `json:"id"`
	Username   string `json:"username"`
	GlobalName string `json:"global_name"`
	Bot        bool   `json:"bot"`
	System     bool   `json:"system"`
}

// message is the part of a MESSAGE_CREATE the plugin reads.
type message struct {
	ID        string `json:"id"`
	ChannelID string `json:"channel_id"`
	GuildID   string `json:"guild_id"`
	Author    user   `json:"author"`
	Member    *struct {
		Nick string `json:"nick"`
	} `json:"member"`
	Content          string `json:"content"`
	Mentions         []user `json:"mentions"`
	Type             int    `json:"type"`
	WebhookID        string `json:"webhook_id"`
	MessageReference *struct {
		MessageID string `json:"message_id"`
	} `json:"message_reference"`
	ReferencedMessage *struct {
		ID     string `json:"id"`
		Author user   `json:"author"`
	} `json:"referenced_message"`
	Attachments []struct {
		Filename string `json:"filename"`
	} `json:"attachments"`
}

// deletion is a MESSAGE_DELETE.
type deletion struct {
	ID        string `json:"id"`
	ChannelID string `json:"channel_id"`
	GuildID   string `json:"guild_id"`
}

// Message types that are what a person wrote: DEFAULT and REPLY.
const (
	typeDefault = 0
	typeReply   = 19
)

// Channel types that are threads (announcement, public, private).
func isThreadType(t int) bool { return t == 10 || t == 11 || t == 12 }

// channelInfo is what the plugin knows of a channel: a thread has a parent.
type channelInfo struct {
	Type   int    `json:"t"`
	Parent string `json:"p,omitempty"`
}

func (ci channelInfo) thread() bool { return isThreadType(ci.Type) && ci.Parent != "" }

// mapOptions are what mapping needs besides the payload.
type mapOptions struct {
	BotID          string
	RequireMention bool
	// Channel is what is known of the message's channel (the zero value: a plain channel).
	Channel channelInfo
	// FreeResponse reports channels where every message is a turn (nil: none).
	FreeResponse func(channel string) bool
	// Followed reports a thread the bot was mentioned in before (nil: none).
	Followed func(thread string) bool
}

// mapped is the outcome of mapping one dispatch.
type mapped struct {
	Event *abi.InboundEvent // nil when skipped
	Skip  string            // why, when it is
	// Follow names a thread the bot was just mentioned in: the caller remembers it, so that
	// later messages there are turns (follow_threads).
	Follow string
}

// mapMessage maps a MESSAGE_CREATE. err is set only for malformed input; a well-formed message
// the plugin does not turn into an event is a skip.
func mapMessage(raw []byte, o mapOptions) (mapped, error) {
	var m message
	if err := json.Unmarshal(raw, &m); err != nil {
		return mapped{}, err
	}
	switch {
	case m.ID == "" || m.ChannelID == "" || m.Author.ID == "":
		return mapped{Skip: "message without id, channel or author"}, nil
	case o.BotID != "" && m.Author.ID == o.BotID:
		return mapped{Skip: "the bot's own message"}, nil
	case m.Author.Bot || m.Author.System || m.WebhookID != "":
		return mapped{Skip: "a message from a bot or a webhook"}, nil
	case m.Type != typeDefault && m.Type != typeReply:
		return mapped{Skip: "message type " + strconv.Itoa(m.Type)}, nil
	}
	mentioned := o.BotID != "" && (slices.ContainsFunc(m.Mentions, func(u user) bool { return u.ID == o.BotID }) ||
		strings.Contains(m.Content, "<@"+o.BotID+">") || strings.Contains(m.Content, "<@!"+o.BotID+">"))
	text := plainText(stripLeadingMention(m.Content, o.BotID), m.Mentions)
	for _, a := range m.Attachments {
		name := a.Filename
		if name == "" {
			name = "file"
		}
		text = strings.TrimSpace(text + " [file: " + name + "]")
	}
	text = command(text)
	if strings.TrimSpace(text) == "" {
		return mapped{Skip: "message without text"}, nil
	}
	src := abi.Source{ChatID: m.ChannelID, UserID: m.Author.ID, UserName: displayName(&m), MessageID: m.ID}
	out := mapped{}
	ev := &abi.InboundEvent{ID: "msg:" + m.ID, Kind: abi.EventMessage, Text: text, Mentioned: mentioned, UnixMs: snowflakeMillis(m.ID)}
	if ref := m.MessageReference; ref != nil {
		ev.ReplyTo = ref.MessageID
	}
	if m.GuildID == "" {
		src.ChatType = abi.ChatDM
	} else {
		src.ChatType, src.ScopeID = abi.ChatGroup, m.GuildID
		thread := o.Channel.thread()
		if thread {
			src.ChatID, src.ThreadID = o.Channel.Parent, m.ChannelID
		}
		toBot := m.ReferencedMessage != nil && o.BotID != "" && m.ReferencedMessage.Author.ID == o.BotID
		switch {
		case mentioned:
		case !o.RequireMention || (o.FreeResponse != nil && (o.FreeResponse(m.ChannelID) || (thread && o.FreeResponse(o.Channel.Parent)))):
			ev.Addressed = abi.AddressedFreeResponse
		case toBot:
			ev.Addressed = abi.AddressedReply
		case thread && o.Followed != nil && o.Followed(m.ChannelID):
			ev.Addressed = abi.AddressedThread
		case isCommand(text):
			ev.Addressed = abi.AddressedCommand
		default:
			ev.Kind = abi.EventObserve
		}
		if mentioned && thread {
			out.Follow = m.ChannelID
		}
	}
	ev.Source = src
	out.Event = ev
	return out, nil
}

// mapDeletion maps a MESSAGE_DELETE to a redaction of the message.
func mapDeletion(raw []byte, o mapOptions) (mapped, error) {
	var d deletion
	if err := json.Unmarshal(raw, &d); err != nil {
		return mapped{}, err
	}
	if d.ID == "" || d.ChannelID == "" {
		return mapped{Skip: "deletion without id or channel"}, nil
	}
	src := abi.Source{ChatType: abi.ChatDM, ChatID: d.ChannelID, MessageID: d.ID}
	if d.GuildID != "" {
		src.ChatType, src.ScopeID = abi.ChatGroup, d.GuildID
		if o.Channel.thread() {
			src.ChatID, src.ThreadID = o.Channel.Parent, d.ChannelID
		}
	}
	return mapped{Event: &abi.InboundEvent{ID: "del:" + d.ID, Kind: abi.EventRedact, Source: src}}, nil
}

func displayName(m *message) string {
	if m.Member != nil && m.Member.Nick != "" {
		return m.Member.Nick
	}
	if m.Author.GlobalName != "" {
		return m.Author.GlobalName
	}
	return m.Author.Username
}

// snowflakeMillis is the creation time of a Discord id, in Unix milliseconds (0 if it is not one).
func snowflakeMillis(id string) int64 {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return 0
	}
	return int64(n>>22) + 1420070400000
}

// stripLeadingMention removes the bot's mention (and the separators after it) from the start of
// text.
func stripLeadingMention(text, bot string) string {
	if bot == "" {
		return text
	}
	t := strings.TrimLeft(text, " \t\n")
	for _, p := range []string{"<@" + bot + ">", "<@!" + bot + ">"} {
		if rest, ok := strings.CutPrefix(t, p); ok {
			return strings.TrimLeft(rest, " \t\n,:")
		}
	}
	return text
}

var tokenRE = regexp.MustCompile(`<(@!?|@&|#)(\d+)>`)

// plainText decodes Discord's mention tokens for the agent: <@id> becomes @name (from the
// message's mentions, else @id), <@&id> @role, <#id> #channel.
func plainText(s string, mentions []user) string {
	if !strings.Contains(s, "<") {
		return s
	}
	return tokenRE.ReplaceAllStringFunc(s, func(tok string) string {
		m := tokenRE.FindStringSubmatch(tok)
		switch m[1] {
		case "@", "@!":
			for _, u := range mentions {
				if u.ID == m[2] {
					if u.GlobalName != "" {
						return "@" + u.GlobalName
					}
					if u.Username != "" {
						return "@" + u.Username
					}
				}
			}
			return "@" + m[2]
		case "@&":
			return "@role:" + m[2]
		}
		return "#" + m[2]
	})
}

// The host's slash commands (sdk.Commands). Discord's client takes "/" for its own application
// commands, so "!new" is accepted too.
var isCommand, command = sdk.IsCommand, sdk.BangCommand
