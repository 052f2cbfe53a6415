package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/hermes-host/hermes-host/sdk"
)

// DefaultAPIBase is the Web API's address.
const DefaultAPIBase = "https://slack.com/api"

// Modes of receiving events.
const (
	ModeEvents = "events" // Slack POSTs signed events to /hooks/slack/{profile} (the default)
	ModeSocket = "socket" // the plugin holds a Socket Mode WebSocket (no public URL needed)
)

// Config is a profile's configuration.
type Config struct {
	BotToken      string `json:"bot_token"`      // xoxb-: the workspace the app was installed in
	SigningSecret string `json:"signing_secret"` // events mode: verifies every request
	AppToken      string `json:"app_token"`      // socket mode: xapp- with connections:write
	Mode          string `json:"mode"`           // ModeEvents (default) or ModeSocket
	APIBase       string `json:"api_base"`       // default DefaultAPIBase
	// Workspaces maps more team ids to their bot tokens, for an app installed in several
	// workspaces: {"T0SECOND": {"bot_token": "xoxb-..."}}.
	Workspaces map[string]Workspace `json:"workspaces"`
	// BotUserID is the bot's user id (U...), used to recognise mentions; normally read from each
	// event's authorizations, or learned with auth.test.
	BotUserID string `json:"bot_user_id"`
	// RequireMention: in channels, only messages that mention the bot start turns; others are
	// observed (default true).
	RequireMention *bool `json:"require_mention"`
	// ReplyInThread: a top-level mention in a channel starts a thread, and a session of its own
	// (default true). With false, the channel's top level is one conversation.
	ReplyInThread *bool `json:"reply_in_thread"`
	// FollowThreads: once the bot was mentioned in a thread, later replies there are turns
	// without a new mention (default true).
	FollowThreads *bool `json:"follow_threads"`
	// FreeResponseChannels are channel ids where every message is a turn.
	FreeResponseChannels []string `json:"free_response_channels"`
}

// Workspace is one more installation of the app.
type Workspace struct {
	BotToken string `json:"bot_token"`
}

const schema = `{"type": "object",
 "properties": {
  "bot_token":      {"type": "string", "secret": true, "description": "bot token (xoxb-) of the workspace"},
  "signing_secret": {"type": "string", "secret": true, "description": "events mode: the app's signing secret"},
  "app_token":      {"type": "string", "secret": true, "description": "socket mode: app-level token (xapp-) with connections:write"},
  "mode":           {"type": "string", "description": "events (default: Slack POSTs to /hooks/slack/{profile}) or socket"},
  "api_base":       {"type": "string", "description": "Web API base URL (default https://slack.com/api)"},
  "workspaces":     {"type": "object", "secret": true, "description": "more installations: team id -> {bot_token}"},
  "bot_user_id":    {"type": "string", "description": "the bot's user id; read from events or auth.test when empty"},
  "require_mention": {"type": "boolean", "description": "in channels, only mentions start turns (default true)"},
  "reply_in_thread": {"type": "boolean", "description": "a top-level mention starts a thread session (default true)"},
  "follow_threads":  {"type": "boolean", "description": "after a mention in a thread, replies there need none (default true)"},
  "free_response_channels": {"type": "array", "description": "channel ids where every message is a turn"}
 },
 "required": ["bot_token"]}`

// loadConfig decodes the call's configuration and fills in defaults.
func loadConfig(c *sdk.Context) (*Config, error) {
	var cfg Config
	if err := c.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	cfg.APIBase = strings.TrimRight(strings.TrimSpace(cfg.APIBase), "/")
	if cfg.APIBase == "" {
		cfg.APIBase = DefaultAPIBase
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeEvents
	}
	return &cfg, nil
}

func flag(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

func (cfg *Config) requireMention() bool { return flag(cfg.RequireMention, true) }
func (cfg *Config) replyInThread() bool  { return flag(cfg.ReplyInThread, true) }
func (cfg *Config) followThreads() bool  { return flag(cfg.FollowThreads, true) }

// freeResponse reports whether channel is one where every message is a turn.
func (cfg *Config) freeResponse(channel string) bool {
	for _, c := range cfg.FreeResponseChannels {
		if c == channel {
			return true
		}
	}
	return false
}

// tokenFor returns the bot token for a team: its workspace entry, else bot_token.
func (cfg *Config) tokenFor(team string) string {
	if w, ok := cfg.Workspaces[team]; ok && w.BotToken != "" {
		return w.BotToken
	}
	return cfg.BotToken
}

// tokens lists every bot token of the profile (bot_token first, then by team id).
func (cfg *Config) tokens() []string {
	out := []string{cfg.BotToken}
	teams := make([]string, 0, len(cfg.Workspaces))
	for t := range cfg.Workspaces {
		teams = append(teams, t)
	}
	sort.Strings(teams)
	for _, t := range teams {
		out = append(out, cfg.Workspaces[t].BotToken)
	}
	return out
}

// keyOf is a short, non-secret name for a token, used in kv keys.
func keyOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// problems lists what is wrong with the configuration, without contacting Slack.
func (cfg *Config) problems() []string {
	var out []string
	checkToken := func(name, tok, prefix string) {
		switch {
		case tok == "":
			out = append(out, name+" is required")
		case !strings.HasPrefix(tok, prefix) || strings.ContainsAny(tok, " \t\r\n"):
			out = append(out, fmt.Sprintf("%s does not look like a Slack token (%s...)", name, prefix))
		}
	}
	checkToken("bot_token", cfg.BotToken, "xoxb-")
	for team, w := range cfg.Workspaces {
		if !validID(team, 'T') && !validID(team, 'E') {
			out = append(out, fmt.Sprintf("workspaces: %q is not a team id (T...)", team))
		}
		checkToken("workspaces."+team+".bot_token", w.BotToken, "xoxb-")
	}
	if u, err := url.Parse(cfg.APIBase); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.RawQuery != "" || u.Fragment != "" {
		out = append(out, fmt.Sprintf("api_base %q is not an http(s) base URL", cfg.APIBase))
	}
	switch cfg.Mode {
	case ModeEvents:
		if cfg.SigningSecret == "" {
			out = append(out, "events mode needs signing_secret (the app's Basic Information page), so that forged requests are refused")
		}
	case ModeSocket:
		checkToken("app_token", cfg.AppToken, "xapp-")
	default:
		out = append(out, fmt.Sprintf("mode %q: want %q or %q", cfg.Mode, ModeEvents, ModeSocket))
	}
	if cfg.BotUserID != "" && !validID(cfg.BotUserID, 'U') && !validID(cfg.BotUserID, 'W') {
		out = append(out, fmt.Sprintf("bot_user_id %q is not a user id (U...)", cfg.BotUserID))
	}
	return out
}

// validID reports whether s looks like a Slack id starting with prefix: upper-case letters and
// digits.
func validID(s string, prefix byte) bool {
	if len(s) < 2 || len(s) > 32 || s[0] != prefix {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
