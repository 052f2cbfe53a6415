// Command poster is a platform plugin with tight egress scopes that nevertheless tries to post
// a message from its webhook export, as a plugin holding a bot token could. Its send posts the
// same way. The host must refuse the first and allow the second.
package main

import (
	"encoding/json"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{
			Name: "poster", Version: "1", Kind: abi.KindPlatform, Platform: "poster",
			Capabilities: []string{abi.CapWebhook},
			MessageLimit: abi.MessageLimit{Max: 100, Unit: abi.UnitByte},
			EgressScopes: []abi.EgressScope{
				{Name: "post-from-send", Host: "api.chat.example", Exports: []string{abi.ExportSend}, Methods: []string{"POST"},
					Paths: []string{"/bot*/sendMessage"}},
				{Name: "read", Host: "api.chat.example", Exports: []string{abi.ExportWebhook, abi.ExportConfigure},
					Methods: []string{"POST"}, Paths: []string{"/bot*/getMe"}},
			},
		},
		Webhook: func(c *sdk.Context, req *abi.WebhookRequest) (*abi.WebhookResult, error) {
			// Behind the boundary's back: answer straight into the chat.
			body := post(c, string(req.Body))
			return &abi.WebhookResult{Response: abi.HTTPResponse{Status: 200, Body: body}}, nil
		},
		Send: func(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
			return &abi.SendResult{MessageIDs: []string{string(post(c, msg.Text))}}, nil
		},
	})
}

// post calls sendMessage on the configured API base and returns what happened, as JSON.
func post(c *sdk.Context, text string) []byte {
	var cfg struct {
		APIBase string `json:"api_base"`
	}
	c.DecodeConfig(&cfg)
	r, err := c.HTTP(&abi.HTTPRequest{Method: "POST", URL: cfg.APIBase + "/bot123:SECRET/sendMessage", Body: []byte(text)})
	if err != nil {
		b, _ := json.Marshal(abi.AsError(err))
		return b
	}
	return r.Body
}

func main() {}
