package config

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/hermes-host/hermes-host/internal/store"
)

// This file checks a configuration file's YAML against the shape of Config before it is decoded,
// so that each problem names its key path and says what is wanted in the configuration's words
// ("agent.max_tokens: want an integer, got \"lots\""), where the decoder names Go types
// ("cannot unmarshal !!str `lots` into int"), and so that every problem is reported, not the
// first one.

// Error is every problem found in a configuration, each a line that starts with its key path
// (or "line N" for a document that is not YAML).
type Error struct {
	// File is where the configuration came from ("" for the defaults and flags alone).
	File string
	// Problems are the problems, in the order of the file, then the values out of range.
	Problems []string
}

// Error joins the problems on one line, as the host logs a refused configuration.
func (e *Error) Error() string {
	at := "config"
	if e.File != "" {
		at = "config " + e.File
	}
	return at + ": " + strings.Join(e.Problems, "; ")
}

// errorOf is nil for no problems, else an *Error with them.
func errorOf(file string, problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	return &Error{File: file, Problems: problems}
}

// lineOf is where a problem of the file's says it is ("… (line N)").
var lineOf = regexp.MustCompile(`\(line (\d+)\)$`)

// byLine orders problems by the line they name, in the file's order.
func byLine(problems []string) []string {
	line := func(p string) int {
		if m := lineOf.FindStringSubmatch(p); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
		return 0
	}
	sort.SliceStable(problems, func(i, j int) bool { return line(problems[i]) < line(problems[j]) })
	return problems
}

var (
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	durationType    = reflect.TypeFor[Duration]()
)

// checkShape reports every key of the document n that Config has no place for, and every
// value of a type its key does not take, each with its key path and line.
func checkShape(n *yaml.Node) []string {
	var out []string
	add := func(path string, n *yaml.Node, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s: %s (line %d)", path, fmt.Sprintf(format, args...), n.Line))
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	walkShape("", n, reflect.TypeFor[Config](), add)
	return out
}

// walkShape checks node n, at key path, against Go type t.
func walkShape(path string, n *yaml.Node, t reflect.Type, add func(string, *yaml.Node, string, ...any)) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // an empty value keeps the zero value (or the default)
	}
	shown := path
	if shown == "" {
		shown = "(the document)"
	}
	if t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(unmarshalerType) {
		if n.Kind != yaml.ScalarNode {
			add(shown, n, "want %s, got %s", want(t), got(n))
			return
		}
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			if t == durationType {
				add(shown, n, "%q is not a duration (like 10s or 2m)", n.Value)
			} else {
				add(shown, n, "%v", err)
			}
		}
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		walkShape(path, n, t.Elem(), add)
	case reflect.Interface:
		// any value (a plugin profile's settings: the plugin's schema checks them at load)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			add(shown, n, "want a mapping of keys (%s), got %s", strings.Join(fieldNames(t), ", "), got(n))
			return
		}
		fields := map[string]reflect.StructField{}
		for _, f := range reflect.VisibleFields(t) {
			if name := yamlName(f); name != "" {
				fields[name] = f
			}
		}
		eachPair(path, n, add, func(key string, k, v *yaml.Node) {
			f, ok := fields[key]
			if !ok {
				if s := suggest(key, fieldNames(t)); s != "" {
					add(join(path, key), k, "unknown key (did you mean %s?)", s)
				} else {
					add(join(path, key), k, "unknown key (known here: %s)", strings.Join(fieldNames(t), ", "))
				}
				return
			}
			walkShape(join(path, key), v, f.Type, add)
		})
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			add(shown, n, "want a mapping, got %s", got(n))
			return
		}
		eachPair(path, n, add, func(key string, _, v *yaml.Node) { walkShape(join(path, key), v, t.Elem(), add) })
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			add(shown, n, "want a list, got %s", got(n))
			return
		}
		for i, item := range n.Content {
			walkShape(fmt.Sprintf("%s[%d]", shown, i), item, t.Elem(), add)
		}
	default:
		if n.Kind != yaml.ScalarNode {
			add(shown, n, "want %s, got %s", want(t), got(n))
			return
		}
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			add(shown, n, "want %s, got %q", want(t), n.Value)
		}
	}
}

// eachPair calls fn for each key and value of the mapping n, reporting keys given twice (the
// decoder refuses them) and keys that are not scalars.
func eachPair(path string, n *yaml.Node, add func(string, *yaml.Node, string, ...any), fn func(key string, k, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			add(join(path, "?"), k, "a key must be a plain name, got %s", got(k))
			continue
		}
		if k.Value == "<<" { // a merge key: its mapping's keys are checked where they are written
			continue
		}
		if line, twice := seen[k.Value]; twice {
			add(join(path, k.Value), k, "given twice (first on line %d)", line)
			continue
		}
		seen[k.Value] = k.Line
		fn(k.Value, k, v)
	}
}

// join appends key to a key path; a key holding '.' or spaces (a host:port, a chat name) is
// quoted so the path stays readable.
func join(path, key string) string {
	if strings.ContainsAny(key, ". \t\"[]") {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// yamlName is the key of a struct field in YAML ("" for a field not read from YAML).
func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	if name == "" {
		return strings.ToLower(f.Name)
	}
	return name
}

// fieldNames are the YAML keys of struct type t, in their order.
func fieldNames(t reflect.Type) []string {
	var out []string
	for _, f := range reflect.VisibleFields(t) {
		if name := yamlName(f); name != "" {
			out = append(out, name)
		}
	}
	return out
}

// want says what a value of type t is written as.
func want(t reflect.Type) string {
	if t == durationType {
		return "a duration (like 10s or 2m)"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	}
	return "a " + t.Kind().String()
}

// got says what node n is, for an error.
func got(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "nothing"
}

// suggest returns the name among names closest to key when it is close enough to be a typo
// (an edit distance of at most a third of its length, and at most 3), else "".
func suggest(key string, names []string) string {
	best, bestD := "", 1<<30
	for _, name := range names {
		if d := distance(strings.ToLower(key), name); d < bestD {
			best, bestD = name, d
		}
	}
	if bestD <= min(3, max(1, len(key)/3)) {
		return best
	}
	return ""
}

// distance is the Levenshtein distance of a and b (an adjacent swap counts as one edit).
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range rb {
		d[0][j+1] = j + 1
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// secretWords are the words of a key whose value is a secret (bot_token, signing_secret,
// api_key, password).
var secretWords = map[string]bool{"token": true, "secret": true, "password": true, "passwd": true, "key": true,
	"apikey": true, "credentials": true, "authorization": true}

// Redacted returns the configuration as YAML, as it is in effect (the defaults, the file and the
// overrides merged), with its secrets left out: the value of every key named like a secret
// (tokens, keys, secrets, passwords), every header value and the store's password are
// "[redacted]", and where a value holds what a ${NAME} the file referenced expanded to, the
// reference is shown instead of the value.
func (c *Config) Redacted() ([]byte, error) {
	var n yaml.Node
	if err := n.Encode(c); err != nil {
		return nil, err
	}
	env := strings.NewReplacer(c.envPairs()...)
	redactNode(&n, "", false, env)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, err
	}
	err := enc.Close()
	return b.Bytes(), err
}

// envPairs are the values of the variables the file referenced and their ${NAME}s, longest
// value first, for a strings.Replacer.
func (c *Config) envPairs() []string {
	type ref struct{ name, value string }
	var refs []ref
	for _, name := range c.EnvRefs {
		if v := os.Getenv(name); len(v) >= 3 { // shorter values ("1", "on") would match everywhere
			refs = append(refs, ref{name, v})
		}
	}
	sort.SliceStable(refs, func(i, j int) bool { return len(refs[i].value) > len(refs[j].value) })
	var out []string
	for _, r := range refs {
		out = append(out, r.value, "${"+r.name+"}")
	}
	return out
}

// redactNode redacts the values under n (at key), all of them when secret; null values are
// left out.
func redactNode(n *yaml.Node, key string, secret bool, env *strings.Replacer) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			redactNode(c, key, secret, env)
		}
	case yaml.MappingNode:
		var kept []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
				continue
			}
			redactNode(v, k.Value, secret || secretKey(k.Value) || key == "headers", env)
			kept = append(kept, k, v)
		}
		n.Content = kept
	case yaml.ScalarNode:
		switch {
		case n.Value == "" || n.ShortTag() != "!!str":
		case secret:
			n.Value, n.Style = "[redacted]", 0
		case key == "store":
			n.Value = env.Replace(store.Redact(n.Value))
		default:
			n.Value = env.Replace(n.Value)
		}
	}
}

// secretKey reports whether a key names a secret: one of its words (split at '_' and '-') is
// one of secretWords.
func secretKey(key string) bool {
	for _, w := range strings.FieldsFunc(strings.ToLower(key), func(r rune) bool { return r == '_' || r == '-' }) {
		if secretWords[w] {
			return true
		}
	}
	return false
}
