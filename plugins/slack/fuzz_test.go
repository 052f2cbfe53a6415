package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
)

// sign is Slack's v0 signature, computed here independently of verify.
func sign(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:" + ts + ":"))
	m.Write(body)
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}

// FuzzParseEvent feeds arbitrary payloads to the event parser (seed corpus in
// testdata/fuzz/FuzzParseEvent). It must never panic, and every event it produces must be well
// formed: an id of its kind (msg:/obs:<team>:<channel>:<ts>, ev:<event_id>), a known kind and
// chat type, a workspace and a chat, a user for messages, non-empty valid UTF-8 text for
// messages and observations. Requiring a mention can only turn messages into observations.
func FuzzParseEvent(f *testing.F) {
	f.Add(callback(`{"type":"app_mention","user":"U1","text":"<@U0BOT> hi","ts":"1700000000.000100","channel":"C1"}`))
	f.Add(callback(`{"type":"message","user":"U1","text":"x","ts":"2.000001","thread_ts":"1.000001","channel":"D1","channel_type":"im"}`))
	f.Add(callback(`{"type":"message","subtype":"file_share","user":"U1","text":"","ts":"1.000001","channel":"C1","files":[{"name":"a.png","mimetype":"image/png","size":3,"url_private":"https://files.slack.com/files-pri/T1-F1/a.png"}]}`))
	f.Add([]byte(`{"type":"url_verification","challenge":"abc"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		env, err := parseEnvelope(raw)
		if err != nil {
			return
		}
		if env.Type != "event_callback" {
			return
		}
		var kinds [2]string
		for i, rm := range []bool{false, true} {
			o := mapOptions{RequireMention: rm, ReplyInThread: true, BotUserID: "U0BOT"}
			m, err := mapCallback(env, o)
			if err != nil {
				if m.Event != nil {
					t.Fatalf("error %v with event %+v", err, m.Event)
				}
				return
			}
			if m.Event == nil {
				if m.Skip == "" {
					t.Fatal("skipped without a reason")
				}
				return
			}
			checkEvent(t, env, m.Event)
			kinds[i] = m.Event.Kind
		}
		if kinds[0] == abi.EventObserve && kinds[1] != abi.EventObserve {
			t.Fatalf("kinds without/with require_mention: %v", kinds)
		}
	})
}

func checkEvent(t *testing.T, env *envelope, ev *abi.InboundEvent) {
	t.Helper()
	s := ev.Source
	if s.ScopeID == "" || s.ChatID == "" || (s.ChatType != abi.ChatDM && s.ChatType != abi.ChatGroup) {
		t.Fatalf("source %+v", s)
	}
	switch ev.Kind {
	case abi.EventMessage, abi.EventObserve:
		want := "msg:"
		if ev.Kind == abi.EventObserve {
			want = "obs:"
		}
		edit := ev.Kind == abi.EventObserve && strings.HasPrefix(ev.Text, "(edited) ") && ev.ID == "ev:"+env.EventID
		if !edit && ev.ID != want+s.ScopeID+":"+s.ChatID+":"+s.MessageID || s.MessageID == "" || s.UserID == "" {
			t.Fatalf("event id %q for %+v", ev.ID, s)
		}
		if (strings.TrimSpace(ev.Text) == "" && len(ev.Attachments) == 0) || !utf8.ValidString(ev.Text) {
			t.Fatalf("text %q without attachments", ev.Text)
		}
		for _, a := range ev.Attachments {
			switch a.Kind {
			case abi.AttachImage, abi.AttachVoice, abi.AttachAudio, abi.AttachVideo, abi.AttachDocument:
			default:
				t.Fatalf("attachment kind %q", a.Kind)
			}
			if a.Ref == "" || a.Size < 0 || a.Data != nil {
				t.Fatalf("attachment %+v", a)
			}
		}
	case abi.EventSeed, abi.EventRedact:
		if ev.ID != "ev:"+env.EventID {
			t.Fatalf("event id %q, event_id %q", ev.ID, env.EventID)
		}
	default:
		t.Fatalf("kind %q", ev.Kind)
	}
	if ev.UnixMs < 0 {
		t.Fatalf("negative time %d", ev.UnixMs)
	}
}

// FuzzInteraction feeds arbitrary interactivity payloads to mapInteraction: it must never
// panic, and every event is a callback with a valid button id, a workspace, a chat, a user and
// the message pressed, its id naming them.
func FuzzInteraction(f *testing.F) {
	f.Add([]byte(`{"type":"block_actions","team":{"id":"T1"},"user":{"id":"U1"},"container":{"message_ts":"2.000001","channel_id":"C1","thread_ts":"1.000001"},"actions":[{"type":"button","value":"approve:1","action_ts":"3.000001"}]}`))
	f.Add([]byte(`{"type":"block_actions","user":{"id":"U1","team_id":"T1"},"channel":{"id":"D1"},"message":{"ts":"1.000001"},"actions":[{"type":"button","action_id":"x"}]}`))
	f.Add([]byte(`{"type":"view_submission"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		evs, skip, err := mapInteraction(raw)
		if err != nil || len(evs) == 0 {
			if len(evs) != 0 || (err == nil && skip == "") {
				t.Fatalf("%v %q %+v", err, skip, evs)
			}
			return
		}
		for _, ev := range evs {
			s := ev.Source
			if ev.Kind != abi.EventCallback || !validButtonID(ev.CallbackID) || s.ScopeID == "" || s.ChatID == "" || s.UserID == "" ||
				s.MessageID == "" || s.ThreadID == s.MessageID || !strings.HasPrefix(ev.ID, "act:"+s.ScopeID+":"+s.ChatID+":"+s.MessageID+":") ||
				!strings.HasSuffix(ev.ID, ":"+ev.CallbackID) || ev.UnixMs < 0 {
				t.Fatalf("event %+v", ev)
			}
		}
	})
}

// FuzzVerify feeds arbitrary headers and bodies to the signature verifier (seed corpus in
// testdata/fuzz/FuzzVerify). It must never panic, must accept only a request whose signature is
// the HMAC of exactly this timestamp and body within the window, and must accept the properly
// signed request.
func FuzzVerify(f *testing.F) {
	f.Add("1700000000", "v0=0000", []byte(`{"type":"event_callback"}`), int64(0))
	f.Add("1700000000", "", []byte{}, int64(-301))
	f.Add("abc", "v0=zz", []byte("x"), int64(299))
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte, skew int64) {
		const secret = "fuzz-secret"
		now := time.Unix(1700000000, 0).Add(time.Duration(skew%100000) * time.Second)
		h := map[string][]string{headerTimestamp: {ts}, headerSignature: {sig}}
		if err := verify(h, body, secret, now); err == nil {
			sec, perr := strconv.ParseInt(ts, 10, 64)
			if perr != nil || sig != sign(secret, ts, body) {
				t.Fatalf("accepted ts %q sig %q", ts, sig)
			}
			if d := now.Sub(time.Unix(sec, 0)); d > signatureWindow || d < -signatureWindow {
				t.Fatalf("accepted a timestamp %v away", d)
			}
		}
		// The genuine signature of this body at now always passes, and fails for another body.
		good := strconv.FormatInt(now.Unix(), 10)
		h = map[string][]string{headerTimestamp: {good}, headerSignature: {sign(secret, good, body)}}
		if err := verify(h, body, secret, now); err != nil {
			t.Fatalf("genuine request refused: %v", err)
		}
		if err := verify(h, append(append([]byte(nil), body...), 'x'), secret, now); err == nil {
			t.Fatal("a longer body passed with the original signature")
		}
	})
}
