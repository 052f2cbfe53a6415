package main

import (
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
)

// FuzzParseUpdate feeds arbitrary bytes to the update parser (seed corpus in
// testdata/fuzz/FuzzParseUpdate). It must never panic, and every event it produces must be well
// formed: an "update:<update_id>" id, a known kind and chat type, a chat and message id, a thread
// only on a forum or DM topic, non-empty valid UTF-8 text.
func FuzzParseUpdate(f *testing.F) {
	f.Add([]byte(`{"update_id": 1, "message": {"message_id": 1, "chat": {"id": 1, "type": "private"}, "text": "hi"}}`))
	f.Add([]byte(`{"update_id": 2, "message": {"message_id": 2, "message_thread_id": 3, "is_topic_message": true,` +
		`"chat": {"id": -100, "type": "supergroup", "is_forum": true}, "from": {"id": 5}, "text": "/x@hermes_test_bot y"}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"update_id": 3, "callback_query": {"id": "9", "from": {"id": 5}, "data": "approve:1",` +
		`"message": {"message_id": 4, "chat": {"id": 1, "type": "private"}, "date": 0}}}`))
	f.Add([]byte(`{"update_id": 4, "message": {"message_id": 5, "chat": {"id": -1, "type": "group"}, "from": {"id": 5},` +
		`"voice": {"file_id": "v", "file_size": -3}, "document": {"file_id": "d", "file_name": "a/b.pdf"}, "caption": "@hermes_test_bot x"}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var kinds [2]string
		for i, rm := range []bool{false, true} {
			id, ev, skip, err := parseUpdate(raw, mapOptions{Me: me, RequireMention: rm})
			switch {
			case err != nil:
				if ev != nil || id < 0 {
					t.Fatalf("error %v with event %+v, id %d", err, ev, id)
				}
				return
			case ev == nil:
				if skip == "" || id <= 0 {
					t.Fatalf("skipped update %d without a reason", id)
				}
				return
			}
			checkEvent(t, ev)
			if ev.ID != "update:"+strconv.FormatInt(id, 10) || id <= 0 {
				t.Fatalf("event id %q for update %d", ev.ID, id)
			}
			if !utf8.ValidString(ev.Text) {
				t.Fatalf("invalid UTF-8 text %q", ev.Text)
			}
			if n, err := strconv.ParseInt(ev.Source.ChatID, 10, 64); err != nil || n == 0 {
				t.Fatalf("chat id %q", ev.Source.ChatID)
			}
			if th := ev.Source.ThreadID; th != "" {
				if n, err := strconv.ParseInt(th, 10, 64); err != nil || n <= 0 {
					t.Fatalf("thread id %q", th)
				}
			}
			if _, target, _, ok := parseCommand(ev.Text); ok && target != "" {
				t.Fatalf("command kept a bot name: %q", ev.Text)
			}
			for _, a := range ev.Attachments {
				if a.Size < 0 {
					t.Fatalf("negative size %+v", a)
				}
			}
			if ev.UnixMs < 0 {
				t.Fatalf("negative time %d", ev.UnixMs)
			}
			kinds[i] = ev.Kind
		}
		// Requiring a mention can only turn messages into observations, never the reverse.
		if kinds[0] == abi.EventObserve && kinds[1] != abi.EventObserve {
			t.Fatalf("kinds without/with require_mention: %v", kinds)
		}
	})
}
