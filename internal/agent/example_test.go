package agent_test

import (
	"context"
	"fmt"

	"github.com/hermes-host/hermes-host/internal/agent"
)

// A notification turn on the builtin agent: a short summary, and no tool is called.
func ExampleBuiltin_synthetic() {
	a, _ := agent.New("builtin", agent.Config{})
	one := 1
	rep, _ := a.Turn(context.Background(), &agent.Turn{
		Synthetic: true,
		Notices: []agent.Notice{{Kind: agent.NoticeCompletion, ProcID: "proc_0123456789ab", Command: "make test",
			State: agent.StateExited, ExitCode: &one, Output: "--- FAIL: TestX\nFAIL\n"}},
	})
	fmt.Println(rep.Text)
	// Output:
	// Your background job failed (exit 1).
	// Last lines of output:
	// --- FAIL: TestX
	// FAIL
	// (Full output: log proc_0123456789ab)
}

// A model error becomes a short text for the chat.
func ExampleUserMessage() {
	fmt.Println(agent.UserMessage(&agent.APIError{Status: 429, RetryAfter: 20e9}))
	// Output:
	// The model is rate limited right now. Try again in 20s.
}
