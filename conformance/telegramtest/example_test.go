package telegramtest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance/telegramtest"
	"github.com/hermes-host/hermes-host/internal/chunk"
)

// A minimal adapter loop against the fake: long-poll, then answer in the same topic.
func Example() {
	tg := telegramtest.New(nil)
	defer tg.Close()
	bot := tg.Bot()
	chat, topics := tg.AddForum(-1001234567890, "Team", telegramtest.Topic{Name: "ops"})
	bot.TopicText(chat.ID, topics[0], telegramtest.Person(111, "Ada"), "@hermes_test_bot status?")

	var got struct {
		Result []telegramtest.Update `json:"result"`
	}
	resp, _ := http.PostForm(tg.BotURL(bot.Token())+"/getUpdates", url.Values{"timeout": {"10"}})
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	m := got.Result[0].Message

	resp, _ = http.PostForm(tg.BotURL(bot.Token())+"/sendMessage", url.Values{
		"chat_id":           {fmt.Sprint(m.Chat.ID)},
		"message_thread_id": {fmt.Sprint(m.MessageThreadID)},
		"text":              {"all green"},
	})
	resp.Body.Close()

	sent, _ := tg.WaitSent(chat.ID, topics[0], 1, 5*time.Second)
	fmt.Println(sent[0].Message.Text, sent[0].Message.IsTopicMessage)
	// Output: all green true
}

// Scenario 32 end to end: a 5000-unit reply split by internal/chunk is accepted by the fake as
// two messages, while the unsplit text is refused.
func TestScenario32ThroughFake(t *testing.T) {
	tg := telegramtest.New(t)
	tg.AddPrivate(telegramtest.Person(111, "Ada"))
	var b strings.Builder
	b.WriteString("Result 😀:\n```sh\n")
	for chunk.Len(b.String(), abi.UnitUTF16) < 4990 {
		b.WriteString("echo 'łódź 🚀'\n")
	}
	b.WriteString("```\nok")
	text := b.String()
	for chunk.Len(text, abi.UnitUTF16) < 5000 {
		text += "."
	}
	send := func(s string) *http.Response {
		resp, err := tg.Client().PostForm(tg.BotURL(telegramtest.DefaultToken)+"/sendMessage",
			url.Values{"chat_id": {"111"}, "text": {s}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := send(text); resp.StatusCode != 400 {
		t.Fatalf("unsplit text accepted: %d", resp.StatusCode)
	}
	parts := chunk.Split(text, abi.MessageLimit{Max: telegramtest.MaxTextLength, Unit: abi.UnitUTF16})
	if len(parts) != 2 {
		t.Fatalf("%d parts", len(parts))
	}
	for _, p := range parts {
		if resp := send(p); resp.StatusCode != 200 {
			t.Fatalf("part refused: %d", resp.StatusCode)
		}
	}
	got := tg.SentTexts(111, 0)
	if len(got) != 2 || !strings.HasSuffix(got[0], "(1/2)") || !strings.HasSuffix(got[1], "(2/2)") {
		t.Fatalf("transcript %q", got)
	}
	for i, p := range got {
		if strings.Count(p, "```")%2 != 0 {
			t.Fatalf("part %d has unbalanced fences", i+1)
		}
	}
}
