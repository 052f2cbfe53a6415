package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	st "github.com/hermes-host/hermes-host/conformance/slacktest"
	"github.com/hermes-host/hermes-host/conformance/telegramtest"
)

var approvalPrompt = regexp.MustCompile(`/approve (ap[a-z0-9]+)`)

// TestApprovalButtonsEndToEnd: the real binary with telegram.wasm against the Bot API fake and
// the builtin agent, the shell granted. `sh rm -rf DIR` waits: the prompt arrives with an inline
// keyboard, and the directory stays until the requester presses Approve (a callback_query);
// then the command runs. A second one is voided by /new: pressing Approve afterwards is refused
// and the directory stays. `sessions show --json` lists both requests and their outcomes.
func TestApprovalButtonsEndToEnd(t *testing.T) {
	t.Parallel()
	ann := telegramtest.User{ID: 4343, FirstName: "Ann"}
	tg := telegramtest.New(t)
	tg.AddPrivate(ann)
	bin, data, _ := serveTelegramWith(t, tg, "\ndemo: {plugin: \"\"}\n", `{users: ["4343"], tools: [shell]}`)
	bot := tg.Bot()
	dirs := t.TempDir()
	first, second := filepath.Join(dirs, "first"), filepath.Join(dirs, "second")
	for _, d := range []string{first, second} {
		if err := os.MkdirAll(filepath.Join(d, "inside"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// waitSent waits for a message to ann containing sub, after the first `after` ones.
	waitSent := func(what, sub string, after int) (telegramtest.SentMessage, int) {
		t.Helper()
		var got telegramtest.SentMessage
		n := 0
		if err := tg.Wait(testWait, func() bool {
			sent := tg.Sent(ann.ID, 0)
			for i := after; i < len(sent); i++ {
				if strings.Contains(sent[i].Message.Text, sub) {
					got, n = sent[i], i+1
					return true
				}
			}
			return false
		}); err != nil {
			t.Fatalf("%s: %v; sent %q", what, err, tg.SentTexts(ann.ID, 0))
		}
		return got, n
	}
	prompt := func(after int) (telegramtest.SentMessage, string, int) {
		t.Helper()
		m, n := waitSent("the approval prompt", "Approval needed", after)
		id := approvalPrompt.FindStringSubmatch(m.Message.Text)
		if id == nil {
			t.Fatalf("no request id in %q", m.Message.Text)
		}
		if !strings.Contains(string(m.Message.ReplyMarkup), `"callback_data":"approve:`+id[1]+`"`) {
			t.Fatalf("the prompt has no Approve button: %s", m.Message.ReplyMarkup)
		}
		return m, id[1], n
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	// The output "42-gone" is not in the prompt, which quotes the command.
	bot.PrivateText(ann, "sh rm -rf "+first+" && echo $((40+2))-gone")
	m, id1, seen := prompt(0)
	if !exists(first) {
		t.Fatal("the command ran before anyone answered")
	}
	if _, err := bot.Press(ann.ID, m.Message.MessageID, ann, "approve:"+id1); err != nil {
		t.Fatal(err)
	}
	_, seen = waitSent("the confirmation", "Approved "+id1, seen)
	waitSent("the command's output", "42-gone", 0)
	if exists(first) {
		t.Fatal("approved and answered, and the directory is still there")
	}

	bot.PrivateText(ann, "sh rm -rf "+second)
	m, id2, seen := prompt(seen)
	bot.PrivateText(ann, "/new")
	_, seen = waitSent("/new's confirmation", "New conversation started", seen)
	if _, err := bot.Press(ann.ID, m.Message.MessageID, ann, "approve:"+id2); err != nil {
		t.Fatal(err)
	}
	waitSent("the press after /new refused", id2+" is voided already", seen)
	if !exists(second) {
		t.Fatal("a press after /new ran the command")
	}

	keys, err := runCLI(bin, data, "sessions", "ls")
	if err != nil {
		t.Fatalf("sessions ls: %v\n%s", err, keys)
	}
	key := regexp.MustCompile(`agent:\S*telegram\S*`).FindString(keys)
	out, err := runCLI(bin, data, "sessions", "show", "--json", key)
	if err != nil {
		t.Fatalf("sessions show %s: %v\n%s", key, err, out)
	}
	var view struct {
		Approvals []struct {
			ID, State, Command, Reason string
		} `json:"approvals"`
	}
	if err := json.Unmarshal([]byte(out), &view); err != nil {
		t.Fatalf("sessions show --json: %v\n%s", err, out)
	}
	states := map[string]string{}
	for _, a := range view.Approvals {
		states[a.ID] = a.State
	}
	if len(view.Approvals) != 2 || states[id1] != "approved" || states[id2] != "voided" {
		t.Fatalf("sessions show lists %+v, want %s approved and %s voided", view.Approvals, id1, id2)
	}
}

// TestApprovalSlackButtonsEndToEnd: the real binary with slack.wasm against the Slack fake. The
// approval prompt in the thread carries Block Kit buttons; another member's press is refused
// and runs nothing; the requester's Deny press refuses the command, whose directory stays.
func TestApprovalSlackButtonsEndToEnd(t *testing.T) {
	t.Parallel()
	h := startSlackHost(t, "")
	team := h.s.Team()
	team.AddUser("U0BOB", "bob")
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	root := team.Mention(slackGeneral, slackAnn, "sh rm -rf "+victim)
	h.waitFor(t, "the approval prompt", h.threadHas(team.ID, root.TS, "Approval needed"))
	var prompt st.Message
	for _, m := range h.s.Posted(team.ID, slackGeneral, root.TS) {
		if strings.Contains(m.Text, "Approval needed") {
			prompt = m
		}
	}
	id := approvalPrompt.FindStringSubmatch(prompt.Text)
	if id == nil || len(prompt.Buttons()) != 2 {
		t.Fatalf("prompt %q with buttons %+v", prompt.Text, prompt.Buttons())
	}
	press := func(user, action string) {
		t.Helper()
		p, err := team.PressButton(user, prompt, action)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := h.s.Interact(p); err != nil || d.Status != 200 {
			t.Fatalf("press %s by %s: %+v %v", action, user, d, err)
		}
	}
	press("U0BOB", "approve:"+id[1])
	h.waitFor(t, "bob's press refused", h.threadHas(team.ID, root.TS, "Only the user who asked"))
	if _, err := os.Stat(victim); err != nil {
		t.Fatal("another member's press ran the command")
	}
	press(slackAnn, "deny:"+id[1])
	h.waitFor(t, "the denial", h.threadHas(team.ID, root.TS, "Denied "+id[1]))
	h.waitFor(t, "the turn's answer", h.threadHas(team.ID, root.TS, "was denied"))
	if _, err := os.Stat(victim); err != nil {
		t.Fatal("denied, and the command ran")
	}
}
