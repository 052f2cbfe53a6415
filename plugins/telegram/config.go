package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"github.com/hermes-host/hermes-host/sdk"
)

// DefaultAPIBase is the Bot API's address.
const DefaultAPIBase = "https://api.telegram.org"

// Modes of receiving updates.
const (
	ModePoll    = "poll"    // long polling with getUpdates (the default)
	ModeWebhook = "webhook" // Telegram POSTs updates to /hooks/telegram/{profile}
)

// Config is a profile's configuration.
type Config struct {
	Token          string `json:"token"`           // the bot token from @BotFather
	APIBase        string `json:"api_base"`        // default DefaultAPIBase
	Mode           string `json:"mode"`            // ModePoll (default) or ModeWebhook
	WebhookURL     string `json:"webhook_url"`     // public URL of /hooks/telegram/{profile} (webhook mode)
	SecretToken    string `json:"secret_token"`    // X-Telegram-Bot-Api-Secret-Token (webhook mode)
	BotUsername    string `json:"bot_username"`    // optional; learned with getMe otherwise
	RequireMention *bool  `json:"require_mention"` // groups: only mentions start turns (default true)
}

const schema = `{"type": "object",
 "properties": {
  "token":           {"type": "string", "secret": true, "description": "bot token from @BotFather"},
  "api_base":        {"type": "string", "description": "Bot API base URL (default https://api.telegram.org)"},
  "mode":            {"type": "string", "description": "poll (default) or webhook"},
  "webhook_url":     {"type": "string", "description": "webhook mode: public URL of /hooks/telegram/{profile}"},
  "secret_token":    {"type": "string", "secret": true, "description": "webhook mode: 1-256 of A-Z a-z 0-9 _ -"},
  "bot_username":    {"type": "string", "description": "the bot's username; learned with getMe when empty"},
  "require_mention": {"type": "boolean", "description": "in groups, only messages that address the bot start turns (default true)"}
 },
 "required": ["token"]}`

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
		cfg.Mode = ModePoll
	}
	cfg.BotUsername = strings.TrimPrefix(strings.TrimSpace(cfg.BotUsername), "@")
	return &cfg, nil
}

// requireMention reports the effective require_mention setting.
func (cfg *Config) requireMention() bool {
	return cfg.RequireMention == nil || *cfg.RequireMention
}

// tokenKey is a short, non-secret name for the token, used in kv keys so that state (offset,
// identity, webhook registration) follows the bot and not merely the profile.
func (cfg *Config) tokenKey() string {
	sum := sha256.Sum256([]byte(cfg.Token))
	return hex.EncodeToString(sum[:8])
}

// problems lists what is wrong with the configuration, without contacting Telegram.
func (cfg *Config) problems() []string {
	var out []string
	if cfg.Token == "" {
		out = append(out, "token is required")
	} else if strings.ContainsAny(cfg.Token, "/?#%@ \t\r\n") || !strings.Contains(cfg.Token, ":") {
		out = append(out, "token does not look like a bot token (<bot id>:<secret>)")
	}
	if u, err := url.Parse(cfg.APIBase); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.RawQuery != "" || u.Fragment != "" {
		out = append(out, fmt.Sprintf("api_base %q is not an http(s) base URL", cfg.APIBase))
	}
	if cfg.BotUsername != "" && !validName(cfg.BotUsername, 1, 64) {
		out = append(out, fmt.Sprintf("bot_username %q is not a Telegram username", cfg.BotUsername))
	}
	switch cfg.Mode {
	case ModePoll:
	case ModeWebhook:
		if u, err := url.Parse(cfg.WebhookURL); cfg.WebhookURL == "" || err != nil ||
			(u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			out = append(out, "webhook mode needs webhook_url, the public https URL of /hooks/telegram/{profile}")
		}
		if cfg.SecretToken == "" {
			out = append(out, "webhook mode needs secret_token, so that forged webhook requests are refused")
		}
	default:
		out = append(out, fmt.Sprintf("mode %q: want %q or %q", cfg.Mode, ModePoll, ModeWebhook))
	}
	if cfg.SecretToken != "" && !validSecret(cfg.SecretToken) {
		out = append(out, "secret_token must be 1-256 characters of A-Z a-z 0-9 _ -")
	}
	return out
}

func validSecret(s string) bool {
	if len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isNameByte(c) && c != '-' {
			return false
		}
	}
	return s != ""
}
