package telegramtest

import (
	"strings"
	"testing"
)

const (
	groupID = int64(-4001234567)
	superID = int64(-1001234567890)
	forumID = int64(-1009876543210)
)

func TestSendMessageReturnsMessage(t *testing.T) {
	s := New(t)
	s.AddPrivate(ada)
	var m1, m2 Message
	mustOK(t, api(t, s, DefaultToken, "sendMessage", map[string]any{"chat_id": 111, "text": "  hello  "}), &m1)
	mustOK(t, api(t, s, DefaultToken, "sendMessage", map[string]any{"chat_id": "111", "text": "again"}), &m2)
	if m1.Text != "hello" || m1.Chat.ID != 111 || m1.Chat.Type != Private || m1.From == nil || !m1.From.IsBot || m1.Date == 0 {
		t.Fatalf("message %+v", m1)
	}
	if m2.MessageID != m1.MessageID+1 {
		t.Fatalf("message ids %d, %d", m1.MessageID, m2.MessageID)
	}
	// Each chat counts its own ids.
	s.AddGroup(groupID, "G")
	var g Message
	mustOK(t, api(t, s, DefaultToken, "sendMessage", map[string]any{"chat_id": groupID, "text": "g"}), &g)
	if g.MessageID != 1 {
		t.Fatalf("group message id %d", g.MessageID)
	}
	s.AddChannel(-1005555555555, "News", "hermes_news")
	mustOK(t, api(t, s, DefaultToken, "sendMessage", map[string]any{"chat_id": "@hermes_news", "text": "by username"}), nil)
	if got := s.SentTexts(-1005555555555, 0); len(got) != 1 {
		t.Fatalf("channel transcript %q", got)
	}
}

func TestSendMessageErrors(t *testing.T) {
	s := New(t)
	s.AddPrivate(ada)
	s.AddSupergroup(superID, "S")
	s.AddForum(forumID, "F", Topic{ID: 17, Name: "ops"})
	s.MigrateGroup(groupID, -1003333333333)
	send := func(p map[string]any) reply { return api(t, s, DefaultToken, "sendMessage", p) }

	mustFail(t, send(map[string]any{"text": "x"}), 400, "Bad Request: chat_id is empty")
	mustFail(t, send(map[string]any{"chat_id": 999, "text": "x"}), 400, "Bad Request: chat not found")
	mustFail(t, send(map[string]any{"chat_id": "@nobody", "text": "x"}), 400, "Bad Request: chat not found")
	mustFail(t, send(map[string]any{"chat_id": 111}), 400, "Bad Request: message text is empty")
	mustFail(t, send(map[string]any{"chat_id": 111, "text": " \n "}), 400, "Bad Request: message text is empty")
	mustFail(t, send(map[string]any{"chat_id": 111, "text": strings.Repeat("a", 4097)}), 400, "Bad Request: message is too long")

	r := send(map[string]any{"chat_id": groupID, "text": "x"})
	mustFail(t, r, 400, "Bad Request: group chat was upgraded to a supergroup chat")
	if r.Parameters == nil || r.Parameters.MigrateToChatID != -1003333333333 {
		t.Fatalf("no migrate_to_chat_id: %s", r.Raw)
	}
	mustOK(t, send(map[string]any{"chat_id": -1003333333333, "text": "x"}), nil)

	const noThread = "Bad Request: message thread not found"
	mustFail(t, send(map[string]any{"chat_id": forumID, "message_thread_id": 99, "text": "x"}), 400, noThread)
	mustFail(t, send(map[string]any{"chat_id": forumID, "message_thread_id": GeneralTopic, "text": "x"}), 400, noThread)
	mustFail(t, send(map[string]any{"chat_id": superID, "message_thread_id": 17, "text": "x"}), 400, noThread)
	mustFail(t, send(map[string]any{"chat_id": 111, "message_thread_id": 5, "text": "x"}), 400, noThread)
	mustOK(t, send(map[string]any{"chat_id": forumID, "message_thread_id": 17, "text": "x"}), nil)

	mustFail(t, send(map[string]any{"chat_id": 111, "text": "x", "reply_to_message_id": 500}), 400, "Bad Request: message to be replied not found")
	mustFail(t, send(map[string]any{"chat_id": 111, "text": "x", "reply_parameters": map[string]any{"message_id": 500}}), 400, "Bad Request: message to be replied not found")
	var m Message
	mustOK(t, send(map[string]any{"chat_id": 111, "text": "x", "reply_parameters": map[string]any{"message_id": 500, "allow_sending_without_reply": true}}), &m)
	if m.ReplyToMessage != nil {
		t.Fatalf("reply to a missing message: %+v", m.ReplyToMessage)
	}
	// The same with form encoding, where reply_parameters is a JSON string.
	mustFail(t, callForm(t, s, DefaultToken, "sendMessage", map[string][]string{"chat_id": {"111"}, "text": {"x"}, "reply_parameters": {`{"message_id":500}`}}),
		400, "Bad Request: message to be replied not found")

	mustFail(t, send(map[string]any{"chat_id": 111, "text": "Hello!", "parse_mode": "MarkdownV2"}), 400,
		`Bad Request: can't parse entities: Character '!' is reserved and must be escaped with the preceding '\'`)
	mustFail(t, send(map[string]any{"chat_id": 111, "text": "<b>bold", "parse_mode": "HTML"}), 400,
		`Bad Request: can't parse entities: Can't find end tag corresponding to start tag "b"`)
	mustFail(t, send(map[string]any{"chat_id": 111, "text": "x", "parse_mode": "Klingon"}), 400, "Bad Request: unsupported parse_mode")

	// Nothing failed was recorded in a transcript.
	if got := s.SentTexts(111, 0); len(got) != 1 {
		t.Fatalf("transcript %q", got)
	}
}

// The limit counts UTF-16 code units: an astral emoji costs 2.
func TestUTF16LengthBoundary(t *testing.T) {
	s := New(t)
	s.AddPrivate(ada)
	send := func(text string) reply {
		return api(t, s, DefaultToken, "sendMessage", map[string]any{"chat_id": 111, "text": text})
	}
	mustOK(t, send(strings.Repeat("😀", 2048)), nil)                                           // 4096 units
	mustFail(t, send(strings.Repeat("😀", 2048)+"a"), 400, "Bad Request: message is too long") // 4097
	mustFail(t, send(strings.Repeat("a", 4095)+"😀"), 400, "Bad Request: message is too long") // 4096 code points, 4097 units
	mustOK(t, send(strings.Repeat("a", 4094)+"😀"), nil)
	mustOK(t, send(strings.Repeat("é", 4096)), nil) // 8192 bytes, 4096 units
	// Length is counted after markup parsing.
	mustOK(t, api(t, s, DefaultToken, "sendMessage", map[string]any{"chat_id": 111, "parse_mode": "HTML",
		"text": "<b>" + strings.Repeat("a", 4096) + "</b>"}), nil)
}

func TestTopicsAndTranscripts(t *testing.T) {
	s := New(t)
	b := s.Bot()
	chat, topics := s.AddForum(forumID, "F", Topic{Name: "ops"}, Topic{Name: "dev"})
	if topics[0] == topics[1] || topics[0] < 2 {
		t.Fatalf("topic ids %v", topics)
	}
	send := func(p map[string]any) Message {
		var m Message
		p["chat_id"] = chat.ID
		mustOK(t, api(t, s, DefaultToken, "sendMessage", p), &m)
		return m
	}
	m := send(map[string]any{"text": "in ops", "message_thread_id": topics[0]})
	if m.MessageThreadID != topics[0] || !m.IsTopicMessage {
		t.Fatalf("topic message %+v", m)
	}
	send(map[string]any{"text": "in general"})
	// A reply to a topic message without message_thread_id lands in the topic.
	in := b.TopicText(chat.ID, topics[1], ada, "question")
	r := send(map[string]any{"text": "answer", "reply_parameters": map[string]any{"message_id": in.Message.MessageID}})
	if r.MessageThreadID != topics[1] || r.ReplyToMessage == nil || r.ReplyToMessage.Text != "question" {
		t.Fatalf("reply %+v", r)
	}
	if got := s.SentTexts(chat.ID, topics[0]); len(got) != 1 || got[0] != "in ops" {
		t.Fatalf("ops %q", got)
	}
	if got := s.SentTexts(chat.ID, 0); len(got) != 1 || got[0] != "in general" {
		t.Fatalf("general %q", got)
	}
	if got := s.SentTexts(chat.ID, topics[1]); len(got) != 1 || got[0] != "answer" {
		t.Fatalf("dev %q", got)
	}
	if len(s.AllSent()) != 3 {
		t.Fatalf("all %d", len(s.AllSent()))
	}
}

func TestEditMessageText(t *testing.T) {
	s := New(t)
	s.AddPrivate(ada)
	var m Message
	mustOK(t, api(t, s, DefaultToken, "sendMessage", map[string]any{"chat_id": 111, "text": "draft"}), &m)
	edit := func(p map[string]any) reply {
		p["chat_id"], p["message_id"] = 111, m.MessageID
		return api(t, s, DefaultToken, "editMessageText", p)
	}
	mustFail(t, edit(map[string]any{"text": "draft"}), 400,
		"Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message")
	var e Message
	mustOK(t, edit(map[string]any{"text": "final"}), &e)
	if e.Text != "final" || e.EditDate == 0 || e.MessageID != m.MessageID {
		t.Fatalf("edited %+v", e)
	}
	// Same text, different markup (bold) is a modification; the same markup again is not.
	mustOK(t, edit(map[string]any{"text": "*final*", "parse_mode": "MarkdownV2"}), nil)
	mustFail(t, edit(map[string]any{"text": "<b>final</b>", "parse_mode": "HTML"}), 400,
		"Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message")
	sent := s.Sent(111, 0)
	if len(sent) != 1 || sent[0].Message.Text != "final" || strings.Join(sent[0].Edits, ",") != "draft,final" {
		t.Fatalf("transcript %+v", sent)
	}
	mustFail(t, api(t, s, DefaultToken, "editMessageText", map[string]any{"chat_id": 111, "message_id": 999, "text": "x"}), 400, "Bad Request: message to edit not found")
	in := s.Bot().PrivateText(ada, "user's own")
	mustFail(t, api(t, s, DefaultToken, "editMessageText", map[string]any{"chat_id": 111, "message_id": in.Message.MessageID, "text": "x"}), 400, "Bad Request: message can't be edited")
}

func TestSendChatAction(t *testing.T) {
	s := New(t)
	chat, topics := s.AddForum(forumID, "F", Topic{Name: "ops"})
	act := func(p map[string]any) reply {
		p["chat_id"] = chat.ID
		return api(t, s, DefaultToken, "sendChatAction", p)
	}
	r := act(map[string]any{"action": "typing", "message_thread_id": topics[0]})
	mustOK(t, r, nil)
	if string(r.Result) != "true" {
		t.Fatalf("result %s", r.Result)
	}
	mustOK(t, act(map[string]any{"action": "typing", "message_thread_id": GeneralTopic}), nil)
	mustFail(t, act(map[string]any{"action": "typing", "message_thread_id": 4242}), 400, "Bad Request: message thread not found")
	mustFail(t, act(map[string]any{"action": "dancing"}), 400, "Bad Request: wrong parameter action in request")
	got := s.Actions(chat.ID)
	if len(got) != 2 || got[0].Thread != topics[0] || got[1].Thread != GeneralTopic || got[0].Action != "typing" {
		t.Fatalf("actions %+v", got)
	}
}
