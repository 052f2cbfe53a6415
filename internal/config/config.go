// Package config reads hermes-host's configuration: embedded defaults, then an optional YAML
// file merged over them. In the file, ${NAME} in a value is replaced by the environment variable
// NAME after the YAML is parsed, so secrets can stay in the environment and a value can never
// change the file's structure.
package config

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"
)

//go:embed defaults.yaml
var defaults []byte

// Config is the whole configuration.
type Config struct {
	// Listen is the public listener: it serves only the webhooks, /hooks/{plugin}/{profile}.
	Listen string `yaml:"listen" json:"listen"`
	// AdminListen is the operator's listener (loopback by default): /api/*, /metrics, /healthz
	// and the demo platform, behind a bearer token kept in the data directory.
	AdminListen string `yaml:"admin_listen" json:"admin_listen"`
	// AdminHosts are Host names the admin listener answers besides localhost, 127.0.0.1 and
	// ::1 (a DNS-rebinding defence: any other Host is refused).
	AdminHosts []string `yaml:"admin_hosts" json:"admin_hosts,omitempty"`
	Demo       Demo     `yaml:"demo" json:"demo"`
	DataDir    string   `yaml:"data_dir" json:"data_dir"`
	PluginsDir string   `yaml:"plugins_dir" json:"plugins_dir"`
	LogLevel   string   `yaml:"log_level" json:"log_level"`
	Limits     Limits   `yaml:"limits" json:"limits"`
	// StrictEgress refuses plugins that can reach a chat platform's API from every export.
	StrictEgress  bool              `yaml:"strict_egress" json:"strict_egress"`
	Agent         Agent             `yaml:"agent" json:"agent"`
	Notifications string            `yaml:"notifications" json:"notifications"`
	Plugins       map[string]Plugin `yaml:"plugins" json:"plugins"`
	Sessions      Sessions          `yaml:"sessions" json:"sessions"`
	Processes     Processes         `yaml:"processes" json:"processes"`

	// TestClock is a file holding the time plugins see (serve --test-clock, tests only); never
	// read from a config file.
	TestClock string `yaml:"-" json:"-"`

	// EnvRefs are the environment variables the config file referenced (${NAME}): secrets, as a
	// rule. Background processes do not inherit them.
	EnvRefs []string `yaml:"-" json:"-"`
}

// Limits are the default per-plugin limits.
type Limits struct {
	MemoryMiB     int      `yaml:"memory_mib" json:"memory_mib"`
	CallTimeout   Duration `yaml:"call_timeout" json:"call_timeout"`
	PoolSize      int      `yaml:"pool_size" json:"pool_size"`
	MaxPayloadKiB int      `yaml:"max_payload_kib" json:"max_payload_kib"`
}

// Agent selects and configures the agent behind turns.
type Agent struct {
	Kind    string `yaml:"kind" json:"kind"`
	BaseURL string `yaml:"base_url" json:"base_url"`
	Model   string `yaml:"model" json:"model"`
	APIKey  string `yaml:"api_key" json:"-"`
	// SystemPrompt replaces the opening of the system prompt.
	SystemPrompt string `yaml:"system_prompt" json:"system_prompt,omitempty"`
	// MaxRounds bounds the model calls of one turn (0: 8).
	MaxRounds int `yaml:"max_rounds" json:"max_rounds,omitempty"`
	// Timeout bounds each model call; TurnTimeout a whole turn (0: 120s and 10m).
	Timeout     Duration `yaml:"timeout" json:"timeout"`
	TurnTimeout Duration `yaml:"turn_timeout" json:"turn_timeout"`
	// Temperature and MaxTokens are sent when set.
	Temperature *float64 `yaml:"temperature" json:"temperature,omitempty"`
	MaxTokens   int      `yaml:"max_tokens" json:"max_tokens,omitempty"`
	// Headers are extra HTTP headers for every model request (values are secrets in logs).
	Headers map[string]string `yaml:"headers" json:"-"`
	// Tools turns the terminal and process tools on (default) or off, for servers or models
	// that reject "tools".
	Tools *bool `yaml:"tools" json:"tools,omitempty"`
	// Stream streams answers into platforms that edit messages (default on).
	Stream *bool `yaml:"stream" json:"stream,omitempty"`
	// MaxMessages caps the chat messages one answer becomes; /more sends the rest (0: 5).
	MaxMessages int `yaml:"max_messages" json:"max_messages,omitempty"`
	// Check is what a failed start-up check of GET base_url/models does: warn (default, log
	// and serve), fail (refuse to start) or off.
	Check string `yaml:"check" json:"check,omitempty"`
}

// Plugin is the operator's settings for one plugin.
type Plugin struct {
	Limits       *Limits  `yaml:"limits" json:"limits,omitempty"`
	EgressNarrow []string `yaml:"egress_narrow" json:"egress_narrow,omitempty"`
	EgressExtra  []string `yaml:"egress_extra" json:"egress_extra,omitempty"`
	// EgressInternal grants internal addresses (loopback, private, link-local: IPs, CIDR
	// prefixes or host names) that declared hosts may resolve to, without granting any host.
	EgressInternal []string `yaml:"egress_internal" json:"egress_internal,omitempty"`
	// EgressAlias maps an address (host:port) to the declared host it stands in for (a
	// self-hosted Bot API server): the host's scopes apply to requests to that address.
	EgressAlias map[string]string         `yaml:"egress_alias" json:"egress_alias,omitempty"`
	Profiles    map[string]map[string]any `yaml:"profiles" json:"-"`
	// Access says, per profile, who may talk to the agent through this plugin and which tools
	// they get. A profile without an entry admits nobody but users the operator approves
	// through DM pairing, and grants no tools.
	Access map[string]Access `yaml:"access" json:"access,omitempty"`
}

// Access is one profile's authorization: deny by default.
type Access struct {
	// AllowAll admits everyone, in DMs and in every group (the mention rule still applies).
	AllowAll bool `yaml:"allow_all" json:"allow_all,omitempty"`
	// Users are platform user ids admitted in DMs, and in groups that list no users of their own.
	Users []string `yaml:"users" json:"users,omitempty"`
	// Pairing sends an unknown user's first DM a one-time code the operator can approve
	// (hermes-host pairing approve CODE). Default true.
	Pairing *bool `yaml:"pairing" json:"pairing,omitempty"`
	// Groups are the group chats (groups, channels, forums) the agent listens in, by chat id;
	// "*" is any group. None by default.
	Groups map[string]Group `yaml:"groups" json:"groups,omitempty"`
	// Tools are the capabilities granted to admitted senders: "shell" (sh, run, watch; the
	// terminal tool), "processes" (ps, poll, log, wait, kill; the process tool) and "cron" (the
	// /cron command: their chat's scheduled jobs). None by default.
	Tools []string `yaml:"tools" json:"tools,omitempty"`
}

// Group is the rule for one group chat.
type Group struct {
	// AllowAll admits every member.
	AllowAll bool `yaml:"allow_all" json:"allow_all,omitempty"`
	// Users admitted in this group; unset: the profile's users and approved users.
	Users []string `yaml:"users" json:"users,omitempty"`
	// RequireMention: only messages that address the bot start turns (default true); the
	// others are kept in the transcript.
	RequireMention *bool `yaml:"require_mention" json:"require_mention,omitempty"`
	// Observe keeps messages of members who are not admitted in the transcript (no turn, no
	// answer). Default false: they are refused.
	Observe bool `yaml:"observe" json:"observe,omitempty"`
}

// Tool capabilities a profile may grant.
const (
	ToolShell     = "shell"
	ToolProcesses = "processes"
	ToolCron      = "cron"
)

// Demo names the plugin profile that is the loopback demo platform: served on the admin
// listener only, with a secret the host generates into the data directory.
type Demo struct {
	Plugin  string `yaml:"plugin" json:"plugin"` // "" turns the demo off
	Profile string `yaml:"profile" json:"profile"`
}

// Sessions configures session keys and auto-reset.
type Sessions struct {
	GroupPerUser  *bool  `yaml:"group_sessions_per_user" json:"group_sessions_per_user,omitempty"`
	ThreadPerUser bool   `yaml:"thread_sessions_per_user" json:"thread_sessions_per_user"`
	ResetMode     string `yaml:"reset_mode" json:"reset_mode"` // none (default), idle, daily, both
	IdleMinutes   int    `yaml:"idle_minutes" json:"idle_minutes"`
	DailyAtHour   int    `yaml:"daily_at_hour" json:"daily_at_hour"`
}

// Processes configures the background-process registry.
type Processes struct {
	MaxAge Duration `yaml:"max_age" json:"max_age"`
}

// Duration is a time.Duration written as "10s" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	if s == "" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (like 10s or 2m)", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Load returns the defaults merged with the file at path (if not empty), with ${ENV} expanded
// in the file's values. A reference to an unset variable is an error naming it.
func Load(path string) (*Config, error) {
	var c Config
	if err := decode(defaults, &c); err != nil {
		return nil, fmt.Errorf("config: embedded defaults: %w", err)
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if b, c.EnvRefs, err = expand(b); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
		if err := decode(b, &c); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if env := os.Getenv("HERMES_DATA_DIR"); env != "" {
		c.DataDir = env
	}
	if c.PluginsDir == "" {
		c.PluginsDir = filepath.Join(c.DataDir, "plugins")
	}
	return &c, c.validate()
}

// expand parses the YAML document b, replaces ${NAME} in every scalar value (never in keys, never
// in the text) and returns the document encoded again, with the names it referenced. A value
// holding quotes, newlines or YAML syntax stays one value: the encoder quotes it.
func expand(b []byte) ([]byte, []string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, nil, err
	}
	if doc.Kind == 0 {
		return b, nil, nil // empty file
	}
	var refs, missing []string
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c)
			}
		case yaml.MappingNode:
			for i := 1; i < len(n.Content); i += 2 {
				walk(n.Content[i])
			}
		case yaml.ScalarNode:
			if !envRef.MatchString(n.Value) {
				return
			}
			n.Value = envRef.ReplaceAllStringFunc(n.Value, func(m string) string {
				name := envRef.FindStringSubmatch(m)[1]
				v, ok := os.LookupEnv(name)
				if !ok {
					missing = append(missing, name)
				}
				refs = append(refs, name)
				return v
			})
			if n.Style == 0 || n.Style == yaml.FlowStyle {
				n.Tag = "" // plain: typed by the expanded value, like a literal (a port, a bool)
			}
		}
	}
	walk(&doc)
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("environment variables not set: %v", missing)
	}
	out, err := yaml.Marshal(&doc)
	return out, refs, err
}

// decode merges YAML over c, refusing unknown keys so a typo is an error, not a silent default.
func decode(b []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && err.Error() != "EOF" {
		return err
	}
	return nil
}

func (c *Config) validate() error {
	if c.Listen == "" {
		return fmt.Errorf("config: listen is empty")
	}
	if c.DataDir == "" {
		return fmt.Errorf("config: data_dir is empty")
	}
	if c.AdminListen == "" {
		return fmt.Errorf("config: admin_listen is empty")
	}
	for name, p := range c.Plugins {
		for profile, a := range p.Access {
			for _, tool := range a.Tools {
				if tool != ToolShell && tool != ToolProcesses && tool != ToolCron {
					return fmt.Errorf("config: plugins.%s.access.%s.tools: %q: want %s, %s or %s", name, profile, tool, ToolShell, ToolProcesses, ToolCron)
				}
			}
		}
	}
	switch c.Agent.Kind {
	case "builtin", "openai":
	default:
		return fmt.Errorf("config: agent.kind %q: want builtin or openai", c.Agent.Kind)
	}
	switch c.Agent.Check {
	case "", "warn", "fail", "off":
	default:
		return fmt.Errorf("config: agent.check %q: want warn, fail or off", c.Agent.Check)
	}
	if c.Agent.Kind == "openai" && c.Agent.Model == "" {
		return fmt.Errorf("config: agent.model is empty: the openai agent needs the model name the server serves (GET base_url/models lists them)")
	}
	if t := c.Agent.Temperature; t != nil && (*t < 0 || *t > 2) {
		return fmt.Errorf("config: agent.temperature %v: want 0 to 2", *t)
	}
	if c.Agent.MaxRounds < 0 || c.Agent.MaxTokens < 0 || c.Agent.MaxMessages < 0 {
		return fmt.Errorf("config: agent.max_rounds, max_tokens and max_messages must not be negative")
	}
	switch c.Notifications {
	case "concise", "all", "result", "error", "off":
	default:
		return fmt.Errorf("config: notifications %q: want concise, all, result, error or off", c.Notifications)
	}
	return nil
}

// ProfileJSON returns a profile's configuration as the JSON object plugins receive.
func (p Plugin) ProfileJSON(profile string) (json.RawMessage, error) {
	b, err := json.Marshal(p.Profiles[profile])
	return b, err
}
