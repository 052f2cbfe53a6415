package turn

import (
	"context"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
)

// /model shows the conversation's model and switches it among the operator's models: the next
// request names the chosen model; a name not on the list is refused; the choice is the
// session's (a compression continuation keeps it, /new starts from the default).
func TestModelCommand(t *testing.T) {
	srv := agenttest.New(t, agenttest.Text("a1"), agenttest.Text("a2"), agenttest.Text("SUMMARY-M"), agenttest.Text("a3"), agenttest.Text("a4"))
	h := newHarness(t, modelAgent(t, srv, agent.Config{}), Options{Model: "test-model", Models: []string{"qwen3-8b", "llama3.2"}})
	model := func(i int) any { return waitChats(t, srv, i+1)[i].Body["model"] }
	h.say(dm, "/model")
	h.chat.waitFor(t, "the model list", has("Model: test-model (the default).\nModels you can choose: qwen3-8b, llama3.2."))
	h.say(dm, "q1")
	h.chat.waitFor(t, "a1", has("a1"))
	h.say(dm, "/model gpt-9")
	h.chat.waitFor(t, "the refusal", has("“gpt-9” is not a model you can choose here."))
	h.say(dm, "/model qwen3-8b")
	h.chat.waitFor(t, "the switch", has("now uses the model qwen3-8b"))
	h.say(dm, "q2")
	h.chat.waitFor(t, "a2", has("a2"))
	if model(0) != "test-model" || model(1) != "qwen3-8b" {
		t.Fatalf("models asked: %v, %v", model(0), model(1))
	}
	h.say(dm, "/compress")
	h.chat.waitFor(t, "compressed", has("Compressed"))
	h.say(dm, "q3")
	h.chat.waitFor(t, "a3", has("a3"))
	if model(2) != "test-model" || model(3) != "qwen3-8b" { // the summary is the configured model's
		t.Errorf("after /compress: %v, %v", model(2), model(3))
	}
	if info, _ := h.k.Session(context.Background(), h.current(dm).SessionID); info.Model != "qwen3-8b" {
		t.Errorf("the continuation's model %q", info.Model)
	}
	h.say(dm, "/new")
	h.chat.waitFor(t, "new", has("New conversation"))
	h.say(dm, "q4")
	h.chat.waitFor(t, "a4", has("a4"))
	if model(4) != "test-model" {
		t.Errorf("after /new: %v", model(4))
	}
}

// Without agent.models, /model says it is off and sends nothing to the model.
func TestModelCommandOff(t *testing.T) {
	srv := agenttest.New(t)
	h := newHarness(t, modelAgent(t, srv, agent.Config{}), Options{Model: "test-model"})
	h.say(dm, "/model qwen3-8b")
	h.chat.waitFor(t, "off", has(ModelsOff))
	if len(srv.Chats()) != 0 {
		t.Fatal("the model was asked")
	}
}

// /usage adds up the usage the server reported for the conversation's turns.
func TestUsageCommand(t *testing.T) {
	srv := agenttest.New(t,
		agenttest.ToolCalls(agenttest.Call{ID: "c1", Name: "process", Args: `{"action":"list"}`}),
		agenttest.WithUsage(120, 30, agenttest.Text("a1")),
		agenttest.WithUsage(200, 50, agenttest.Text("a2")))
	h := newHarness(t, modelAgent(t, srv, agent.Config{}), Options{})
	h.say(dm, "/usage")
	h.chat.waitFor(t, "no usage yet", has(NoUsage))
	h.say(dm, "q1")
	h.chat.waitFor(t, "a1", has("a1"))
	h.say(dm, "q2")
	h.chat.waitFor(t, "a2", has("a2"))
	h.say(dm, "/usage")
	// 10+5 for the tool-call round (agenttest's default usage), then 120+30 and 200+50.
	h.chat.waitFor(t, "the usage", has("330 prompt tokens and 85 completion tokens (415 in all) in 3 model calls"))
}

// /undo takes the last exchange out of what the model sees; the transcript keeps it.
func TestUndoCommand(t *testing.T) {
	srv := agenttest.New(t, agenttest.Text("a1"), agenttest.Text("a2"), agenttest.Text("a3"))
	h := newHarness(t, modelAgent(t, srv, agent.Config{}), Options{})
	h.say(dm, "/undo")
	h.chat.waitFor(t, "nothing to undo", has(NothingUndo))
	h.say(dm, "q1")
	h.chat.waitFor(t, "a1", has("a1"))
	h.say(dm, "q2 wrong")
	h.chat.waitFor(t, "a2", has("a2"))
	h.say(dm, "/undo")
	h.chat.waitFor(t, "the undo", has("Your message “q2 wrong” and its answer no longer reach the model"))
	h.say(dm, "q3")
	h.chat.waitFor(t, "a3", has("a3"))
	if got := strings.Join(roles(srv.Chats()[2]), "|"); got != "user:q1|assistant:a1|user:q3" {
		t.Errorf("after /undo the model saw %q", got)
	}
	if tr := transcript(t, h.k, h.current(dm).SessionID); !strings.Contains(tr, "user:q2 wrong\nassistant:a2\nuser:/undo\n") {
		t.Errorf("the transcript does not record the undone exchange and the /undo: %q", tr)
	}
}

// /retry asks the model again for the last message, without the old answer in what it sees;
// the next turn sees the question once, with the new answer.
func TestRetryCommand(t *testing.T) {
	srv := agenttest.New(t, agenttest.Text("a1"), agenttest.Text("a2 bad"), agenttest.Text("a2 better"), agenttest.Text("a3"))
	h := newHarness(t, modelAgent(t, srv, agent.Config{}), Options{})
	h.say(dm, "/retry")
	h.chat.waitFor(t, "nothing to retry", has(NothingRetry))
	h.say(dm, "q1")
	h.chat.waitFor(t, "a1", has("a1"))
	h.say(dm, "q2")
	h.chat.waitFor(t, "a2", has("a2 bad"))
	h.say(dm, "/retry")
	h.chat.waitFor(t, "the new answer", has("a2 better"))
	h.say(dm, "q3")
	h.chat.waitFor(t, "a3", has("a3"))
	reqs := srv.Chats()
	if got := strings.Join(roles(reqs[2]), "|"); got != "user:q1|assistant:a1|user:q2" {
		t.Errorf("the retry asked %q", got)
	}
	if got := strings.Join(roles(reqs[3]), "|"); got != "user:q1|assistant:a1|user:q2|assistant:a2 better|user:q3" {
		t.Errorf("after /retry the model saw %q", got)
	}
	if st, out := h.settled(h.key(dm), "/retry"); st != stDone || !strings.Contains(out, "answered") {
		t.Errorf("the /retry row: %s %q", st, out)
	}
}

// /help lists the commands the sender may use: /model only where the operator lists models,
// an extension command only where it is allowed, and the builtin agent's own commands.
func TestHelpCommand(t *testing.T) {
	allowCron := false
	h := newHarness(t, agent.NewBuiltin(agent.Config{}), Options{
		Commands: map[string]Command{"cron": CommandFunc(func(context.Context, CommandCall) string { return "" })},
		CommandAllowed: func(_ context.Context, name, _, _ string, _ abi.Source) bool {
			return name != "cron" || allowCron
		},
	})
	h.say(dm, "/help")
	m := h.chat.waitFor(t, "the help", has(HelpTitle))
	for _, want := range []string{"/new — ", "/retry — ", "/undo — ", "/usage — ", "/compress — ", agent.BuiltinHelp} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("help lacks %q:\n%s", want, m.Text)
		}
	}
	for _, not := range []string{"/model", "/cron"} {
		if strings.Contains(m.Text, not) {
			t.Errorf("help lists %s:\n%s", not, m.Text)
		}
	}
	allowCron = true
	h.say(dm, "/help")
	h.chat.waitFor(t, "the help with /cron", has("/cron — "))
}

// A thinking model's reasoning stays out of the chat and the history (reasoning_content, and a
// <think> block at the start of the content), streamed or not; with show_reasoning it is shown,
// quoted before the answer.
func TestReasoningKeptOut(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := "plain"
		if stream {
			name = "streamed"
		}
		t.Run(name, func(t *testing.T) {
			srv := agenttest.New(t,
				agenttest.Thinking("REASONING-1 the user wants", "answer one"),
				agenttest.Text("<think>REASONING-2 inline</think>\nanswer two"),
				agenttest.Text("answer three"))
			opt := Options{}
			if stream {
				opt.CanEdit = func(string) bool { return true }
			}
			h := newHarness(t, modelAgent(t, srv, agent.Config{}), opt)
			h.say(dm, "q1")
			h.chat.waitFor(t, "answer one", has("answer one"))
			h.say(dm, "q2")
			h.chat.waitFor(t, "answer two", has("answer two"))
			h.say(dm, "q3")
			h.chat.waitFor(t, "answer three", has("answer three"))
			for _, text := range h.chat.texts() {
				if strings.Contains(text, "REASONING") || strings.Contains(text, "<think>") {
					t.Errorf("the chat got the reasoning: %q", text)
				}
			}
			if got := strings.Join(roles(srv.Chats()[2]), "|"); got != "user:q1|assistant:answer one|user:q2|assistant:answer two|user:q3" {
				t.Errorf("history %q", got)
			}
		})
	}
	t.Run("show_reasoning", func(t *testing.T) {
		srv := agenttest.New(t, agenttest.Thinking("REASONING-3", "answer four"))
		h := newHarness(t, modelAgent(t, srv, agent.Config{ShowReasoning: true}), Options{})
		h.say(dm, "q")
		h.chat.waitFor(t, "the answer with its reasoning", has("💭 REASONING-3\n\nanswer four"))
	})
}
