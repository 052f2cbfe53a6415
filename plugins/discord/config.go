package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/hermes-host/hermes-host/sdk"
)

// Discord's public endpoints (both can be overridden, e.g. to point at a loopback fake).
const (
	DefaultAPIBase    = "https://discord.com/api/v10"
	DefaultGatewayURL = "wss://gateway.discord.gg"
)

// Config is a profile's configuration.
type Config struct {
	BotToken   string `json:"bot_token"`   // the bot's token (Developer Portal → Bot)
	APIBase    string `json:"api_base"`    // default DefaultAPIBase
	GatewayURL string `json:"gateway_url"` // default DefaultGatewayURL
	// RequireMention: in guild channels, only messages that mention the bot (or reply to it)
	// start turns; others are observed (default true).
	RequireMention *bool `json:"require_mention"`
	// FollowThreads: once the bot was mentioned in a thread, later messages there are turns
	// without a new mention (default true).
	FollowThreads *bool `json:"follow_threads"`
	// FreeResponseChannels are channel ids where every message is a turn.
	FreeResponseChannels []string `json:"free_response_channels"`
}

const schema = `{"type": "object",
 "properties": {
  "bot_token":   {"type": "string", "secret": true, "description": "the bot's token (Developer Portal: Bot, Reset Token); enable the Message Content intent there"},
  "api_base":    {"type": "string", "description": "REST API base URL (default https://discord.com/api/v10)"},
  "gateway_url": {"type": "string", "description": "Gateway WebSocket URL (default wss://gateway.discord.gg)"},
  "require_mention": {"type": "boolean", "description": "in guild channels, only mentions and replies to the bot start turns (default true)"},
  "follow_threads":  {"type": "boolean", "description": "after a mention in a thread, messages there need none (default true)"},
  "free_response_channels": {"type": "array", "description": "channel ids where every message is a turn"}
 },
 "required": ["bot_token"]}`

// loadConfig decodes the call's configuration and fills in defaults.
func loadConfig(c *sdk.Context) (*Config, error) {
	var cfg Config
	if err := c.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	cfg.BotToken = strings.TrimPrefix(strings.TrimSpace(cfg.BotToken), "Bot ")
	cfg.APIBase = strings.TrimRight(strings.TrimSpace(cfg.APIBase), "/")
	if cfg.APIBase == "" {
		cfg.APIBase = DefaultAPIBase
	}
	cfg.GatewayURL = strings.TrimSpace(cfg.GatewayURL)
	if cfg.GatewayURL == "" {
		cfg.GatewayURL = DefaultGatewayURL
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
func (cfg *Config) followThreads() bool  { return flag(cfg.FollowThreads, true) }

// freeResponse reports whether channel is one where every message is a turn.
func (cfg *Config) freeResponse(channel string) bool {
	return slices.Contains(cfg.FreeResponseChannels, channel)
}

// problems lists what is wrong with the configuration, without contacting Discord.
func (cfg *Config) problems() []string {
	var out []string
	switch {
	case cfg.BotToken == "":
		out = append(out, "bot_token is required")
	case strings.ContainsAny(cfg.BotToken, " \t\r\n"):
		out = append(out, "bot_token contains white space: paste the token alone")
	}
	if u, err := url.Parse(cfg.APIBase); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.RawQuery != "" || u.Fragment != "" {
		out = append(out, fmt.Sprintf("api_base %q is not an http(s) base URL", cfg.APIBase))
	}
	if u, err := url.Parse(cfg.GatewayURL); err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		out = append(out, fmt.Sprintf("gateway_url %q is not a ws(s) URL", cfg.GatewayURL))
	}
	return out
}

// gatewayURL is url with the version and encoding Discord wants as its query.
func gatewayURL(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	q := u.Query()
	q.Set("v", "10")
	q.Set("encoding", "json")
	u.RawQuery = q.Encode()
	if u.Path == "" {
		u.Path = "/"
	}
	return u.String()
}

// digest names the token and endpoints without revealing the token: the Gateway state in the
// kv store belongs to the digest it was made with, so a changed configuration starts afresh.
func (cfg *Config) digest() string {
	sum := sha256.Sum256([]byte(strings.Join([]string{cfg.BotToken, cfg.APIBase, cfg.GatewayURL}, "\x00")))
	return hex.EncodeToString(sum[:8])
}

// scrub removes the token from a text (egress errors quote no secrets, but be sure).
func (cfg *Config) scrub(text string) string {
	if cfg.BotToken == "" {
		return text
	}
	return strings.ReplaceAll(text, cfg.BotToken, "<bot_token>")
}
