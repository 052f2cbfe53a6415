package slacktest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

// slack-go's UploadFile (UploadFileV2 before v0.35: files.getUploadURLExternal, a multipart
// POST to the upload URL, files.completeUploadExternal) against the fake: the bytes, the
// channel, thread and comment are recorded, and the file is shared in the thread.
func TestUploadWithSlackGo(t *testing.T) {
	s := New(t)
	team := s.Team()
	ch := team.AddChannel("C0GENERAL", "general")
	root := team.Say(ch, "U0ANN", "the logs?")
	api := slack.New(team.BotToken, slack.OptionAPIURL(s.APIURL()+"/"))
	data := bytes.Repeat([]byte("log line\n"), 1000)
	sum, err := api.UploadFile(slack.UploadFileParameters{Filename: "app.log", FileSize: len(data), Reader: bytes.NewReader(data),
		Title: "App log", Channel: ch, ThreadTimestamp: root.TS, InitialComment: "here"})
	if err != nil {
		t.Fatalf("UploadFile: %v (requests %+v)", err, s.Requests(""))
	}
	up := s.Uploads()
	if len(up) != 1 || sum.ID != up[0].ID || sum.Title != "App log" {
		t.Fatalf("summary %+v, uploads %+v", sum, up)
	}
	f := up[0]
	if !bytes.Equal(f.Data, data) || f.Length != len(data) || f.Channel != ch || f.ThreadTS != root.TS || f.InitialComment != "here" ||
		f.Title != "App log" || !f.Completed || f.ShareTS == "" {
		t.Fatalf("upload %+v", f)
	}
	if p := s.Posted(team.ID, ch, root.TS); len(p) != 1 || len(p[0].Files) != 1 || p[0].TS != f.ShareTS {
		t.Fatalf("thread holds %+v", p)
	}
	// The fake refuses what Slack refuses: a second completion, an unknown file, no length.
	if _, err := api.CompleteUploadExternalContext(context.Background(), slack.CompleteUploadExternalParameters{Files: []slack.FileSummary{{ID: f.ID}}, Channel: ch}); err == nil {
		t.Fatal("a file completed twice")
	}
	if _, err := api.CompleteUploadExternalContext(context.Background(), slack.CompleteUploadExternalParameters{Files: []slack.FileSummary{{ID: "F0NOPE"}}}); err == nil ||
		err.Error() != "file_not_found" {
		t.Fatalf("unknown file: %v", err)
	}
	if _, err := api.UploadFile(slack.UploadFileParameters{Filename: "x", FileSize: 1, Content: "x", Channel: "C0NOPE"}); err == nil ||
		!strings.Contains(err.Error(), "channel_not_found") {
		t.Fatalf("unknown channel: %v", err)
	}
}

// slack-go's GetFile reads a shared file with the bot token; with another workspace's token it
// lands on the sign-in page, which slack-go reports as an error (not the file).
func TestGetFileWithSlackGo(t *testing.T) {
	s := New(t)
	team := s.Team()
	two := s.AddTeam("T0SECOND01", "Second", "xoxb-2-second")
	ch := team.AddChannel("C0GENERAL", "general")
	data := []byte("\x89PNG\r\n\x1a\n picture")
	team.ShareFile(ch, "U0ANN", "a picture", FileSpec{Name: "cat picture.png", Mimetype: "image/png", Data: data})
	files := s.Files()
	if len(files) != 1 {
		t.Fatalf("files %+v", files)
	}
	ev := s.eventFile(&files[0], "U0ANN")
	for _, u := range []string{ev.URLPrivate, ev.URLPrivateDownload} {
		var buf bytes.Buffer
		if err := slack.New(team.BotToken, slack.OptionAPIURL(s.APIURL()+"/")).GetFile(u, &buf); err != nil || !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("GetFile %s: %v %q", u, err, buf.Bytes())
		}
	}
	var buf bytes.Buffer
	err := slack.New(two.BotToken, slack.OptionAPIURL(s.APIURL()+"/")).GetFile(ev.URLPrivateDownload, &buf)
	if err == nil || !strings.Contains(err.Error(), "sign-in") || buf.Len() != 0 {
		t.Fatalf("another workspace's token: %v %q", err, buf.Bytes())
	}
	// Without a token at all: the same redirect.
	resp, err := http.Get(ev.URLPrivate)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), "Sign in") {
		t.Fatalf("without a token: %s %q", resp.Header.Get("Content-Type"), body)
	}
	d := s.Downloads()
	if len(d) != 4 || d[0].Status != 200 || d[2].Status != 302 || d[2].Token != two.BotToken || d[3].Token != "" {
		t.Fatalf("downloads %+v", d)
	}
}

// Blocks posted with slack-go are recorded and checked; a press of their button, as the fake
// POSTs it, is what slack-go's verifier and InteractionCallback accept as Slack's, and a forged
// one fails the verifier.
func TestBlocksAndInteractivityWithSlackGo(t *testing.T) {
	s := New(t)
	team := s.Team()
	team.AddUser("U0ANN", "ann")
	ch := team.AddChannel("C0GENERAL", "general")
	api := slack.New(team.BotToken, slack.OptionAPIURL(s.APIURL()+"/"))
	approve := slack.NewButtonBlockElement("approve:1", "approve:1", slack.NewTextBlockObject("plain_text", "Approve", false, false))
	approve.Style = slack.StylePrimary
	deny := slack.NewButtonBlockElement("deny:1", "deny:1", slack.NewTextBlockObject("plain_text", "Deny", false, false))
	deny.Style = slack.StyleDanger
	_, ts, err := api.PostMessage(ch, slack.MsgOptionText("run it?", false), slack.MsgOptionBlocks(
		slack.NewSectionBlock(slack.NewTextBlockObject("mrkdwn", "run it?", false, false), nil, nil),
		slack.NewActionBlock("choices", approve, deny)))
	if err != nil {
		t.Fatal(err)
	}
	msg := s.Posted(team.ID, ch, "-")[0]
	if msg.TS != ts || len(msg.Buttons()) != 2 || msg.Buttons()[1] != (Button{BlockID: "choices", ActionID: "deny:1", Value: "deny:1", Text: "Deny", Style: "danger"}) {
		t.Fatalf("buttons %+v", msg.Buttons())
	}
	// Slack's limits: a button label over 75 characters is invalid_blocks.
	long := slack.NewButtonBlockElement("x", "x", slack.NewTextBlockObject("plain_text", strings.Repeat("x", 76), false, false))
	if _, _, err := api.PostMessage(ch, slack.MsgOptionBlocks(slack.NewActionBlock("", long))); err == nil || err.Error() != "invalid_blocks" {
		t.Fatalf("a long label: %v", err)
	}

	var mu sync.Mutex
	var got []slack.InteractionCallback
	var refused int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sv, err := slack.NewSecretsVerifier(r.Header, s.SigningSecret())
		if err == nil {
			sv.Write(body)
			err = sv.Ensure()
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			refused++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var cb slack.InteractionCallback
		if err := cb.UnmarshalJSON([]byte(r.FormValue("payload"))); err != nil || r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got = append(got, cb)
	}))
	defer srv.Close()
	s.SetInteractivityURL(srv.URL)
	p, err := team.PressButton("U0ANN", msg, "approve:1")
	if err != nil {
		t.Fatal(err)
	}
	if d, err := s.Interact(p); err != nil || d.Status != 200 {
		t.Fatalf("press: %+v %v", d, err)
	}
	for _, f := range Forgeries() {
		if d, _ := s.ForgeInteraction(f, p); d.Status != 401 {
			t.Errorf("%v: %d", f, d.Status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || refused != len(Forgeries()) {
		t.Fatalf("%d accepted, %d refused", len(got), refused)
	}
	cb := got[0]
	if cb.Type != slack.InteractionTypeBlockActions || len(cb.ActionCallback.BlockActions) != 1 || cb.User.ID != "U0ANN" || cb.Team.ID != team.ID ||
		cb.Channel.ID != ch || cb.Container.MessageTs != ts || cb.Container.ChannelID != ch {
		t.Fatalf("callback %+v", cb)
	}
	if a := cb.ActionCallback.BlockActions[0]; a.ActionID != "approve:1" || a.Value != "approve:1" || a.BlockID != "choices" || a.Type != "button" {
		t.Fatalf("action %+v", a)
	}
}

// An interactive frame is what slack-go's Socket Mode client reads as one, and its ack counts.
func TestSocketInteractiveWithSlackGo(t *testing.T) {
	s := New(t)
	s.SetSocketMode(true)
	team := s.Team()
	ch := team.AddChannel("C0GENERAL", "general")
	api := slack.New(team.BotToken, slack.OptionAPIURL(s.APIURL()+"/"), slack.OptionAppLevelToken(s.AppToken()))
	b := slack.NewButtonBlockElement("go", "go", slack.NewTextBlockObject("plain_text", "Go", false, false))
	if _, _, err := api.PostMessage(ch, slack.MsgOptionText("go?", false), slack.MsgOptionBlocks(slack.NewActionBlock("", b))); err != nil {
		t.Fatal(err)
	}
	client := socketmode.New(api)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- client.RunContext(ctx) }()
	pressed := make(chan slack.InteractionCallback, 1)
	go func() {
		for evt := range client.Events {
			if evt.Type == socketmode.EventTypeInteractive {
				pressed <- evt.Data.(slack.InteractionCallback)
				client.Ack(*evt.Request)
			}
		}
	}()
	if err := s.Wait(wait, func() bool { n, _ := s.SocketConns(); return n == 1 }); err != nil {
		t.Fatal(err)
	}
	p, err := team.PressButton("U0ANN", s.Posted(team.ID, ch, "-")[0], "go")
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.InteractSocket(p)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case cb := <-pressed:
		if len(cb.ActionCallback.BlockActions) != 1 || cb.ActionCallback.BlockActions[0].Value != "go" {
			t.Fatalf("callback %+v", cb)
		}
	case <-time.After(wait):
		t.Fatalf("no interactive event: frames %+v", s.SocketFrames())
	}
	if err := s.WaitAcked(wait, id); err != nil {
		t.Fatalf("%v: acks %+v", err, s.SocketAcks())
	}
	cancel()
	select {
	case <-runDone:
	case <-time.After(wait):
		t.Fatal("socketmode client did not stop")
	}
}
