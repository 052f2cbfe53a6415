package gateway

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
	"github.com/hermes-host/hermes-host/internal/config"
)

// The agent's media settings reach the agent: with vision and transcribe configured, a
// picture goes to the model as an image_url part and a voice note through the transcription
// server, whose key comes from api_key_env.
func TestAgentMediaSettingsReachTheAgent(t *testing.T) {
	srv := agenttest.New(t, agenttest.Text("Seen and heard."))
	stt := agenttest.NewTranscriptions(t, agenttest.Transcript("hello there"))
	t.Setenv("TEST_WHISPER_KEY", "sk-whisper-from-env")
	cfg, err := config.Parse("hermes.yaml", []byte(`agent:
  kind: openai
  base_url: `+srv.URL+`
  model: test-model
  vision: true
  transcribe: {url: "`+stt.URL+`", model: whisper-test, api_key_env: TEST_WHISPER_KEY}
`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(cfg.Agent.Kind, agentConfig(cfg.Agent, slog.New(slog.NewTextHandler(io.Discard, nil)), agent.NewMetrics(prometheus.NewRegistry())))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	img, voice := filepath.Join(dir, "img"), filepath.Join(dir, "voice")
	pic := []byte("\x89PNG\r\n\x1a\nnot really")
	os.WriteFile(img, pic, 0o600)
	os.WriteFile(voice, []byte("OggS"), 0o600)
	rep, err := a.Turn(context.Background(), &agent.Turn{Attachments: []agent.Attachment{
		{Kind: abi.AttachImage, MIMEType: "image/png", Size: int64(len(pic)), Path: img},
		{Kind: abi.AttachVoice, MIMEType: "audio/ogg", Size: 4, Path: voice},
	}})
	if err != nil || rep.Text != "Seen and heard." {
		t.Fatalf("turn: %+v %v", rep, err)
	}
	req := srv.Chats()[0]
	if u := req.ImageURLs(); len(u) != 1 || u[0] != "data:image/png;base64,"+base64.StdEncoding.EncodeToString(pic) {
		t.Fatalf("image parts %v", u)
	}
	if !strings.Contains(req.LastUser(), "[voice note] hello there") {
		t.Fatalf("user message %q", req.LastUser())
	}
	if r := stt.Requests()[0]; r.Fields["model"] != "whisper-test" || r.Header.Get("Authorization") != "Bearer sk-whisper-from-env" {
		t.Fatalf("transcription request %+v", r)
	}
}
