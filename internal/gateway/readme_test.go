package gateway

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
	"github.com/hermes-host/hermes-host/internal/config"
)

// The README's agent examples for vLLM, llama.cpp server and Ollama load, pass the start-up
// check against a server that serves their model, answer, and turn each server's real error
// bodies into a line the user (or operator) can act on.
func TestReadmeAgentExamples(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(agent:\n.*?)```").FindAllStringSubmatch(string(readme), -1)
	examples := map[string]string{}
	for _, b := range blocks {
		switch {
		case strings.Contains(b[1], ":8000/v1"):
			examples["vllm"] = b[1]
		case strings.Contains(b[1], ":8080/v1"):
			examples["llama.cpp"] = b[1]
		case strings.Contains(b[1], ":11434/v1"):
			examples["ollama"] = b[1]
		}
	}
	replays := map[string][]struct {
		status int
		body   string
		want   string
	}{
		"vllm": {
			{400, agenttest.VLLMNoToolChoice, "--enable-auto-tool-choice"},
			{404, agenttest.VLLMModelNotFound, "agent.model"},
			{400, agenttest.VLLMContext, "/compress"},
			{401, agenttest.VLLMBadKey, "API key"},
		},
		"llama.cpp": {
			{500, agenttest.LlamaCppNeedsJinja, "--jinja"},
			{400, agenttest.LlamaCppContext, "/compress"},
			{503, agenttest.LlamaCppLoading, "still loading"},
			{401, agenttest.LlamaCppBadKey, "API key"},
		},
		"ollama": {
			{400, agenttest.OllamaNoTools, "agent.tools: false"},
			{404, agenttest.OllamaModelNotFound, "ollama pull"},
		},
	}
	t.Setenv("VLLM_API_KEY", "sk-vllm-test")
	for name, cases := range replays {
		t.Run(name, func(t *testing.T) {
			block, ok := examples[name]
			if !ok {
				t.Fatalf("README has no %s example", name)
			}
			srv := agenttest.New(t)
			// The example as written, with the host pointed at the fake (the path stays).
			yaml := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).ReplaceAllString(block, srv.Root)
			path := filepath.Join(t.TempDir(), "hermes.yaml")
			if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatalf("the README's %s example does not load: %v", name, err)
			}
			srv.SetModels(cfg.Agent.Model)
			a, err := agent.New(cfg.Agent.Kind, agentConfig(cfg.Agent, slog.New(slog.NewTextHandler(io.Discard, nil)), agent.NewMetrics(prometheus.NewRegistry())))
			if err != nil {
				t.Fatal(err)
			}
			if err := a.(*agent.OpenAI).Check(context.Background()); err != nil {
				t.Fatalf("start-up check: %v", err)
			}
			srv.Push(agenttest.Text("hello from " + name))
			rep, err := a.Turn(context.Background(), &agent.Turn{Text: "hi"})
			if err != nil || rep.Text != "hello from "+name {
				t.Fatalf("turn: %+v %v", rep, err)
			}
			for _, c := range cases {
				srv.Push(agenttest.Error(c.status, c.body))
				_, err := a.Turn(context.Background(), &agent.Turn{Text: "hi"})
				if line := agent.UserMessage(err); !strings.Contains(line, c.want) {
					t.Errorf("HTTP %d %s: user line %q lacks %q", c.status, c.body, line, c.want)
				}
			}
			req := srv.Chats()[0]
			if name == "vllm" && req.Header.Get("Authorization") != "Bearer sk-vllm-test" {
				t.Errorf("vllm key not sent: %q", req.Header.Get("Authorization"))
			}
			if name == "ollama" && req.Header.Get("X-Client") != "hermes-host" {
				t.Errorf("ollama extra header not sent")
			}
		})
	}
}
