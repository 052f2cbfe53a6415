package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
)

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// disabledKernel lists the Extism kernel conveniences this host does not provide, with what to
// use instead (SPEC 1.2). A plugin importing one is refused at load rather than having its
// requests or logs silently dropped.
var disabledKernel = map[string][2]string{
	"http_request":     {"Extism HTTP", "use hermes_http, which the egress policy governs"},
	"http_status_code": {"Extism HTTP", "use hermes_http, which the egress policy governs"},
	"http_headers":     {"Extism HTTP", "use hermes_http, which the egress policy governs"},
	"config_get":       {"Extism config", "read the profile's configuration from the request's config"},
	"var_get":          {"Extism vars", "use hermes_kv_get/hermes_kv_set: instances are disposable"},
	"var_set":          {"Extism vars", "use hermes_kv_get/hermes_kv_set: instances are disposable"},
	"log_trace":        {"Extism log", "use hermes_log, which the host attributes to the plugin"},
	"log_debug":        {"Extism log", "use hermes_log, which the host attributes to the plugin"},
	"log_info":         {"Extism log", "use hermes_log, which the host attributes to the plugin"},
	"log_warn":         {"Extism log", "use hermes_log, which the host attributes to the plugin"},
	"log_error":        {"Extism log", "use hermes_log, which the host attributes to the plugin"},
	"get_log_level":    {"Extism log", "use hermes_log, which the host attributes to the plugin"},
}

var knownCaps = []string{abi.CapWebhook, abi.CapPoll, abi.CapThreads, abi.CapEdit, abi.CapTyping, abi.CapReplies, abi.CapJobs,
	abi.CapAttachments, abi.CapButtons}

// checkStatic validates what can be read from the binary without running it: the ABI marker,
// the required exports, and that every host import is one this host provides.
func checkStatic(info *moduleInfo, host abi.Version) (abi.Version, error) {
	var markers []abi.Version
	var bad []string
	for name, kind := range info.exports {
		if !strings.HasPrefix(name, abi.MarkerPrefix) {
			continue
		}
		v, ok := abi.ParseMarker(name)
		if !ok || kind != externFunc {
			bad = append(bad, name)
			continue
		}
		markers = append(markers, v)
	}
	switch {
	case len(bad) > 0:
		return abi.Version{}, fmt.Errorf("malformed ABI marker export %q (want a function named like %s)", bad[0], host.MarkerName())
	case len(markers) == 0:
		return abi.Version{}, fmt.Errorf("no ABI marker: a hermes plugin exports a function named %s (is this a hermes plugin? built with the SDK?)", host.MarkerName())
	case len(markers) > 1:
		return abi.Version{}, fmt.Errorf("%d ABI markers exported; want exactly one", len(markers))
	}
	guest := markers[0]
	if err := host.Supports(guest); err != nil {
		return guest, err
	}
	for _, name := range []string{abi.ExportDescribe, abi.ExportConfigure} {
		kind, ok := info.exports[name]
		if !ok {
			return guest, fmt.Errorf("missing required export %q", name)
		}
		if kind != externFunc {
			return guest, fmt.Errorf("export %q is not a function", name)
		}
	}
	if _, ok := info.exports["_start"]; ok {
		return guest, errors.New("module exports _start (a WASI command): build with -buildmode=c-shared so it is a reactor")
	}
	// Every export the host calls takes nothing and returns an i32 (SPEC 1): a different
	// signature would crash on every call, so it is refused now.
	for _, name := range []string{abi.ExportDescribe, abi.ExportConfigure, abi.ExportSend, abi.ExportWebhook, abi.ExportPoll, abi.ExportTick, abi.ExportJobs, abi.ExportFetch} {
		if kind, ok := info.exports[name]; !ok || kind != externFunc {
			continue
		}
		sig, ok := info.funcSig(name)
		if !ok {
			return guest, fmt.Errorf("export %q: its signature cannot be read", name)
		}
		if len(sig.params) != 0 || len(sig.results) != 1 || sig.results[0] != 0x7f {
			return guest, fmt.Errorf("export %q has type %s; every export the host calls must be () -> (i32) (SPEC 1)", name, sig)
		}
	}
	for _, im := range info.imports {
		switch im.module {
		case "extism:host/env":
			if use, ok := disabledKernel[im.name]; ok {
				return guest, fmt.Errorf("imports %s.%s (%s), which this host disables; %s", im.module, im.name, use[0], use[1])
			}
		case "wasi_snapshot_preview1":
		case abi.HostNamespace:
			if !abi.IsHostFunction(im.name) {
				return guest, fmt.Errorf("imports unknown host function %s.%s (built for a newer host?)", im.module, im.name)
			}
			if since := abi.Since(im.name); guest.Minor < since.Minor {
				return guest, fmt.Errorf("imports %s, which ABI %s added, but declares ABI %s: rebuild it with a newer SDK", im.name, since, guest)
			}
		default:
			return guest, fmt.Errorf("imports %s.%s from module %q, which this host does not provide", im.module, im.name, im.module)
		}
	}
	return guest, nil
}

// checkManifest validates a plugin's describe output against its exports and its ABI version.
func checkManifest(m *abi.Manifest, info *moduleInfo, guest abi.Version) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !nameRE.MatchString(m.Name) {
		bad("name %q: want 1-32 of [a-z0-9_-], starting with a letter", m.Name)
	}
	if m.Version == "" {
		bad("version is empty")
	}
	has := func(export string) bool {
		kind, ok := info.exports[export]
		return ok && kind == externFunc
	}
	switch m.Kind {
	case abi.KindPlatform:
		if !nameRE.MatchString(m.Platform) {
			bad("platform %q: want 1-32 of [a-z0-9_-]", m.Platform)
		}
		if !has(abi.ExportSend) {
			bad("platform plugins must export %q", abi.ExportSend)
		}
		if m.MessageLimit.Max <= 0 {
			bad("message_limit.max must be positive")
		}
		if u := m.MessageLimit.Unit; u != abi.UnitUTF16 && u != abi.UnitCodePoint && u != abi.UnitByte {
			bad("message_limit.unit %q: want %s, %s or %s", u, abi.UnitUTF16, abi.UnitCodePoint, abi.UnitByte)
		}
	case abi.KindScheduler:
		if !has(abi.ExportTick) {
			bad("scheduler plugins must export %q", abi.ExportTick)
		}
	default:
		bad("kind %q: want %q or %q", m.Kind, abi.KindPlatform, abi.KindScheduler)
	}
	for _, c := range m.Capabilities {
		switch {
		case !slices.Contains(knownCaps, c):
			bad("unknown capability %q", c)
		case guest.Minor < abi.Since(c).Minor:
			bad("capability %q needs ABI %s; the plugin declares %s", c, abi.Since(c), guest)
		}
	}
	if m.Has(abi.CapWebhook) && !has(abi.ExportWebhook) {
		bad("declares capability %q but does not export it", abi.CapWebhook)
	}
	if m.Has(abi.CapPoll) && !has(abi.ExportPoll) {
		bad("declares capability %q but does not export it", abi.CapPoll)
	}
	if m.Has(abi.CapJobs) && (m.Kind != abi.KindScheduler || !has(abi.ExportJobs)) {
		bad("capability %q is for scheduler plugins that export %q", abi.CapJobs, abi.ExportJobs)
	}
	if m.Has(abi.CapAttachments) && (m.Kind != abi.KindPlatform || !has(abi.ExportFetch)) {
		bad("capability %q is for platform plugins that export %q", abi.CapAttachments, abi.ExportFetch)
	}
	if m.Has(abi.CapButtons) && m.Kind != abi.KindPlatform {
		bad("capability %q is for platform plugins", abi.CapButtons)
	}
	for _, p := range m.Egress {
		if err := egress.ValidatePattern(p); err != nil {
			bad("%v", err)
		}
	}
	exports := []string{abi.ExportConfigure, abi.ExportSend, abi.ExportWebhook, abi.ExportPoll, abi.ExportTick, abi.ExportJobs, abi.ExportFetch}
	for i, s := range m.EgressScopes {
		if err := egress.ValidatePattern(s.Host); err != nil {
			bad("egress_scopes[%d]: %v", i, err)
		}
		if len(s.Exports) == 0 {
			bad("egress_scopes[%d] (%s): exports is empty; name the exports that may use it", i, s.Label())
		}
		for _, e := range s.Exports {
			if !slices.Contains(exports, e) {
				bad("egress_scopes[%d] (%s): unknown export %q (want one of %s)", i, s.Label(), e, strings.Join(exports, ", "))
			}
		}
		for _, meth := range s.Methods {
			if meth == "" || meth != strings.ToUpper(meth) || strings.ContainsAny(meth, " /") {
				bad("egress_scopes[%d] (%s): method %q: want an upper-case HTTP method", i, s.Label(), meth)
			}
		}
		for _, pat := range s.Paths {
			if _, err := path.Match(pat, ""); err != nil || !strings.HasPrefix(pat, "/") {
				bad("egress_scopes[%d] (%s): path %q: want a pattern starting with /", i, s.Label(), pat)
			}
		}
	}
	if len(m.ConfigSchema) > 0 {
		if _, err := parseSchema(m.ConfigSchema); err != nil {
			bad("config_schema: %v", err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid manifest: %w", errors.Join(errs...))
	}
	return nil
}

// schema is the subset of JSON Schema a manifest's config_schema may use: an object with typed
// properties, some required, some marked secret (never echoed by the admin API).
type schema struct {
	Type       string                `json:"type"`
	Properties map[string]propSchema `json:"properties"`
	Required   []string              `json:"required"`
}

type propSchema struct {
	Type        string `json:"type"`
	Secret      bool   `json:"secret"`
	Description string `json:"description"`
}

var schemaTypes = []string{"string", "integer", "number", "boolean", "array", "object"}

func parseSchema(raw json.RawMessage) (*schema, error) {
	var s schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	if s.Type != "object" {
		return nil, fmt.Errorf("type must be \"object\", not %q", s.Type)
	}
	for name, p := range s.Properties {
		if !slices.Contains(schemaTypes, p.Type) {
			return nil, fmt.Errorf("property %q: unknown type %q", name, p.Type)
		}
	}
	for _, r := range s.Required {
		if _, ok := s.Properties[r]; !ok {
			return nil, fmt.Errorf("required property %q is not declared", r)
		}
	}
	return &s, nil
}

// validateConfig checks a profile's configuration against the manifest's schema.
func validateConfig(m *abi.Manifest, cfg json.RawMessage) []string {
	if len(m.ConfigSchema) == 0 {
		return nil
	}
	s, err := parseSchema(m.ConfigSchema)
	if err != nil {
		return []string{"plugin's config_schema is invalid: " + err.Error()}
	}
	var obj map[string]json.RawMessage
	if len(cfg) == 0 {
		cfg = json.RawMessage("{}")
	}
	if err := json.Unmarshal(cfg, &obj); err != nil || obj == nil {
		return []string{"configuration must be a JSON object"}
	}
	var problems []string
	for _, r := range s.Required {
		if v, ok := obj[r]; !ok || string(v) == "null" || string(v) == `""` {
			problems = append(problems, fmt.Sprintf("%s is required", r))
		}
	}
	for name, v := range obj {
		p, ok := s.Properties[name]
		if !ok {
			continue // unknown keys are allowed, as in JSON Schema without additionalProperties
		}
		if !jsonType(v, p.Type) {
			problems = append(problems, fmt.Sprintf("%s must be of type %s", name, p.Type))
		}
	}
	slices.Sort(problems)
	return problems
}

func jsonType(v json.RawMessage, typ string) bool {
	var x any
	if json.Unmarshal(v, &x) != nil {
		return false
	}
	switch typ {
	case "string":
		_, ok := x.(string)
		return ok
	case "number":
		_, ok := x.(float64)
		return ok
	case "integer":
		f, ok := x.(float64)
		return ok && f == float64(int64(f))
	case "boolean":
		_, ok := x.(bool)
		return ok
	case "array":
		_, ok := x.([]any)
		return ok
	case "object":
		_, ok := x.(map[string]any)
		return ok
	}
	return false
}

// UnknownConfigKeys lists the keys of a profile's configuration that the manifest's
// config_schema does not declare (sorted). They are allowed, as in JSON Schema without
// additionalProperties, but most likely a typo, so the host warns about them. A plugin without
// a schema declares nothing to compare with: the answer is nil.
func UnknownConfigKeys(m abi.Manifest, cfg json.RawMessage) []string {
	s, err := parseSchema(m.ConfigSchema)
	if len(m.ConfigSchema) == 0 || err != nil {
		return nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(cfg, &obj) != nil {
		return nil // validateConfig reports it
	}
	var unknown []string
	for k := range obj {
		if _, ok := s.Properties[k]; !ok {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	return unknown
}

// SecretKeys lists the configuration keys the manifest marks secret.
func SecretKeys(m *abi.Manifest) []string {
	s, err := parseSchema(m.ConfigSchema)
	if err != nil || s == nil {
		return nil
	}
	var keys []string
	for name, p := range s.Properties {
		if p.Secret {
			keys = append(keys, name)
		}
	}
	slices.Sort(keys)
	return keys
}
