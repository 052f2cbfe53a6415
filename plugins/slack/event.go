package main

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// This file turns Events API payloads into abi.InboundEvents. It is pure (no host calls): what it
// needs from the kv store (which threads the bot follows) comes in mapOptions, so it is
// unit-tested and fuzzed natively.

// envelope is the outer payload of the Events API (HTTP body, or a Socket Mode frame's payload):
// url_verification, event_callback or app_rate_limited.
type envelope struct {
	Type           string          `json:"type"`
	Challenge      string          `json:"challenge"`
	TeamID         string          `json:"team_id"`
	APIAppID       string          `json:"api_app_id"`
	EventID        string          `json:"event_id"`
	EventTime      int64           `json:"event_time"`
	Event          json.RawMessage `json:"event"`
	Authorizations []struct {
		TeamID string `json:"team_id"`
		UserID string `json:"user_id"`
		IsBot  bool   `json:"is_bot"`
	} `json:"authorizations"`
}

// event is the part of an inner event the plugin reads.
type event struct {
	Type            string `json:"type"`
	Subtype         string `json:"subtype"`
	User            string `json:"user"`
	BotID           string `json:"bot_id"`
	Text            string `json:"text"`
	TS              string `json:"ts"`
	ThreadTS        string `json:"thread_ts"`
	Channel         string `json:"channel"`
	ChannelType     string `json:"channel_type"`
	Team            string `json:"team"`
	DeletedTS       string `json:"deleted_ts"`
	Message         *event `json:"message"`
	PreviousMessage *event `json:"previous_message"`
	Files           []file `json:"files"`
	UserProfile     *struct {
		DisplayName string `json:"display_name"`
		RealName    string `json:"real_name"`
		Name        string `json:"name"`
	} `json:"user_profile"`
	AssistantThread *struct {
		UserID    string `json:"user_id"`
		ChannelID string `json:"channel_id"`
		ThreadTS  string `json:"thread_ts"`
	} `json:"assistant_thread"`
}

// file is a file of a message event (files, on a file_share message).
type file struct {
	ID                 string `json:"id"`
	Name               string `json:"name"`
	Title              string `json:"title"`
	Mimetype           string `json:"mimetype"`
	Filetype           string `json:"filetype"`
	Subtype            string `json:"subtype"` // "slack_audio" for an audio clip recorded in Slack
	Size               int64  `json:"size"`
	Mode               string `json:"mode"` // "hosted"; "external" for a remote file; "tombstone" once deleted
	IsExternal         bool   `json:"is_external"`
	URLPrivate         string `json:"url_private"`
	URLPrivateDownload string `json:"url_private_download"`
}

// attachment maps a file to an abi.Attachment, or reports false for a file whose bytes the
// plugin cannot fetch with the bot token: a remote (external) file, whose url_private is
// outside Slack, a deleted one, or one Slack hides (over the free plan's limit) without a URL.
func (f file) attachment() (abi.Attachment, bool) {
	ref := f.URLPrivateDownload
	if ref == "" {
		ref = f.URLPrivate
	}
	if ref == "" || f.IsExternal || f.Mode == "external" || f.Mode == "tombstone" || f.Mode == "hidden_by_limit" {
		return abi.Attachment{}, false
	}
	name := f.Name
	if name == "" {
		name = f.Title
	}
	return abi.Attachment{Kind: fileKind(f), MIMEType: f.Mimetype, Name: name, Size: max(f.Size, 0), Ref: ref}, true
}

// fileKind tells an attachment's kind from the file's mimetype, else its filetype: audio
// clips recorded in Slack (subtype slack_audio) are voice notes.
func fileKind(f file) string {
	mt := strings.ToLower(f.Mimetype)
	switch {
	case f.Subtype == "slack_audio":
		return abi.AttachVoice
	case strings.HasPrefix(mt, "image/"):
		return abi.AttachImage
	case strings.HasPrefix(mt, "audio/"):
		return abi.AttachAudio
	case strings.HasPrefix(mt, "video/"):
		return abi.AttachVideo
	}
	switch strings.ToLower(f.Filetype) {
	case "png", "jpg", "jpeg", "gif", "webp", "bmp", "heic":
		return abi.AttachImage
	case "mp3", "m4a", "ogg", "wav", "flac", "aac", "opus", "webm_audio":
		return abi.AttachAudio
	case "mp4", "mov", "webm", "mkv", "avi":
		return abi.AttachVideo
	}
	return abi.AttachDocument
}

// mapOptions are what mapping needs besides the payload.
type mapOptions struct {
	// BotUserID is the bot's user id when the envelope's authorizations do not name it.
	BotUserID      string
	RequireMention bool
	ReplyInThread  bool
	// FreeResponse reports channels where every message is a turn (nil: none).
	FreeResponse func(channel string) bool
	// Followed reports a channel thread where the bot was mentioned before (nil: none).
	Followed func(team, channel, thread string) bool
}

// mapped is the outcome of mapping one event_callback.
type mapped struct {
	Event *abi.InboundEvent // nil when the event is skipped
	Skip  string            // why, when it is
	// Follow names a channel thread (team, channel, thread ts) the bot was just mentioned in:
	// the caller remembers it, so that later replies there are turns (follow_threads).
	Follow *threadRef
}

type threadRef struct{ Team, Channel, Thread string }

var (
	errNotEnvelope = errors.New("not an Events API payload (no type)")
	errNoEventID   = errors.New("event_callback without event_id")
	errNoTeam      = errors.New("event_callback without team_id")
)

// parseEnvelope decodes an Events API payload.
func parseEnvelope(raw []byte) (*envelope, error) {
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, err
	}
	if env.Type == "" {
		return nil, errNotEnvelope
	}
	return &env, nil
}

// botUser is the bot's user id in the envelope's workspace: the authorization naming a bot,
// else the configured (or learned) one.
func (env *envelope) botUser(fallback string) string {
	for _, a := range env.Authorizations {
		if a.IsBot && a.UserID != "" && (a.TeamID == "" || a.TeamID == env.TeamID) {
			return a.UserID
		}
	}
	return fallback
}

// mapCallback maps an event_callback. err is set only for malformed input; a well-formed event
// the plugin does not turn into an inbound event is a skip.
func mapCallback(env *envelope, o mapOptions) (mapped, error) {
	if env.EventID == "" {
		return mapped{}, errNoEventID
	}
	var ev event
	if err := json.Unmarshal(env.Event, &ev); err != nil {
		return mapped{}, err
	}
	team := env.TeamID
	if team == "" {
		team = ev.Team
	}
	if team == "" {
		return mapped{}, errNoTeam
	}
	bot := env.botUser(o.BotUserID)
	switch ev.Type {
	case "message", "app_mention":
		return mapMessage(env, team, bot, &ev, o), nil
	case "assistant_thread_started":
		t := ev.AssistantThread
		if t == nil || t.ChannelID == "" || t.ThreadTS == "" || t.UserID == "" {
			return mapped{Skip: "assistant_thread_started without channel, thread or user"}, nil
		}
		return mapped{Event: &abi.InboundEvent{
			ID: "ev:" + env.EventID, Kind: abi.EventSeed, UnixMs: max(env.EventTime, 0) * 1000,
			Source: abi.Source{ChatType: abi.ChatDM, ChatID: t.ChannelID, ThreadID: t.ThreadTS, UserID: t.UserID, ScopeID: team},
		}}, nil
	}
	return mapped{Skip: "event type " + strconv.Quote(ev.Type) + " is not handled"}, nil
}

// mapMessage maps a message or app_mention event.
func mapMessage(env *envelope, team, bot string, ev *event, o mapOptions) mapped {
	switch ev.Subtype {
	case "", "thread_broadcast", "file_share", "me_message":
	case "message_changed":
		return mapEdit(env, team, bot, ev)
	case "message_deleted":
		return mapDelete(env, team, ev)
	default:
		return mapped{Skip: "message subtype " + strconv.Quote(ev.Subtype)}
	}
	if ev.BotID != "" || ev.Subtype == "bot_message" || (bot != "" && ev.User == bot) {
		return mapped{Skip: "message from a bot"}
	}
	if ev.Channel == "" || ev.TS == "" || ev.User == "" {
		return mapped{Skip: "message without channel, ts or user"}
	}
	text := ev.Text
	var atts []abi.Attachment
	for _, f := range ev.Files {
		if a, ok := f.attachment(); ok {
			atts = append(atts, a)
			continue
		}
		// A file the plugin cannot fetch is named in the text, so the agent knows of it.
		name := f.Name
		if name == "" {
			name = "file"
		}
		text = strings.TrimSpace(text + " [file: " + name + "]")
	}
	mentioned := ev.Type == "app_mention" || hasMention(text, bot)
	text = command(plainText(stripLeadingMention(text, bot)))
	if strings.TrimSpace(text) == "" && len(atts) == 0 {
		return mapped{Skip: "message without text"}
	}
	src := source(team, ev)
	out := mapped{}
	kind := abi.EventMessage
	why := "" // abi.Addressed*: why an unmentioned message is addressed to the bot
	if src.ChatType != abi.ChatDM {
		thread := ev.ThreadTS != "" && ev.ThreadTS != ev.TS
		switch {
		case mentioned:
		case !o.RequireMention || (o.FreeResponse != nil && o.FreeResponse(ev.Channel)):
			why = abi.AddressedFreeResponse
		case thread && o.Followed != nil && o.Followed(team, ev.Channel, ev.ThreadTS):
			why = abi.AddressedThread
		case isCommand(text):
			why = abi.AddressedCommand
		}
		addressed := mentioned || why != ""
		switch {
		case thread:
			src.ThreadID = ev.ThreadTS
		case addressed && o.ReplyInThread:
			src.ThreadID = ev.TS // a top-level mention starts a thread: its own session
		}
		if mentioned && src.ThreadID != "" {
			out.Follow = &threadRef{team, ev.Channel, src.ThreadID}
		}
		if !addressed {
			kind = abi.EventObserve
		}
	} else if ev.ThreadTS != "" && ev.ThreadTS != ev.TS {
		src.ThreadID = ev.ThreadTS // a DM thread (an assistant thread, say)
	}
	// message and app_mention deliver one message twice with different event ids: the id is
	// the message's, so the host's durable deduplication keeps one. An observation gets another
	// id, so a message misread as unaddressed (bot user unknown) still starts its turn.
	prefix := "msg:"
	if kind == abi.EventObserve {
		prefix = "obs:"
	}
	out.Event = &abi.InboundEvent{
		ID: prefix + team + ":" + ev.Channel + ":" + ev.TS, Kind: kind, Source: src, Text: text,
		Mentioned: mentioned, Addressed: why, UnixMs: tsMillis(ev.TS), Attachments: atts,
	}
	return out
}

// mapEdit turns message_changed into an observation of the new wording (an edit never starts
// a turn).
func mapEdit(env *envelope, team, bot string, ev *event) mapped {
	m := ev.Message
	if m == nil || m.TS == "" || m.User == "" || m.BotID != "" || (bot != "" && m.User == bot) {
		return mapped{Skip: "edit of a bot's message or without a message"}
	}
	text := plainText(stripLeadingMention(m.Text, bot))
	if strings.TrimSpace(text) == "" || ev.Channel == "" {
		return mapped{Skip: "edit without text or channel"}
	}
	m.Channel, m.ChannelType = ev.Channel, ev.ChannelType
	src := source(team, m)
	if m.ThreadTS != "" {
		src.ThreadID = m.ThreadTS
	}
	return mapped{Event: &abi.InboundEvent{ID: "ev:" + env.EventID, Kind: abi.EventObserve, Source: src,
		Text: "(edited) " + text, UnixMs: tsMillis(ev.TS)}}
}

// mapDelete turns message_deleted into a redaction of the deleted message.
func mapDelete(env *envelope, team string, ev *event) mapped {
	if ev.DeletedTS == "" || ev.Channel == "" {
		return mapped{Skip: "deletion without deleted_ts or channel"}
	}
	src := abi.Source{ChatType: chatType(ev.Channel, ev.ChannelType), ChatID: ev.Channel, ScopeID: team, MessageID: ev.DeletedTS}
	if p := ev.PreviousMessage; p != nil {
		src.UserID = p.User
		if p.ThreadTS != "" && p.ThreadTS != p.TS {
			src.ThreadID = p.ThreadTS
		}
	}
	return mapped{Event: &abi.InboundEvent{ID: "ev:" + env.EventID, Kind: abi.EventRedact, Source: src, UnixMs: tsMillis(ev.TS)}}
}

// source maps the channel and the sender (the thread is decided by the caller).
func source(team string, ev *event) abi.Source {
	s := abi.Source{ChatType: chatType(ev.Channel, ev.ChannelType), ChatID: ev.Channel, UserID: ev.User,
		ScopeID: team, MessageID: ev.TS}
	if p := ev.UserProfile; p != nil {
		for _, n := range []string{p.DisplayName, p.RealName, p.Name} {
			if n != "" {
				s.UserName = n
				break
			}
		}
	}
	return s
}

// chatType maps a channel: direct messages (channel_type im, ids D...) are "dm"; channels,
// private channels and group DMs are "group". app_mention carries no channel_type: the id's
// prefix tells.
func chatType(channel, channelType string) string {
	if channelType == "im" || (channelType == "" && strings.HasPrefix(channel, "D")) {
		return abi.ChatDM
	}
	return abi.ChatGroup
}

// tsMillis converts a Slack timestamp ("1700000000.000100") to Unix milliseconds (0 if it is not
// one).
func tsMillis(ts string) int64 {
	sec, frac, _ := strings.Cut(ts, ".")
	s, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || s < 0 || s > 1<<40 {
		return 0
	}
	ms := s * 1000
	if len(frac) >= 3 {
		if f, err := strconv.ParseInt(frac[:3], 10, 64); err == nil && f >= 0 {
			ms += f
		}
	}
	return ms
}

// hasMention reports whether text mentions user as Slack encodes it: <@U123> or <@U123|name>.
func hasMention(text, user string) bool {
	if user == "" {
		return false
	}
	return strings.Contains(text, "<@"+user+">") || strings.Contains(text, "<@"+user+"|")
}

// stripLeadingMention removes the bot's mention (and the separators after it) from the start of
// text.
func stripLeadingMention(text, user string) string {
	if user == "" {
		return text
	}
	t := strings.TrimLeft(text, " \t\n")
	rest, ok := strings.CutPrefix(t, "<@"+user)
	if !ok || rest == "" || (rest[0] != '>' && rest[0] != '|') {
		return text
	}
	i := strings.IndexByte(rest, '>')
	if i < 0 {
		return text
	}
	return strings.TrimLeft(rest[i+1:], " \t\n,:")
}

// The host's slash commands (sdk.Commands). Slack does not let a user type "/new" in a thread (the
// client takes it for a slash command), so "!new" is accepted too, as the Python gateway does.
var isCommand, command = sdk.IsCommand, sdk.BangCommand

// plainText decodes Slack's message formatting for the agent: <@U1|name> becomes @name (or
// @U1), <#C1|general> #general, <!here> @here, <https://x|label> "label (https://x)", and the
// escapes &lt; &gt; &amp; their characters.
func plainText(s string) string {
	if !strings.ContainsAny(s, "<&") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '<')
		if i < 0 {
			break
		}
		j := strings.IndexByte(s[i:], '>')
		if j < 0 {
			break
		}
		b.WriteString(unescape(s[:i]))
		b.WriteString(decodeLink(s[i+1 : i+j]))
		s = s[i+j+1:]
	}
	b.WriteString(unescape(s))
	out := b.String()
	if !utf8.ValidString(out) {
		out = strings.ToValidUTF8(out, "\uFFFD")
	}
	return out
}

// decodeLink decodes the inside of one <...> sequence.
func decodeLink(in string) string {
	target, label, hasLabel := strings.Cut(in, "|")
	label = unescape(label)
	switch {
	case strings.HasPrefix(target, "@"):
		if hasLabel && label != "" {
			return "@" + strings.TrimPrefix(label, "@")
		}
		return target
	case strings.HasPrefix(target, "#"):
		if hasLabel && label != "" {
			return "#" + label
		}
		return target
	case strings.HasPrefix(target, "!"):
		if hasLabel && label != "" {
			return label
		}
		name, _, _ := strings.Cut(target[1:], "^")
		return "@" + name
	}
	target = unescape(target)
	if hasLabel && label != "" && label != target {
		return label + " (" + target + ")"
	}
	return target
}

var unescaper = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&")

func unescape(s string) string {
	if !strings.Contains(s, "&") {
		return s
	}
	return unescaper.Replace(s)
}
