package main

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	tgt "github.com/hermes-host/hermes-host/conformance/telegramtest"
)

var (
	ada = tgt.Person(111, "Ada")
	bob = tgt.Person(222, "Bob")
	me  = identity{ID: 123456789, Username: tgt.DefaultBotUsername}
)

// mapped runs an update built by the fake through the parser, as poll and webhook do.
func mapped(t *testing.T, u tgt.Update, requireMention bool) (*abi.InboundEvent, string) {
	t.Helper()
	raw, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	id, ev, skip, err := parseUpdate(raw, mapOptions{Me: me, RequireMention: requireMention})
	if err != nil || id != u.UpdateID {
		t.Fatalf("parseUpdate: id %d, %v", id, err)
	}
	if ev != nil {
		checkEvent(t, ev)
	}
	return ev, skip
}

// checkEvent asserts the invariants every event must hold.
func checkEvent(t testing.TB, ev *abi.InboundEvent) {
	t.Helper()
	if !strings.HasPrefix(ev.ID, "update:") || len(ev.ID) == len("update:") {
		t.Fatalf("event id %q", ev.ID)
	}
	if ev.Kind != abi.EventMessage && ev.Kind != abi.EventObserve && ev.Kind != abi.EventCallback {
		t.Fatalf("event kind %q", ev.Kind)
	}
	if (ev.Kind == abi.EventCallback) != (ev.CallbackID != "") {
		t.Fatalf("callback id %q on a %s event", ev.CallbackID, ev.Kind)
	}
	for _, a := range ev.Attachments {
		if a.Ref == "" || a.Kind == "" || a.MIMEType == "" || len(a.Data) != 0 {
			t.Fatalf("attachment %+v", a)
		}
	}
	s := ev.Source
	switch s.ChatType {
	case abi.ChatDM, abi.ChatGroup, abi.ChatForum, abi.ChatChannel:
	default:
		t.Fatalf("chat type %q", s.ChatType)
	}
	if s.ChatID == "" || s.ChatID == "0" || s.MessageID == "" {
		t.Fatalf("source %+v", s)
	}
	if s.ThreadID != "" && s.ChatType != abi.ChatForum && s.ChatType != abi.ChatDM {
		t.Fatalf("thread id on a %s chat: %+v", s.ChatType, s)
	}
	if s.ChatType == abi.ChatForum && s.ThreadID == "" {
		t.Fatalf("forum event without a thread: %+v", s)
	}
	if strings.TrimSpace(ev.Text) == "" && len(ev.Attachments) == 0 && ev.Kind != abi.EventCallback {
		t.Fatalf("event without text: %+v", ev)
	}
}

func TestMapChatsAndTopics(t *testing.T) {
	tg := tgt.New(t)
	bot := tg.Bot()
	forum, topics := tg.AddForum(-1001000000001, "Team", tgt.Topic{Name: "ops"})

	// A topic message: forum + thread, and the topic's creation message is not a reply.
	ev, _ := mapped(t, bot.TopicText(forum.ID, topics[0], ada, "@hermes_test_bot status?"), true)
	if ev.Source.ChatType != abi.ChatForum || ev.Source.ThreadID != itoa(topics[0]) || ev.ReplyTo != "" ||
		ev.Kind != abi.EventMessage || !ev.Mentioned || ev.Text != "status?" {
		t.Fatalf("topic message: %+v", ev)
	}
	if ev.Source.UserID != "111" || ev.Source.UserName != "ada" || ev.Source.ChatName != "Team" || ev.UnixMs == 0 {
		t.Fatalf("topic message sender: %+v", ev)
	}

	// A reply in the General topic carries a stray message_thread_id: no thread.
	ev, _ = mapped(t, bot.GeneralTopicReply(forum.ID, ada, 5, "@hermes_test_bot and this?"), true)
	if ev.Source.ChatType != abi.ChatGroup || ev.Source.ThreadID != "" || ev.ReplyTo != "5" {
		t.Fatalf("general topic reply: %+v", ev)
	}

	// The General topic, flagged as a topic (thread 1) or not, is the chat itself: one key.
	flagged, _ := mapped(t, bot.InjectMessage(tgt.Message{From: &ada, Chat: forum, Text: "@hermes_test_bot general",
		MessageThreadID: tgt.GeneralTopic, IsTopicMessage: true}), true)
	plain, _ := mapped(t, bot.InjectMessage(tgt.Message{From: &ada, Chat: forum, Text: "@hermes_test_bot general"}), true)
	if flagged.Source != (abi.Source{ChatType: abi.ChatGroup, ChatID: plain.Source.ChatID, ChatName: plain.Source.ChatName,
		UserID: "111", UserName: "ada", MessageID: flagged.Source.MessageID}) || plain.Source.ThreadID != "" || plain.Source.ChatType != abi.ChatGroup {
		t.Fatalf("General topic: flagged %+v, plain %+v", flagged.Source, plain.Source)
	}

	// A DM reply chain carries a thread id too: still a plain DM.
	first := bot.PrivateText(ada, "hello")
	ev, _ = mapped(t, bot.DMReply(ada, first.Message.MessageID, "again"), true)
	if ev.Source.ChatType != abi.ChatDM || ev.Source.ThreadID != "" || ev.ReplyTo != itoa(first.Message.MessageID) ||
		ev.Kind != abi.EventMessage || ev.Source.ChatID != "111" {
		t.Fatalf("dm reply: %+v", ev)
	}

	// A channel post has no sender: the channel speaks.
	ev, _ = mapped(t, bot.ChannelPost(-1002000000002, "news"), true)
	if ev.Source.ChatType != abi.ChatChannel || ev.Source.UserID != "-1002000000002" || ev.Kind != abi.EventObserve {
		t.Fatalf("channel post: %+v", ev)
	}
}

func TestMapMentionGating(t *testing.T) {
	tg := tgt.New(t)
	bot := tg.Bot()
	const group = -4000000001

	ev, _ := mapped(t, bot.GroupText(group, ada, "just chatting"), true)
	if ev.Kind != abi.EventObserve || ev.Mentioned || ev.Source.ChatType != abi.ChatGroup {
		t.Fatalf("unmentioned: %+v", ev)
	}
	ev, _ = mapped(t, bot.GroupText(group, ada, "just chatting"), false)
	if ev.Kind != abi.EventMessage {
		t.Fatalf("require_mention false: %+v", ev)
	}
	ev, _ = mapped(t, bot.MentionText(group, ada, "what's up"), true)
	if ev.Kind != abi.EventMessage || !ev.Mentioned || ev.Text != "what's up" {
		t.Fatalf("mentioned: %+v", ev)
	}
	ev, _ = mapped(t, bot.GroupText(group, ada, "hey @HERMES_TEST_BOT look"), true)
	if ev.Kind != abi.EventMessage || ev.Text != "hey @HERMES_TEST_BOT look" {
		t.Fatalf("mention inside text: %+v", ev)
	}
	ev, _ = mapped(t, bot.GroupText(group, ada, "cc @hermes_test_bot_two"), true)
	if ev.Kind != abi.EventObserve {
		t.Fatalf("another bot's longer name counted as a mention: %+v", ev)
	}

	// A reply to the bot's own message is a mention.
	botMsg := tgt.Message{MessageID: 900, From: &tgt.User{ID: me.ID, IsBot: true, Username: me.Username}, Chat: tgt.Chat{ID: group, Type: tgt.Group}, Text: "answer"}
	bot.InjectMessage(botMsg)
	u := bot.InjectMessage(tgt.Message{From: &ada, Chat: tgt.Chat{ID: group, Type: tgt.Group}, Text: "thanks", ReplyToMessage: &tgt.Message{MessageID: 900}})
	ev, _ = mapped(t, u, true)
	if ev.Kind != abi.EventMessage || !ev.Mentioned || ev.ReplyTo != "900" {
		t.Fatalf("reply to the bot: %+v", ev)
	}
	// A reply to someone else is not.
	u = bot.InjectMessage(tgt.Message{From: &bob, Chat: tgt.Chat{ID: group, Type: tgt.Group}, Text: "me too", ReplyToMessage: &tgt.Message{MessageID: u.Message.MessageID}})
	if ev, _ = mapped(t, u, true); ev.Kind != abi.EventObserve {
		t.Fatalf("reply to a person: %+v", ev)
	}

	// Commands: ours lose the @name, another bot's are ignored, bare ones address us.
	ev, _ = mapped(t, bot.Command(group, ada, "new", "fresh start"), true)
	if ev.Kind != abi.EventMessage || ev.Text != "/new fresh start" {
		t.Fatalf("command to us: %+v", ev)
	}
	if ev, skip := mapped(t, bot.GroupText(group, ada, "/new@other_bot x"), true); ev != nil || !strings.Contains(skip, "another bot") {
		t.Fatalf("command to another bot: %+v %q", ev, skip)
	}
	ev, _ = mapped(t, bot.GroupText(group, ada, "/stop"), true)
	if ev.Kind != abi.EventMessage || ev.Text != "/stop" {
		t.Fatalf("bare command: %+v", ev)
	}
	ev, _ = mapped(t, bot.GroupText(group, ada, "@hermes_test_bot /resume 42"), true)
	if ev.Kind != abi.EventMessage || ev.Text != "/resume 42" {
		t.Fatalf("mention then command: %+v", ev)
	}
	ev, _ = mapped(t, bot.Command(ada.ID, ada, "start", ""), true)
	if ev.Kind != abi.EventMessage || ev.Text != "/start" || ev.Source.ChatType != abi.ChatDM {
		t.Fatalf("dm command: %+v", ev)
	}
}

func TestMapSkipsAndEdits(t *testing.T) {
	tg := tgt.New(t)
	bot := tg.Bot()
	const group = -4000000002

	if ev, skip := mapped(t, bot.BotText(group, tgt.Person(333, "Other Bot"), "@hermes_test_bot beep"), true); ev != nil || skip != "message from a bot" {
		t.Fatalf("bot sender: %+v %q", ev, skip)
	}
	orig := bot.MentionText(group, ada, "typo")
	edit, ok := bot.EditText(group, orig.Message.MessageID, "@hermes_test_bot fixed")
	if !ok {
		t.Fatal("edit")
	}
	ev, _ := mapped(t, edit, true)
	if ev.Kind != abi.EventObserve || ev.Text != "(edited) fixed" || ev.Source.MessageID != itoa(orig.Message.MessageID) || ev.ID == "update:"+itoa(orig.UpdateID) {
		t.Fatalf("edit: %+v", ev)
	}
	// Both service messages of a group's upgrade name the new chat and the old one.
	u1, u2 := bot.Migration(-4000000003, -1004000000003)
	for _, u := range []tgt.Update{u1, u2} {
		ev, skip := mapped(t, u, true)
		if ev == nil || ev.Kind != abi.EventObserve || ev.Source.ChatID != "-1004000000003" || ev.Source.ChatType != abi.ChatGroup ||
			ev.MigrateFromChatID != "-4000000003" || ev.Text != MigrationNote || ev.ID != "update:"+itoa(u.UpdateID) {
			t.Fatalf("migration service message: %+v %q", ev, skip)
		}
	}
	// Other service messages are skipped.
	raw0 := `{"update_id": 6, "message": {"message_id": 2, "chat": {"id": -4000000002, "type": "group"}, "from": {"id": 111, "first_name": "Ada"},
	  "date": 1700000000, "new_chat_title": "renamed"}}`
	if _, ev, skip, err := parseUpdate([]byte(raw0), mapOptions{Me: me, RequireMention: true}); err != nil || ev != nil || skip == "" {
		t.Fatalf("title change: %+v %q %v", ev, skip, err)
	}

	// Media: an attachment (the largest photo size), the caption as text.
	raw := `{"update_id": 7, "message": {"message_id": 3, "chat": {"id": 111, "type": "private"}, "from": {"id": 111, "first_name": "Ada"},
	  "date": 1700000000, "photo": [{"file_id": "small", "width": 90, "height": 60}, {"file_id": "x", "width": 900, "height": 600, "file_size": 5000}], "caption": "look"}}`
	_, ev, _, err := parseUpdate([]byte(raw), mapOptions{Me: me, RequireMention: true})
	if err != nil || ev == nil || ev.Text != "look" || ev.Source.UserName != "Ada" || ev.UnixMs != 1700000000000 ||
		len(ev.Attachments) != 1 || !reflect.DeepEqual(ev.Attachments[0], abi.Attachment{Kind: abi.AttachImage, MIMEType: "image/jpeg", Size: 5000, Ref: "x", Caption: "look"}) {
		t.Fatalf("photo: %+v %v", ev, err)
	}
	// Content without a file is still described.
	raw = `{"update_id": 9, "message": {"message_id": 5, "chat": {"id": 111, "type": "private"}, "from": {"id": 111, "first_name": "Ada"},
	  "date": 1700000000, "location": {"latitude": 1, "longitude": 2}}}`
	if _, ev, _, err = parseUpdate([]byte(raw), mapOptions{Me: me}); err != nil || ev == nil || ev.Text != "[location]" || ev.Attachments != nil {
		t.Fatalf("location: %+v %v", ev, err)
	}
	// An anonymous admin writes as the group: not a bot.
	raw = `{"update_id": 8, "message": {"message_id": 4, "chat": {"id": -100555, "type": "supergroup", "title": "G"},
	  "from": {"id": 1087968824, "is_bot": true, "first_name": "Group", "username": "GroupAnonymousBot"},
	  "sender_chat": {"id": -100555, "type": "supergroup", "title": "G"}, "date": 1, "text": "@hermes_test_bot hi"}}`
	_, ev, _, err = parseUpdate([]byte(raw), mapOptions{Me: me, RequireMention: true})
	if err != nil || ev == nil || ev.Kind != abi.EventMessage || ev.Source.UserID != "-100555" || ev.Source.UserName != "G" {
		t.Fatalf("anonymous admin: %+v %v", ev, err)
	}
	// Malformed: a readable update_id still advances the offset.
	id, ev, _, err := parseUpdate([]byte(`{"update_id": 9, "message": {"message_id": "x"}}`), mapOptions{Me: me})
	if err == nil || id != 9 || ev != nil {
		t.Fatalf("malformed: %d %+v %v", id, ev, err)
	}
	if id, _, _, err := parseUpdate([]byte(`[1,2]`), mapOptions{Me: me}); err == nil || id != 0 {
		t.Fatalf("not an object: %d %v", id, err)
	}
	if _, ev, skip, err := parseUpdate([]byte(`{"update_id": 10, "callback_query": {}}`), mapOptions{Me: me}); err != nil || ev != nil || skip == "" {
		t.Fatalf("callback query: %+v %q %v", ev, skip, err)
	}
}

func TestMentionEntitiesUTF16(t *testing.T) {
	// The mention sits after astral characters: entity offsets count UTF-16 units.
	text := "😀😀 @hermes_test_bot go"
	ents := []entity{{Type: "mention", Offset: 5, Length: 16}}
	if !hasMention(text, ents, me) {
		t.Fatal("mention after emoji not found")
	}
	if hasMention(text, []entity{{Type: "mention", Offset: 4, Length: 16}}, me) {
		t.Fatal("misaligned entity matched")
	}
	for _, e := range []entity{{Type: "mention", Offset: -1, Length: 3}, {Type: "mention", Offset: 20, Length: 99}, {Type: "mention", Offset: 1 << 30, Length: 1 << 30}} {
		if hasMention(text, []entity{e}, me) {
			t.Fatalf("out-of-range entity %+v matched", e)
		}
	}
	if !hasMention("hi", []entity{{Type: "text_mention", Offset: 0, Length: 2, User: &user{ID: me.ID}}}, me) {
		t.Fatal("text_mention of the bot not found")
	}
	if got := utf16Len("a😀é"); got != 4 {
		t.Fatalf("utf16Len = %d", got)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Every kind of Telegram media becomes an attachment with its file_id, type, name and size; a
// message with only a file is still a message; a mention in a caption addresses the bot.
func TestMapMediaAttachments(t *testing.T) {
	tg := tgt.New(t)
	bot := tg.Bot()
	const group = -4001
	for _, c := range []struct {
		att  tgt.Attach
		want abi.Attachment
	}{
		{tgt.Attach{Data: []byte("jpg")}, abi.Attachment{Kind: abi.AttachImage, MIMEType: "image/jpeg", Size: 3}},
		{tgt.Attach{Kind: tgt.KindDocument, Data: []byte("%PDF-1"), FileName: "a.pdf", MIMEType: "application/pdf"},
			abi.Attachment{Kind: abi.AttachDocument, MIMEType: "application/pdf", Name: "a.pdf", Size: 6}},
		{tgt.Attach{Kind: tgt.KindVoice, Data: []byte("ogg"), Duration: 2}, abi.Attachment{Kind: abi.AttachVoice, MIMEType: "audio/ogg", Size: 3}},
		{tgt.Attach{Kind: tgt.KindAudio, Data: []byte("mp3!"), FileName: "song.mp3", MIMEType: "audio/mpeg"},
			abi.Attachment{Kind: abi.AttachAudio, MIMEType: "audio/mpeg", Name: "song.mp3", Size: 4}},
		{tgt.Attach{Kind: tgt.KindVideo, Data: []byte("mp4"), MIMEType: "video/mp4"}, abi.Attachment{Kind: abi.AttachVideo, MIMEType: "video/mp4", Size: 3}},
		{tgt.Attach{Kind: tgt.KindVideoNote, Data: []byte("round")}, abi.Attachment{Kind: abi.AttachVideo, MIMEType: "video/mp4", Size: 5}},
		{tgt.Attach{Kind: tgt.KindSticker, Data: []byte("webp"), Emoji: "👍"}, abi.Attachment{Kind: abi.AttachSticker, MIMEType: "image/webp", Size: 4}},
		{tgt.Attach{Data: []byte("x"), Size: 25 << 20}, abi.Attachment{Kind: abi.AttachImage, MIMEType: "image/jpeg", Size: 25 << 20}},
	} {
		u, f := bot.Media(ada.ID, ada, c.att, "")
		ev, skip := mapped(t, u, true)
		want := c.want
		want.Ref = f.ID
		if ev == nil || ev.Kind != abi.EventMessage || ev.Text != "" || len(ev.Attachments) != 1 || !reflect.DeepEqual(ev.Attachments[0], want) {
			t.Errorf("%s: %+v (%s), want %+v", c.att.Kind, ev, skip, want)
		}
	}
	// In a group, a caption that mentions the bot addresses it; the caption is the text.
	u, f := bot.Media(group, ada, tgt.Attach{Kind: tgt.KindDocument, Data: []byte("d")}, "@hermes_test_bot read this")
	ev, _ := mapped(t, u, true)
	if ev.Kind != abi.EventMessage || !ev.Mentioned || ev.Text != "read this" || ev.Attachments[0].Ref != f.ID ||
		ev.Attachments[0].Caption != "@hermes_test_bot read this" {
		t.Fatalf("group caption: %+v", ev)
	}
	// Unaddressed, a file is observed.
	u, _ = bot.Media(group, ada, tgt.Attach{Data: []byte("p")}, "")
	if ev, _ := mapped(t, u, true); ev.Kind != abi.EventObserve || len(ev.Attachments) != 1 {
		t.Fatalf("group photo: %+v", ev)
	}
}

// A button press becomes a callback event in the chat and topic of the message that carried
// the button, from the user who pressed; presses without a usable message or data are skipped.
func TestMapCallbacks(t *testing.T) {
	tg := tgt.New(t)
	bot := tg.Bot()
	forum, topics := tg.AddForum(-1001000000001, "Team", tgt.Topic{Name: "ops"})
	m := tgt.Message{MessageID: 77, MessageThreadID: topics[0], IsTopicMessage: true, Chat: forum, Date: 1700000000,
		From: &tgt.User{ID: me.ID, IsBot: true, Username: me.Username}, Text: "approve?"}
	u := bot.InjectCallback(tgt.CallbackQuery{From: bob, Message: &m, Data: "approve:42"})
	ev, skip := mapped(t, u, true)
	if ev == nil || ev.Kind != abi.EventCallback || ev.CallbackID != "approve:42" || ev.Source.MessageID != "77" ||
		ev.Source.UserID != itoa(bob.ID) || ev.Source.ChatID != itoa(forum.ID) || ev.Source.ThreadID != itoa(topics[0]) ||
		ev.Source.ChatType != abi.ChatForum {
		t.Fatalf("callback: %+v %q", ev, skip)
	}
	raw, _ := json.Marshal(u)
	if callbackQueryID(raw) != u.CallbackQuery.ID || u.CallbackQuery.ID == "" {
		t.Fatalf("query id %q", callbackQueryID(raw))
	}
	for _, q := range []tgt.CallbackQuery{
		{From: bob, Data: "approve:42"},                         // inline mode: no message
		{From: bob, Message: &m},                                // a game: no data
		{From: bob, Message: &m, Data: "not a button id!"},      // forged data
		{From: bob, Message: &m, Data: strings.Repeat("x", 65)}, // too long
	} {
		if ev, skip := mapped(t, bot.InjectCallback(q), true); ev != nil || skip == "" {
			t.Errorf("%+v: %+v", q, ev)
		}
	}
}

// TestRetryAfter: the wait Telegram asks for, from parameters.retry_after or else the first
// "retry after N" in the description that has a number.
func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		param int64
		desc  string
		want  int64
	}{
		{0, "Too Many Requests: retry after 5", 5000},
		{7, "Too Many Requests: retry after 5", 7000},
		{0, "retry after soon; retry after 3", 3000},
		{0, "retry after ", 0},
		{0, "Bad Request: chat not found", 0},
		{0, "retry after 99999999999999999999", 0},
		{0, "retry after 2147483648", 0},
		{0, "retry after 12s", 12000},
	} {
		r := reply{Description: tc.desc}
		r.Parameters.RetryAfter = tc.param
		if got := r.retryAfter(); got != tc.want {
			t.Errorf("retry_after %d, %q: %d ms, want %d", tc.param, tc.desc, got, tc.want)
		}
	}
}
