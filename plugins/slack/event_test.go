package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

const bot = "U0BOT"

func callback(event string) []byte {
	return []byte(`{"type":"event_callback","team_id":"T1","api_app_id":"A1","event_id":"Ev1","event_time":1700000000,
	 "authorizations":[{"team_id":"T1","user_id":"` + bot + `","is_bot":true}],"event":` + event + `}`)
}

func mapRaw(t *testing.T, raw []byte, o mapOptions) mapped {
	t.Helper()
	env, err := parseEnvelope(raw)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	m, err := mapCallback(env, o)
	if err != nil {
		t.Fatalf("map: %v", err)
	}
	return m
}

var defaults = mapOptions{RequireMention: true, ReplyInThread: true}

func TestMapMessages(t *testing.T) {
	for _, c := range []struct {
		name, event string
		o           mapOptions
		kind        string // "" for a skip
		thread      string
		text        string
		follow      bool
	}{
		{"mention starts a thread", `{"type":"app_mention","user":"U1","text":"<@U0BOT> hi","ts":"1700000000.000100","channel":"C1"}`,
			defaults, abi.EventMessage, "1700000000.000100", "hi", true},
		{"message with the mention, same event", `{"type":"message","user":"U1","text":"<@U0BOT|hermes>: hi","ts":"1700000000.000100","channel":"C1","channel_type":"channel"}`,
			defaults, abi.EventMessage, "1700000000.000100", "hi", true},
		{"mention without reply_in_thread", `{"type":"app_mention","user":"U1","text":"<@U0BOT> hi","ts":"1700000000.000100","channel":"C1"}`,
			mapOptions{RequireMention: true}, abi.EventMessage, "", "hi", false},
		{"chatter", `{"type":"message","user":"U1","text":"hi all","ts":"1.000001","channel":"C1","channel_type":"channel"}`,
			defaults, abi.EventObserve, "", "hi all", false},
		{"chatter without require_mention", `{"type":"message","user":"U1","text":"hi all","ts":"1.000001","channel":"C1","channel_type":"group"}`,
			mapOptions{ReplyInThread: true}, abi.EventMessage, "1.000001", "hi all", false},
		{"free response channel", `{"type":"message","user":"U1","text":"hi all","ts":"1.000001","channel":"C9","channel_type":"channel"}`,
			mapOptions{RequireMention: true, FreeResponse: func(c string) bool { return c == "C9" }}, abi.EventMessage, "", "hi all", false},
		{"thread reply", `{"type":"message","user":"U1","text":"more","ts":"2.000001","thread_ts":"1.000001","channel":"C1","channel_type":"channel"}`,
			defaults, abi.EventObserve, "1.000001", "more", false},
		{"followed thread reply", `{"type":"message","user":"U1","text":"more","ts":"2.000001","thread_ts":"1.000001","channel":"C1","channel_type":"channel"}`,
			mapOptions{RequireMention: true, Followed: func(team, ch, th string) bool { return team == "T1" && ch == "C1" && th == "1.000001" }},
			abi.EventMessage, "1.000001", "more", false},
		{"mention in a thread", `{"type":"message","user":"U1","text":"<@U0BOT> !new","ts":"2.000001","thread_ts":"1.000001","channel":"C1","channel_type":"channel"}`,
			defaults, abi.EventMessage, "1.000001", "/new", true},
		{"command in a thread", `{"type":"message","user":"U1","text":"!new","ts":"2.000001","thread_ts":"1.000001","channel":"C1","channel_type":"channel"}`,
			defaults, abi.EventMessage, "1.000001", "/new", false},
		{"dm", `{"type":"message","user":"U1","text":"&lt;b&gt; &amp; <#C2|ops>","ts":"1.000001","channel":"D1","channel_type":"im"}`,
			defaults, abi.EventMessage, "", "<b> & #ops", false},
		{"dm thread", `{"type":"message","user":"U1","text":"x","ts":"2.000001","thread_ts":"1.000001","channel":"D1","channel_type":"im"}`,
			defaults, abi.EventMessage, "1.000001", "x", false},
		{"file", `{"type":"message","subtype":"file_share","user":"U1","text":"","files":[{"name":"a.png"}],"ts":"1.000001","channel":"D1","channel_type":"im"}`,
			defaults, abi.EventMessage, "", "[file: a.png]", false},
		{"bot", `{"type":"message","bot_id":"B1","user":"U0BOT","text":"echo","ts":"1.000001","channel":"C1"}`, defaults, "", "", "", false},
		{"own user", `{"type":"message","user":"U0BOT","text":"echo","ts":"1.000001","channel":"C1"}`, defaults, "", "", "", false},
		{"join", `{"type":"message","subtype":"channel_join","user":"U1","text":"joined","ts":"1.000001","channel":"C1"}`, defaults, "", "", "", false},
		{"empty", `{"type":"message","user":"U1","text":"<@U0BOT>","ts":"1.000001","channel":"C1"}`, defaults, "", "", "", false},
		{"reaction", `{"type":"reaction_added","user":"U1"}`, defaults, "", "", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := mapRaw(t, callback(c.event), c.o)
			if c.kind == "" {
				if m.Event != nil || m.Skip == "" {
					t.Fatalf("want a skip, got %+v", m)
				}
				return
			}
			ev := m.Event
			if ev == nil {
				t.Fatalf("skipped: %s", m.Skip)
			}
			if ev.Kind != c.kind || ev.Source.ThreadID != c.thread || ev.Text != c.text || ev.Source.ScopeID != "T1" {
				t.Fatalf("got %+v", ev)
			}
			if (m.Follow != nil) != c.follow {
				t.Fatalf("follow %+v", m.Follow)
			}
			wantPrefix := "msg:T1:"
			if c.kind == abi.EventObserve {
				wantPrefix = "obs:T1:"
			}
			if !strings.HasPrefix(ev.ID, wantPrefix) {
				t.Fatalf("id %q", ev.ID)
			}
		})
	}
}

// An unmentioned message the plugin takes as addressed says why, so that the operator's
// require_mention (the host's door) counts it as a mention; a mention or plain chatter says nothing.
func TestMapMessagesSayWhyAddressed(t *testing.T) {
	followed := func(team, ch, th string) bool { return th == "1.000001" }
	for _, c := range []struct {
		name, event string
		o           mapOptions
		want        string
	}{
		{"mention", `{"type":"app_mention","user":"U1","text":"<@U0BOT> hi","ts":"1.000100","channel":"C1"}`, defaults, ""},
		{"chatter", `{"type":"message","user":"U1","text":"hi all","ts":"1.000001","channel":"C1","channel_type":"channel"}`, defaults, ""},
		{"followed thread", `{"type":"message","user":"U1","text":"more","ts":"2.000001","thread_ts":"1.000001","channel":"C1","channel_type":"channel"}`,
			mapOptions{RequireMention: true, Followed: followed}, abi.AddressedThread},
		{"free response", `{"type":"message","user":"U1","text":"hi","ts":"1.000001","channel":"C9","channel_type":"channel"}`,
			mapOptions{RequireMention: true, FreeResponse: func(c string) bool { return c == "C9" }}, abi.AddressedFreeResponse},
		{"no mention required", `{"type":"message","user":"U1","text":"hi","ts":"1.000001","channel":"C1","channel_type":"channel"}`,
			mapOptions{}, abi.AddressedFreeResponse},
		{"command", `{"type":"message","user":"U1","text":"!last","ts":"2.000001","thread_ts":"1.000001","channel":"C1","channel_type":"channel"}`,
			defaults, abi.AddressedCommand},
		{"dm", `{"type":"message","user":"U1","text":"x","ts":"1.000001","channel":"D1","channel_type":"im"}`, defaults, ""},
	} {
		if ev := mapRaw(t, callback(c.event), c.o).Event; ev == nil || ev.Addressed != c.want || ev.Kind != abi.EventMessage && c.want != "" {
			t.Errorf("%s: %+v, want addressed %q", c.name, ev, c.want)
		}
	}
}

// Without authorizations the bot user comes from the options; the mention is then recognised
// in a message event too.
func TestBotUserFallback(t *testing.T) {
	raw := []byte(`{"type":"event_callback","team_id":"T1","event_id":"Ev2","event":{"type":"message","user":"U1","text":"<@U0BOT> hi","ts":"1.000001","channel":"C1","channel_type":"channel"}}`)
	if m := mapRaw(t, raw, defaults); m.Event.Kind != abi.EventObserve || m.Event.ID != "obs:T1:C1:1.000001" {
		t.Fatalf("unknown bot: %+v", m.Event)
	}
	o := defaults
	o.BotUserID = bot
	if m := mapRaw(t, raw, o); m.Event.Kind != abi.EventMessage || m.Event.Text != "hi" {
		t.Fatalf("known bot: %+v", m.Event)
	}
}

func TestMalformedCallbacks(t *testing.T) {
	for _, raw := range []string{
		`{"type":"event_callback","team_id":"T1","event":{}}`,                   // no event_id
		`{"type":"event_callback","event_id":"Ev1","event":{"type":"message"}}`, // no team
		`{"type":"event_callback","team_id":"T1","event_id":"Ev1","event":[1]}`, // not an object
	} {
		env, err := parseEnvelope([]byte(raw))
		if err != nil {
			continue
		}
		if _, err := mapCallback(env, defaults); err == nil {
			t.Errorf("%s: accepted", raw)
		}
	}
	if _, err := parseEnvelope([]byte(`{"challenge":"x"}`)); err == nil {
		t.Error("a payload without type was accepted")
	}
}

func TestVerify(t *testing.T) {
	now := time.Unix(1700000000, 0)
	body := []byte(`{"type":"event_callback"}`)
	sig := sign("s3cret", "1700000000", body)
	h := func(ts, sig string) map[string][]string {
		return map[string][]string{"X-Slack-Request-Timestamp": {ts}, "x-slack-signature": {sig}}
	}
	for _, c := range []struct {
		name string
		h    map[string][]string
		body []byte
		at   time.Time
		want error
	}{
		{"good", h("1700000000", sig), body, now, nil},
		{"4 min late", h("1700000000", sig), body, now.Add(4 * time.Minute), nil},
		{"6 min late", h("1700000000", sig), body, now.Add(6 * time.Minute), errStale},
		{"6 min early", h("1700000000", sig), body, now.Add(-6 * time.Minute), errStale},
		{"no headers", nil, body, now, errMissingHeaders},
		{"signed minus sign", h("-1700000000", sig), body, now, errBadTimestamp},
		{"v1", h("1700000000", "v1="+sig[3:]), body, now, errBadVersion},
		{"not hex", h("1700000000", "v0=zz"+sig[5:]), body, now, errBadHex},
		{"short", h("1700000000", sig[:40]), body, now, errBadHex},
		{"other body", h("1700000000", sig), []byte(`{"type":"event_callback "}`), now, errMismatch},
		{"other secret", h("1700000000", sign("other", "1700000000", body)), body, now, errMismatch},
	} {
		if err := verify(c.h, c.body, "s3cret", c.at); err != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestSplitEscaped(t *testing.T) {
	parts := splitEscaped(strings.Repeat("a&b ", 10), 20)
	var joined string
	for _, p := range parts {
		if len([]rune(p)) > 20 {
			t.Fatalf("part %q over the limit", p)
		}
		if strings.Count(p, "&") != strings.Count(p, "&amp;") {
			t.Fatalf("entity cut in %q", p)
		}
		joined += p
	}
	if joined != escape(strings.Repeat("a&b ", 10)) {
		t.Fatalf("parts lose text: %q", joined)
	}
	if got := splitEscaped("short", MaxText); len(got) != 1 || got[0] != "short" {
		t.Fatalf("%q", got)
	}
}

// Files become attachments, their kind from the mimetype (else the filetype); a file the bot
// token cannot fetch (remote, deleted, hidden) is named in the text instead; a message with only
// a file is not skipped.
func TestMapFiles(t *testing.T) {
	ev := func(files string) string {
		return `{"type":"message","subtype":"file_share","user":"U1","text":"see","ts":"1.000001","channel":"D1","channel_type":"im","files":[` + files + `]}`
	}
	for _, c := range []struct {
		name, files string
		want        []abi.Attachment
		text        string
	}{
		{"image", `{"id":"F1","name":"a.png","mimetype":"image/png","filetype":"png","size":10,"url_private":"https://files.slack.com/files-pri/T1-F1/a.png","url_private_download":"https://files.slack.com/files-pri/T1-F1/download/a.png"}`,
			[]abi.Attachment{{Kind: abi.AttachImage, MIMEType: "image/png", Name: "a.png", Size: 10, Ref: "https://files.slack.com/files-pri/T1-F1/download/a.png"}}, "see"},
		{"voice clip", `{"id":"F2","name":"audio_message.m4a","mimetype":"audio/mp4","subtype":"slack_audio","url_private":"https://files.slack.com/files-pri/T1-F2/audio_message.m4a"}`,
			[]abi.Attachment{{Kind: abi.AttachVoice, MIMEType: "audio/mp4", Name: "audio_message.m4a", Ref: "https://files.slack.com/files-pri/T1-F2/audio_message.m4a"}}, "see"},
		{"audio, video, document", `{"name":"a.mp3","mimetype":"audio/mpeg","url_private":"u1"},{"name":"b.mov","filetype":"mov","url_private":"u2"},{"name":"c.pdf","mimetype":"application/pdf","url_private":"u3"}`,
			[]abi.Attachment{{Kind: abi.AttachAudio, MIMEType: "audio/mpeg", Name: "a.mp3", Ref: "u1"}, {Kind: abi.AttachVideo, Name: "b.mov", Ref: "u2"},
				{Kind: abi.AttachDocument, MIMEType: "application/pdf", Name: "c.pdf", Ref: "u3"}}, "see"},
		{"remote file", `{"name":"doc","is_external":true,"mode":"external","url_private":"https://docs.example.com/d/1"}`, nil, "see [file: doc]"},
		{"hidden file", `{"name":"old.png","mode":"hidden_by_limit"}`, nil, "see [file: old.png]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := mapRaw(t, callback(ev(c.files)), defaults)
			if m.Event == nil {
				t.Fatalf("skipped: %s", m.Skip)
			}
			if m.Event.Text != c.text || len(m.Event.Attachments) != len(c.want) {
				t.Fatalf("got %+v", m.Event)
			}
			for i, a := range m.Event.Attachments {
				if !reflect.DeepEqual(a, c.want[i]) {
					t.Errorf("attachment %d: %+v, want %+v", i, a, c.want[i])
				}
			}
		})
	}
	only := `{"type":"message","subtype":"file_share","user":"U1","text":"","ts":"1.000001","channel":"D1","channel_type":"im","files":[{"name":"a.png","mimetype":"image/png","url_private":"u"}]}`
	if m := mapRaw(t, callback(only), defaults); m.Event == nil || m.Event.Text != "" || len(m.Event.Attachments) != 1 {
		t.Fatalf("a file without text: %+v %s", m.Event, m.Skip)
	}
}

func TestMapInteraction(t *testing.T) {
	payload := func(container, actions string) []byte {
		return []byte(`{"type":"block_actions","team":{"id":"T1"},"user":{"id":"U1","username":"ann","team_id":"T1"},
		 "container":` + container + `,"channel":{"id":"C1"},"actions":` + actions + `}`)
	}
	button := `[{"type":"button","action_id":"approve:7","value":"approve:7","action_ts":"1700000001.000200"}]`
	evs, skip, err := mapInteraction(payload(`{"type":"message","message_ts":"2.000001","channel_id":"C1","thread_ts":"1.000001"}`, button))
	if err != nil || len(evs) != 1 {
		t.Fatalf("%v %q %+v", err, skip, evs)
	}
	want := abi.Source{ChatType: abi.ChatGroup, ChatID: "C1", ThreadID: "1.000001", UserID: "U1", UserName: "ann", ScopeID: "T1", MessageID: "2.000001"}
	if e := evs[0]; e.Kind != abi.EventCallback || e.CallbackID != "approve:7" || e.Source != want || e.ID == "" || e.UnixMs != 1700000001000 {
		t.Fatalf("%+v", e)
	}
	// A thread's root is at the top level; a DM is a dm.
	evs, _, _ = mapInteraction(payload(`{"type":"message","message_ts":"1.000001","channel_id":"D1","thread_ts":"1.000001"}`, button))
	if len(evs) != 1 || evs[0].Source.ThreadID != "" || evs[0].Source.ChatType != abi.ChatDM {
		t.Fatalf("%+v", evs)
	}
	for name, raw := range map[string][]byte{
		"not a button":     payload(`{"message_ts":"1.000001","channel_id":"C1"}`, `[{"type":"static_select","action_id":"x","value":"x"}]`),
		"not our id":       payload(`{"message_ts":"1.000001","channel_id":"C1"}`, `[{"type":"button","action_id":"a b","value":"a b"}]`),
		"id too long":      payload(`{"message_ts":"1.000001","channel_id":"C1"}`, `[{"type":"button","value":"`+strings.Repeat("x", 65)+`"}]`),
		"without message":  payload(`{"channel_id":"C1"}`, button),
		"a view submitted": []byte(`{"type":"view_submission","team":{"id":"T1"},"user":{"id":"U1"}}`),
	} {
		if evs, skip, err := mapInteraction(raw); err != nil || len(evs) != 0 || skip == "" {
			t.Errorf("%s: %v %q %+v", name, err, skip, evs)
		}
	}
	if _, _, err := mapInteraction([]byte(`{`)); err == nil {
		t.Error("malformed JSON accepted")
	}
}
