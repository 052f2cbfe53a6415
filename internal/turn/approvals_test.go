package turn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/approval"
)

var approvalID = regexp.MustCompile(`/approve (ap[a-z0-9]+)`)

// approvalHarness is a harness whose policy asks for the default dangerous commands (timeout:
// how long a request waits) and a directory the test's `rm -rf` would remove.
func approvalHarness(t *testing.T, timeout time.Duration, buttons bool) (*harness, string) {
	t.Helper()
	pol, err := approval.NewPolicy("", nil, timeout, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{Approval: pol, CanButtons: func(string) bool { return buttons }})
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.MkdirAll(filepath.Join(victim, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	return h, victim
}

// prompt waits for the approval prompt of src's chat and returns it and its request id.
func (h *harness) prompt(src abi.Source) (abi.OutboundMessage, string) {
	h.t.Helper()
	m := h.chat.waitFor(h.t, "the approval prompt", func(m abi.OutboundMessage) bool {
		return m.UserID == src.UserID && strings.Contains(m.Text, "Approval needed")
	})
	id := approvalID.FindStringSubmatch(m.Text)
	if id == nil {
		h.t.Fatalf("no request id in %q", m.Text)
	}
	return m, id[1]
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (h *harness) approvalState(id string) approval.Record {
	h.t.Helper()
	r, err := h.e.opt.Approvals.Get(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// A dangerous command waits for its requester: nothing runs until /approve, then it runs once
// and its output is the answer.
func TestApprovalApproveRunsTheCommand(t *testing.T) {
	h, victim := approvalHarness(t, time.Hour, false)
	h.say(dm, "sh rm -rf "+victim+" && echo $((40+2))-removed") // the output is not in the prompt
	m, id := h.prompt(dm)
	if !strings.Contains(m.Text, "rm -rf "+victim) || !strings.Contains(m.Text, "recursive rm") || len(m.Buttons) != 0 {
		t.Fatalf("prompt %+v: want the command, the rule, and no buttons on a platform without them", m)
	}
	if !exists(victim) || h.approvalState(id).State != approval.StatePending {
		t.Fatal("the command ran before anyone answered")
	}
	h.say(dm, "/approve "+id)
	h.chat.waitFor(t, "the confirmation", func(m abi.OutboundMessage) bool { return strings.Contains(m.Text, "✅ Approved "+id) })
	h.chat.waitFor(t, "the command's output", func(m abi.OutboundMessage) bool { return strings.Contains(m.Text, "42-removed") })
	if exists(victim) {
		t.Fatal("approved, and the directory is still there")
	}
	if r := h.approvalState(id); r.State != approval.StateApproved || r.DecidedBy != "echo:u1" {
		t.Fatalf("record %+v", r)
	}
	h.say(dm, "/approve "+id)
	h.chat.waitFor(t, "a second answer refused", func(m abi.OutboundMessage) bool { return strings.Contains(m.Text, id+" is approved already") })
}

// /deny (without an id: the sender's only request in the chat) refuses it; the command never
// runs and the agent's answer says why.
func TestApprovalDenyRefuses(t *testing.T) {
	h, victim := approvalHarness(t, time.Hour, false)
	h.say(dm, "sh rm -rf "+victim)
	_, id := h.prompt(dm)
	h.say(dm, "/deny")
	h.chat.waitFor(t, "the confirmation", func(m abi.OutboundMessage) bool { return strings.Contains(m.Text, "🚫 Denied "+id) })
	h.chat.waitFor(t, "the turn's answer", func(m abi.OutboundMessage) bool { return strings.Contains(m.Text, "was denied") })
	if !exists(victim) {
		t.Fatal("denied, and the command ran")
	}
	if r := h.approvalState(id); r.State != approval.StateDenied {
		t.Fatalf("record %+v", r)
	}
	h.say(dm, "/deny")
	h.chat.waitFor(t, "nothing waits", func(m abi.OutboundMessage) bool {
		return strings.Contains(m.Text, "no approval request waiting for you")
	})
}

// Another member of the group cannot answer ann's request, by command or by button; ann can.
func TestApprovalOnlyTheRequesterAnswers(t *testing.T) {
	h, victim := approvalHarness(t, time.Hour, true)
	ann := abi.Source{Platform: "echo", Profile: "main", ChatType: abi.ChatGroup, ChatID: "G", UserID: "ann"}
	bob := ann
	bob.UserID = "bob"
	h.say(ann, "sh rm -rf "+victim)
	m, id := h.prompt(ann)
	if len(m.Buttons) != 2 || m.Buttons[0].ID != "approve:"+id || m.Buttons[1].ID != "deny:"+id {
		t.Fatalf("buttons %+v", m.Buttons)
	}
	h.say(bob, "/approve "+id)
	h.chat.waitFor(t, "bob refused", func(m abi.OutboundMessage) bool {
		return m.UserID == "bob" && strings.Contains(m.Text, "Only the user who asked")
	})
	h.press(bob, m.Buttons[0].ID)
	refusals := 0 // waitFor's match runs under the chat's lock: it counts, it does not call back
	h.chat.waitFor(t, "bob's press refused", func(m abi.OutboundMessage) bool {
		if m.UserID == "bob" && strings.Contains(m.Text, "Only the user who asked") {
			refusals++
		}
		return refusals == 2
	})
	if !exists(victim) || h.approvalState(id).State != approval.StatePending {
		t.Fatal("bob's answer counted")
	}
	h.press(ann, m.Buttons[0].ID)
	h.chat.waitFor(t, "ann's press", func(m abi.OutboundMessage) bool { return strings.Contains(m.Text, "✅ Approved "+id) })
	h.chat.waitFor(t, "the command ran", func(m abi.OutboundMessage) bool { return !exists(victim) })
}

// press dispatches a button press of src's.
func (h *harness) press(src abi.Source, button string) {
	h.t.Helper()
	msgMu.Lock()
	msgSeq++
	id := fmt.Sprintf("press%d", msgSeq)
	msgMu.Unlock()
	if _, err := h.e.Dispatch(context.Background(), "echo", "main", abi.InboundEvent{ID: id, Kind: abi.EventCallback, Source: src, CallbackID: button}); err != nil {
		h.t.Fatal(err)
	}
}

// Without an answer within the timeout the request is denied and the command never runs.
func TestApprovalTimeoutDenies(t *testing.T) {
	h, victim := approvalHarness(t, 300*time.Millisecond, false)
	h.say(dm, "sh rm -rf "+victim)
	_, id := h.prompt(dm)
	h.chat.waitFor(t, "the turn's answer", func(m abi.OutboundMessage) bool { return strings.Contains(m.Text, "nobody answered in time") })
	if r := h.approvalState(id); r.State != approval.StateExpired || !exists(victim) {
		t.Fatalf("record %+v, directory there %v", r, exists(victim))
	}
	h.say(dm, "/approve "+id)
	h.chat.waitFor(t, "a late yes refused", func(m abi.OutboundMessage) bool { return strings.Contains(m.Text, id+" is expired already") })
	time.Sleep(100 * time.Millisecond)
	if !exists(victim) {
		t.Fatal("a late yes ran the command")
	}
}

// /new while a request waits voids it in the transition: the command never runs, a yes sent
// after /new is refused, and the request's row says why.
func TestApprovalVoidedByNew(t *testing.T) {
	h, victim := approvalHarness(t, time.Hour, false)
	h.say(dm, "sh rm -rf "+victim)
	_, id := h.prompt(dm)
	before := h.current(dm)
	h.say(dm, "/new")
	h.chat.waitFor(t, "/new's confirmation", func(m abi.OutboundMessage) bool { return h.current(dm).Generation > before.Generation })
	deadline := time.Now().Add(20 * time.Second)
	for h.approvalState(id).State == approval.StatePending && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if r := h.approvalState(id); r.State != approval.StateVoided || r.Reason != "voided by /new" {
		t.Fatalf("record %+v", r)
	}
	h.say(dm, "/approve "+id)
	h.chat.waitFor(t, "the yes after /new refused", func(m abi.OutboundMessage) bool { return strings.Contains(m.Text, id+" is voided already") })
	time.Sleep(100 * time.Millisecond)
	if !exists(victim) {
		t.Fatal("the command ran after /new")
	}
}

// A yes that lands just before a /new does not run the command in the new conversation: the
// /new is applied between the approval and the start (testHookApproved), and the start, inside
// the key's boundary, finds the turn's generation gone.
func TestApprovalYesThenNewDoesNotRun(t *testing.T) {
	h, victim := approvalHarness(t, time.Hour, false)
	moved := make(chan struct{})
	testHookApproved = func(approval.Record) {
		before := h.current(dm)
		h.say(dm, "/new")
		for deadline := time.Now().Add(20 * time.Second); h.current(dm).Generation == before.Generation; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Error("/new was not applied")
				break
			}
		}
		close(moved)
	}
	t.Cleanup(func() { testHookApproved = nil })
	h.say(dm, "run rm -rf "+victim) // in the background: a stopped turn does not kill it
	_, id := h.prompt(dm)
	h.say(dm, "/approve "+id)
	<-moved
	h.chat.waitFor(t, "/new's confirmation", func(m abi.OutboundMessage) bool { return strings.Contains(m.Text, "New conversation") })
	time.Sleep(200 * time.Millisecond)
	if !exists(victim) {
		t.Fatal("a yes followed by /new ran the command in the new conversation")
	}
	if r := h.approvalState(id); r.State != approval.StateApproved {
		t.Fatalf("record %+v: the yes stands, the command did not run", r)
	}
}

// A command that needs no approval runs at once, and `ps`-like builtin commands are untouched.
func TestApprovalOrdinaryCommandsRunAtOnce(t *testing.T) {
	h, _ := approvalHarness(t, time.Hour, false)
	h.say(dm, "sh echo plain-and-simple")
	h.chat.waitFor(t, "the output", func(m abi.OutboundMessage) bool { return strings.Contains(m.Text, "plain-and-simple") })
	if n := h.chat.count("Approval needed"); n != 0 {
		t.Fatalf("%d prompts for an ordinary command", n)
	}
}

// A notification turn's dangerous command is denied without a prompt: the tool returns
// ErrReadOnly, nothing is asked in the chat, and the denial is recorded for the key.
func TestApprovalNotificationTurnDeniesWithoutAsking(t *testing.T) {
	pol, _ := approval.NewPolicy("", nil, time.Hour, nil)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	spawned := make(chan error, 1)
	a := agent.Func(func(ctx context.Context, tr *agent.Turn) (*agent.Reply, error) {
		if !tr.Synthetic {
			return &agent.Reply{Text: "ok"}, nil
		}
		if tr.Tools == nil {
			spawned <- fmt.Errorf("the notification turn has no tools")
			return &agent.Reply{Text: "job summary"}, nil
		}
		_, err := tr.Tools.Spawn(ctx, agent.SpawnRequest{Command: "rm -rf " + victim})
		spawned <- err
		return &agent.Reply{Text: "job summary"}, nil
	})
	h := newHarness(t, a, Options{Approval: pol})
	p := h.spawn(dm, "echo the-job", true)
	h.eventDone(p.ID)
	select {
	case err := <-spawned:
		if !errors.Is(err, ErrReadOnly) {
			t.Fatalf("the notification turn's rm -rf: %v, want ErrReadOnly", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no notification turn")
	}
	h.chat.waitFor(t, "the notification's answer", func(m abi.OutboundMessage) bool { return strings.Contains(m.Text, "job summary") })
	if n := h.chat.count("Approval needed"); n != 0 || !exists(victim) {
		t.Fatalf("%d prompts; directory there %v", n, exists(victim))
	}
	recs, err := h.e.opt.Approvals.ForKey(context.Background(), h.key(dm))
	if err != nil || len(recs) != 1 || recs[0].State != approval.StateDenied || recs[0].DecidedBy != "host" || recs[0].Command != "rm -rf "+victim {
		t.Fatalf("records %+v, %v: want the host's denial", recs, err)
	}
}
