package telegramtest_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	tgt "github.com/hermes-host/hermes-host/conformance/telegramtest"
)

// These tests cross-check the fake with a real Bot API client, go-telegram-bot-api v5.5.1: what
// the fake serves must parse there as the fake means it (updates, errors, retry_after,
// migrate_to_chat_id), and its faults must fail there the way they fail against Telegram.
// The library predates forum topics, so message_thread_id is checked elsewhere.

func newClient(t *testing.T, tg *tgt.Server) *tgbotapi.BotAPI {
	t.Helper()
	api, err := tgbotapi.NewBotAPIWithClient(tgt.DefaultToken, tg.URL()+"/bot%s/%s", tg.Client())
	if err != nil {
		t.Fatalf("the client library could not start against the fake (getMe): %v", err)
	}
	return api
}

func TestClientLibraryGetMe(t *testing.T) {
	tg := tgt.New(t)
	api := newClient(t, tg)
	if api.Self.UserName != tgt.DefaultBotUsername || !api.Self.IsBot || api.Self.ID != tg.Bot().User().ID {
		t.Fatalf("Self %+v", api.Self)
	}
	if api.Self.CanReadAllGroupMessages || !api.Self.CanJoinGroups {
		t.Fatalf("a new bot has privacy mode on and may join groups: %+v", api.Self)
	}
	tg.Bot().SetPrivacyMode(false)
	me, err := api.GetMe()
	if err != nil || !me.CanReadAllGroupMessages {
		t.Fatalf("privacy mode off: %+v %v", me, err)
	}
}

func TestClientLibraryParsesUpdates(t *testing.T) {
	tg := tgt.New(t)
	bot := tg.Bot()
	api := newClient(t, tg)
	ada, bob := tgt.Person(111, "Ada"), tgt.Person(222, "Bob")
	const group, oldGroup, newGroup, channel = int64(-4001), int64(-4002), int64(-1004002), int64(-1009)

	dm := bot.PrivateText(ada, "hello 😀 @"+bot.Username())
	mention := bot.MentionText(group, bob, "ping")
	cmd := bot.Command(group, ada, "resume", "42")
	reply := bot.InjectMessage(tgt.Message{From: &bob, Chat: tgt.Chat{ID: group, Type: tgt.Group}, Text: "re",
		ReplyToMessage: &tgt.Message{MessageID: mention.Message.MessageID}})
	chain := bot.DMReply(ada, dm.Message.MessageID, "chained")
	topic := bot.TopicText(-1007, 0, ada, "in a topic")
	edit, _ := bot.EditText(ada.ID, dm.Message.MessageID, "edited")
	post := bot.ChannelPost(channel, "news")
	migTo, migFrom := bot.Migration(oldGroup, newGroup)
	want := []tgt.Update{dm, mention, cmd, reply, chain, topic, edit, post, migTo, migFrom}

	got, err := api.GetUpdates(tgbotapi.UpdateConfig{Timeout: 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d updates, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if int64(g.UpdateID) != w.UpdateID {
			t.Fatalf("update %d: id %d, want %d", i, g.UpdateID, w.UpdateID)
		}
		gm, wm := g.Message, w.Payload()
		switch {
		case w.EditedMessage != nil:
			gm = g.EditedMessage
		case w.ChannelPost != nil:
			gm = g.ChannelPost
		}
		if gm == nil {
			t.Fatalf("update %d: the library found no %s", w.UpdateID, w.Kind())
		}
		sameMessage(t, w.UpdateID, gm, wm)
	}

	// What the library derives from the fake's entities.
	if m := got[2].Message; !m.IsCommand() || m.Command() != "resume" || m.CommandArguments() != "42" {
		t.Errorf("command: IsCommand %v Command %q args %q", m.IsCommand(), m.Command(), m.CommandArguments())
	}
	if m := got[1].Message; len(m.Entities) != 1 || !m.Entities[0].IsMention() || api.IsMessageToMe(*m) != true {
		t.Errorf("mention entities %+v", m.Entities)
	}
	// A mention after an astral emoji: the UTF-16 offset counts it as 2.
	if e := got[0].Message.Entities; len(e) != 1 || e[0].Offset != len("hello ")+2+1 {
		t.Errorf("dm entities %+v", e)
	}
	if m := got[6].EditedMessage; m.EditDate == 0 || m.Text != "edited" {
		t.Errorf("edit %+v", m)
	}
	if m := got[7].ChannelPost; m.From != nil || m.SenderChat == nil || m.SenderChat.ID != channel {
		t.Errorf("channel post from %+v sender_chat %+v", m.From, m.SenderChat)
	}
	if m := got[8].Message; m.MigrateToChatID != newGroup || m.Chat.ID != oldGroup {
		t.Errorf("migrate_to: %+v", m)
	}
	if m := got[9].Message; m.MigrateFromChatID != oldGroup || m.Chat.ID != newGroup || m.Chat.Type != "supergroup" {
		t.Errorf("migrate_from: %+v chat %+v", m, m.Chat)
	}
	// The topic message's reply_to_message is the topic's creation message, whole.
	if r := got[5].Message.ReplyToMessage; r == nil || r.Chat == nil || r.From == nil || r.Date == 0 {
		t.Errorf("topic root %+v", r)
	}

	// Confirmation through the library's offset.
	if _, err := api.GetUpdates(tgbotapi.UpdateConfig{Offset: got[len(got)-1].UpdateID + 1}); err != nil {
		t.Fatal(err)
	}
	if c := bot.Confirmed(); c != migFrom.UpdateID {
		t.Fatalf("confirmed %d", c)
	}
}

// sameMessage compares a message as the library parsed it with the fake's.
func sameMessage(t *testing.T, id int64, g *tgbotapi.Message, w *tgt.Message) {
	t.Helper()
	if int64(g.MessageID) != w.MessageID || g.Chat == nil || g.Chat.ID != w.Chat.ID || g.Chat.Type != w.Chat.Type ||
		g.Text != w.Text || int64(g.Date) != w.Date {
		t.Errorf("update %d: library %+v (chat %+v), fake %+v", id, g, g.Chat, w)
		return
	}
	if (g.From == nil) != (w.From == nil) || (g.From != nil && (g.From.ID != w.From.ID || g.From.UserName != w.From.Username || g.From.IsBot != w.From.IsBot)) {
		t.Errorf("update %d: from %+v, fake %+v", id, g.From, w.From)
	}
	if len(g.Entities) != len(w.Entities) {
		t.Errorf("update %d: entities %+v, fake %+v", id, g.Entities, w.Entities)
	}
	for i := range min(len(g.Entities), len(w.Entities)) {
		ge, we := g.Entities[i], w.Entities[i]
		if ge.Type != we.Type || ge.Offset != we.Offset || ge.Length != we.Length {
			t.Errorf("update %d: entity %d %+v, fake %+v", id, i, ge, we)
		}
	}
	switch {
	case (g.ReplyToMessage == nil) != (w.ReplyToMessage == nil):
		t.Errorf("update %d: reply_to_message %+v, fake %+v", id, g.ReplyToMessage, w.ReplyToMessage)
	case w.ReplyToMessage != nil:
		r, wr := g.ReplyToMessage, w.ReplyToMessage
		if int64(r.MessageID) != wr.MessageID || r.Chat == nil || r.Chat.ID != w.Chat.ID || int64(r.Date) != wr.Date ||
			(r.From == nil) != (wr.From == nil) || r.Text != wr.Text || r.ReplyToMessage != nil {
			t.Errorf("update %d: reply_to_message %+v, fake %+v", id, r, wr)
		}
	}
}

func TestClientLibrarySendAndErrors(t *testing.T) {
	tg := tgt.New(t)
	api := newClient(t, tg)
	ada := tgt.Person(111, "Ada")
	tg.AddPrivate(ada)

	first, err := api.Send(tgbotapi.NewMessage(ada.ID, "first"))
	if err != nil {
		t.Fatal(err)
	}
	msg := tgbotapi.NewMessage(ada.ID, "second")
	msg.ReplyToMessageID = first.MessageID
	second, err := api.Send(msg)
	if err != nil {
		t.Fatal(err)
	}
	sent := tg.Sent(ada.ID, 0)
	if len(sent) != 2 || int64(first.MessageID) != sent[0].Message.MessageID || int64(second.MessageID) != sent[1].Message.MessageID {
		t.Fatalf("ids %d %d, fake %+v", first.MessageID, second.MessageID, sent)
	}
	if r := second.ReplyToMessage; r == nil || r.MessageID != first.MessageID || r.Text != "first" || r.From == nil || !r.From.IsBot {
		t.Fatalf("reply_to_message %+v", second.ReplyToMessage)
	}

	// Flood control: the library's Error carries the code, the description and retry_after.
	tg.InjectFault("sendMessage", tgt.FloodWait(33))
	_, err = api.Send(tgbotapi.NewMessage(ada.ID, "flood"))
	var e *tgbotapi.Error
	if !errors.As(err, &e) || e.Code != 429 || e.RetryAfter != 33 || e.Message != "Too Many Requests: retry after 33" {
		t.Fatalf("429 parsed as %#v", err)
	}

	// A migrated group: MigrateToChatID, on a real 400 from the fake's chat registry.
	tg.MigrateGroup(-4005, -1004005)
	_, err = api.Send(tgbotapi.NewMessage(-4005, "hello"))
	if !errors.As(err, &e) || e.Code != 400 || e.MigrateToChatID != -1004005 || !strings.Contains(e.Message, "upgraded to a supergroup") {
		t.Fatalf("migration parsed as %#v", err)
	}
	if _, err := api.Send(tgbotapi.NewMessage(-1004005, "there")); err != nil {
		t.Fatalf("send to the supergroup: %v", err)
	}

	// A plain refusal.
	_, err = api.Send(tgbotapi.NewMessage(999, "nobody"))
	if !errors.As(err, &e) || e.Code != 400 || e.Message != "Bad Request: chat not found" || e.RetryAfter != 0 || e.MigrateToChatID != 0 {
		t.Fatalf("chat not found parsed as %#v", err)
	}
}

// Faults fail in the library as they would against Telegram: not as a Bot API Error, so a
// client cannot mistake them for a refusal. After the effect, the message is posted anyway.
func TestClientLibraryFaults(t *testing.T) {
	tg := tgt.New(t)
	api := newClient(t, tg)
	api.Client = &http.Client{Timeout: 300 * time.Millisecond}
	chat := int64(111)
	tg.AddPrivate(tgt.Person(chat, "Ada"))
	faults := []tgt.Fault{
		tgt.ServerError(502).AfterEffect(),
		tgt.MalformedJSON().AfterEffect(),
		tgt.TruncatedBody().AfterEffect(),
		tgt.ConnectionReset().AfterEffect(),
		tgt.Slow(time.Minute),
		tgt.NoAnswer(),
	}
	for i, f := range faults {
		tg.InjectFault("sendMessage", f)
		_, err := api.Send(tgbotapi.NewMessage(chat, f.String()))
		var e *tgbotapi.Error
		if err == nil || errors.As(err, &e) {
			t.Errorf("%s: library answered %v, want a transport or decoding error", f, err)
		}
		if n := len(tg.Sent(chat, 0)); n != i+1 {
			t.Errorf("%s: %d messages posted, want %d", f, n, i+1)
		}
	}
}
