// Command discord is the Discord platform plugin: it connects a Discord bot (one per profile)
// to hermes-host over the Gateway, a WebSocket the host owns and keeps across plugin instances,
// and sends through the REST API.
//
// Inbound, poll keeps the Gateway: HELLO, IDENTIFY with the guilds, guild messages, direct
// messages and message content intents, heartbeats at Discord's interval (a heartbeat without
// its ACK marks a zombied connection, which is closed and resumed), RESUME with the session's
// last recorded sequence after any drop, op 7 (reconnect) and op 9 (invalid session: RESUME
// again, or IDENTIFY anew when it is not resumable), and a stop for good on the permanent close
// codes (4004 a refused token, 4014 the Message Content intent not enabled…). MESSAGE_CREATE
// becomes an event with id "msg:<message id>", so a replayed event is one event to the host's
// durable deduplication, and the sequence advances only once the host recorded it. DMs are
// "dm" chats; guild channels "group" chats with the guild as scope_id, a thread keyed as its
// parent channel and the thread; in guilds only mentions of the bot, replies to its messages,
// threads it was mentioned in (follow_threads), free-response channels and the host's commands
// start turns, the rest is observed. The bot's own messages, other bots' and webhooks' are
// skipped; MESSAGE_DELETE redacts.
//
// Outbound, send posts with POST /channels/{id}/messages (into the thread; a reply references
// the message answered), with allowed_mentions {"parse": []} so that nothing the agent or a
// process wrote can ping @everyone, a role or a user, and a nonce from the host's delivery id.
// Edits (streaming) are PATCH /channels/{id}/messages/{mid}, typing POST /channels/{id}/typing.
// A 429 (a route bucket or the global limit) is retryable after retry_after; a bucket an answer
// said is exhausted (X-RateLimit-Remaining: 0) is answered retryable without a request until
// X-RateLimit-Reset-After; an answer lost after the request was written (a 5xx, a reset, a body
// cut short, none in time) is uncertain, never resent.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o discord.wasm .
package main

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Version is the plugin's version, reported in its manifest and its User-Agent.
const Version = "1.0.0"

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{
			Name:         "discord",
			Version:      Version,
			Kind:         abi.KindPlatform,
			Platform:     "discord",
			Description:  "Discord bots: the Gateway over the host's WebSocket (RESUME, heartbeats), REST sends, threads, DMs",
			Capabilities: []string{abi.CapPoll, abi.CapThreads, abi.CapEdit, abi.CapTyping, abi.CapReplies},
			MessageLimit: abi.MessageLimit{Max: MaxContent, Unit: abi.UnitUTF16},
			EgressScopes: egressScopes,
			ConfigSchema: json.RawMessage(schema),
		},
		Configure: configure,
		Poll:      poll,
		Send:      send,
	})
}

func main() {}

// egressScopes: only send posts into chats (through the host's guarded path); configure asks
// who the token is; poll looks channels up and holds the Gateway, whose frames carry no posts
// (Discord takes messages over REST only), on gateway.discord.gg or a session's resume host.
var egressScopes = []abi.EgressScope{
	{Name: "post-from-send", Host: "discord.com", Exports: []string{abi.ExportSend}, Methods: []string{"POST", "PATCH"},
		Paths: []string{"/api/v*/channels/*/messages", "/api/v*/channels/*/messages/*", "/api/v*/channels/*/typing"}},
	{Name: "read", Host: "discord.com", Exports: []string{abi.ExportConfigure, abi.ExportPoll}, Methods: []string{"GET"},
		Paths: []string{"/api/v*/users/@me", "/api/v*/channels/*"}},
	{Name: "gateway", Host: "*.discord.gg", Exports: []string{abi.ExportPoll}},
}

// configure validates a profile and, when Discord can be reached, its token (GET /users/@me: a
// refused token disables the profile). It also lifts a stop for good: a load (a restart, a
// reload, a changed configuration) is the operator's cue to try again.
func configure(c *sdk.Context) ([]string, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		return p, nil
	}
	if now, err := c.Now(); err == nil {
		c.KVSet(resumeKey, []byte(strconv.FormatInt(now.UnixMilli(), 10)))
	}
	r, err := newAPI(c, cfg).call("GET", "/users/@me", nil)
	switch {
	case err != nil && abi.CodeOf(err) == abi.CodeDenied:
		return []string{"api_base is not reachable under the egress policy (grant its address with egress_alias or egress_extra): " +
			cfg.scrub(err.Error())}, nil
	case err != nil:
		c.Log(abi.LevelWarn, "GET /users/@me failed; accepting the profile", "error", strings.TrimSpace(cfg.scrub(err.Error())))
	case r.Status == 401:
		return []string{"Discord refused bot_token (" + r.describe() + ")"}, nil
	case r.ok():
		var me botUser
		if json.Unmarshal(r.Body, &me) == nil && me.ID != "" {
			c.KVSet(meKey, []byte(me.ID))
		}
	default:
		c.Log(abi.LevelWarn, "GET /users/@me failed; accepting the profile", "error", r.describe())
	}
	return nil, nil
}
