package session

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
)

// ErrMalformedKey is returned (wrapped) by ParseKey for a string that is not a session key, and by
// BuildKey for a source that cannot be keyed.
var ErrMalformedKey = errors.New("session: malformed session key")

// KeyOptions decide the shape of session keys. The zero value is the default policy: group chats
// get one session per participant, threads are shared by everyone in them, Slack keys carry the
// workspace (team) id, and the default profile is called "main".
type KeyOptions struct {
	// SharedGroups makes a group, channel or forum chat outside a thread one shared session
	// instead of one session per participant (Python: group_sessions_per_user=false).
	SharedGroups bool
	// ThreadsPerUser gives each participant of a thread their own session (Python:
	// thread_sessions_per_user=true).
	ThreadsPerUser bool
	// ScopedPlatforms lists the platforms whose keys carry Source.ScopeID (the workspace) before
	// the chat id; such a source must have a scope. Nil means {"slack"}; an empty non-nil slice
	// means none.
	ScopedPlatforms []string
	// DefaultProfile names the host's default profile, whose keys use the historical namespace
	// agent:main. Empty means "main". A profile literally named "main" that is not the default is
	// keyed agent:main~ so it never shares the default's sessions.
	DefaultProfile string
}

// Key is a session key taken apart. Profile is the profile name ("" never appears in a parsed
// key: the default namespace parses to the default profile's name).
type Key struct {
	Profile  string
	Platform string
	ChatType string // abi.ChatDM, ChatGroup, ChatChannel, ChatThread or ChatForum
	Scope    string // workspace id, only for ScopedPlatforms
	ChatID   string // for a DM keyed by its sender (no chat id), the sender's id
	ThreadID string
	UserID   string // the participant, when sessions are per user
}

// Source returns the routing fields of k as an abi.Source; BuildKey(k.Source(), opt) gives back
// the key k was parsed from.
func (k Key) Source() abi.Source {
	return abi.Source{Platform: k.Platform, Profile: k.Profile, ChatType: k.ChatType,
		ScopeID: k.Scope, ChatID: k.ChatID, ThreadID: k.ThreadID, UserID: k.UserID}
}

const keyPrefix = "agent"

func (o KeyOptions) defaultProfile() string {
	if o.DefaultProfile == "" {
		return "main"
	}
	return o.DefaultProfile
}

func (o KeyOptions) scoped(platform string) bool {
	if o.ScopedPlatforms == nil {
		return platform == "slack"
	}
	for _, p := range o.ScopedPlatforms {
		if p == platform {
			return true
		}
	}
	return false
}

// namespace returns the second key component for profile.
func (o KeyOptions) namespace(profile string) (string, error) {
	if profile == "" || profile == o.defaultProfile() {
		return "main", nil
	}
	if !validName(profile) {
		return "", fmt.Errorf("%w: invalid profile name %q", ErrMalformedKey, profile)
	}
	if profile == "main" {
		return "main~", nil
	}
	return profile, nil
}

// validName accepts profile and platform names: [a-z0-9][a-z0-9_-]{0,63}.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

func validChatType(t string) bool {
	switch t {
	case abi.ChatDM, abi.ChatGroup, abi.ChatChannel, abi.ChatThread, abi.ChatForum:
		return true
	}
	return false
}

// escapeComponent makes an id safe as one key component: ':' and '%' are percent-encoded, so
// ids without them (all Telegram, Slack and Yuanbao ids) appear byte for byte.
func escapeComponent(s string) string {
	if !strings.ContainsAny(s, ":%") {
		return s
	}
	return strings.NewReplacer("%", "%25", ":", "%3A").Replace(s)
}

func unescapeComponent(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "%25"):
			b.WriteByte('%')
		case strings.HasPrefix(s[i:], "%3A"):
			b.WriteByte(':')
		default:
			return "", fmt.Errorf("%w: bad escape in %q", ErrMalformedKey, s)
		}
		i += 2
	}
	return b.String(), nil
}

// BuildKey is the one constructor of session keys:
//
//	agent:<ns>:<platform>:<chat_type>[:<scope>]:<chat_id>[:<thread_id>][:<user_id>]
//
// ns is "main" for the default profile, "main~" for a non-default profile literally named
// "main", the profile name otherwise. A DM is keyed by its chat id, or by the sender when it has
// none; the thread follows. Other chats put the thread before the participant, who is added
// when sessions are per user: outside a thread unless SharedGroups, inside one only with
// ThreadsPerUser. A "thread" chat must carry a thread id; other non-DM chats a chat id.
func BuildKey(src abi.Source, opt KeyOptions) (string, error) {
	ns, err := opt.namespace(src.Profile)
	if err != nil {
		return "", err
	}
	if !validName(src.Platform) {
		return "", fmt.Errorf("%w: invalid platform %q", ErrMalformedKey, src.Platform)
	}
	if !validChatType(src.ChatType) {
		return "", fmt.Errorf("%w: invalid chat type %q", ErrMalformedKey, src.ChatType)
	}
	var b strings.Builder
	b.Grow(len(ns) + len(src.Platform) + len(src.ScopeID) + len(src.ChatID) + len(src.ThreadID) + len(src.UserID) + 24)
	b.WriteString(keyPrefix)
	b.WriteByte(':')
	b.WriteString(ns)
	b.WriteByte(':')
	b.WriteString(src.Platform)
	b.WriteByte(':')
	b.WriteString(src.ChatType)
	add := func(s string) {
		b.WriteByte(':')
		b.WriteString(escapeComponent(s))
	}
	if opt.scoped(src.Platform) {
		if src.ScopeID == "" {
			return "", fmt.Errorf("%w: %s source without scope_id", ErrMalformedKey, src.Platform)
		}
		add(src.ScopeID)
	}
	if src.ChatType == abi.ChatDM {
		switch {
		case src.ChatID != "":
			add(src.ChatID)
		case src.UserID != "":
			add(src.UserID) // no chat id: key by the sender so such DMs do not share a session
		default:
			return "", fmt.Errorf("%w: dm source without chat_id or user_id", ErrMalformedKey)
		}
		if src.ThreadID != "" {
			add(src.ThreadID)
		}
		return b.String(), nil
	}
	if src.ChatID == "" {
		return "", fmt.Errorf("%w: %s source without chat_id", ErrMalformedKey, src.ChatType)
	}
	if src.ChatType == abi.ChatThread && src.ThreadID == "" {
		return "", fmt.Errorf("%w: thread source without thread_id", ErrMalformedKey)
	}
	add(src.ChatID)
	if src.ThreadID != "" {
		add(src.ThreadID)
	}
	perUser := (src.ThreadID == "" && !opt.SharedGroups) || (src.ThreadID != "" && opt.ThreadsPerUser)
	if perUser && src.UserID != "" {
		add(src.UserID)
	}
	return b.String(), nil
}

// ParseKey is the one parser of session keys. It accepts exactly the strings BuildKey produces
// under opt (it rebuilds the key from the parts and compares), so a key built under other
// options, a raw id or a bad namespace is an error wrapping ErrMalformedKey.
//
// One shape is ambiguous by construction: with per-user groups and shared threads (the
// defaults) a group/channel/forum key with one component after the chat id is either a
// participant (no thread) or a shared thread. It parses as the participant, as the Python
// gateway's parser does ("a group's sixth part may be a user"); the origin stored with the
// session, not the key, is the authority for routing a reply.
func ParseKey(s string, opt KeyOptions) (Key, error) {
	bad := func(why string) (Key, error) {
		return Key{}, fmt.Errorf("%w: %q: %s", ErrMalformedKey, s, why)
	}
	parts := strings.Split(s, ":")
	if len(parts) < 5 || parts[0] != keyPrefix {
		return bad("want agent:<profile>:<platform>:<chat_type>:…")
	}
	var k Key
	switch ns := parts[1]; {
	case ns == "main":
		k.Profile = opt.defaultProfile()
	case ns == "main~":
		k.Profile = "main"
	case validName(ns):
		k.Profile = ns
	default:
		return bad("invalid namespace")
	}
	k.Platform, k.ChatType = parts[2], parts[3]
	if !validName(k.Platform) {
		return bad("invalid platform")
	}
	if !validChatType(k.ChatType) {
		return bad("invalid chat type")
	}
	rest := parts[4:]
	for i, p := range rest {
		if p == "" {
			return bad("empty component")
		}
		u, err := unescapeComponent(p)
		if err != nil {
			return Key{}, err
		}
		rest[i] = u
	}
	if opt.scoped(k.Platform) {
		k.Scope, rest = rest[0], rest[1:]
		if len(rest) == 0 {
			return bad("no chat id")
		}
	}
	k.ChatID, rest = rest[0], rest[1:]
	switch {
	case k.ChatType == abi.ChatDM && len(rest) <= 1:
		if len(rest) == 1 {
			k.ThreadID = rest[0]
		}
	case k.ChatType == abi.ChatThread && len(rest) >= 1 && len(rest) <= 2:
		k.ThreadID = rest[0]
		if len(rest) == 2 {
			k.UserID = rest[1]
		}
	case k.ChatType != abi.ChatDM && k.ChatType != abi.ChatThread && len(rest) <= 2:
		switch {
		case len(rest) == 2:
			k.ThreadID, k.UserID = rest[0], rest[1]
		case len(rest) == 1 && opt.SharedGroups:
			k.ThreadID = rest[0]
		case len(rest) == 1:
			k.UserID = rest[0]
		}
	default:
		return bad("wrong number of components")
	}
	if again, err := BuildKey(k.Source(), opt); err != nil || again != s {
		return bad("not a canonical key under these options")
	}
	return k, nil
}

// profileMatches reports whether key is in the namespace of profile, without allocating. An
// empty profile matches any key.
func (o KeyOptions) profileMatches(key, profile string) bool {
	if profile == "" {
		return true
	}
	ns := profile
	switch {
	case profile == o.defaultProfile():
		ns = "main"
	case profile == "main":
		ns = "main~"
	}
	return len(key) > len(keyPrefix)+len(ns)+2 && key[:len(keyPrefix)] == keyPrefix &&
		key[len(keyPrefix)] == ':' && key[len(keyPrefix)+1:len(keyPrefix)+1+len(ns)] == ns &&
		key[len(keyPrefix)+1+len(ns)] == ':'
}
