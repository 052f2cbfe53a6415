package telegramtest

import (
	"encoding/json"
	"strings"
	"testing"
)

// fetch returns the bot's pending updates through getUpdates, decoded from the wire.
func fetch(t *testing.T, s *Server) []Update {
	t.Helper()
	return updates(t, api(t, s, DefaultToken, "getUpdates", nil))
}

func TestBuildersProduceRealisticUpdates(t *testing.T) {
	s := New(t)
	b := s.Bot()
	other := User{ID: 555, IsBot: true, FirstName: "Other", Username: "other_bot"}

	priv := b.PrivateText(ada, "hello")
	mention := b.MentionText(superID, ada, "what's up")
	plain := b.GroupText(superID, ada, "just chatting")
	cmd := b.Command(superID, ada, "new", "fresh start")
	dmCmd := b.Command(ada.ID, ada, "start", "")
	topic := b.TopicText(forumID, 42, ada, "in the topic")
	general := b.GeneralTopicReply(forumID, ada, topic.Message.MessageID, "general reply")
	dm := b.DMReply(ada, priv.Message.MessageID, "dm reply")
	post := b.ChannelPost(-1005555555555, "announcement")
	fromBot := b.BotText(superID, other, "beep")
	edited, ok := b.EditText(superID, plain.Message.MessageID, "just chatting (edited)")
	if !ok {
		t.Fatal("EditText found no message")
	}

	got := fetch(t, s)
	if len(got) != 11 {
		t.Fatalf("%d updates", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i].UpdateID != got[i-1].UpdateID+1 {
			t.Fatalf("update ids not sequential: %v", ids(got))
		}
	}
	byID := map[int64]Update{}
	for _, u := range got {
		byID[u.UpdateID] = u
	}
	wire := func(u Update) *Message { return byID[u.UpdateID].Payload() }

	if m := wire(priv); m.Chat.Type != Private || m.Chat.ID != ada.ID || m.From.ID != ada.ID || m.MessageThreadID != 0 {
		t.Fatalf("private %+v", m)
	}
	if m := wire(mention); m.Chat.Type != Supergroup || len(m.Entities) != 1 || m.Entities[0].Type != "mention" ||
		m.Entities[0].Length != len("@"+DefaultBotUsername) || !strings.HasPrefix(m.Text, "@"+DefaultBotUsername+" ") {
		t.Fatalf("mention %+v", m)
	}
	if m := wire(plain); len(m.Entities) != 0 {
		t.Fatalf("plain group message has entities %+v", m.Entities)
	}
	if m := wire(cmd); m.Text != "/new@"+DefaultBotUsername+" fresh start" || m.Entities[0].Type != "bot_command" ||
		m.Entities[0].Offset != 0 || m.Entities[0].Length != len("/new@"+DefaultBotUsername) {
		t.Fatalf("command %+v", m)
	}
	if m := wire(dmCmd); m.Text != "/start" || m.Entities[0].Type != "bot_command" {
		t.Fatalf("dm command %+v", m)
	}
	tm := wire(topic)
	if tm.MessageThreadID != 42 || !tm.IsTopicMessage || !tm.Chat.IsForum || tm.ReplyToMessage == nil ||
		tm.ReplyToMessage.MessageID != 42 || tm.ReplyToMessage.ForumTopicCreated == nil {
		t.Fatalf("topic %+v", tm)
	}
	gm := wire(general)
	if gm.MessageThreadID != topic.Message.MessageID || gm.IsTopicMessage || gm.ReplyToMessage.Text != "in the topic" {
		t.Fatalf("general reply %+v", gm)
	}
	dmm := wire(dm)
	if dmm.MessageThreadID == 0 || dmm.IsTopicMessage || dmm.ReplyToMessage.Text != "hello" {
		t.Fatalf("dm reply %+v", dmm)
	}
	if got[8].ChannelPost == nil {
		t.Fatalf("channel post arrived as %+v", got[8])
	}
	if m := wire(post); m.From != nil || m.SenderChat == nil || m.SenderChat.Type != Channel {
		t.Fatalf("channel post %+v", m)
	}
	if m := wire(fromBot); !m.From.IsBot {
		t.Fatalf("bot message %+v", m)
	}
	if u := byID[edited.UpdateID]; u.EditedMessage == nil || u.EditedMessage.Text != "just chatting (edited)" ||
		u.EditedMessage.MessageID != plain.Message.MessageID || u.EditedMessage.EditDate == 0 {
		t.Fatalf("edited %+v", u)
	}
	// "from" is absent from the channel post's JSON, not null.
	raw, _ := json.Marshal(got[8])
	if strings.Contains(string(raw), `"from"`) {
		t.Fatalf("channel post JSON has from: %s", raw)
	}
}

// The traps: echoing the thread id of a General-topic reply or a DM reply chain fails; only
// is_topic_message thread ids can be echoed.
func TestEchoingBogusThreadIDsFails(t *testing.T) {
	s := New(t)
	b := s.Bot()
	topic := b.TopicText(forumID, 42, ada, "in the topic")
	general := b.GeneralTopicReply(forumID, ada, topic.Message.MessageID, "general reply")
	priv := b.PrivateText(ada, "hello")
	dm := b.DMReply(ada, priv.Message.MessageID, "dm reply")

	for _, u := range []Update{general, dm} {
		m := u.Message
		mustFail(t, api(t, s, DefaultToken, "sendMessage", map[string]any{
			"chat_id": m.Chat.ID, "message_thread_id": m.MessageThreadID, "text": "echo"}),
			400, "Bad Request: message thread not found")
		// Replying without the thread id works.
		mustOK(t, api(t, s, DefaultToken, "sendMessage", map[string]any{
			"chat_id": m.Chat.ID, "text": "reply", "reply_parameters": map[string]any{"message_id": m.MessageID}}), nil)
	}
	mustOK(t, api(t, s, DefaultToken, "sendMessage", map[string]any{
		"chat_id": forumID, "message_thread_id": topic.Message.MessageThreadID, "text": "echo"}), nil)
}

func TestDetectEntitiesUTF16Offsets(t *testing.T) {
	got := detectEntities("😀 @someone /help@hermes_test_bot x@notamention /a")
	want := []MessageEntity{
		{Type: "mention", Offset: 3, Length: 8},
		{Type: "bot_command", Offset: 12, Length: 21},
		{Type: "bot_command", Offset: 48, Length: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("entity %d: got %+v want %+v", i, got[i], want[i])
		}
	}
}

func TestMigrationUpdates(t *testing.T) {
	s := New(t)
	b := s.Bot()
	s.AddGroup(groupID, "Old")
	u1, u2 := b.Migration(groupID, superID)
	if u1.Message.Chat.ID != groupID || u1.Message.MigrateToChatID != superID ||
		u2.Message.Chat.ID != superID || u2.Message.Chat.Type != Supergroup || u2.Message.MigrateFromChatID != groupID {
		t.Fatalf("%+v / %+v", u1.Message, u2.Message)
	}
	r := api(t, s, DefaultToken, "sendMessage", map[string]any{"chat_id": groupID, "text": "x"})
	if r.Parameters == nil || r.Parameters.MigrateToChatID != superID {
		t.Fatalf("%s", r.Raw)
	}
	if c, ok := s.Chat(superID); !ok || c.Title != "Old" {
		t.Fatalf("new chat %+v", c)
	}
}
