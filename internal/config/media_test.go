package config

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The agent's media settings parse, keep the transcription key out of the JSON, and are
// validated with errors naming their keys.
func TestAgentMediaSettings(t *testing.T) {
	c, err := Parse("hermes.yaml", []byte(`agent:
  kind: openai
  model: llava
  vision: true
  models: [qwen3, qwen2.5-vl]
  vision_models: [qwen2.5-vl]
  document_kib: 16
  transcribe: {url: "http://127.0.0.1:8080/v1", model: whisper-1, api_key: sk-transcribe-secret, timeout: 30s}
`))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Agent
	if !a.Vision || strings.Join(a.VisionModels, ",") != "qwen2.5-vl" || a.DocumentKiB != 16 {
		t.Fatalf("agent %+v", a)
	}
	if a.Transcribe == nil || a.Transcribe.URL != "http://127.0.0.1:8080/v1" || a.Transcribe.Model != "whisper-1" ||
		a.Transcribe.APIKey != "sk-transcribe-secret" || time.Duration(a.Transcribe.Timeout) != 30*time.Second {
		t.Fatalf("transcribe %+v", a.Transcribe)
	}
	b, _ := json.Marshal(c)
	if strings.Contains(string(b), "sk-transcribe-secret") {
		t.Fatalf("the transcription key is in the configuration's JSON: %s", b)
	}
	// The defaults: no vision, no transcription.
	d, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if d.Agent.Vision || d.Agent.Transcribe != nil || d.Agent.DocumentKiB != 0 {
		t.Fatalf("defaults %+v", d.Agent)
	}

	for name, tc := range map[string]struct{ body, want string }{
		"vision model not listed": {"agent: {models: [a], vision_models: [b]}\n", `agent.vision_models: "b" is not in agent.models`},
		"document negative":       {"agent: {document_kib: -1}\n", "agent.document_kib must not be negative"},
		"transcribe url":          {"agent: {transcribe: {url: \"localhost:8080\"}}\n", `agent.transcribe.url "localhost:8080": want an http or https URL`},
		"transcribe no url":       {"agent: {transcribe: {model: whisper-1}}\n", `agent.transcribe.url "": want an http or https URL`},
		"transcribe timeout":      {"agent: {transcribe: {url: \"http://h/v1\", timeout: -1s}}\n", "agent.transcribe.timeout must not be negative"},
		"transcribe two keys":     {"agent: {transcribe: {url: \"http://h/v1\", api_key: k, api_key_env: K}}\n", "set api_key or api_key_env, not both"},
		"transcribe typo":         {"agent: {transcribe: {url: \"http://h/v1\", modle: w}}\n", "agent.transcribe.modle: unknown key (did you mean model?)"},
	} {
		_, err := Parse("hermes.yaml", []byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to mention %q", name, err, tc.want)
		}
	}
}

// The README's example of the media settings loads as it is written.
func TestReadmeMediaExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var block string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(agent:\n.*?)```").FindAllStringSubmatch(string(readme), -1) {
		if strings.Contains(m[1], "transcribe:") {
			block = m[1]
		}
	}
	if block == "" {
		t.Fatal("README has no agent example with transcribe:")
	}
	c, err := Parse("README.md", []byte(block))
	if err != nil {
		t.Fatalf("the README's media example does not load: %v", err)
	}
	if a := c.Agent; !a.Vision || len(a.VisionModels) != 1 || a.Transcribe == nil || a.Transcribe.APIKeyEnv != "WHISPER_API_KEY" || a.DocumentKiB != 32 {
		t.Fatalf("agent %+v", a)
	}
}
