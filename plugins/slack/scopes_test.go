package main

import (
	"net/url"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
)

// TestEgressScopesOnSlack: against Slack's real URLs, only send may post into a chat;
// configure may ask auth.test, poll may open Socket Mode; every other use is refused.
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
