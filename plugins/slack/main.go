// Command slack is the Slack platform plugin: it connects a Slack app (one per profile, in one
// or more workspaces) to hermes-host.
//
// Inbound, Slack POSTs signed Events API requests to /hooks/slack/{profile} (mode "events", the
// default), or the plugin holds a Socket Mode connection through the host's WebSocket egress
// (mode "socket"). Files of a message become its attachments, whose bytes the fetch export
// reads from url_private with the bot token; a press of one of the bot's buttons (Block Kit),
// POSTed to the same URL as an interactivity request (or sent over Socket Mode), becomes a
// callback event. Messages become events with id "msg:<team>:<channel>:<ts>", so the
// "message" and "app_mention" deliveries of one message, and Slack's retries of either, are one
// event to the host's durable deduplication. Sessions carry the workspace (team id) as their
// scope: direct messages are "dm" (a DM thread, such as an assistant thread, is its own
// session); channels are "group", where a top-level mention starts a thread with a session of
// its own (reply_in_thread), thread replies belong to their thread, and messages that do not
// mention the bot are observed (require_mention), except in threads the bot was mentioned in
// (follow_threads). assistant_thread_started seeds the thread's session without a turn.
//
// Outbound, send posts plain text with chat.postMessage (into the thread; split at Slack's
// 40,000 characters; buttons as Block Kit section and actions blocks), shares a file with
// Slack's upload flow (files.getUploadURLExternal, the upload, files.completeUploadExternal),
// edits with chat.update, shows "typing" in assistant threads with
// assistant.threads.setStatus, and maps Slack's refusals to typed errors for the host, which
// owns retries. Every request fits in 8 s, under the host's call deadline; an answer lost after
// the request was sent is "uncertain", never resent.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o slack.wasm .
package main

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Version is the plugin's version, reported in its manifest.
const Version = "1.1.0"

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{
			Name:        "slack",
			Version:     Version,
			Kind:        abi.KindPlatform,
			Platform:    "slack",
			Description: "Slack: Events API or Socket Mode, threads, workspaces, assistant threads, files, buttons",
			Capabilities: []string{abi.CapWebhook, abi.CapPoll, abi.CapThreads, abi.CapTyping, abi.CapEdit,
				abi.CapAttachments, abi.CapButtons},
			MessageLimit: abi.MessageLimit{Max: ManifestLimit, Unit: abi.UnitCodePoint},
			EgressScopes: egressScopes,
			ConfigSchema: json.RawMessage(schema),
		},
		Configure: configure,
		Webhook:   webhook,
		Poll:      poll,
		Send:      send,
		Fetch:     fetch,
	})
}

func main() {}

// egressScopes: only send posts into chats (through the host's guarded path), files included
// (the upload flow's two methods and the upload itself on files.slack.com); only fetch reads
// files (GET url_private on files.slack.com, with the bot token); configure asks who a token
// is, poll opens Socket Mode connections (apps.connections.open, then the WebSocket on a
// wss-*.slack.com host); nothing else reaches Slack.
var egressScopes = []abi.EgressScope{
	{Name: "post-from-send", Host: "slack.com", Exports: []string{abi.ExportSend}, Methods: []string{"POST"},
		Paths: []string{"/api/chat.postMessage", "/api/chat.update", "/api/assistant.threads.setStatus",
			"/api/files.getUploadURLExternal", "/api/files.completeUploadExternal"}},
	{Name: "upload-from-send", Host: "files.slack.com", Exports: []string{abi.ExportSend}, Methods: []string{"POST"},
		Paths: []string{"/upload/v1/*"}},
	{Name: "download-from-fetch", Host: "files.slack.com", Exports: []string{abi.ExportFetch}, Methods: []string{"GET"},
		Paths: []string{"/files-pri/*/*", "/files-pri/*/download/*"}},
	{Name: "identity", Host: "slack.com", Exports: []string{abi.ExportConfigure}, Methods: []string{"POST"},
		Paths: []string{"/api/auth.test"}},
	{Name: "socket-open", Host: "slack.com", Exports: []string{abi.ExportPoll}, Methods: []string{"POST"},
		Paths: []string{"/api/apps.connections.open"}},
	{Name: "socket", Host: "*.slack.com", Exports: []string{abi.ExportPoll}, Methods: []string{"GET"},
		Paths: []string{"/link", "/link/*"}},
}

// configure validates a profile. Beyond the local checks it asks Slack whom each bot token
// belongs to (auth.test): a revoked token, or a workspace token filed under another team id,
// disables the profile, and the bot's user id is cached for recognising mentions. When Slack
// cannot be reached the profile is accepted.
func configure(c *sdk.Context) ([]string, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		return p, nil
	}
	a := newAPI(c, cfg)
	var problems []string
	check := func(name, team, token string) {
		id, err := a.authTest(token)
		var ae *apiError
		switch {
		case err == nil:
			if team != "" && id.TeamID != team {
				problems = append(problems, name+" belongs to team "+id.TeamID+", not "+team)
			}
		case errors.As(err, &ae) && ae.r.JSON && authErrors[ae.r.Error]:
			problems = append(problems, "Slack rejected "+name+" (auth.test: "+ae.r.describe()+")")
		case abi.CodeOf(err) == abi.CodeDenied:
			problems = append(problems, "api_base is not reachable under the egress policy (grant its host with egress_extra): "+
				scrub(err.Error(), token))
		default:
			c.Log(abi.LevelWarn, "auth.test failed; accepting the profile", "token", name, "error", strings.TrimSpace(scrub(err.Error(), token)))
		}
	}
	check("bot_token", "", cfg.BotToken)
	teams := make([]string, 0, len(cfg.Workspaces))
	for team := range cfg.Workspaces {
		teams = append(teams, team)
	}
	sort.Strings(teams)
	for _, team := range teams {
		check("workspaces."+team+".bot_token", team, cfg.Workspaces[team].BotToken)
	}
	return problems, nil
}
