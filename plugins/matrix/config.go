package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"github.com/hermes-host/hermes-host/sdk"
)

// Config is a profile's configuration.
type Config struct {
	Homeserver  string `json:"homeserver"`   // client-server API base URL (default https://matrix-client.matrix.org)
	AccessToken string `json:"access_token"` // the bot account's access token
	UserID      string `json:"user_id"`      // optional: @bot:server; learned with whoami
	DisplayName string `json:"display_name"` // optional: the name mentions use; learned from the profile
	// RequireMention: in group rooms, only messages that address the bot start turns; others are
	// observed (default true).
	RequireMention *bool `json:"require_mention"`
	// ReplyInThread: a top-level mention in a group room starts a thread, a session of its own
	// (default true).
	ReplyInThread *bool `json:"reply_in_thread"`
	// FollowThreads: once the bot was mentioned in a thread (or answered there), later messages
	// in it are turns without a new mention (default true).
	FollowThreads *bool `json:"follow_threads"`
	// AutoJoin: accept invitations to unencrypted rooms (default true).
	AutoJoin *bool `json:"auto_join"`
}

const schema = `{"type": "object",
 "properties": {
  "homeserver":      {"type": "string", "description": "client-server API base URL (default https://matrix-client.matrix.org)"},
  "access_token":    {"type": "string", "secret": true, "description": "the bot account's access token"},
  "user_id":         {"type": "string", "description": "the bot's user id (@bot:server); learned with whoami when empty"},
  "display_name":    {"type": "string", "description": "the bot's display name, for mentions in the body; learned from its profile when empty"},
  "require_mention": {"type": "boolean", "description": "in group rooms, only messages that address the bot start turns (default true)"},
  "reply_in_thread": {"type": "boolean", "description": "a top-level mention starts a thread session (default true)"},
  "follow_threads":  {"type": "boolean", "description": "after a mention in a thread, messages there need none (default true)"},
  "auto_join":       {"type": "boolean", "description": "accept invitations to unencrypted rooms (default true)"}
 },
 "required": ["access_token"]}`

// loadConfig decodes the call's configuration and fills in defaults.
func loadConfig(c *sdk.Context) (*Config, error) {
	var cfg Config
	if err := c.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	cfg.Homeserver = strings.TrimRight(strings.TrimSpace(cfg.Homeserver), "/")
	if cfg.Homeserver == "" {
		cfg.Homeserver = "https://" + DefaultHost
	}
	cfg.UserID = strings.TrimSpace(cfg.UserID)
	cfg.DisplayName = strings.TrimSpace(cfg.DisplayName)
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
func (cfg *Config) autoJoin() bool       { return flag(cfg.AutoJoin, true) }

// tokenKey is a short, non-secret name for the access token, used in kv keys: a since token and
// an identity belong to the account (and its device), not merely to the profile.
func (cfg *Config) tokenKey() string {
	sum := sha256.Sum256([]byte(cfg.AccessToken))
	return hex.EncodeToString(sum[:8])
}

// problems lists what is wrong with the configuration, without contacting the homeserver.
func (cfg *Config) problems() []string {
	var out []string
	if cfg.AccessToken == "" {
		out = append(out, "access_token is required")
	} else if strings.ContainsAny(cfg.AccessToken, " \t\r\n") {
		out = append(out, "access_token contains white space")
	}
	if u, err := url.Parse(cfg.Homeserver); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		out = append(out, fmt.Sprintf("homeserver %q is not an http(s) base URL (https://matrix.example.org)", cfg.Homeserver))
	}
	if cfg.UserID != "" && !validUserID(cfg.UserID) {
		out = append(out, fmt.Sprintf("user_id %q is not a Matrix user id (@name:server)", cfg.UserID))
	}
	return out
}

func validUserID(s string) bool {
	local, server, ok := strings.Cut(strings.TrimPrefix(s, "@"), ":")
	return strings.HasPrefix(s, "@") && ok && local != "" && server != "" && len(s) <= 255 && !strings.ContainsAny(s, " /")
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Host
}
