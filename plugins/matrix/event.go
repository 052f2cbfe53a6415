package main

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// syncResponse is the part of a /sync answer the plugin reads.
type syncResponse struct {
	NextBatch string `json:"next_batch"`
	Rooms     struct {
		Join   map[string]joinedRoom  `json:"join"`
		Invite map[string]invitedRoom `json:"invite"`
	} `json:"rooms"`
}

type joinedRoom struct {
	Timeline struct {
		Events    []rawEvent `json:"events"`
		Limited   bool       `json:"limited"`
		PrevBatch string     `json:"prev_batch"`
	} `json:"timeline"`
	State struct {
		Events []rawEvent `json:"events"`
	} `json:"state"`
	Summary struct {
		Joined *int `json:"m.joined_member_count"`
	} `json:"summary"`
}

type invitedRoom struct {
	InviteState struct {
		Events []rawEvent `json:"events"`
	} `json:"invite_state"`
}

// rawEvent is a room event; its content is decoded by kind, so that one malformed event does
// not hide the others.
type rawEvent struct {
	EventID  string          `json:"event_id"`
	Type     string          `json:"type"`
	Sender   string          `json:"sender"`
	StateKey *string         `json:"state_key"`
	Content  json.RawMessage `json:"content"`
	TS       int64           `json:"origin_server_ts"`
	Redacts  string          `json:"redacts"`
}

type relation struct {
	RelType   string `json:"rel_type"`
	EventID   string `json:"event_id"`
	InReplyTo *struct {
		EventID string `json:"event_id"`
	} `json:"m.in_reply_to"`
	IsFallingBack bool `json:"is_falling_back"`
}

type messageContent struct {
	MsgType  string `json:"msgtype"`
	Body     string `json:"body"`
	Mentions *struct {
		UserIDs []string `json:"user_ids"`
		Room    bool     `json:"room"`
	} `json:"m.mentions"`
	RelatesTo  *relation `json:"m.relates_to"`
	NewContent *struct {
		Body string `json:"body"`
	} `json:"m.new_content"`
	Redacts string `json:"redacts"`
}

// mapOptions are what mapping an event needs beyond the event and its room.
type mapOptions struct {
	Me             identity
	RequireMention bool
	ReplyInThread  bool
	FollowThreads  bool
	Followed       func(room, thread string) bool // the bot follows the thread
	Own            func(eventID string) bool      // the bot sent the event
}

// mapped is what one event becomes: an event for the host, or a reason to skip it; and what to
// remember (a thread to follow, one of the bot's own events).
type mapped struct {
	Event  *abi.InboundEvent
	Skip   string
	Follow string // thread root to follow in the event's room
	Own    string // the bot's own event id
}

// mapEvent maps one timeline event of room.
func mapEvent(room string, info roomInfo, ev rawEvent, o mapOptions) mapped {
	if ev.EventID == "" || ev.Sender == "" {
		return mapped{Skip: "event without id or sender"}
	}
	src := abi.Source{ChatType: info.chatType(), ChatID: room, ChatName: info.Name, UserID: ev.Sender,
		UserName: localpart(ev.Sender), MessageID: ev.EventID}
	switch ev.Type {
	case "m.room.message":
	case "m.room.redaction":
		var c messageContent
		json.Unmarshal(ev.Content, &c)
		target := ev.Redacts
		if target == "" {
			target = c.Redacts
		}
		if target == "" || ev.Sender == o.Me.UserID {
			return mapped{Skip: "redaction without a target, or the bot's own"}
		}
		src.MessageID = target
		return mapped{Event: &abi.InboundEvent{ID: ev.EventID, Kind: abi.EventRedact, Source: src, UnixMs: ev.TS}}
	case "m.room.encrypted":
		return mapped{Skip: "encrypted message (end-to-end encryption is not supported)"}
	default:
		return mapped{Skip: "event type " + strconv.Quote(ev.Type)}
	}
	var c messageContent
	if err := json.Unmarshal(ev.Content, &c); err != nil {
		return mapped{Skip: "malformed content: " + err.Error()}
	}
	rel := c.RelatesTo
	thread, replyTo := "", ""
	if rel != nil {
		if rel.RelType == "m.thread" && rel.EventID != "" {
			thread = rel.EventID
		}
		if rel.InReplyTo != nil && !rel.IsFallingBack {
			replyTo = rel.InReplyTo.EventID
		}
	}
	if ev.Sender == o.Me.UserID {
		return mapped{Skip: "the bot's own message", Own: ev.EventID, Follow: thread}
	}
	if rel != nil && rel.RelType == "m.replace" {
		if c.NewContent == nil || strings.TrimSpace(c.NewContent.Body) == "" {
			return mapped{Skip: "edit without new content"}
		}
		src.MessageID = rel.EventID
		return mapped{Event: &abi.InboundEvent{ID: ev.EventID, Kind: abi.EventObserve, Source: src,
			Text: "(edited) " + c.NewContent.Body, UnixMs: ev.TS}}
	}
	text := c.Body
	switch c.MsgType {
	case "m.text":
	case "m.emote":
		text = "* " + localpart(ev.Sender) + " " + text
	case "m.notice":
		return mapped{Skip: "m.notice (automated messages are never answered)"}
	case "m.image", "m.file", "m.audio", "m.video":
		text = "[file: " + text + "]"
	default:
		return mapped{Skip: "msgtype " + strconv.Quote(c.MsgType)}
	}
	mentioned := false
	if c.Mentions != nil {
		mentioned = slices.Contains(c.Mentions.UserIDs, o.Me.UserID)
	} else {
		// A client without intentional mentions: the MXID or the display name in the body.
		mentioned = containsName(text, o.Me.UserID) || (o.Me.DisplayName != "" && containsName(text, o.Me.DisplayName))
	}
	text = command(stripLeadingMention(text, o.Me))
	if strings.TrimSpace(text) == "" {
		return mapped{Skip: "message without text"}
	}
	out := mapped{}
	kind := abi.EventMessage
	why := ""
	ownReply := replyTo != "" && o.Own != nil && o.Own(replyTo)
	if src.ChatType == abi.ChatDM {
		src.ThreadID = thread
		if !mentioned && ownReply {
			why = abi.AddressedReply
		}
	} else {
		switch {
		case mentioned:
		case !o.RequireMention:
			why = abi.AddressedFreeResponse
		case thread != "" && o.FollowThreads && o.Followed != nil && o.Followed(room, thread):
			why = abi.AddressedThread
		case ownReply:
			why = abi.AddressedReply
		case isCommand(text):
			why = abi.AddressedCommand
		}
		addressed := mentioned || why != ""
		switch {
		case thread != "":
			src.ThreadID = thread
		case addressed && o.ReplyInThread:
			src.ThreadID = ev.EventID // a top-level mention starts a thread: its own session
		}
		if (mentioned || why == abi.AddressedReply) && src.ThreadID != "" {
			out.Follow = src.ThreadID
		}
		if !addressed {
			kind = abi.EventObserve
		}
	}
	out.Event = &abi.InboundEvent{ID: ev.EventID, Kind: kind, Source: src, Text: text, ReplyTo: replyTo,
		Mentioned: mentioned, Addressed: why, UnixMs: ev.TS}
	return out
}

// localpart is "ann" for "@ann:example.org".
func localpart(user string) string {
	l, _, _ := strings.Cut(strings.TrimPrefix(user, "@"), ":")
	return l
}

// containsName reports whether name occurs in text as a whole word (case-insensitive).
func containsName(text, name string) bool {
	if name == "" {
		return false
	}
	lt, ln := strings.ToLower(text), strings.ToLower(name)
	for i := 0; ; {
		j := strings.Index(lt[i:], ln)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(ln)
		before, _ := utf8.DecodeLastRuneInString(lt[:start])
		after, _ := utf8.DecodeRuneInString(lt[end:])
		if (start == 0 || !isWordRune(before)) && (end == len(lt) || !isWordRune(after)) {
			return true
		}
		i = start + 1
	}
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' }

// stripLeadingMention removes "Hermes: " or "@hermes:server " that a client puts before the
// text when the user picks the bot's name.
func stripLeadingMention(text string, me identity) string {
	t := strings.TrimSpace(text)
	for _, name := range []string{me.UserID, me.DisplayName} {
		if name == "" || len(t) < len(name) || !strings.EqualFold(t[:len(name)], name) {
			continue
		}
		rest := t[len(name):]
		if rest == "" || strings.ContainsRune(":, \t\n", rune(rest[0])) {
			return strings.TrimLeft(rest, ":, \t\n")
		}
	}
	return text
}

// The host's slash commands (sdk.Commands). Element takes "/new" for one of its own commands, so
// "!new" is accepted too (as on Slack).
var isCommand, command = sdk.IsCommand, sdk.BangCommand
