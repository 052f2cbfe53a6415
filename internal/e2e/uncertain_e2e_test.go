package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/telegramtest"
	"github.com/hermes-host/hermes-host/internal/delivery"
)

// TestTelegramUncertainReplyIsNeverSilent: under a slow Telegram (the answer comes after the
// call deadline; the message may or may not be posted), a reply recorded "outcome unknown" is
// never resent, and the chat gets exactly one line saying so once Telegram answers again; /last
// then sends the reply again as a new message, on request only.
func TestTelegramUncertainReplyIsNeverSilent(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	ann := telegramtest.Person(311, "Ann")
	th := startTelegram(t, func(tg *telegramtest.Server) {
		tg.AddPrivate(ann)
		tg.InjectFault("sendMessage", telegramtest.Slow(12*time.Second).ForChat(ann.ID))
	})
	tg, bot := th.tg, th.bot
	bot.PrivateText(ann, "help")
	eventually(t, "the reply's outcome unknown", func() bool { return len(th.deliveries(t, "failed")) == 1 })
	// Telegram answers again (the next message is answered at once): the notice follows.
	bot.PrivateText(ann, "ps")
	notice := func() int { return count(tg.SentTexts(ann.ID, 0), delivery.UncertainNotice) }
	if err := tg.Wait(time.Minute, func() bool { return notice() == 1 }); err != nil {
		t.Fatalf("no notice about the uncertain reply: %v; sent %q", err, tg.SentTexts(ann.ID, 0))
	}
	bot.PrivateText(ann, "/last")
	if err := tg.Wait(time.Minute, func() bool { return count(tg.SentTexts(ann.ID, 0), "built-in agent") == 2 }); err != nil {
		t.Fatalf("/last did not send the reply again: %v; sent %q", err, tg.SentTexts(ann.ID, 0))
	}
	// Nothing more comes: one notice, the reply once unasked and once on /last.
	bot.PrivateText(ann, "ps")
	if err := tg.Wait(time.Minute, func() bool { return count(tg.SentTexts(ann.ID, 0), "No processes") == 2 }); err != nil {
		t.Fatal(err)
	}
	if n := notice(); n != 1 {
		t.Fatalf("%d notices: %q", n, tg.SentTexts(ann.ID, 0))
	}
	if n := count(tg.SentTexts(ann.ID, 0), "built-in agent"); n != 2 {
		t.Fatalf("the reply was sent %d times: %q", n, tg.SentTexts(ann.ID, 0))
	}
}

// TestYuanbaoReconnectStormLosesNoReply: for a minute the Yuanbao gateway closes the bot's
// socket every 2 s while the user keeps writing. Replies the plugin cannot send for want of a
// connection ("not connected; not sent") wait for it instead of using up their attempts: every
// message is answered, once.
func TestYuanbaoReconnectStormLosesNoReply(t *testing.T) {
	t.Parallel() // mostly waiting: beside the other long tests (doc.go)
	if testing.Short() {
		t.Skip("a minute-long reconnect storm")
	}
	h := startYuanbaoHost(t, "", "")
	bot := h.bot
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				bot.Close(1012, "service restart")
			}
		}
	}()
	const n = 30
	for i := range n {
		bot.DM(ybAnn, fmt.Sprintf("sh echo storm-reply-%d", i))
		time.Sleep(2 * time.Second)
	}
	close(stop)
	wg.Wait()
	// Busy turns merge, so one message may answer several: count each reply's own line.
	answered := func(i int) int {
		re := regexp.MustCompile(fmt.Sprintf(`(?m)^storm-reply-%d$`, i))
		n := 0
		for _, s := range h.bot.SentTexts("dm", ybAnn.ID) {
			n += len(re.FindAllString(s, -1))
		}
		return n
	}
	if err := h.yb.Wait(3*time.Minute, func() bool {
		for i := range n {
			if answered(i) == 0 {
				return false
			}
		}
		return true
	}); err != nil {
		var missing []int
		for i := range n {
			if answered(i) == 0 {
				missing = append(missing, i)
			}
		}
		failed := 0
		for _, s := range h.bot.SentTexts("dm", ybAnn.ID) {
			if strings.Contains(s, "could not be delivered") {
				failed++
			}
		}
		out, _ := runCLI(h.bin, h.data, "deliveries", "ls")
		t.Fatalf("replies lost to the reconnect storm: %v (%d undelivered notices)\nsent: %q\ndeliveries:\n%s", missing, failed,
			h.bot.SentTexts("dm", ybAnn.ID), out)
	}
	for i := range n {
		if c := answered(i); c != 1 {
			t.Errorf("reply %d posted %d times", i, c)
		}
	}
	t.Logf("%d replies through a minute of reconnects: binds %d", n, bot.Binds())
}
