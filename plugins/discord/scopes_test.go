package main

import (
	"net/url"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
)

// TestEgressScopesOnDiscord: against Discord's real URLs, only send may post, edit or type
// into a channel; configure and poll may read who the bot is and what a channel is; only poll
// holds the Gateway (on gateway.discord.gg or a session's resume host); the rest is refused.
func TestEgressScopesOnDiscord(t *testing.T) {
	pol := egress.Policy{Scopes: egressScopes}
	for _, c := range []struct {
		export, method, url string
		ok                  bool
	}{
		{abi.ExportSend, "POST", "https://discord.com/api/v10/channels/123/messages", true},
		{abi.ExportSend, "PATCH", "https://discord.com/api/v10/channels/123/messages/456", true},
		{abi.ExportSend, "POST", "https://discord.com/api/v10/channels/123/typing", true},
		{abi.ExportConfigure, "GET", "https://discord.com/api/v10/users/@me", true},
		{abi.ExportPoll, "GET", "https://discord.com/api/v10/channels/123", true},
		{abi.ExportPoll, "GET", "wss://gateway.discord.gg/?v=10&encoding=json", true},
		{abi.ExportPoll, "GET", "wss://gateway-us-east1-b.discord.gg/?v=10&encoding=json", true},
		{abi.ExportPoll, "POST", "https://discord.com/api/v10/channels/123/messages", false},
		{abi.ExportPoll, "POST", "https://discord.com/api/v10/channels/123/typing", false},
		{abi.ExportConfigure, "POST", "https://discord.com/api/v10/channels/123/messages", false},
		{abi.ExportSend, "DELETE", "https://discord.com/api/v10/channels/123/messages/456", false},
		{abi.ExportSend, "POST", "https://discord.com/api/v10/channels/123/messages/456/threads", false},
		{abi.ExportSend, "PUT", "https://discord.com/api/v10/guilds/1/bans/2", false},
		{abi.ExportPoll, "GET", "https://discord.com/api/v10/channels/123/messages", false},
		{abi.ExportSend, "GET", "wss://gateway.discord.gg/?v=10", false},
		{abi.ExportSend, "POST", "https://example.com/api/v10/channels/123/messages", false},
	} {
		u, _ := url.Parse(c.url)
		err := pol.Check(u, egress.Use{Export: c.export, Method: c.method})
		if (err == nil) != c.ok {
			t.Errorf("%s %s from %s: %v, want allowed %v", c.method, c.url, c.export, err, c.ok)
		}
	}
}
