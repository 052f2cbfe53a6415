// Command matrix is the Matrix platform plugin: it connects a bot account (one per profile,
// each with its own access token) on a homeserver to hermes-host through the client-server API.
//
// Inbound, poll long-polls /sync from a since token kept in the plugin's kv store and advanced
// only after the host recorded the events behind it (hermes_dispatch, then the token; or, on a
// host without dispatch, the token of a returned batch committed at the next poll). A timeline
// the homeserver cut short (limited) is filled from /messages back to the previous token. The
// first sync of a profile only learns the rooms: history from before the bot started is not
// answered. Rooms are sessions ("dm" for a room of two, "group" otherwise), threads (m.thread)
// sessions of their own; in groups a top-level mention starts a thread (reply_in_thread), and
// messages that do not address the bot (m.mentions naming it, or, from a client without
// m.mentions, its MXID or display name in the body; a reply to one of its messages; a thread
// it follows; a command) are observed, not turned. Its own messages are skipped; edits are
// observed; redactions redact. Invitations to unencrypted rooms are accepted (auto_join).
//
// Outbound, send PUTs m.room.message events with a transaction id derived from the host's
// delivery id, so a send retried after an ambiguous answer is deduplicated by the homeserver;
// every message carries "m.mentions": {} so that nothing the agent or a process prints pings
// anyone (@room included). Edits are m.replace events, typing is the typing endpoint.
//
// End-to-end encrypted rooms (an m.room.encryption state event) are not supported: their
// messages cannot be read, poll logs the room once, invitations to them are declined by not
// joining, and the first message the host sends into one is replaced by a single notice that
// says so (then refused, permanent).
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o matrix.wasm .
package main

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Version is the plugin's version, reported in its manifest.
const Version = "1.0.0"

// DefaultHost is the host the egress scopes name: matrix.org's client-server API. Another
// homeserver is granted with egress_alias, so that the scopes apply to it too.
const DefaultHost = "matrix-client.matrix.org"

// MaxText is the message_limit in bytes: a Matrix event is at most 64 KiB of JSON, escaping
// included, and a message this long is already a wall of text.
const MaxText = 16000

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{
			Name:         "matrix",
			Version:      Version,
			Kind:         abi.KindPlatform,
			Platform:     "matrix",
			Description:  "Matrix client-server API: /sync long polling, rooms and threads, unencrypted rooms only",
			Capabilities: []string{abi.CapPoll, abi.CapThreads, abi.CapEdit, abi.CapTyping, abi.CapReplies},
			MessageLimit: abi.MessageLimit{Max: MaxText, Unit: abi.UnitByte},
			EgressScopes: egressScopes,
			ConfigSchema: json.RawMessage(schema),
		},
		Configure: configure,
		Poll:      poll,
		Send:      send,
	})
}

func main() {}

const clientAPI = "/_matrix/client/v3"

// egressScopes: only send posts into rooms (messages, edits, typing), through the host's
// guarded path; poll reads (/sync, /messages) and joins rooms it is invited to; whoami and the
// profile tell who the bot is.
var egressScopes = []abi.EgressScope{
	{Name: "post-from-send", Host: DefaultHost, Exports: []string{abi.ExportSend}, Methods: []string{"PUT"},
		Paths: []string{clientAPI + "/rooms/*/send/m.room.message/*", clientAPI + "/rooms/*/typing/*"}},
	{Name: "identity", Host: DefaultHost, Exports: []string{abi.ExportConfigure, abi.ExportPoll, abi.ExportSend}, Methods: []string{"GET"},
		Paths: []string{clientAPI + "/account/whoami", clientAPI + "/profile/*/displayname"}},
	{Name: "read", Host: DefaultHost, Exports: []string{abi.ExportPoll}, Methods: []string{"GET"},
		Paths: []string{clientAPI + "/sync", clientAPI + "/rooms/*/messages"}},
	{Name: "join", Host: DefaultHost, Exports: []string{abi.ExportPoll}, Methods: []string{"POST"},
		Paths: []string{clientAPI + "/rooms/*/join"}},
}

// configure validates a profile. Beyond the local checks it asks the homeserver whose token it
// is (whoami): a rejected token disables the profile, a user_id that disagrees with it too.
// When the homeserver cannot be reached the profile is accepted and poll learns the identity.
func configure(c *sdk.Context) ([]string, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		return p, nil
	}
	a := newAPI(c, cfg, identityBudget)
	me, err := a.whoami()
	var me2 *matrixError
	switch {
	case err == nil:
		if cfg.UserID != "" && cfg.UserID != me {
			return []string{"access_token belongs to " + me + ", not user_id " + cfg.UserID}, nil
		}
		return nil, nil
	case errors.As(err, &me2) && me2.unauthorized():
		return []string{"the homeserver rejected access_token (whoami: " + me2.Error() + ")"}, nil
	case abi.CodeOf(err) == abi.CodeDenied:
		return []string{"homeserver is not reachable under the egress policy (grant it with egress_alias: {\"" +
			hostOf(cfg.Homeserver) + "\": " + DefaultHost + "}): " + a.scrub(err.Error())}, nil
	}
	c.Log(abi.LevelWarn, "whoami failed; accepting the profile and retrying from poll", "error", strings.TrimSpace(a.scrub(err.Error())))
	return nil, nil
}
