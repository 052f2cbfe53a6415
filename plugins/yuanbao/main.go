// Command yuanbao is the Yuanbao platform plugin: it connects a Yuanbao bot (one per profile,
// each with its own APP_ID and APP_SECRET) to hermes-host over the bot gateway's WebSocket,
// which the host owns and keeps across plugin instances.
//
// Inbound, poll keeps the connection: it signs a token over HTTP (sign-token), opens the
// WebSocket through the host, binds it (AUTH_BIND), pings it every 30 s, reconnects with
// back-off (and stops for good on the permanent close codes, reporting it to the operator), and
// hands every push to the host before acknowledging it. Pushes (protobuf or JSON) become events
// with id "msg:<msg_id>": private messages are "dm" chats keyed by the sender's account, group
// messages "group" chats keyed by the group code (per user, as the host's keys go). In groups,
// only messages that mention the bot (a 1002 mention element) or the bot owner's slash commands
// start turns; the rest are observed as context. Recalls redact the message and cancel a turn
// that answers it. The bot's own messages are dropped.
//
// Outbound, send writes send_c2c_message or send_group_message and waits for the answer with
// the same msg_id. A send whose answer does not come in time is reported as uncertain (it may
// have been posted) and never resent. While an answer is being prepared, the chat shows the bot
// typing (RUNNING heartbeats every 2 s, FINISH after delivery).
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o yuanbao.wasm .
package main

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Version is the plugin's version, reported in its manifest and to Yuanbao.
var Version = "1.0.0"

// MaxText is Yuanbao's limit on a message's text, in code points.
const MaxText = 4000

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{
			Name:         "yuanbao",
			Version:      Version,
			Kind:         abi.KindPlatform,
			Platform:     "yuanbao",
			Description:  "Yuanbao bots over the host's WebSocket: sign-token, AUTH_BIND, mention gating, recalls",
			Capabilities: []string{abi.CapPoll, abi.CapReplies, abi.CapTyping},
			MessageLimit: abi.MessageLimit{Max: MaxText, Unit: abi.UnitCodePoint},
			// Tokens are signed from configure and poll. The gateway connection is opened by
			// poll and written by poll (AUTH_BIND, pings, acks) and send (messages, typing):
			// the host does not read frames, so it cannot confine posting to send (SPEC 5.4.1).
			EgressScopes: []abi.EgressScope{
				{Name: "sign-token", Host: "bot.yuanbao.tencent.com", Exports: []string{abi.ExportConfigure, abi.ExportPoll},
					Methods: []string{"POST"}, Paths: []string{signPath}},
				{Name: "gateway", Host: "bot-wss.yuanbao.tencent.com", Exports: []string{abi.ExportPoll, abi.ExportSend},
					Paths: []string{"/wss/connection"}},
			},
			ConfigSchema: json.RawMessage(schema),
		},
		Configure: configure,
		Poll:      poll,
		Send:      send,
	})
}

func main() {}

// configure validates a profile and, when Yuanbao can be reached, its credentials (a
// sign-token that Yuanbao refuses disables the profile). It also lifts a stop for good: a load
// (a restart, a reload, a changed configuration) is the operator's cue to try again.
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
	_, err = getToken(c, cfg)
	var se *signError
	switch {
	case err == nil:
		return nil, nil
	case errors.As(err, &se) && se.refused():
		return []string{"Yuanbao refused the credentials (" + se.Error() + ")"}, nil
	case abi.CodeOf(err) == abi.CodeDenied:
		return []string{"api_domain is not reachable under the egress policy (grant its host with egress_extra): " +
			scrubError(cfg, err)}, nil
	}
	c.Log(abi.LevelWarn, "sign-token failed; accepting the profile and retrying from poll",
		"error", strings.TrimSpace(scrubError(cfg, err)))
	return nil, nil
}
