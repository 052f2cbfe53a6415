package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/sdk"
)

// Yuanbao's public endpoints (both can be overridden, e.g. to point at a loopback fake).
const (
	DefaultWSURL     = "wss://bot-wss.yuanbao.tencent.com/wss/connection"
	DefaultAPIDomain = "https://bot.yuanbao.tencent.com"
)

// Config is a profile's configuration.
type Config struct {
	AppID     string `json:"app_id"`     // the bot's APP_ID (the app_key of sign-token)
	AppSecret string `json:"app_secret"` // its APP_SECRET
	BotID     string `json:"bot_id"`     // optional: sign-token answers it
	WSURL     string `json:"ws_url"`     // default DefaultWSURL
	APIDomain string `json:"api_domain"` // default DefaultAPIDomain
	RouteEnv  string `json:"route_env"`  // optional X-Route-Env / AUTH_BIND env_name
	// SendTimeoutMs bounds the wait for a send's answer. It must stay under the plugin's call
	// deadline (call_timeout, 10 s by default): a send whose answer does not come in time is
	// reported as uncertain, never resent. Default 8000.
	SendTimeoutMs int64 `json:"send_timeout_ms"`
}

const schema = `{"type": "object",
 "properties": {
  "app_id":          {"type": "string", "description": "the bot's APP_ID (Yuanbao app: PAI → My Bot)"},
  "app_secret":      {"type": "string", "secret": true, "description": "the bot's APP_SECRET"},
  "bot_id":          {"type": "string", "description": "the bot's account id; learned from sign-token when empty"},
  "ws_url":          {"type": "string", "description": "gateway WebSocket URL (default wss://bot-wss.yuanbao.tencent.com/wss/connection)"},
  "api_domain":      {"type": "string", "description": "API base URL (default https://bot.yuanbao.tencent.com)"},
  "route_env":       {"type": "string", "description": "optional routing environment (X-Route-Env)"},
  "send_timeout_ms": {"type": "integer", "description": "wait for a send's answer; keep it under the call deadline (default 8000)"}
 },
 "required": ["app_id", "app_secret"]}`

const defaultSendTimeout = 8 * time.Second

// loadConfig decodes the call's configuration and fills in defaults.
func loadConfig(c *sdk.Context) (*Config, error) {
	var cfg Config
	if err := c.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	cfg.AppID = strings.TrimSpace(cfg.AppID)
	cfg.AppSecret = strings.TrimSpace(cfg.AppSecret)
	cfg.BotID = strings.TrimSpace(cfg.BotID)
	cfg.RouteEnv = strings.TrimSpace(cfg.RouteEnv)
	cfg.WSURL = strings.TrimSpace(cfg.WSURL)
	if cfg.WSURL == "" {
		cfg.WSURL = DefaultWSURL
	}
	cfg.APIDomain = strings.TrimRight(strings.TrimSpace(cfg.APIDomain), "/")
	if cfg.APIDomain == "" {
		cfg.APIDomain = DefaultAPIDomain
	}
	return &cfg, nil
}

// problems lists what is wrong with the configuration, without contacting Yuanbao.
func (cfg *Config) problems() []string {
	var out []string
	if cfg.AppID == "" {
		out = append(out, "app_id is required")
	}
	if cfg.AppSecret == "" {
		out = append(out, "app_secret is required")
	}
	if u, err := url.Parse(cfg.WSURL); err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		out = append(out, fmt.Sprintf("ws_url %q is not a ws(s) URL", cfg.WSURL))
	}
	if u, err := url.Parse(cfg.APIDomain); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.RawQuery != "" || u.Fragment != "" {
		out = append(out, fmt.Sprintf("api_domain %q is not an http(s) base URL", cfg.APIDomain))
	}
	if cfg.SendTimeoutMs < 0 || cfg.SendTimeoutMs > 30000 {
		out = append(out, "send_timeout_ms must be between 0 (default 8000) and 30000")
	}
	return out
}

// sendTimeout is the wait for a send's answer.
func (cfg *Config) sendTimeout() time.Duration {
	if cfg.SendTimeoutMs > 0 {
		return time.Duration(cfg.SendTimeoutMs) * time.Millisecond
	}
	return defaultSendTimeout
}

// digest names the credentials and endpoints without revealing the secret. State in the kv
// store (the token, the connection) is valid only for the digest it was made with, so a
// changed configuration starts afresh.
func (cfg *Config) digest() string {
	sum := sha256.Sum256([]byte(strings.Join([]string{cfg.AppID, cfg.AppSecret, cfg.BotID, cfg.WSURL, cfg.APIDomain, cfg.RouteEnv}, "\x00")))
	return hex.EncodeToString(sum[:8])
}
