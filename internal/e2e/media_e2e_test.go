package e2e

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/telegramtest"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

// testWait bounds a wait for the host's answer: a minute on a quiet machine, stretched by the
// harness's factor.
var testWait = testdeadline.Scale(time.Minute)

// pngImage is a small real PNG (a red square), as a phone's screenshot would be.
func pngImage(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 64, 48))
	for x := 0; x < 64; x++ {
		for y := 0; y < 48; y++ {
			img.Set(x, y, color.RGBA{R: 255, A: 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// oggVoice is the start of an Ogg Opus stream, as Telegram voice notes are.
var oggVoice = append([]byte("OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x13OpusHead\x01\x01"), bytes.Repeat([]byte{0x55}, 200)...)

// elfBinary is the start of a Linux executable.
var elfBinary = append([]byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x3e\x00"), bytes.Repeat([]byte{0}, 200)...)

// serveTelegramWith is serveTelegram with top (top-level YAML: the agent, media caps) in the
// configuration too.
func serveTelegramWith(t *testing.T, tg *telegramtest.Server, top, access string) (bin, data, admin string) {
	t.Helper()
	bin, plugins := buildHost(t)
	data = t.TempDir()
	cfg := filepath.Join(data, "hermes.yaml")
	os.WriteFile(cfg, []byte(top+fmt.Sprintf(`
plugins:
  telegram:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {token: "%s", api_base: "%s", require_mention: false}
    access:
      main: %s
`, tg.Bot().Token(), tg.URL(), access)), 0o600)
	return bin, data, serve(t, bin, plugins, data, "--config", cfg).Admin
}

// storedWith reports whether a file under data's media store holds exactly b.
func storedWith(t *testing.T, data string, b []byte) bool {
	t.Helper()
	found := false
	filepath.WalkDir(filepath.Join(data, "media"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if got, _ := os.ReadFile(p); bytes.Equal(got, b) {
				found = true
			}
		}
		return nil
	})
	return found
}

// TestTelegramMediaEndToEnd: the real binary with telegram.wasm against the Bot API fake and the
// OpenAI-compatible agent on fake model and transcription servers. A photo reaches the vision
// model as an image_url part holding the photo's bytes, and its answer arrives; a voice note is
// transcribed and the transcript answered; an executable sent as photo.png and a file over the
// size cap are each refused with one line, and nothing of them is stored (the oversized one is
// not even downloaded).
func TestTelegramMediaEndToEnd(t *testing.T) {
	t.Parallel()
	model := agenttest.New(t, agenttest.Text("That is a red square."), agenttest.Text("You said hello there."))
	tr := agenttest.NewTranscriptions(t, agenttest.Transcript("hello there"))
	ann := telegramtest.User{ID: 4242, FirstName: "Ann"}
	tg := telegramtest.New(t)
	tg.AddPrivate(ann)
	top := fmt.Sprintf(`
agent: {kind: openai, base_url: %q, model: test-model, check: off, vision: true, transcribe: {url: %q, model: whisper-1}}
media: {max_file_mib: 1, max_profile_mib: 100}
demo: {plugin: ""}
`, model.URL, tr.URL)
	_, data, _ := serveTelegramWith(t, tg, top, `{users: ["4242"]}`)
	bot := tg.Bot()
	waitText := func(what, sub string) {
		t.Helper()
		if err := tg.Wait(testWait, func() bool {
			for _, s := range tg.SentTexts(ann.ID, 0) {
				if strings.Contains(s, sub) {
					return true
				}
			}
			return false
		}); err != nil {
			t.Fatalf("%s: %v; sent %q", what, err, tg.SentTexts(ann.ID, 0))
		}
	}

	photo := pngImage(t)
	bot.Media(ann.ID, ann, telegramtest.Attach{Kind: telegramtest.KindPhoto, Data: photo}, "what is this?")
	waitText("the vision model's answer", "That is a red square.")
	chats := model.Chats()
	if len(chats) != 1 {
		t.Fatalf("%d model calls for the photo", len(chats))
	}
	urls := chats[0].ImageURLs()
	if want := "data:image/png;base64," + base64.StdEncoding.EncodeToString(photo); len(urls) != 1 || urls[0] != want {
		t.Fatalf("image_url parts %d (want the photo's bytes as a PNG data URL)", len(urls))
	}
	if !strings.Contains(chats[0].LastUser(), "what is this?") {
		t.Fatalf("the caption did not reach the model: %q", chats[0].LastUser())
	}

	bot.Media(ann.ID, ann, telegramtest.Attach{Kind: telegramtest.KindVoice, Data: oggVoice, MIMEType: "audio/ogg", Duration: 2}, "")
	waitText("the answer to the voice note", "You said hello there.")
	if got := tr.Requests(); len(got) != 1 || !bytes.Equal(got[0].File, oggVoice) || got[0].Fields["model"] != "whisper-1" {
		t.Fatalf("transcription requests %d", len(got))
	}
	if chats := model.Chats(); len(chats) != 2 || !strings.Contains(chats[1].LastUser(), "hello there") {
		t.Fatalf("the transcript did not reach the model: %d calls", len(chats))
	}

	bot.Media(ann.ID, ann, telegramtest.Attach{Kind: telegramtest.KindDocument, Data: elfBinary, FileName: "photo.png", MIMEType: "image/png"}, "")
	waitText("the disguised file's refusal", "photo.png was not accepted")
	downloads := len(tg.Downloads())
	big := bytes.Repeat([]byte("A"), 2<<20)
	bot.Media(ann.ID, ann, telegramtest.Attach{Kind: telegramtest.KindDocument, Data: big, FileName: "big.txt", MIMEType: "text/plain"}, "")
	waitText("the oversized file's refusal", "big.txt was not accepted")
	if n := len(tg.Downloads()); n != downloads {
		t.Fatalf("the oversized file was downloaded (%d downloads, was %d)", n, downloads)
	}
	if storedWith(t, data, elfBinary) || storedWith(t, data, big) {
		t.Fatal("a refused file was stored")
	}
	if !storedWith(t, data, photo) {
		t.Fatal("the accepted photo is not in the media store")
	}
	if n := len(model.Chats()); n != 2 {
		t.Fatalf("the refused files asked the model (%d calls)", n)
	}
}

// TestFilesOutEndToEnd: a file the agent names in its working directory arrives as a document
// on Telegram (sendDocument, multipart) and through Slack's external upload flow, with its bytes;
// a name outside the working directory is refused with one line and nothing is uploaded.
func TestFilesOutEndToEnd(t *testing.T) {
	t.Parallel()
	t.Run("telegram", func(t *testing.T) {
		t.Parallel()
		ann := telegramtest.User{ID: 5151, FirstName: "Ann"}
		tg := telegramtest.New(t)
		tg.AddPrivate(ann)
		serveTelegramWith(t, tg, "demo: {plugin: \"\"}\n", `{users: ["5151"], tools: [shell]}`)
		bot := tg.Bot()
		bot.PrivateText(ann, "sh printf 'report body 42' > report.txt")
		if err := tg.Wait(testWait, func() bool { return len(tg.SentTexts(ann.ID, 0)) >= 1 }); err != nil {
			t.Fatal(err)
		}
		bot.PrivateText(ann, "sendfile report.txt")
		var doc *telegramtest.Upload
		if err := tg.Wait(testWait, func() bool {
			for _, m := range tg.Sent(ann.ID, 0) {
				if m.File != nil && m.Method == "sendDocument" {
					doc = m.File
					return true
				}
			}
			return false
		}); err != nil {
			t.Fatalf("no document: %v; sent %q", err, tg.SentTexts(ann.ID, 0))
		}
		if string(doc.Data) != "report body 42" || doc.FileName != "report.txt" {
			t.Fatalf("document %q named %q", doc.Data, doc.FileName)
		}
		bot.PrivateText(ann, "sendfile ../../hermes.yaml")
		if err := tg.Wait(testWait, func() bool {
			for _, s := range tg.SentTexts(ann.ID, 0) {
				if strings.Contains(s, "was not sent") {
					return true
				}
			}
			return false
		}); err != nil {
			t.Fatalf("no refusal for a file outside the working directory: %v; sent %q", err, tg.SentTexts(ann.ID, 0))
		}
		for _, m := range tg.Sent(ann.ID, 0) {
			if m.File != nil && m.File.FileName != "report.txt" {
				t.Fatalf("sent %s", m.File.FileName)
			}
		}
	})
	t.Run("slack", func(t *testing.T) {
		t.Parallel()
		h := startSlackHostAccess(t, "demo: {plugin: \"\"}\n", "", `{allow_all: true, tools: [shell], groups: {"*": {allow_all: true, require_mention: false}}}`)
		team := h.s.Team()
		a := team.Mention(slackGeneral, slackAnn, "sh printf 'slack report' > out.csv")
		h.waitFor(t, "the command's answer", func() bool { return len(h.s.PostedTexts(team.ID, slackGeneral, a.TS)) >= 1 })
		team.Reply(slackGeneral, a.TS, slackAnn, "sendfile out.csv")
		h.waitFor(t, "the upload", func() bool {
			for _, f := range h.s.Uploads() {
				if f.Completed {
					return true
				}
			}
			return false
		})
		up := h.s.Uploads()
		if len(up) != 1 || string(up[0].Data) != "slack report" || up[0].Name != "out.csv" || up[0].Channel != slackGeneral || up[0].ThreadTS != a.TS {
			t.Fatalf("uploads %+v", up)
		}
	})
}
