package discordtest

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

// These tests check the fake against discordgo, a client written against the real Discord: if
// discordgo connects, receives events, resumes and honours rate limits against the fake, the
// fake speaks Discord's protocol as that client understands it.

// toFake sends discordgo's REST requests (to https://discord.com/api/v9/...) to the fake.
type toFake struct{ base *url.URL }

func (t toFake) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host = t.base.Scheme, t.base.Host
	r.Host = t.base.Host
	return http.DefaultTransport.RoundTrip(r)
}

// received collects discordgo's MESSAGE_CREATE events.
type received struct {
	mu   sync.Mutex
	msgs []*discordgo.MessageCreate
}

func (r *received) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.msgs {
		out = append(out, m.ID)
	}
	return out
}

func (r *received) has(id string) func() bool {
	return func() bool {
		for _, x := range r.ids() {
			if x == id {
				return true
			}
		}
		return false
	}
}

func openDiscordgo(t *testing.T, d *Server) (*discordgo.Session, *received) {
	t.Helper()
	dg, err := discordgo.New("Bot " + d.Token())
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse(d.rest.URL)
	dg.Client = &http.Client{Transport: toFake{base}, Timeout: 10 * time.Second}
	dg.Identify.Intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages | discordgo.IntentsDirectMessages |
		discordgo.IntentsMessageContent
	dg.LogLevel = discordgo.LogError
	rec := &received{}
	dg.AddHandler(func(_ *discordgo.Session, m *discordgo.MessageCreate) {
		rec.mu.Lock()
		rec.msgs = append(rec.msgs, m)
		rec.mu.Unlock()
	})
	if err := dg.Open(); err != nil {
		t.Fatalf("discordgo Open: %v", err)
	}
	t.Cleanup(func() { dg.Close() })
	return dg, rec
}

func wait(t *testing.T, d *Server, what string, cond func() bool) {
	t.Helper()
	if err := d.Wait(testdeadline.Scale(10*time.Second), cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// discordgo connects (GET /gateway, HELLO, IDENTIFY with its intents, READY), receives a mention
// in a guild channel and a DM, and sends; what it sends without allowed_mentions pings, what it
// sends with parse [] does not.
func TestDiscordgoConnectReceiveSend(t *testing.T) {
	d := New(t)
	d.AddChannel(d.Guild(), "4000000000000000001", "general")
	dg, rec := openDiscordgo(t, d)
	ids := d.Identifies()
	if len(ids) != 1 || !ids[0].Accepted || ids[0].Intents&IntentMessageContent == 0 {
		t.Fatalf("identifies %+v", ids)
	}
	if dg.State.User == nil || dg.State.User.ID != DefaultBotID {
		t.Fatalf("READY user %+v", dg.State.User)
	}
	m := d.Mention("4000000000000000001", Ann, "hello there")
	dm := d.DM(Bob, "psst")
	wait(t, d, "both messages", func() bool { return rec.has(m.ID)() && rec.has(dm.ID)() })
	// The mention, whichever of the two the session read first.
	rec.mu.Lock()
	got := rec.msgs[slices.IndexFunc(rec.msgs, func(mc *discordgo.MessageCreate) bool { return mc.ID == m.ID })]
	rec.mu.Unlock()
	if got.GuildID != DefaultGuildID || got.Author.ID != Ann.ID || len(got.Mentions) != 1 || got.Mentions[0].ID != DefaultBotID ||
		!strings.Contains(got.Content, "hello there") {
		t.Fatalf("mention as discordgo read it: %+v", got.Message)
	}

	sent, err := dg.ChannelMessageSend("4000000000000000001", "hi @everyone")
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := dg.ChannelMessageSendComplex("4000000000000000001", &discordgo.MessageSend{Content: "quiet @everyone <@" + Ann.ID + ">",
		AllowedMentions: &discordgo.MessageAllowedMentions{Parse: []discordgo.AllowedMentionType{}}})
	if err != nil {
		t.Fatal(err)
	}
	posts := d.Posted("4000000000000000001")
	if len(posts) != 2 || posts[0].ID != sent.ID || posts[1].ID != quiet.ID {
		t.Fatalf("posts %+v, sent %s and %s", posts, sent.ID, quiet.ID)
	}
	if !posts[0].Pinged.Everyone || posts[1].Pinged.Any() {
		t.Fatalf("pings: without allowed_mentions %+v, with parse [] %+v", posts[0].Pinged, posts[1].Pinged)
	}
	// The bot's own messages come back over the Gateway, as Discord sends them.
	wait(t, d, "the bot's own message echoed", rec.has(sent.ID))
}

// A 429 with retry_after is waited out and retried by discordgo; an exhausted bucket's
// X-RateLimit headers make it wait before the next request, so the bucket never answers 429.
func TestDiscordgoRateLimits(t *testing.T) {
	d := New(t)
	ch := "4000000000000000002"
	d.AddChannel(d.Guild(), ch, "general")
	dg, _ := openDiscordgo(t, d)

	d.InjectFault(OpCreate, RateLimited(300*time.Millisecond))
	if _, err := dg.ChannelMessageSend(ch, "after the 429"); err != nil {
		t.Fatal(err)
	}
	reqs := d.Requests(OpCreate)
	if len(reqs) != 2 || reqs[0].Status != 429 || reqs[1].Status != 200 || reqs[1].At.Sub(reqs[0].At) < 300*time.Millisecond {
		t.Fatalf("requests %+v: want a 429, then the retry at least retry_after later", reqs)
	}

	other := "4000000000000000003"
	d.AddChannel(d.Guild(), other, "random")
	d.SetRouteLimit(other, RouteLimit{Limit: 1, Window: 700 * time.Millisecond})
	for _, text := range []string{"one", "two"} {
		if _, err := dg.ChannelMessageSend(other, text); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.RateLimitHits(); n != 0 {
		t.Fatalf("%d requests into an exhausted bucket: the headers did not tell discordgo to wait", n)
	}
	var at []time.Time
	for _, r := range d.Requests(OpCreate) {
		if r.ChannelID == other {
			at = append(at, r.At)
		}
	}
	if len(at) != 2 || at[1].Sub(at[0]) < 600*time.Millisecond {
		t.Fatalf("second request %v after the first: want it after the bucket's reset", at[1].Sub(at[0]))
	}
}

// op 7 makes discordgo reconnect and RESUME (it closes with 1012, which keeps the session); a
// connection cut under it makes it RESUME too, and what was dispatched meanwhile is replayed
// once. A zombied connection (no heartbeat ACKs) makes it close with 1000, which ends the session
// as Discord ends it: its RESUME is refused (op 9 d=false) and it IDENTIFYs. So does a RESUME of
// an expired session.
func TestDiscordgoReconnectResumeInvalidSession(t *testing.T) {
	d := New(t, WithHeartbeatInterval(100*time.Millisecond))
	ch := "4000000000000000004"
	d.AddChannel(d.Guild(), ch, "general")
	_, rec := openDiscordgo(t, d)
	first := d.Say(ch, Ann, "before")
	wait(t, d, "the first message", rec.has(first.ID))

	if !d.RequestReconnect() {
		t.Fatal("no connection to send op 7 on")
	}
	wait(t, d, "a RESUME after op 7", func() bool { r := d.Resumes(); return len(r) == 1 && r[0].Accepted })
	second := d.Say(ch, Ann, "after op 7")
	wait(t, d, "the message after op 7", rec.has(second.ID))

	d.DropConnections()
	away := d.Say(ch, Bob, "while the connection is down")
	wait(t, d, "a RESUME after the drop", func() bool { r := d.Resumes(); return len(r) == 2 && r[1].Accepted })
	wait(t, d, "the message dispatched while down", rec.has(away.ID))

	wait(t, d, "heartbeats", func() bool { return len(d.Heartbeats()) >= 2 })
	if !d.Zombie() {
		t.Fatal("no connection to zombie")
	}
	wait(t, d, "a fresh IDENTIFY after the zombie", func() bool { return len(d.Identifies()) == 2 })
	if r := d.Resumes(); len(r) != 3 || r[2].Accepted {
		t.Fatalf("resumes %+v: discordgo closed the zombie with 1000, so its RESUME must be refused", r)
	}
	third := d.Say(ch, Ann, "after the new session")
	wait(t, d, "the message of the new session", rec.has(third.ID))

	d.ExpireSession()
	d.DropConnections()
	wait(t, d, "a fresh IDENTIFY after op 9", func() bool { return len(d.Identifies()) == 3 })
	fourth := d.Say(ch, Ann, "after the expired session")
	wait(t, d, "the message after the expired session", rec.has(fourth.ID))
	if r := d.Resumes(); len(r) != 4 || r[3].Accepted {
		t.Fatalf("resumes %+v: want the fourth refused", r)
	}
	seen := map[string]int{}
	for _, id := range rec.ids() {
		seen[id]++
	}
	for _, m := range []*Message{first, second, away, third, fourth} {
		if seen[m.ID] != 1 {
			t.Fatalf("message %q received %d times (ids %v)", m.Content, seen[m.ID], rec.ids())
		}
	}
	if v := d.Violations(); len(v) > 0 {
		t.Fatalf("violations: %v", v)
	}
}
