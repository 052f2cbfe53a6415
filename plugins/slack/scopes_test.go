package main

import (
	"net/url"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
)

// TestEgressScopesOnSlack: against Slack's real URLs, only send may post into a chat (files
// included: the upload flow's methods and the upload on files.slack.com); only fetch may read a
// file (GET url_private on files.slack.com); configure may ask auth.test, poll may open Socket
// Mode; every other use is refused.
func TestEgressScopesOnSlack(t *testing.T) {
	pol := egress.Policy{Scopes: egressScopes}
	for _, c := range []struct {
		export, method, url string
		ok                  bool
	}{
		{abi.ExportSend, "POST", "https://slack.com/api/chat.postMessage", true},
		{abi.ExportSend, "POST", "https://slack.com/api/chat.update", true},
		{abi.ExportSend, "POST", "https://slack.com/api/assistant.threads.setStatus", true},
		{abi.ExportConfigure, "POST", "https://slack.com/api/auth.test", true},
		{abi.ExportPoll, "POST", "https://slack.com/api/apps.connections.open", true},
		{abi.ExportPoll, "GET", "wss://wss-primary.slack.com/link/?ticket=abc&app_id=A1", true},
		{abi.ExportSend, "POST", "https://slack.com/api/files.getUploadURLExternal", true},
		{abi.ExportSend, "POST", "https://slack.com/api/files.completeUploadExternal", true},
		{abi.ExportSend, "POST", "https://files.slack.com/upload/v1/CwABAAAAXAoAAZnbfF8WaS1hc2RmAAA", true},
		{abi.ExportFetch, "GET", "https://files.slack.com/files-pri/T0HERMES01-F0123ABC/cat.png", true},
		{abi.ExportFetch, "GET", "https://files.slack.com/files-pri/T0HERMES01-F0123ABC/download/cat.png", true},
		// send cannot read files; fetch cannot post, upload or reach the Web API.
		{abi.ExportSend, "GET", "https://files.slack.com/files-pri/T0HERMES01-F0123ABC/download/cat.png", false},
		{abi.ExportFetch, "POST", "https://slack.com/api/chat.postMessage", false},
		{abi.ExportFetch, "POST", "https://slack.com/api/files.completeUploadExternal", false},
		{abi.ExportFetch, "POST", "https://files.slack.com/upload/v1/CwABAAAAXAoAAZnbfF8WaS1hc2RmAAA", false},
		{abi.ExportFetch, "POST", "https://files.slack.com/files-pri/T0HERMES01-F0123ABC/cat.png", false},
		{abi.ExportFetch, "GET", "https://acme.slack.com/?redir=%2Ffiles-pri%2FT0HERMES01-F0123ABC%2Fcat.png", false}, // the sign-in page
		{abi.ExportFetch, "GET", "https://files.slack.com/files-tmb/T0HERMES01-F0123ABC-abc/cat_360.png", false},
		{abi.ExportWebhook, "GET", "https://files.slack.com/files-pri/T0HERMES01-F0123ABC/cat.png", false},
		{abi.ExportPoll, "GET", "https://files.slack.com/files-pri/T0HERMES01-F0123ABC/cat.png", false},
		{abi.ExportWebhook, "POST", "https://slack.com/api/chat.postMessage", false},
		{abi.ExportPoll, "POST", "https://slack.com/api/chat.postMessage", false},
		{abi.ExportConfigure, "POST", "https://slack.com/api/chat.postMessage", false},
		{abi.ExportPoll, "POST", "https://acme.slack.com/api/chat.postMessage", false},
		{abi.ExportSend, "POST", "https://slack.com/api/chat.delete", false},
		{abi.ExportWebhook, "GET", "wss://wss-primary.slack.com/link/?ticket=abc", false},
		{abi.ExportSend, "POST", "https://example.com/api/chat.postMessage", false},
	} {
		u, _ := url.Parse(c.url)
		err := pol.Check(u, egress.Use{Export: c.export, Method: c.method})
		if (err == nil) != c.ok {
			t.Errorf("%s %s from %s: %v, want allowed %v", c.method, c.url, c.export, err, c.ok)
		}
	}
}
