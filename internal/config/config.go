// Package config reads hermes-host's configuration: embedded defaults, then an optional YAML
// file merged over them. In the file, ${NAME} in a value is replaced by the environment variable
// NAME after the YAML is parsed, so secrets can stay in the environment and a value can never
// change the file's structure.
package config

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/internal/approval"
	"github.com/hermes-host/hermes-host/internal/store"

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
	// Store is the database: empty for SQLite in the data directory (the default, one host), or
	// a postgres:// URL that several hosts share (put the password in ${NAME}). Never printed.
	Store      string `yaml:"store" json:"-"`
	PluginsDir string `yaml:"plugins_dir" json:"plugins_dir"`
	// CompilationCache is the directory of the plugins' compiled code, a directory per plugin
	// file named by its SHA-256 (default <data_dir>/cache/wazero). The code of a file no longer
	// in the plugins directory is removed a week after its last use. Hosts on one machine may
	// share one: entries are written to a temporary file and renamed into place.
	CompilationCache string `yaml:"compilation_cache" json:"compilation_cache,omitempty"`
	LogLevel         string `yaml:"log_level" json:"log_level"`
	Limits           Limits `yaml:"limits" json:"limits"`
	// StrictEgress refuses plugins that can reach a chat platform's API from every export.
	StrictEgress  bool              `yaml:"strict_egress" json:"strict_egress"`
	Agent         Agent             `yaml:"agent" json:"agent"`
	Notifications string            `yaml:"notifications" json:"notifications"`
	Plugins       map[string]Plugin `yaml:"plugins" json:"plugins"`
	Sessions      Sessions          `yaml:"sessions" json:"sessions"`
	Processes     Processes         `yaml:"processes" json:"processes"`
	Deliveries    Deliveries        `yaml:"deliveries" json:"deliveries"`
	Media         Media             `yaml:"media" json:"media"`
	Approval      Approval          `yaml:"approval" json:"approval"`
	// ShutdownTimeout bounds the drain on SIGTERM: the turns and deliveries in progress get this
	// long to finish before what is left is handed back to the next start.
	ShutdownTimeout Duration `yaml:"shutdown_timeout" json:"shutdown_timeout"`

	// TestClock is a file holding the time plugins see (serve --test-clock, tests only); never
	// read from a config file.
	TestClock string `yaml:"-" json:"-"`

	// EnvRefs are the environment variables the config file referenced (${NAME}): secrets, as a
	// rule. Background processes do not inherit them.
	EnvRefs []string `yaml:"-" json:"-"`
	// FilePlugins names the plugins the configuration file itself configures (the embedded
	// defaults configure echo for the demo): the ones worth a warning when no such plugin loads.
	FilePlugins []string `yaml:"-" json:"-"`
	// PluginsDirDefault is true when plugins_dir was not given, so it is <data_dir>/plugins and
	// may be created; a plugins_dir the operator named must exist (EnsurePluginsDir).
	PluginsDirDefault bool `yaml:"-" json:"-"`
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
	// EditInterval is the least time between two streamed edits of one chat (default 1s);
	// EditsPerSecond bounds them per bot over all its chats (default 20; Telegram allows
	// about 30 messages a second per bot).
	EditInterval   Duration `yaml:"edit_interval" json:"edit_interval,omitempty"`
	EditsPerSecond float64  `yaml:"edits_per_second" json:"edits_per_second,omitempty"`
	// Models are the models a chat may choose for its conversation with /model (names the
	// server serves); empty: /model is off. The configured model is always the default.
	Models []string `yaml:"models" json:"models,omitempty"`
	// ShowReasoning shows a thinking model's reasoning in the chat (quoted before the answer)
	// and keeps it in the history; by default it is dropped from both.
	ShowReasoning bool `yaml:"show_reasoning" json:"show_reasoning,omitempty"`
	// ContextTokens is the model's context window in tokens (0: ask the server's /models).
	ContextTokens int `yaml:"context_tokens" json:"context_tokens,omitempty"`
	// CompressAt is the share of the context window past which a conversation is compressed
	// between turns (default 0.8; 0 turns automatic compression off but for a context
	// overflow).
	CompressAt *float64 `yaml:"compress_at" json:"compress_at,omitempty"`
	// Vision says the configured model accepts images (OpenAI image_url content parts): a
	// message's pictures are sent to it. Off (the default): the model gets only the text and
	// the answer says that it cannot see images.
	Vision bool `yaml:"vision" json:"vision,omitempty"`
	// VisionModels are the models of Models that accept images (Vision is for Model).
	VisionModels []string `yaml:"vision_models" json:"vision_models,omitempty"`
	// Transcribe turns voice messages and audio files into text through an OpenAI-compatible
	// transcription server (POST url/audio/transcriptions); nil: they are not transcribed.
	Transcribe *Transcribe `yaml:"transcribe" json:"transcribe,omitempty"`
	// DocumentKiB caps the text of one document inlined into the user's message (0: 32).
	DocumentKiB int `yaml:"document_kib" json:"document_kib,omitempty"`
}

// Transcribe is the speech-to-text server behind voice messages: operator configuration, like
// the model's base_url (loopback allowed; redirects are never followed).
type Transcribe struct {
	// URL is the API root, e.g. http://127.0.0.1:8080/v1; files go to URL/audio/transcriptions.
	URL string `yaml:"url" json:"url"`
	// Model is the model name sent with each file (default whisper-1).
	Model string `yaml:"model" json:"model,omitempty"`
	// APIKey (or the environment variable APIKeyEnv names) is sent as a bearer token; empty:
	// none. Never printed.
	APIKey    string `yaml:"api_key" json:"-"`
	APIKeyEnv string `yaml:"api_key_env" json:"api_key_env,omitempty"`
	// Timeout bounds one transcription (default 60s).
	Timeout Duration `yaml:"timeout" json:"timeout,omitempty"`
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

// Deliveries configures the outbound ledger.
type Deliveries struct {
	// UndeliveredAfter bounds how long a message waits for its platform plugin to be connected
	// (a send it reports certainly not sent, "not_connected") before it fails; 0: 10 minutes.
	UndeliveredAfter Duration `yaml:"undelivered_after" json:"undelivered_after"`
}

// Media configures the attachment store (<data_dir>/media): the files of messages and the
// files answers send.
type Media struct {
	// MaxFileMiB caps one file; MaxProfileMiB the files stored for one plugin profile within
	// the retention. Retention is how long a file is kept after it was last stored.
	MaxFileMiB    int      `yaml:"max_file_mib" json:"max_file_mib"`
	MaxProfileMiB int      `yaml:"max_profile_mib" json:"max_profile_mib"`
	Retention     Duration `yaml:"retention" json:"retention"`
}

// Approval configures which commands a turn's shell tool runs only once a person says yes
// (internal/approval).
type Approval struct {
	// Mode is dangerous (the default: the built-in rules and Patterns), all (every command) or
	// off (none).
	Mode string `yaml:"mode" json:"mode"`
	// Patterns are Go regular expressions of further commands that wait, in mode dangerous.
	Patterns []string `yaml:"patterns" json:"patterns,omitempty"`
	// Timeout is how long a request waits for its answer before it is denied (0: 5 minutes).
	Timeout Duration `yaml:"timeout" json:"timeout"`
	// Approvers are users who may answer anyone's request, as "platform:user_id"; the
	// requester may always answer their own.
	Approvers []string `yaml:"approvers" json:"approvers,omitempty"`
}

// Policy is the approval policy a valid Approval describes.
func (a Approval) Policy() (*approval.Policy, error) {
	return approval.NewPolicy(a.Mode, a.Patterns, time.Duration(a.Timeout), a.Approvers)
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

// MarshalYAML writes the duration as a string ("" for none).
func (d Duration) MarshalYAML() (any, error) {
	if d == 0 {
		return "", nil
	}
	return time.Duration(d).String(), nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Load returns the defaults merged with the file at path (if not empty), with ${ENV} expanded
// in the file's values. A reference to an unset variable is an error naming it.
func Load(path string) (*Config, error) {
	if path == "" {
		return Parse("", nil)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, b)
}

// Parse returns the defaults merged with the YAML document b (none when b is empty), with
// ${ENV} expanded in its values; name is where b came from, for the errors. Every problem is
// reported at once, each naming its key path (an *Error).
func Parse(name string, b []byte) (*Config, error) {
	c, problems, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where(name), err)
	}
	return c, errorOf(name, append(problems, c.problems()...))
}

// Check is Load with the overrides applied, as serve would run with them, and the checks serve
// makes before it serves (a plugins_dir the operator named must exist, though nothing is
// created here): the configuration, and nil or an *Error with every problem found.
func Check(path string, o Overrides) (*Config, error) {
	name, b := path, []byte(nil)
	if path != "" {
		var err error
		if b, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	c, problems, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where(name), err)
	}
	c.apply(o)
	problems = append(problems, c.problems()...)
	if err := c.checkPluginsDir(); err != nil {
		problems = append(problems, err.Error())
	}
	return c, errorOf(name, problems)
}

func where(name string) string {
	if name == "" {
		return "config"
	}
	return "config " + name
}

// parse merges b over the defaults. It returns the problems found in b's keys and values (a key
// Config has no place for, a value of the wrong type, an unset ${NAME}), each naming its key
// path; the value checks (problems) are the caller's. An error is a defect of the embedded
// defaults.
func parse(b []byte) (*Config, []string, error) {
	var c Config
	if err := decode(defaults, &c); err != nil {
		return nil, nil, fmt.Errorf("embedded defaults: %w", err)
	}
	var problems []string
	if len(b) > 0 {
		var doc yaml.Node
		if err := yaml.Unmarshal(b, &doc); err != nil {
			// Not YAML: nothing in it can be read. The parser's message names the line.
			problems = append(problems, strings.TrimPrefix(err.Error(), "yaml: "))
		} else if doc.Kind != 0 {
			var refs []string
			refs, problems = expand(&doc)
			c.EnvRefs = refs
			shape := checkShape(&doc)
			problems = byLine(append(problems, shape...))
			// Decode even past a problem, so the values around it are checked too: the
			// decoder skips what it cannot place and goes on.
			expanded, err := yaml.Marshal(&doc)
			if err == nil {
				err = decode(expanded, &c)
			}
			var named struct {
				Plugins map[string]yaml.Node `yaml:"plugins"`
			}
			if e := doc.Decode(&named); err == nil {
				err = e
			}
			if e := mergePlugins(&c, named.Plugins); err == nil {
				err = e
			}
			if err != nil && len(shape) == 0 { // what checkShape missed, in the decoder's words
				problems = append(problems, err.Error())
			}
			for name := range named.Plugins {
				c.FilePlugins = append(c.FilePlugins, name)
			}
			sort.Strings(c.FilePlugins)
		}
	}
	if env := os.Getenv("HERMES_DATA_DIR"); env != "" {
		c.DataDir = env
	}
	if c.PluginsDir == "" {
		c.PluginsDir, c.PluginsDirDefault = filepath.Join(c.DataDir, "plugins"), true
	}
	return &c, problems, nil
}

// Overrides are settings given beside the file (the command's flags, an embedding program's
// host.Config): each one not empty replaces the file's value.
type Overrides struct {
	DataDir          string // data_dir; a default plugins_dir (<data_dir>/plugins) follows it
	PluginsDir       string
	CompilationCache string
	Listen           string
	AdminListen      string
	LogLevel         string
}

// Override applies o to c and checks the result as Load checks a file.
func (c *Config) Override(o Overrides) error {
	c.apply(o)
	return errorOf("", c.problems())
}

// apply applies o to c.
func (c *Config) apply(o Overrides) {
	if o.DataDir != "" {
		c.DataDir = o.DataDir
		if c.PluginsDirDefault {
			c.PluginsDir = filepath.Join(c.DataDir, "plugins")
		}
	}
	if o.PluginsDir != "" {
		c.PluginsDir, c.PluginsDirDefault = o.PluginsDir, false
	}
	if o.CompilationCache != "" {
		c.CompilationCache = o.CompilationCache
	}
	if o.Listen != "" {
		c.Listen = o.Listen
	}
	if o.AdminListen != "" {
		c.AdminListen = o.AdminListen
	}
	if o.LogLevel != "" {
		c.LogLevel = o.LogLevel
	}
}

// Level is the log level log_level names (validated: one of debug, info, warn, error).
func (c *Config) Level() slog.Level {
	var l slog.Level
	l.UnmarshalText([]byte(c.LogLevel))
	return l
}

// mergePlugins merges each plugin's settings in the file (nodes, by plugin name) over the
// embedded defaults' settings for that plugin, key by key, into c.Plugins. The file's decode
// (strict, into c) replaced each plugin it names whole, which lost what the defaults give that
// plugin and the file does not repeat: the cron plugin's 150 s call deadline, say, under a file
// that only writes the cron profiles. Decoding the file's node over a fresh copy of the
// defaults' settings instead keeps every key the file does not give: a limit given replaces only
// that limit, a profile or an access entry given replaces only that profile's, and a list given
// replaces the default's list. Unknown keys were already refused by the strict decode.
func mergePlugins(c *Config, nodes map[string]yaml.Node) error {
	var d Config
	if err := decode(defaults, &d); err != nil {
		return fmt.Errorf("embedded defaults: %w", err)
	}
	for name, node := range nodes {
		base, ok := d.Plugins[name]
		if !ok {
			continue // nothing to merge with: the file's settings are the whole
		}
		if err := node.Decode(&base); err != nil {
			return err
		}
		c.Plugins[name] = base
	}
	return nil
}

// EnsurePluginsDir checks the plugins directory before serving: the default one
// (<data_dir>/plugins) is created if missing, and reported as created; one the operator named
// must exist, since a typo there would otherwise serve no plugins without a word.
func (c *Config) EnsurePluginsDir() (created bool, err error) {
	if err := c.checkPluginsDir(); err != nil {
		return false, fmt.Errorf("config: %w", err)
	}
	if _, err := os.Stat(c.PluginsDir); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(c.PluginsDir, 0o755); err != nil {
		return false, fmt.Errorf("config: creating the plugins directory: %w", err)
	}
	return true, nil
}

// checkPluginsDir reports a plugins directory that is a file, cannot be read, or was named by
// the operator and does not exist (a missing default one is created when serving). It creates
// nothing.
func (c *Config) checkPluginsDir() error {
	fi, err := os.Stat(c.PluginsDir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return fmt.Errorf("plugins_dir: %s is a file, not a directory", c.PluginsDir)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("plugins_dir: %w", err)
	case !c.PluginsDirDefault:
		return fmt.Errorf("plugins_dir: %s does not exist: create it (and put .wasm plugins in it), or leave plugins_dir unset to use <data_dir>/plugins", c.PluginsDir)
	}
	return nil
}

// expand replaces ${NAME} in every scalar value of the parsed document doc (never in keys,
// never in the text), returning the names it referenced and a problem, naming its key path, for
// each variable not set. A value holding quotes, newlines or YAML syntax stays one value: the
// document is encoded again before it is decoded, and the encoder quotes it.
func expand(doc *yaml.Node) (refs, problems []string) {
	var walk func(path string, n *yaml.Node)
	walk = func(path string, n *yaml.Node) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(path, c)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(fmt.Sprintf("%s[%d]", path, i), c)
			}
		case yaml.MappingNode:
			for i := 1; i < len(n.Content); i += 2 {
				walk(join(path, n.Content[i-1].Value), n.Content[i])
			}
		case yaml.ScalarNode:
			if !envRef.MatchString(n.Value) {
				return
			}
			n.Value = envRef.ReplaceAllStringFunc(n.Value, func(m string) string {
				name := envRef.FindStringSubmatch(m)[1]
				v, ok := os.LookupEnv(name)
				if !ok {
					problems = append(problems, fmt.Sprintf("%s: ${%s} is not set in the environment (line %d)", path, name, n.Line))
				}
				refs = append(refs, name)
				return v
			})
			if n.Style == 0 || n.Style == yaml.FlowStyle {
				n.Tag = "" // plain: typed by the expanded value, like a literal (a port, a bool)
			}
		}
	}
	walk("", doc)
	return refs, problems
}

// decode merges YAML over c, refusing unknown keys so a typo is an error, not a silent default.
func decode(b []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty document
		return err
	}
	return nil
}

// Limits on the per-plugin limits, so a value out of range is a configuration error instead of
// a failure (or a panic) deep in the runtime.
const (
	MaxMemoryMiB    = 4096 // a Wasm memory is at most 65536 pages of 64 KiB
	MaxPoolSize     = 256
	MaxPayloadKiB   = 64 << 10
	MaxCallTimeout  = 10 * time.Minute
	maxHourOfTheDay = 23
	// MaxShutdownTimeout bounds shutdown_timeout: a service manager waits longer still before it
	// kills the host (systemd's TimeoutStopSec).
	MaxShutdownTimeout = time.Hour
	pluginNameFormat   = "lower-case letters, digits, '-' and '_', starting with a letter, at most 32"
)

var (
	pluginName  = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	profileName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	hostPort    = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$|^[0-9A-Fa-f]*:[0-9A-Fa-f:.]*$`)
)

// problems checks every value and returns every problem, each naming its key.
func (c *Config) problems() []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	checkListen("listen", c.Listen, "127.0.0.1:8484", add)
	checkListen("admin_listen", c.AdminListen, "127.0.0.1:8485", add)
	if c.DataDir == "" {
		add("data_dir is empty")
	}
	if c.Store != "" && !store.IsPostgres(c.Store) {
		add("store: want empty (SQLite in data_dir) or a postgres:// URL, not %q", store.Redact(c.Store))
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		add("log_level %q: want debug, info, warn or error", c.LogLevel)
	}
	c.Limits.check("limits", false, add)
	switch c.Agent.Kind {
	case "builtin", "openai":
	default:
		add("agent.kind %q: want builtin or openai", c.Agent.Kind)
	}
	switch c.Agent.Check {
	case "", "warn", "fail", "off":
	default:
		add("agent.check %q: want warn, fail or off", c.Agent.Check)
	}
	if c.Agent.Kind == "openai" && c.Agent.Model == "" {
		add("agent.model is empty: the openai agent needs the model name the server serves (GET base_url/models lists them)")
	}
	if c.Agent.BaseURL != "" {
		if u, err := url.Parse(c.Agent.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("agent.base_url %q: want an http or https URL like http://127.0.0.1:8000/v1", c.Agent.BaseURL)
		}
	}
	if t := c.Agent.Temperature; t != nil && (*t < 0 || *t > 2) {
		add("agent.temperature %v: want 0 to 2", *t)
	}
	if c.Agent.MaxRounds < 0 || c.Agent.MaxTokens < 0 || c.Agent.MaxMessages < 0 {
		add("agent.max_rounds, max_tokens and max_messages must not be negative")
	}
	for _, m := range c.Agent.Models {
		if strings.TrimSpace(m) == "" || strings.EqualFold(m, "default") {
			add("agent.models: %q is not a model name", m)
		}
	}
	if c.Agent.EditInterval < 0 || c.Agent.EditsPerSecond < 0 {
		add("agent.edit_interval and agent.edits_per_second must not be negative")
	}
	if c.Agent.ContextTokens < 0 {
		add("agent.context_tokens must not be negative")
	}
	if a := c.Agent.CompressAt; a != nil && (*a < 0 || *a >= 1) {
		add("agent.compress_at %v: want a share of the context window from 0 (off) to below 1, like 0.8", *a)
	}
	if c.Agent.Timeout < 0 || c.Agent.TurnTimeout < 0 {
		add("agent.timeout and agent.turn_timeout must not be negative")
	}
	for _, m := range c.Agent.VisionModels {
		if !slices.Contains(c.Agent.Models, m) {
			add("agent.vision_models: %q is not in agent.models (agent.vision is for agent.model)", m)
		}
	}
	if c.Agent.DocumentKiB < 0 {
		add("agent.document_kib must not be negative")
	}
	if tr := c.Agent.Transcribe; tr != nil {
		if u, err := url.Parse(tr.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("agent.transcribe.url %q: want an http or https URL like http://127.0.0.1:8080/v1", tr.URL)
		}
		if tr.Timeout < 0 {
			add("agent.transcribe.timeout must not be negative")
		}
		if tr.APIKey != "" && tr.APIKeyEnv != "" {
			add("agent.transcribe: set api_key or api_key_env, not both")
		}
	}
	switch c.Notifications {
	case "concise", "all", "result", "error", "off":
	default:
		add("notifications %q: want concise, all, result, error or off", c.Notifications)
	}
	switch c.Sessions.ResetMode {
	case "", "none", "idle", "daily", "both":
	default:
		add("sessions.reset_mode %q: want none, idle, daily or both", c.Sessions.ResetMode)
	}
	switch m := c.Media; {
	case m.MaxFileMiB <= 0 || m.MaxFileMiB > 2048:
		add("media.max_file_mib %d: must be between 1 and 2048 (MiB a file may have)", m.MaxFileMiB)
	case m.MaxProfileMiB < m.MaxFileMiB:
		add("media.max_profile_mib %d: must be at least media.max_file_mib (%d)", m.MaxProfileMiB, m.MaxFileMiB)
	}
	if r := time.Duration(c.Media.Retention); r < time.Hour {
		add("media.retention %v: must be at least 1h (how long a stored file is kept)", r)
	}
	if _, err := c.Approval.Policy(); err != nil {
		add("%v", err)
	}
	if c.Approval.Timeout < 0 {
		add("approval.timeout %v: must not be negative (0 means the default, 5m)", time.Duration(c.Approval.Timeout))
	}
	if c.Deliveries.UndeliveredAfter < 0 {
		add("deliveries.undelivered_after %v: must not be negative (0 means the default, 10 minutes)", time.Duration(c.Deliveries.UndeliveredAfter))
	}
	if d := time.Duration(c.ShutdownTimeout); d <= 0 || d > MaxShutdownTimeout {
		add("shutdown_timeout %v: want a duration above 0 and at most %v, like 20s", d, MaxShutdownTimeout)
	}
	if c.Sessions.IdleMinutes < 0 {
		add("sessions.idle_minutes %d: must not be negative (0 means the default, 24 hours)", c.Sessions.IdleMinutes)
	}
	if h := c.Sessions.DailyAtHour; h < 0 || h > maxHourOfTheDay {
		add("sessions.daily_at_hour %d: want an hour from 0 to 23", h)
	}
	names := make([]string, 0, len(c.Plugins))
	for name := range c.Plugins {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := c.Plugins[name]
		at := "plugins." + name
		if !pluginName.MatchString(name) {
			add("%s: %q is not a plugin name (%s)", at, name, pluginNameFormat)
		}
		if p.Limits != nil {
			p.Limits.check(at+".limits", true, add)
		}
		for _, h := range append(append([]string(nil), p.EgressNarrow...), p.EgressExtra...) {
			if !hostPort.MatchString(h) {
				add("%s: egress host %q: want a host name or address, optionally with :port (no scheme, no path)", at, h)
			}
		}
		for profile, a := range p.Access {
			for _, tool := range a.Tools {
				if tool != ToolShell && tool != ToolProcesses && tool != ToolCron {
					add("%s.access.%s.tools: %q: want %s, %s or %s", at, profile, tool, ToolShell, ToolProcesses, ToolCron)
				}
			}
		}
		for profile, settings := range p.Profiles {
			if !profileName.MatchString(profile) {
				add("%s.profiles: %q is not a profile name (letters, digits, '.', '-', '_')", at, profile)
			}
			if settings == nil {
				add("%s.profiles.%s is empty: give its settings, or {} for none", at, profile)
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// checkListen reports a listen address (key) that is not host:port with a port number and a
// named interface.
func checkListen(key, addr, example string, add func(string, ...any)) {
	if addr == "" {
		add("%s is empty", key)
	} else if host, port, err := net.SplitHostPort(addr); err != nil {
		add("%s %q: want host:port (like %s): %v", key, addr, example, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		add("%s %q: port %q is not a port number", key, addr, port)
	} else if host == "" {
		add("%s %q: name the interface (127.0.0.1 for this machine only, 0.0.0.0 for all)", key, addr)
	}
}

// check reports limits out of range. In a plugin's own limits zero means "the default".
func (l Limits) check(at string, zeroOK bool, add func(string, ...any)) {
	in := func(name string, v, lo, hi int, unit string) {
		if (zeroOK && v == 0) || (v >= lo && v <= hi) {
			return
		}
		add("%s.%s %d: want %d to %d %s", at, name, v, lo, hi, unit)
	}
	in("memory_mib", l.MemoryMiB, 1, MaxMemoryMiB, "(MiB; a Wasm memory is at most 4 GiB)")
	in("pool_size", l.PoolSize, 1, MaxPoolSize, "(instances)")
	in("max_payload_kib", l.MaxPayloadKiB, 1, MaxPayloadKiB, "(KiB)")
	if d := time.Duration(l.CallTimeout); !(zeroOK && d == 0) && (d <= 0 || d > MaxCallTimeout) {
		add("%s.call_timeout %v: want more than 0 and at most %v", at, d, MaxCallTimeout)
	}
}

// ProfileJSON returns a profile's configuration as the JSON object plugins receive.
func (p Plugin) ProfileJSON(profile string) (json.RawMessage, error) {
	b, err := json.Marshal(p.Profiles[profile])
	return b, err
}
