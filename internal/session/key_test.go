package session

import (
	"errors"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
)

func TestBuildKey(t *testing.T) {
	perUserThreads := KeyOptions{ThreadsPerUser: true}
	shared := KeyOptions{SharedGroups: true}
	otherDefault := KeyOptions{DefaultProfile: "default"}
	cases := []struct {
		name string
		src  abi.Source
		opt  KeyOptions
		want string
	}{
		{"telegram dm", abi.Source{Platform: "telegram", ChatType: "dm", ChatID: "123", UserID: "123"}, KeyOptions{}, "agent:main:telegram:dm:123"},
		{"default profile named main", abi.Source{Platform: "telegram", Profile: "main", ChatType: "dm", ChatID: "123"}, KeyOptions{}, "agent:main:telegram:dm:123"},
		{"dm topic", abi.Source{Platform: "telegram", ChatType: "dm", ChatID: "123", ThreadID: "42"}, KeyOptions{}, "agent:main:telegram:dm:123:42"},
		{"named profile (24)", abi.Source{Platform: "telegram", Profile: "work", ChatType: "dm", ChatID: "123"}, KeyOptions{}, "agent:work:telegram:dm:123"},
		{"profile literally main is not the default (24)", abi.Source{Platform: "telegram", Profile: "main", ChatType: "dm", ChatID: "123"}, otherDefault, "agent:main~:telegram:dm:123"},
		{"the default profile under another name", abi.Source{Platform: "telegram", Profile: "default", ChatType: "dm", ChatID: "123"}, otherDefault, "agent:main:telegram:dm:123"},
		{"dm without chat id keyed by user (25)", abi.Source{Platform: "yuanbao", ChatType: "dm", UserID: "u7"}, KeyOptions{}, "agent:main:yuanbao:dm:u7"},
		{"dm without chat id, with thread", abi.Source{Platform: "yuanbao", ChatType: "dm", UserID: "u7", ThreadID: "t"}, KeyOptions{}, "agent:main:yuanbao:dm:u7:t"},
		{"group per user (25)", abi.Source{Platform: "discord", ChatType: "group", ChatID: "chan1", UserID: "user9"}, KeyOptions{}, "agent:main:discord:group:chan1:user9"},
		{"group thread shared (25)", abi.Source{Platform: "telegram", ChatType: "group", ChatID: "-100", ThreadID: "42", UserID: "u"}, KeyOptions{}, "agent:main:telegram:group:-100:42"},
		{"thread chat", abi.Source{Platform: "telegram", ChatType: "thread", ChatID: "100", ThreadID: "42", UserID: "u"}, KeyOptions{}, "agent:main:telegram:thread:100:42"},
		{"thread per user", abi.Source{Platform: "telegram", ChatType: "thread", ChatID: "100", ThreadID: "42", UserID: "u"}, perUserThreads, "agent:main:telegram:thread:100:42:u"},
		{"shared groups", abi.Source{Platform: "discord", ChatType: "group", ChatID: "chan1", UserID: "user9"}, shared, "agent:main:discord:group:chan1"},
		{"group without user", abi.Source{Platform: "discord", ChatType: "channel", ChatID: "c"}, KeyOptions{}, "agent:main:discord:channel:c"},
		{"slack scope before chat", abi.Source{Platform: "slack", Profile: "work", ChatType: "group", ScopeID: "T01", ChatID: "C42", ThreadID: "1700000000.1234", UserID: "U1"}, KeyOptions{}, "agent:work:slack:group:T01:C42:1700000000.1234"},
		{"slack dm", abi.Source{Platform: "slack", ChatType: "dm", ScopeID: "T01", ChatID: "D9"}, KeyOptions{}, "agent:main:slack:dm:T01:D9"},
		{"forum topic", abi.Source{Platform: "telegram", ChatType: "forum", ChatID: "-1001", ThreadID: "7", UserID: "u"}, KeyOptions{}, "agent:main:telegram:forum:-1001:7"},
		{"colon escaped", abi.Source{Platform: "matrix", ChatType: "group", ChatID: "!room:hs.org", UserID: "@a:hs.org"}, KeyOptions{}, "agent:main:matrix:group:!room%3Ahs.org:@a%3Ahs.org"},
		{"percent escaped", abi.Source{Platform: "x", ChatType: "dm", ChatID: "50%"}, KeyOptions{}, "agent:main:x:dm:50%25"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := BuildKey(c.src, c.opt)
			if err != nil || got != c.want {
				t.Fatalf("BuildKey = %q, %v; want %q", got, err, c.want)
			}
			k, err := ParseKey(got, c.opt)
			if err != nil {
				t.Fatalf("ParseKey(%q): %v", got, err)
			}
			again, err := BuildKey(k.Source(), c.opt)
			if err != nil || again != got {
				t.Fatalf("round trip: %q, %v", again, err)
			}
		})
	}
}

func TestBuildKeyRejects(t *testing.T) {
	for name, src := range map[string]abi.Source{
		"no platform":          {ChatType: "dm", ChatID: "1"},
		"bad platform":         {Platform: "Tele gram", ChatType: "dm", ChatID: "1"},
		"bad chat type":        {Platform: "telegram", ChatType: "supergroup", ChatID: "1"},
		"dm with nothing":      {Platform: "telegram", ChatType: "dm"},
		"group without chat":   {Platform: "telegram", ChatType: "group", UserID: "u"},
		"thread without id":    {Platform: "telegram", ChatType: "thread", ChatID: "1"},
		"slack without scope":  {Platform: "slack", ChatType: "dm", ChatID: "D1"},
		"bad profile":          {Platform: "telegram", Profile: "Bad_NS", ChatType: "dm", ChatID: "1"},
		"profile with a tilde": {Platform: "telegram", Profile: "main~", ChatType: "dm", ChatID: "1"},
	} {
		if k, err := BuildKey(src, KeyOptions{}); !errors.Is(err, ErrMalformedKey) {
			t.Errorf("%s: BuildKey = %q, %v; want ErrMalformedKey", name, k, err)
		}
	}
}

// Scenario 23: _parse_session_key behaviour.
func TestParseKey(t *testing.T) {
	k, err := ParseKey("agent:main:discord:group:c:t", KeyOptions{})
	if err != nil || k.ThreadID != "" || k.ChatID != "c" || k.UserID != "t" || k.Profile != "main" {
		t.Fatalf("group: %+v, %v; want no thread, user t", k, err)
	}
	k, err = ParseKey("agent:work:telegram:thread:100:42", KeyOptions{})
	if err != nil || k.Profile != "work" || k.ThreadID != "42" || k.ChatID != "100" || k.ChatType != "thread" || k.Platform != "telegram" {
		t.Fatalf("thread: %+v, %v", k, err)
	}
	k, err = ParseKey("agent:main:telegram:dm:123:42", KeyOptions{})
	if err != nil || k.ChatID != "123" || k.ThreadID != "42" {
		t.Fatalf("dm topic: %+v, %v", k, err)
	}
	k, err = ParseKey("agent:main~:telegram:dm:1", KeyOptions{DefaultProfile: "default"})
	if err != nil || k.Profile != "main" {
		t.Fatalf("main~: %+v, %v", k, err)
	}
	k, err = ParseKey("agent:main:slack:group:T01:C42:1700000000.1234", KeyOptions{SharedGroups: true})
	if err != nil || k.Scope != "T01" || k.ChatID != "C42" || k.ThreadID != "1700000000.1234" {
		t.Fatalf("slack shared: %+v, %v", k, err)
	}
	for _, bad := range []string{
		"agent:Bad_NS:telegram:dm:1",      // bad namespace
		"20261129_080512_ab12cd34",        // a raw session id
		"agent:main:telegram:dm",          // fewer than 5 parts
		"agent:main:telegram:chat:1",      // unknown chat type
		"agent:main:telegram:dm:1:2:3",    // too many parts for a dm
		"agent:main:telegram:group:1:2:3", // thread+user, but threads are shared
		"agent:main:telegram:dm::1",       // empty component
		"agent:main:x:dm:50%",             // bad escape
		"agent:main~:telegram:dm:1",       // main~ while the default is main: never built
		"hermes:main:telegram:dm:1",       // wrong prefix
		"agent:main:slack:dm:D1",          // slack without scope
		"",
	} {
		if k, err := ParseKey(bad, KeyOptions{}); !errors.Is(err, ErrMalformedKey) {
			t.Errorf("ParseKey(%q) = %+v, %v; want ErrMalformedKey", bad, k, err)
		}
	}
}

func TestSessionID(t *testing.T) {
	now := epoch
	id := NewSessionID(now)
	if len(id) != 24 || id[:16] != "20261129_080512_" || !ValidSessionID(id) {
		t.Fatalf("id %q", id)
	}
	if NewSessionID(now) == id {
		t.Fatal("two ids collided")
	}
	for _, bad := range []string{"", "../20261129_080512_ab", "20261129-080512_ab12cd34", "20261129_080512_AB12CD34", "20261129_080512_ab12/d34", "agent:main:telegram:dm:1"} {
		if ValidSessionID(bad) {
			t.Errorf("ValidSessionID(%q) = true", bad)
		}
	}
}

func TestProfileMatches(t *testing.T) {
	o := KeyOptions{}
	for _, c := range []struct {
		key, profile string
		want         bool
	}{
		{"agent:main:telegram:dm:1", "", true},
		{"agent:main:telegram:dm:1", "main", true},
		{"agent:work:telegram:dm:1", "work", true},
		{"agent:work:telegram:dm:1", "main", false},
		{"agent:main:telegram:dm:1", "work", false},
		{"agent:workshop:telegram:dm:1", "work", false},
	} {
		if got := o.profileMatches(c.key, c.profile); got != c.want {
			t.Errorf("profileMatches(%q, %q) = %v", c.key, c.profile, got)
		}
	}
	if !(KeyOptions{DefaultProfile: "d"}).profileMatches("agent:main~:t:dm:1", "main") {
		t.Error("main~")
	}
}
