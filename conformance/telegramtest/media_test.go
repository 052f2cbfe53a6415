package telegramtest_test

import (
	"bytes"
	"errors"
	"image"
	"image/png"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"

	tgt "github.com/hermes-host/hermes-host/conformance/telegramtest"
)

// pngBytes is a real w×h PNG.
func pngBytes(t *testing.T, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewRGBA(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The library uploads a photo and a document as multipart: the fake records the bytes, names
// and captions, answers with messages the library parses, and serves the files back through
// getFile and the file URL.
func TestClientLibraryUploadsAndDownloads(t *testing.T) {
	tg := tgt.New(t)
	api := newClient(t, tg)
	ada := tgt.Person(111, "Ada")
	tg.AddPrivate(ada)
	img := pngBytes(t, 64, 48)

	photo := tgbotapi.NewPhoto(ada.ID, tgbotapi.FileBytes{Name: "pic.png", Bytes: img})
	photo.Caption = "a picture"
	m, err := api.Send(photo)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Photo) != 1 || m.Photo[0].Width != 64 || m.Photo[0].Height != 48 || m.Caption != "a picture" || m.Photo[0].FileID == "" {
		t.Fatalf("photo message %+v %+v", m, m.Photo)
	}
	doc := tgbotapi.NewDocument(ada.ID, tgbotapi.FileBytes{Name: "notes.txt", Bytes: []byte("hello file")})
	d, err := api.Send(doc)
	if err != nil {
		t.Fatal(err)
	}
	if d.Document == nil || d.Document.FileName != "notes.txt" || d.Document.FileSize != len("hello file") {
		t.Fatalf("document %+v", d.Document)
	}
	sent := tg.Sent(ada.ID, 0)
	if len(sent) != 2 || sent[0].File == nil || !bytes.Equal(sent[0].File.Data, img) || sent[0].File.FileName != "pic.png" ||
		sent[0].Message.Caption != "a picture" || !strings.EqualFold(sent[0].Method, "sendPhoto") ||
		sent[1].File == nil || string(sent[1].File.Data) != "hello file" || sent[1].File.Field != "document" {
		t.Fatalf("recorded %+v", sent)
	}

	// Download what was uploaded, at the path the library forms (its FileEndpoint is a
	// constant naming api.telegram.org: the test points it at the fake).
	for _, c := range []struct {
		id   string
		want []byte
	}{{m.Photo[0].FileID, img}, {d.Document.FileID, []byte("hello file")}} {
		f, err := api.GetFile(tgbotapi.FileConfig{FileID: c.id})
		if err != nil || f.FilePath == "" || f.FileSize != len(c.want) {
			t.Fatalf("getFile %+v %v", f, err)
		}
		u, err := api.GetFileDirectURL(c.id)
		if err != nil || !strings.HasPrefix(u, "https://api.telegram.org/file/bot") {
			t.Fatal(u, err)
		}
		u = tg.URL() + strings.TrimPrefix(u, "https://api.telegram.org")
		resp, err := tg.Client().Get(u)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(got, c.want) {
			t.Fatalf("download %s: %d %q", u, resp.StatusCode, got)
		}
	}
	if n := len(tg.Downloads()); n != 2 {
		t.Fatalf("%d downloads recorded", n)
	}

	// Refusals: an unknown file_id, a file over the download limit, a photo that is no image.
	var e *tgbotapi.Error
	if _, err := api.GetFile(tgbotapi.FileConfig{FileID: "nope"}); !errors.As(err, &e) || e.Code != 400 {
		t.Fatalf("unknown file_id: %v", err)
	}
	big := tg.PutFile(tgt.File{Data: []byte("x"), Size: 25 << 20})
	if _, err := api.GetFile(tgbotapi.FileConfig{FileID: big.ID}); !errors.As(err, &e) || e.Message != "Bad Request: file is too big" {
		t.Fatalf("25 MB file: %v", err)
	}
	if _, err := api.Send(tgbotapi.NewPhoto(ada.ID, tgbotapi.FileBytes{Name: "x.png", Bytes: []byte("not an image")})); !errors.As(err, &e) ||
		!strings.Contains(e.Message, "IMAGE_PROCESS_FAILED") {
		t.Fatalf("non-image photo: %v", err)
	}
	// Photos outside Telegram's dimension rules, and captions over 1024 UTF-16 units.
	if _, err := api.Send(tgbotapi.NewPhoto(ada.ID, tgbotapi.FileBytes{Name: "thin.png", Bytes: pngBytes(t, 1, 30)})); !errors.As(err, &e) ||
		!strings.Contains(e.Message, "PHOTO_INVALID_DIMENSIONS") {
		t.Fatalf("1x30 photo: %v", err)
	}
	long := tgbotapi.NewDocument(ada.ID, tgbotapi.FileBytes{Name: "a.txt", Bytes: []byte("a")})
	long.Caption = strings.Repeat("😀", 513) // 1026 units
	if _, err := api.Send(long); !errors.As(err, &e) || e.Message != "Bad Request: message caption is too long" {
		t.Fatalf("long caption: %v", err)
	}
	long.Caption = strings.Repeat("😀", 512)
	if _, err := api.Send(long); err != nil {
		t.Fatalf("1024-unit caption: %v", err)
	}
	// A file re-sent by file_id needs no upload.
	if _, err := api.Send(tgbotapi.NewDocument(ada.ID, tgbotapi.FileID(d.Document.FileID))); err != nil {
		t.Fatalf("resend by file_id: %v", err)
	}
}

// Inbound media and button presses parse in the library as Telegram's; answerCallbackQuery is
// recorded once per query.
func TestClientLibraryMediaUpdatesAndCallbacks(t *testing.T) {
	tg := tgt.New(t)
	bot := tg.Bot()
	api := newClient(t, tg)
	ada := tgt.Person(111, "Ada")
	photo, pf := bot.Media(ada.ID, ada, tgt.Attach{Data: []byte("jpeg bytes"), Width: 800, Height: 600}, "look @"+bot.Username())
	voice, vf := bot.Media(ada.ID, ada, tgt.Attach{Kind: tgt.KindVoice, Data: []byte("ogg"), Duration: 3}, "")
	doc, _ := bot.Media(-4001, ada, tgt.Attach{Kind: tgt.KindDocument, Data: []byte("%PDF"), FileName: "a.pdf", MIMEType: "application/pdf"}, "")

	msg := tgbotapi.NewMessage(ada.ID, "approve?")
	msg.ReplyMarkup = tgbotapi.NewInlineKeyboardMarkup(tgbotapi.NewInlineKeyboardRow(
		tgbotapi.NewInlineKeyboardButtonData("Yes", "approve:1"), tgbotapi.NewInlineKeyboardButtonData("No", "deny:1")))
	sent, err := api.Send(msg)
	if err != nil {
		t.Fatal(err)
	}
	if sent.ReplyMarkup == nil || len(sent.ReplyMarkup.InlineKeyboard) != 1 || *sent.ReplyMarkup.InlineKeyboard[0][1].CallbackData != "deny:1" {
		t.Fatalf("reply_markup %+v", sent.ReplyMarkup)
	}
	if _, err := bot.Press(ada.ID, int64(sent.MessageID), ada, "missing"); err == nil {
		t.Fatal("pressed a button the message does not have")
	}
	press, err := bot.Press(ada.ID, int64(sent.MessageID), ada, "deny:1")
	if err != nil {
		t.Fatal(err)
	}

	got, err := api.GetUpdates(tgbotapi.UpdateConfig{})
	if err != nil || len(got) != 4 {
		t.Fatalf("%d updates: %v", len(got), err)
	}
	if p := got[0].Message.Photo; len(p) != 2 || p[1].FileID != pf.ID || p[1].Width != 800 || p[0].Width >= p[1].Width ||
		got[0].Message.Caption != photo.Message.Caption || len(got[0].Message.CaptionEntities) != 1 {
		t.Fatalf("photo update %+v", got[0].Message)
	}
	if v := got[1].Message.Voice; v == nil || v.FileID != vf.ID || v.Duration != 3 || v.MimeType != "audio/ogg" || voice.Message.Voice == nil {
		t.Fatalf("voice update %+v", got[1].Message)
	}
	if d := got[2].Message.Document; d == nil || d.FileName != "a.pdf" || d.MimeType != "application/pdf" || got[2].Message.Chat.ID != doc.Message.Chat.ID {
		t.Fatalf("document update %+v", got[2].Message)
	}
	q := got[3].CallbackQuery
	if q == nil || q.ID != press.CallbackQuery.ID || q.Data != "deny:1" || q.From == nil || q.From.ID != ada.ID ||
		q.Message == nil || q.Message.MessageID != sent.MessageID || q.Message.Chat.ID != ada.ID || q.Message.ReplyMarkup == nil {
		t.Fatalf("callback %+v", q)
	}
	if _, err := api.Request(tgbotapi.NewCallback(q.ID, "done")); err != nil {
		t.Fatal(err)
	}
	var e *tgbotapi.Error
	if _, err := api.Request(tgbotapi.NewCallback(q.ID, "again")); !errors.As(err, &e) || e.Code != 400 {
		t.Fatalf("second answer: %v", err)
	}
	if a := tg.Answers(); len(a) != 1 || a[0].QueryID != q.ID || a[0].Text != "done" {
		t.Fatalf("answers %+v", a)
	}

	// callback_data past 64 bytes is refused, as Telegram refuses it.
	bad := tgbotapi.NewMessage(ada.ID, "x")
	bad.ReplyMarkup = tgbotapi.NewInlineKeyboardMarkup(tgbotapi.NewInlineKeyboardRow(
		tgbotapi.NewInlineKeyboardButtonData("Long", strings.Repeat("d", 65))))
	if _, err := api.Send(bad); !errors.As(err, &e) || !strings.Contains(e.Message, "BUTTON_DATA_INVALID") {
		t.Fatalf("long callback_data: %v", err)
	}
}

// Upload faults after the effect: the file is posted (recorded with its bytes), then the
// client gets a 502, a reset or no answer.
func TestUploadFaultsAfterEffect(t *testing.T) {
	tg := tgt.New(t)
	api := newClient(t, tg)
	api.Client = &http.Client{Timeout: 300 * time.Millisecond}
	ada := tgt.Person(111, "Ada")
	tg.AddPrivate(ada)
	for i, f := range []tgt.Fault{tgt.ServerError(502).AfterEffect(), tgt.ConnectionReset().AfterEffect(), tgt.NoAnswer()} {
		tg.InjectFault("sendDocument", f)
		_, err := api.Send(tgbotapi.NewDocument(ada.ID, tgbotapi.FileBytes{Name: "f.bin", Bytes: []byte{byte(i), 1, 2}}))
		var e *tgbotapi.Error
		if err == nil || errors.As(err, &e) {
			t.Errorf("%s: library answered %v", f, err)
		}
		sent := tg.Sent(ada.ID, 0)
		if len(sent) != i+1 || sent[i].File == nil || sent[i].File.Data[0] != byte(i) {
			t.Errorf("%s: upload not recorded: %+v", f, sent)
		}
	}
}
