// Command telegram is the Telegram platform plugin: it connects a bot (one per profile, each with
// its own token) to hermes-host through the Bot API.
//
// Inbound, a profile long-polls getUpdates (mode "poll", the default) or receives Telegram's
// pushes on POST /hooks/telegram/{profile} (mode "webhook", authenticated by secret_token).
// Updates become events with id "update:<update_id>": private chats are "dm", groups "group",
// forum topics "forum" with the topic as thread_id (only for messages Telegram marks
// is_topic_message; the General topic is the chat itself), channels "channel". In groups,
// messages that do not address the bot (a mention, a reply to it, a command) are observed, not
// turned, unless require_mention is false. The service messages of a group's upgrade to a
// supergroup become observe events carrying migrate_from_chat_id, so that the host continues
// the group's conversations in the supergroup.
//
// Files (capability attachments): photos (the largest size), documents, voice notes, audio,
// video, video notes and stickers become attachments with the file_id as ref and the caption as
// text; the fetch export downloads one (getFile, then the file host; 20 MB at most). Buttons
// (capability buttons) become inline keyboards; a press becomes a callback event, answered with
// answerCallbackQuery by the poll or webhook call that received it.
//
// Outbound, send posts plain text with sendMessage (into the topic, replying when asked), a
// file as a multipart sendPhoto, sendVoice, sendAudio, sendVideo or sendDocument (50 MB at
// most; see sendMedia for captions), edits with editMessageText and shows "typing" with
// sendChatAction, and maps Telegram's answers to
// typed results for the host, which owns retries: refusals are permanent, 429 retryable, and an
// answer that may follow the effect (a 5xx, a reset, a timeout) uncertain, never retryable (see
// sendFailure). Every export keeps its requests inside a time budget under the host's call
// deadline (api.go).
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o telegram.wasm .
package main

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Version is the plugin's version, reported in its manifest.
const Version = "1.1.0"

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{
			Name:        "telegram",
			Version:     Version,
			Kind:        abi.KindPlatform,
			Platform:    "telegram",
			Description: "Telegram Bot API: long polling or webhook, forum topics, mention gating",
			Capabilities: []string{abi.CapPoll, abi.CapWebhook, abi.CapThreads, abi.CapTyping,
				abi.CapReplies, abi.CapEdit, abi.CapAttachments, abi.CapButtons},
			MessageLimit: abi.MessageLimit{Max: MaxText, Unit: abi.UnitUTF16},
			EgressScopes: egressScopes,
			ConfigSchema: json.RawMessage(schema),
		},
		Configure: configure,
		Webhook:   webhook,
		Poll:      poll,
		Send:      send,
		Fetch:     fetchFile,
	})
}

// egressScopes confine each export to the Bot API methods it needs: only send may post into
// chats (texts and uploads), only fetch may read files (getFile and the file host's
// /file/bot<token>/<file_path>), poll and webhook may acknowledge button presses, and the other
// exports may read updates and manage the webhook.
var egressScopes = []abi.EgressScope{
	{Name: "post", Host: "api.telegram.org", Exports: []string{abi.ExportSend}, Methods: []string{"POST"},
		Paths: []string{"/bot*/sendMessage", "/bot*/editMessageText", "/bot*/sendChatAction", "/bot*/sendPhoto",
			"/bot*/sendDocument", "/bot*/sendVoice", "/bot*/sendAudio", "/bot*/sendVideo"}},
	{Name: "read", Host: "api.telegram.org", Exports: []string{abi.ExportConfigure, abi.ExportPoll, abi.ExportWebhook},
		Methods: []string{"POST"}, Paths: []string{"/bot*/getMe", "/bot*/getUpdates", "/bot*/setWebhook",
			"/bot*/deleteWebhook", "/bot*/getWebhookInfo"}},
	{Name: "ack", Host: "api.telegram.org", Exports: []string{abi.ExportPoll, abi.ExportWebhook},
		Methods: []string{"POST"}, Paths: []string{"/bot*/answerCallbackQuery"}},
	{Name: "file-info", Host: "api.telegram.org", Exports: []string{abi.ExportFetch},
		Methods: []string{"POST"}, Paths: []string{"/bot*/getFile"}},
	{Name: "download", Host: "api.telegram.org", Exports: []string{abi.ExportFetch},
		Methods: []string{"GET"}, Paths: []string{"/file/bot*/*", "/file/bot*/*/*"}},
}

func main() {}

// configure validates a profile. Beyond the local checks it asks Telegram who the bot is
// (getMe), which rejects a revoked token and caches the bot's username for mention gating; when
// Telegram cannot be reached, or does not answer within identityBudget, the profile is accepted
// and poll learns the identity later.
//
// It never registers a webhook: configure runs at every load, including for a new version that
// may still fail validation while the old one serves. Webhook mode registers (idempotently)
// from poll instead; see ensureWebhook.
func configure(c *sdk.Context) ([]string, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		return p, nil
	}
	if cfg.BotUsername != "" {
		return nil, nil
	}
	a := &api{c: c, cfg: cfg}
	_, err = a.getMe(newBudget(identityBudget))
	var ae *apiError
	switch {
	case err == nil:
		return nil, nil
	case errors.As(err, &ae) && ae.unauthorized():
		return []string{"Telegram rejected the token (getMe: " + ae.r.describe() + ")"}, nil
	case abi.CodeOf(err) == abi.CodeDenied:
		return []string{"api_base is not reachable under the egress policy (grant its host with egress_extra): " +
			a.scrub(err.Error())}, nil
	}
	c.Log(abi.LevelWarn, "getMe failed; accepting the profile and retrying from poll",
		"error", strings.TrimSpace(a.scrub(err.Error())))
	return nil, nil
}
