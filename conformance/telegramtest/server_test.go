package telegramtest

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestTransportsAndRouting(t *testing.T) {
	s := New(t)
	var me User
	mustOK(t, api(t, s, DefaultToken, "getMe", nil), &me)
	if !me.IsBot || me.Username != DefaultBotUsername || me.ID != 123456789 {
		t.Fatalf("getMe: %+v", me)
	}
	// Case-insensitive method names, GET with a query, form and multipart bodies.
	resp, err := s.Client().Get(s.BotURL(DefaultToken) + "/GETME")
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, decode(t, resp), nil)

	s.AddPrivate(ada)
	mustOK(t, callForm(t, s, DefaultToken, "sendmessage", url.Values{"chat_id": {"111"}, "text": {"form"}}), nil)

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("chat_id", "111")
	mw.WriteField("text", "multipart")
	fw, _ := mw.CreateFormFile("document", "a.txt")
	fw.Write([]byte("file"))
	mw.Close()
	resp, err = s.Client().Post(s.BotURL(DefaultToken)+"/sendMessage", mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, decode(t, resp), nil)

	resp, err = s.Client().Get(s.BotURL(DefaultToken) + "/sendMessage?chat_id=111&text=query")
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, decode(t, resp), nil)

	if got := s.SentTexts(111, 0); strings.Join(got, ",") != "form,multipart,query" {
		t.Fatalf("transcript %q", got)
	}
	reqs := s.Requests("sendMessage", 111)
	if len(reqs) != 3 || reqs[1].Files[0] != "document" || reqs[0].Params["text"] != "form" || reqs[0].Status != 200 {
		t.Fatalf("requests %+v", reqs)
	}
}

func TestUnauthorizedAndNotFound(t *testing.T) {
	s := New(t)
	mustFail(t, api(t, s, "42:nope", "getMe", nil), 401, "Unauthorized")
	if r := api(t, s, "42:nope", "getMe", nil); r.Raw != `{"ok":false,"error_code":401,"description":"Unauthorized"}` {
		t.Fatalf("401 body %s", r.Raw)
	}
	mustFail(t, api(t, s, DefaultToken, "sendPigeon", nil), 404, "Not Found")
	resp, err := s.Client().Get(s.URL() + "/nobot/getMe")
	if err != nil {
		t.Fatal(err)
	}
	mustFail(t, decode(t, resp), 404, "Not Found")
	resp, err = s.Client().Post(s.BotURL(DefaultToken)+"/sendMessage", "application/json", strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	if r := decode(t, resp); r.Status != 400 {
		t.Fatalf("bad JSON: %s", r.Raw)
	}
}

func TestBotsHaveOwnQueues(t *testing.T) {
	const work = "987654321:work-profile-token"
	s := New(t, WithBot(work, "work_bot"))
	main, other := s.Bot(), s.BotByToken(work)
	main.PrivateText(ada, "to main")
	other.PrivateText(ada, "to work")
	other.PrivateText(ada, "to work again")
	if got := updates(t, api(t, s, DefaultToken, "getUpdates", nil)); len(got) != 1 || got[0].Message.Text != "to main" {
		t.Fatalf("main got %+v", got)
	}
	got := updates(t, api(t, s, work, "getUpdates", nil))
	if len(got) != 2 || got[0].UpdateID+1 != got[1].UpdateID {
		t.Fatalf("work got %+v", got)
	}
	var me User
	mustOK(t, api(t, s, work, "getMe", nil), &me)
	if me.ID != 987654321 || me.Username != "work_bot" {
		t.Fatalf("work getMe %+v", me)
	}
}

func TestWaitTimesOut(t *testing.T) {
	s := New(t)
	if err := s.Wait(10_000_000, func() bool { return false }); err == nil {
		t.Fatal("Wait of a false condition returned nil")
	}
	if _, err := s.WaitSent(1, 0, 1, 10_000_000); err == nil {
		t.Fatal("WaitSent returned nil")
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	s := New(nil)
	s.Close()
	s.Close()
	if _, err := http.Get(s.URL() + "/bot" + DefaultToken + "/getMe"); err == nil {
		t.Fatal("server still answering after Close")
	}
}
