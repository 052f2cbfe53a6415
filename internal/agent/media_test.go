package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
)

// pngBytes is a real 1x1 PNG.
var pngBytes, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")

// stored writes data as a stored attachment file and describes it.
func stored(t *testing.T, kind, mime, name string, data []byte) Attachment {
	t.Helper()
	path := filepath.Join(t.TempDir(), "att")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return Attachment{Kind: kind, MIMEType: mime, Name: name, Size: int64(len(data)), Path: path}
}

func TestPlaceholder(t *testing.T) {
	for _, tc := range []struct {
		a    Attachment
		want string
	}{
		{Attachment{Kind: abi.AttachImage, MIMEType: "image/jpeg", Name: "photo.jpg", Size: 120 << 10}, "[image: photo.jpg, image/jpeg, 120 KB]"},
		{Attachment{Kind: abi.AttachVoice, MIMEType: "audio/ogg; codecs=opus", Size: 900}, "[voice: audio/ogg, 900 B]"},
		{Attachment{Kind: abi.AttachDocument, MIMEType: "application/pdf", Name: "a]\nb.pdf", Size: 3 << 20}, "[document: a b.pdf, application/pdf, 3.0 MB]"},
	} {
		if got := Placeholder(tc.a); got != tc.want {
			t.Errorf("Placeholder(%+v) = %q, want %q", tc.a, got, tc.want)
		}
	}
}

// With vision on, the user's message carries the image as an image_url part holding the
// file's bytes as a data URL with the sniffed MIME type, after a text part with the user's
// words; no note is added.
func TestVisionSendsImageParts(t *testing.T) {
	srv := agenttest.New(t, agenttest.Text("A single pixel."), agenttest.Text("Also a pixel."))
	o, _, _ := compatAgent(t, srv, Config{Vision: true, VisionModels: []string{"vl-model"}})
	img := stored(t, abi.AttachImage, "image/png", "dot.png", pngBytes)
	rep, err := o.Turn(context.Background(), &Turn{Text: "what is this?", Attachments: []Attachment{img}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Text != "A single pixel." {
		t.Fatalf("reply %q", rep.Text)
	}
	req := srv.Chats()[0]
	want := "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngBytes)
	if got := req.ImageURLs(); len(got) != 1 || got[0] != want {
		t.Fatalf("image parts %v, want one %q", got, want)
	}
	msgs := req.Messages()
	parts, _ := msgs[len(msgs)-1]["content"].([]any)
	first, _ := parts[0].(map[string]any)
	if len(parts) != 2 || first["type"] != "text" || !strings.Contains(first["text"].(string), "what is this?") {
		t.Fatalf("content parts %v", parts)
	}
	// A model of the list the operator marked for vision gets the image too (/model).
	if _, err := o.Turn(context.Background(), &Turn{Model: "vl-model", Text: "and this?", Attachments: []Attachment{img}}); err != nil {
		t.Fatal(err)
	}
	if req := srv.Chats()[1]; len(req.ImageURLs()) != 1 || req.Body["model"] != "vl-model" {
		t.Fatalf("vision model request: %v images, model %v", len(req.ImageURLs()), req.Body["model"])
	}
}

// Without vision the image is not sent: the turn runs on the text and the answer says in one
// line that this model cannot see images. An image alone asks no model at all.
func TestNoVisionNoImage(t *testing.T) {
	srv := agenttest.New(t, agenttest.Text("I see no picture."))
	o, _, _ := compatAgent(t, srv, Config{VisionModels: []string{"vl-model"}})
	img := stored(t, abi.AttachImage, "image/png", "dot.png", pngBytes)
	rep, err := o.Turn(context.Background(), &Turn{Text: "what is this?", Attachments: []Attachment{img}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Text != "I see no picture.\n\n"+NoVisionNote {
		t.Fatalf("reply %q", rep.Text)
	}
	req := srv.Chats()[0]
	if n := len(req.ImageURLs()); n != 0 || bytes.Contains(req.Raw, []byte("image_url")) {
		t.Fatalf("%d image parts sent to a model without vision", n)
	}
	if u := req.LastUser(); !strings.Contains(u, "what is this?") || !strings.Contains(u, "[image: dot.png, image/png, 70 B] (not shown") {
		t.Fatalf("user message %q", u)
	}
	if strings.Contains(NoVisionNote, "\n") {
		t.Fatal("the note is more than one line")
	}
	rep, err = o.Turn(context.Background(), &Turn{Attachments: []Attachment{img}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Text != NoVisionNote || len(srv.Chats()) != 1 {
		t.Fatalf("image alone: reply %q after %d model calls", rep.Text, len(srv.Chats()))
	}
	// Vision follows the model: with vision on for the configured one, a /model choice not in
	// vision_models gets no image; the image's caption is the user's text.
	srv.Push(agenttest.Text("Still no picture."))
	ov, _, _ := compatAgent(t, srv, Config{Vision: true})
	captioned := img
	captioned.Caption = "my cat"
	rep, err = ov.Turn(context.Background(), &Turn{Model: "text-model", Attachments: []Attachment{captioned}})
	if err != nil {
		t.Fatal(err)
	}
	req = srv.Chats()[1]
	if len(req.ImageURLs()) != 0 || !strings.HasPrefix(req.LastUser(), "my cat\n\n[image: dot.png") || !strings.HasSuffix(rep.Text, NoVisionNote) {
		t.Fatalf("text model: %d images, user %q, reply %q", len(req.ImageURLs()), req.LastUser(), rep.Text)
	}
}

// A transcription server that cannot be reached, or that redirects, is one clear line too.
func TestTranscriptionUnreachableOrRedirected(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	redirecting := agenttest.NewTranscriptions(t, func(w http.ResponseWriter, r *http.Request, req agenttest.Transcription) {
		http.Redirect(w, r, "http://elsewhere.test/v1/audio/transcriptions", http.StatusTemporaryRedirect)
	})
	voice := stored(t, abi.AttachVoice, "audio/ogg", "memo.ogg", []byte("OggS"))
	for url, want := range map[string]string{
		closed:          "(I could not transcribe memo.ogg: the transcription server cannot be reached (the operator needs to check agent.transcribe.url). Try again, or send it as text.)",
		redirecting.URL: "(I could not transcribe memo.ogg: the transcription server answered with a redirect, which is not followed (agent.transcribe.url must be its real address). Try again, or send it as text.)",
	} {
		o, _, _ := compatAgent(t, agenttest.New(t), Config{Transcribe: &TranscribeConfig{URL: url, APIKey: transcribeKey}})
		rep, err := o.Turn(context.Background(), &Turn{Attachments: []Attachment{voice}})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Text != want {
			t.Errorf("%s: reply %q", url, rep.Text)
		}
	}
}

const transcribeKey = "sk-transcribe-0123456789secret"

// A voice message is POSTed to the transcription server as multipart/form-data (file, model,
// response_format=json, the key as a bearer token), and its transcript reaches the model as
// the user's text.
func TestVoiceTranscribed(t *testing.T) {
	stt := agenttest.NewTranscriptions(t, agenttest.Transcript(" turn on the lights "))
	srv := agenttest.New(t, agenttest.Text("Done."))
	o, _, _ := compatAgent(t, srv, Config{Transcribe: &TranscribeConfig{URL: stt.URL + "/", Model: "whisper-large", APIKey: transcribeKey}})
	audio := []byte("OggS\x00\x02fake opus frames")
	voice := stored(t, abi.AttachVoice, "audio/ogg", "voice.ogg", audio)
	rep, err := o.Turn(context.Background(), &Turn{Attachments: []Attachment{voice}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Text != "Done." {
		t.Fatalf("reply %q", rep.Text)
	}
	reqs := stt.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d transcription requests", len(reqs))
	}
	r := reqs[0]
	if r.FileName != "voice.ogg" || r.FileType != "audio/ogg" || !bytes.Equal(r.File, audio) ||
		r.Fields["model"] != "whisper-large" || r.Fields["response_format"] != "json" || len(r.Fields) != 2 {
		t.Fatalf("transcription request %+v", r)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+transcribeKey {
		t.Fatalf("Authorization %q", got)
	}
	if u := srv.Chats()[0].LastUser(); u != "[voice note] turn on the lights" {
		t.Fatalf("user message %q", u)
	}
	// An audio file without a name is sent under a name from its type, its transcript marked.
	stt2 := agenttest.NewTranscriptions(t, agenttest.Transcript("la la"))
	srv.Push(agenttest.Text("A song."))
	o2, _, _ := compatAgent(t, srv, Config{Transcribe: &TranscribeConfig{URL: stt2.URL}})
	song := stored(t, abi.AttachAudio, "audio/mpeg", "", audio)
	if _, err := o2.Turn(context.Background(), &Turn{Text: "what is it?", Attachments: []Attachment{song}}); err != nil {
		t.Fatal(err)
	}
	if r := stt2.Requests()[0]; r.FileName != "audio.mp3" || r.Fields["model"] != DefaultTranscribeModel || r.Header.Get("Authorization") != "" {
		t.Fatalf("audio request %+v", r)
	}
	if u := srv.Chats()[1].LastUser(); u != "what is it?\n\n[audio: audio/mpeg, 22 B] transcript: la la" {
		t.Fatalf("user message %q", u)
	}
}

// A failed transcription (a 500 whose body echoes the key, a server that never answers) is one
// clear line in the answer, without the key, in the log neither; a voice message alone asks
// no model, one with text still gets its answer.
func TestTranscriptionFailures(t *testing.T) {
	stt := agenttest.NewTranscriptions(t,
		agenttest.TranscribeFail(500, `{"error":{"message":"decoder crashed (auth was Bearer `+transcribeKey+`)"}}`),
		agenttest.TranscribeHang(),
		agenttest.TranscribeFail(500, "<html><body>Internal Server Error</body></html>"))
	srv := agenttest.New(t, agenttest.Text("Here is the summary."))
	o, logs, m := compatAgent(t, srv, Config{Transcribe: &TranscribeConfig{URL: stt.URL, APIKey: transcribeKey, Timeout: 200 * time.Millisecond}})
	voice := stored(t, abi.AttachVoice, "audio/ogg", "", []byte("OggS voice"))

	rep, err := o.Turn(context.Background(), &Turn{Attachments: []Attachment{voice}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Text != "(I could not transcribe your voice message: the transcription server failed (HTTP 500: decoder crashed (auth was Bearer [redacted])). Try again, or send it as text.)" {
		t.Fatalf("500: reply %q", rep.Text)
	}

	rep, err = o.Turn(context.Background(), &Turn{Attachments: []Attachment{voice}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Text != "(I could not transcribe your voice message: the transcription server did not answer within 1s (agent.transcribe.timeout). Try again, or send it as text.)" {
		t.Fatalf("timeout: reply %q", rep.Text)
	}
	if n := len(srv.Chats()); n != 0 {
		t.Fatalf("%d model calls for voice messages that could not be transcribed", n)
	}

	rep, err = o.Turn(context.Background(), &Turn{Text: "summarize this", Attachments: []Attachment{voice}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rep.Text, "Here is the summary.\n\n(I could not transcribe your voice message: the transcription server failed (HTTP 500: Internal Server Error)") {
		t.Fatalf("with text: reply %q", rep.Text)
	}
	if u := srv.Chats()[0].LastUser(); !strings.HasPrefix(u, "summarize this\n\n[voice: audio/ogg, 10 B] (transcription failed)") {
		t.Fatalf("user message %q", u)
	}
	if strings.Contains(logs.String(), transcribeKey) || !strings.Contains(logs.String(), "transcription failed") {
		t.Fatalf("log:\n%s", logs)
	}
	if h, to := testutil.ToFloat64(m.heard.WithLabelValues("http")), testutil.ToFloat64(m.heard.WithLabelValues("timeout")); h != 2 || to != 1 {
		t.Fatalf("hermes_agent_transcriptions_total: http %v, timeout %v", h, to)
	}
}

// A /stop while a voice message is being transcribed ends the turn at once, as cancelled, and
// asks no model.
func TestStopDuringTranscription(t *testing.T) {
	entered := make(chan struct{})
	stt := agenttest.NewTranscriptions(t, func(w http.ResponseWriter, r *http.Request, req agenttest.Transcription) {
		close(entered)
		<-r.Context().Done()
	})
	srv := agenttest.New(t)
	o, _, _ := compatAgent(t, srv, Config{Transcribe: &TranscribeConfig{URL: stt.URL}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }()
	_, err := o.Turn(ctx, &Turn{Attachments: []Attachment{stored(t, abi.AttachVoice, "audio/ogg", "", []byte("OggS"))}})
	if !errors.Is(err, context.Canceled) || UserMessage(err) != "Stopped." {
		t.Fatalf("error %v", err)
	}
	if len(srv.Chats()) != 0 {
		t.Fatal("a stopped turn asked the model")
	}
}

// Without agent.transcribe a voice message is answered with one line saying voice is not set
// up here and how to set it up; the builtin agent says the same.
func TestVoiceNotSetUp(t *testing.T) {
	srv := agenttest.New(t)
	o, _, _ := compatAgent(t, srv, Config{})
	voice := stored(t, abi.AttachVoice, "audio/ogg", "", []byte("OggS voice"))
	for name, a := range map[string]Agent{"openai": o, "builtin": NewBuiltin(Config{})} {
		rep, err := a.Turn(context.Background(), &Turn{Attachments: []Attachment{voice}})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Text != VoiceNotSetUp {
			t.Errorf("%s: reply %q", name, rep.Text)
		}
	}
	if !strings.Contains(VoiceNotSetUp, "agent.transcribe") || strings.Contains(VoiceNotSetUp, "\n") {
		t.Fatalf("note %q", VoiceNotSetUp)
	}
}

// The builtin agent with a transcription server echoes what it heard, and never runs a
// command it heard.
func TestBuiltinVoiceTranscribed(t *testing.T) {
	stt := agenttest.NewTranscriptions(t, agenttest.Transcript("run rm -rf /tmp/x"))
	b := NewBuiltin(Config{Transcribe: &TranscribeConfig{URL: stt.URL}})
	tools := &fakeTools{}
	rep, err := b.Turn(context.Background(), &Turn{Tools: tools, Attachments: []Attachment{stored(t, abi.AttachVoice, "audio/ogg", "v.ogg", []byte("OggS"))}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Text, "I understood: “run rm -rf /tmp/x”") || len(tools.Calls()) != 0 {
		t.Fatalf("reply %q, tool calls %v", rep.Text, tools.methods())
	}
	// Other files: one line that the builtin agent does not open them.
	rep, err = b.Turn(context.Background(), &Turn{Text: "ps", Tools: tools, Attachments: []Attachment{stored(t, abi.AttachImage, "image/png", "", pngBytes)}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(rep.Text, "\n\n"+BuiltinNoFiles) {
		t.Fatalf("reply %q", rep.Text)
	}
}

// A text document is inlined, fenced as data, up to the cap: a longer one is cut at a
// character boundary with a note saying so. Other documents are named, never read.
func TestDocumentsInlinedUpToTheCap(t *testing.T) {
	srv := agenttest.New(t, agenttest.Text("Read."))
	o, _, _ := compatAgent(t, srv, Config{DocumentBytes: 64})
	long := strings.Repeat("a", 63) + "é" + strings.Repeat("z", 100) // é straddles the cap
	notes := stored(t, abi.AttachDocument, "text/plain; charset=utf-8", "notes.txt", []byte(long))
	small := stored(t, abi.AttachDocument, "application/json", "conf.json", []byte(`{"port": 8080}`))
	pdf := stored(t, abi.AttachDocument, "application/pdf", "report.pdf", []byte("%PDF-1.7 SECRET-PDF-BYTES"))
	if _, err := o.Turn(context.Background(), &Turn{Text: "look", Attachments: []Attachment{notes, small, pdf}}); err != nil {
		t.Fatal(err)
	}
	u := srv.Chats()[0].LastUser()
	want := "look\n\n[document: notes.txt, text/plain, 165 B]\n" + fence("The document the user attached", strings.Repeat("a", 63)) +
		"\n[The document was cut: only its first 63 B of 165 B are shown.]\n\n" +
		"[document: conf.json, application/json, 14 B]\n" + fence("The document the user attached", `{"port": 8080}`) + "\n\n" +
		"[document: report.pdf, application/pdf, 25 B]"
	if u != want {
		t.Fatalf("user message:\n%s\nwant:\n%s", u, want)
	}
	if strings.Contains(u, "SECRET-PDF-BYTES") || strings.Contains(u, "z") {
		t.Fatal("bytes past the cap or of a binary document reached the model")
	}
}

// Images are sent once: the transcript keeps the placeholder (HistoryText), so a later turn
// sends none, and nothing the turn returns for the transcript holds the image's bytes.
func TestHistoryKeepsOnlyPlaceholders(t *testing.T) {
	srv := agenttest.New(t, agenttest.Text("A pixel."), agenttest.Text("It was red."))
	o, _, _ := compatAgent(t, srv, Config{Vision: true})
	big := append(append([]byte(nil), pngBytes...), bytes.Repeat([]byte{0}, 300<<10)...)
	img := stored(t, abi.AttachImage, "image/png", "photo.png", big)
	first := &Turn{Text: "what is this?", Attachments: []Attachment{img}}
	rep, err := o.Turn(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	if len(srv.Chats()[0].ImageURLs()) != 1 {
		t.Fatal("the first turn sent no image")
	}
	stored := HistoryText(first.Text, first.Attachments)
	if stored != "what is this?\n[image: photo.png, image/png, 300 KB]" {
		t.Fatalf("history text %q", stored)
	}
	history := append([]Message{{Role: RoleUser, Text: stored}}, rep.Trail...)
	history = append(history, Message{Role: RoleAssistant, Text: rep.Text})
	b64 := base64.StdEncoding.EncodeToString(big[:64])
	for _, m := range history {
		if len(m.Text) > 1000 || strings.Contains(m.Text, b64) {
			t.Fatalf("a transcript entry holds the image: %.100q", m.Text)
		}
	}
	if _, err := o.Turn(context.Background(), &Turn{Text: "what colour was it?", History: history}); err != nil {
		t.Fatal(err)
	}
	second := srv.Chats()[1]
	if len(second.ImageURLs()) != 0 || len(second.Raw) > 10<<10 {
		t.Fatalf("the second turn sent %d images, %d bytes", len(second.ImageURLs()), len(second.Raw))
	}
	if !bytes.Contains(second.Raw, []byte(`[image: photo.png, image/png, 300 KB]`)) {
		t.Fatalf("the second turn lacks the placeholder: %s", second.Raw)
	}
}
