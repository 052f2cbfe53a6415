package hostcall

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// A plugin writes what people and the bot said, never the host's own system or notification
// entries (which the agent would take as trusted).
func TestPluginRoles(t *testing.T) {
	for in, want := range map[string]string{"": "user", "user": "user", "assistant": "assistant"} {
		if got, err := role(in); err != nil || got != want {
			t.Errorf("role(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"system", "notification", "tool", "User"} {
		if _, err := role(in); abi.CodeOf(err) != abi.CodeBadRequest {
			t.Errorf("role(%q): %v; want bad_request", in, err)
		}
	}
}

// A scheduler's target written as platform:chat[:thread] has no chat type; the host uses the
// type of the sessions it has for that chat (so a seed lands in the key the users' replies use),
// and "dm" for a chat it has not seen.
func TestTargetChatTypeFromKnownSessions(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "h.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	k, err := session.Open(context.Background(), db, session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []abi.Source{
		{Platform: "telegram", Profile: "main", ChatType: abi.ChatForum, ChatID: "-1001", ThreadID: "42", UserID: "111"},
		{Platform: "telegram", Profile: "main", ChatType: abi.ChatGroup, ChatID: "-2002", UserID: "111"}, // per-user key
	} {
		if _, err := k.Resolve(context.Background(), src, session.ResolveOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s := Sender{Kernel: k}
	for target, want := range map[abi.Source]string{
		{Platform: "telegram", Profile: "main", ChatID: "-1001", ThreadID: "42"}: abi.ChatForum,
		{Platform: "telegram", Profile: "main", ChatID: "-1001"}:                 abi.ChatForum,
		{Platform: "telegram", Profile: "main", ChatID: "-2002"}:                 abi.ChatGroup,
		{Platform: "telegram", Profile: "main", ChatID: "-200"}:                  abi.ChatDM, // a prefix of -2002 is another chat
		{Platform: "telegram", Profile: "main", ChatID: "555"}:                   abi.ChatDM,
	} {
		if got := s.chatType(context.Background(), target); got != want {
			t.Errorf("%+v: %s, want %s", target, got, want)
		}
	}
}
