package main

import (
	"net/url"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
)

// TestEgressScopesOnTelegram: against Telegram's real URLs, only send may post into chats
// (texts and uploads), only fetch may read files, poll and webhook may answer button presses.
func TestEgressScopesOnTelegram(t *testing.T) {
	pol := egress.Policy{Scopes: egressScopes}
	const bot, file = "https://api.telegram.org/bot123:abc/", "https://api.telegram.org/file/bot123:abc/"
	for _, c := range []struct {
		export, method, url string
		ok                  bool
	}{
		{abi.ExportSend, "POST", bot + "sendMessage", true},
		{abi.ExportSend, "POST", bot + "sendPhoto", true},
		{abi.ExportSend, "POST", bot + "sendDocument", true},
		{abi.ExportSend, "POST", bot + "sendVoice", true},
		{abi.ExportSend, "POST", bot + "sendAudio", true},
		{abi.ExportSend, "POST", bot + "sendVideo", true},
		{abi.ExportFetch, "POST", bot + "getFile", true},
		{abi.ExportFetch, "GET", file + "photos/file_1.jpg", true},
		{abi.ExportFetch, "GET", file + "file_1.jpg", true},
		{abi.ExportPoll, "POST", bot + "getUpdates", true},
		{abi.ExportPoll, "POST", bot + "answerCallbackQuery", true},
		{abi.ExportWebhook, "POST", bot + "answerCallbackQuery", true},
		// send cannot reach the files, fetch cannot post.
		{abi.ExportSend, "GET", file + "photos/file_1.jpg", false},
		{abi.ExportSend, "POST", bot + "getFile", false},
		{abi.ExportFetch, "POST", bot + "sendMessage", false},
		{abi.ExportFetch, "POST", bot + "sendPhoto", false},
		{abi.ExportFetch, "POST", file + "photos/file_1.jpg", false},
		{abi.ExportFetch, "GET", file + "a/b/c/d.jpg", false},
		{abi.ExportFetch, "POST", bot + "getUpdates", false},
		// Only send posts; nobody else may answer presses or read files.
		{abi.ExportPoll, "POST", bot + "sendPhoto", false},
		{abi.ExportPoll, "GET", file + "photos/file_1.jpg", false},
		{abi.ExportConfigure, "POST", bot + "answerCallbackQuery", false},
		{abi.ExportSend, "POST", bot + "answerCallbackQuery", false},
		{abi.ExportFetch, "GET", "https://example.com/file/bot123:abc/photos/file_1.jpg", false},
	} {
		u, _ := url.Parse(c.url)
		err := pol.Check(u, egress.Use{Export: c.export, Method: c.method})
		if (err == nil) != c.ok {
			t.Errorf("%s %s from %s: %v, want allowed %v", c.method, c.url, c.export, err, c.ok)
		}
	}
}
