package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/telegramtest"
)

// TestTelegramEndToEnd runs the real binary with the real telegram.wasm against the Telegram
// fake: replies land in the right chat and topic; a process started from topic 42 notifies topic
// 42 while the user talks in topic 7; after /new an old completion is dropped and recorded; after
// /compress one arrives in the continuation.
func TestTelegramEndToEnd(t *testing.T) {
	const forum = -1001234
	tg, bot, bin, data := startTelegramHost(t, func(tg *telegramtest.Server) {
		tg.AddForum(forum, "Ops", telegramtest.Topic{ID: 42, Name: "builds"}, telegramtest.Topic{ID: 7, Name: "chat"})
	}, `{tools: [shell, processes], groups: {"-1001234": {users: ["111"], require_mention: false}}}`)
	ann := telegramtest.User{ID: 111, FirstName: "Ann", Username: "ann"}

	topicHas := func(thread int64, sub string) func() bool {
		return func() bool {
			for _, s := range tg.SentTexts(forum, thread) {
				if strings.Contains(s, sub) {
					return true
				}
			}
			return false
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := tg.Wait(60*time.Second, cond); err != nil {
			t.Fatalf("%s: %v\ntopic 42: %q\ntopic 7: %q", what, err, tg.SentTexts(forum, 42), tg.SentTexts(forum, 7))
		}
	}

	bot.TopicText(forum, 42, ann, "help")
	waitFor("a reply in topic 42", topicHas(42, "built-in agent"))

	bot.TopicText(forum, 42, ann, "run sleep 1; echo tg-done-42")
	waitFor("the start confirmation in 42", topicHas(42, "Started"))
	bot.TopicText(forum, 7, ann, "hello from topic 7")
	waitFor("a reply in topic 7", topicHas(7, "hello from topic 7"))
	waitFor("the completion in topic 42", topicHas(42, "tg-done-42\n"))
	if topicHas(7, "tg-done-42\n")() {
		t.Fatal("the completion leaked into topic 7")
	}

	bot.TopicText(forum, 42, ann, "run sleep 1; echo tg-stale-output")
	waitFor("the second start", topicHas(42, "tg-stale-output"))
	bot.TopicText(forum, 42, ann, "/new")
	waitFor("the /new confirmation", topicHas(42, "New conversation"))

	bot.TopicText(forum, 42, ann, "run sleep 1; echo tg-compressed-output")
	waitFor("the third start", topicHas(42, "tg-compressed-output"))
	bot.TopicText(forum, 42, ann, "/compress")
	waitFor("the completion in the continuation", topicHas(42, "tg-compressed-output\n"))

	// The stale completion never reached Telegram, and the ledger says why.
	for _, s := range tg.SentTexts(forum, 42) {
		if strings.Contains(s, "tg-stale-output") && !strings.HasPrefix(s, "Started") {
			t.Fatalf("stale output sent: %q", s)
		}
	}
	eventually(t, "the stale completion to be recorded as dropped", func() bool {
		out, err := runCLI(bin, data, "deliveries", "ls", "--dropped")
		return err == nil && strings.Contains(out, "stale: user_boundary")
	})
}

// startTelegramHost runs the binary with telegram.wasm pointed at a fresh Bot API fake, with
// access (a YAML flow mapping) as the main profile's authorization.
func startTelegramHost(t *testing.T, setup func(*telegramtest.Server), access string) (*telegramtest.Server, *telegramtest.Bot, string, string) {
	t.Helper()
	h := startTelegramWith(t, setup, access)
	return h.tg, h.bot, h.bin, h.data
}

// openAccess admits everyone on the main profile, in DMs and every group, with tools: for tests
// of the platform's behaviour, not of who may talk.
const openAccess = `{allow_all: true, tools: [shell, processes], groups: {"*": {allow_all: true, require_mention: false}}}`

// serveTelegram runs the binary with telegram.wasm pointed at tg (default limits: a 10 s call
// deadline) and access as the main profile's authorization; it returns the binary, the data
// directory and the admin listener's address.
func serveTelegram(t *testing.T, tg *telegramtest.Server, access string) (bin, data, admin string) {
	t.Helper()
	return serveTelegramWith(t, tg, "", access)
}

// TestTelegramFloodWaitHonoured: a 429 with retry_after holds the chat: no sendMessage reaches
// the fake before retry_after has passed, and the message is then delivered once.
func TestTelegramFloodWaitHonoured(t *testing.T) {
	ann := telegramtest.User{ID: 222, FirstName: "Bo"}
	tg, bot, _, _ := startTelegramHost(t, func(tg *telegramtest.Server) { tg.AddPrivate(ann) }, `{users: ["222"]}`)
	tg.InjectFault("sendMessage", telegramtest.FloodWait(2))
	bot.PrivateText(ann, "help")
	if err := tg.Wait(60*time.Second, func() bool { return len(tg.Requests("sendMessage", ann.ID)) >= 1 }); err != nil {
		t.Fatal(err)
	}
	flooded := tg.Requests("sendMessage", ann.ID)[0].Time
	if err := tg.Wait(60*time.Second, func() bool { return len(tg.SentTexts(ann.ID, 0)) >= 1 }); err != nil {
		t.Fatal(err)
	}
	reqs := tg.Requests("sendMessage", ann.ID)
	if len(reqs) != 2 || reqs[1].Time.Sub(flooded) < 2*time.Second {
		t.Fatalf("sendMessage at %v then %v; want the retry ≥ 2 s after the 429", flooded, reqs[len(reqs)-1].Time)
	}
	if n := len(tg.SentTexts(ann.ID, 0)); n != 1 {
		t.Fatalf("%d messages delivered", n)
	}
}
