package session

import (
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

func groupMsg(chat, user string) abi.Source {
	return abi.Source{Platform: "telegram", ChatType: abi.ChatGroup, ChatID: chat, UserID: user}
}

func (e *env) alias(platform, profile, chat, of string) bool {
	e.t.Helper()
	ok, err := e.k.AliasChat(e.ctx, platform, profile, chat, of)
	if err != nil {
		e.t.Fatal(err)
	}
	return ok
}

// A group upgraded to a supergroup: the supergroup's messages continue the group's
// conversations (per participant), and work stamped in the group still delivers there.
func TestChatAliasContinuesTheConversation(t *testing.T) {
	e := newEnv(t, Options{})
	const group, super = "-4001", "-1004001"
	ada, bob := groupMsg(group, "111"), groupMsg(group, "222")
	first := e.resolve(ada)
	e.resolve(bob)
	work := e.stamp(ada) // a background process started in the group

	if !e.alias("telegram", "", super, group) {
		t.Fatal("alias not recorded")
	}
	adaNow := groupMsg(super, "111")
	if got, want := e.key(adaNow), e.key(ada); got != want {
		t.Fatalf("supergroup key %s, want the group's %s", got, want)
	}
	r := e.resolve(adaNow)
	if r.SessionID != first.SessionID || r.Created {
		t.Fatalf("supergroup message resolved %+v, want the group's session %s", r, first.SessionID)
	}
	if v := e.deliver(work, "done"); v.Kind != Deliver || v.SessionID != first.SessionID {
		t.Fatalf("verdict for the group's process %+v", v)
	}
	if err := e.k.VerifyRoute(work, work.Route); err != nil {
		t.Fatal(err)
	}
	// Work started after the upgrade is stamped with the same key, routed to the supergroup.
	later := e.stamp(adaNow)
	if later.Key != work.Key || later.Route.ChatID != super {
		t.Fatalf("stamp after the upgrade %+v", later)
	}
	if err := e.k.VerifyRoute(later, later.Route); err != nil {
		t.Fatal(err)
	}
	if to, ok := e.k.ChatAlias("telegram", "", super); !ok || to != group {
		t.Fatalf("ChatAlias %q %v", to, ok)
	}
	if _, ok := e.k.ChatAlias("telegram", "", group); ok {
		t.Fatal("the old chat has an alias")
	}

	// Recorded durably: a restarted kernel keys the supergroup the same way.
	k2, err := Open(e.ctx, e.db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Close()
	if got, _ := k2.Key(adaNow); got != work.Key {
		t.Fatalf("after reopen: %s, want %s", got, work.Key)
	}
}

func TestChatAliasRefusals(t *testing.T) {
	e := newEnv(t, Options{})
	const group, super, other = "-4002", "-1004002", "-1004003"
	e.resolve(groupMsg(group, "111"))

	// A supergroup that already has a conversation of its own is not taken over: the host
	// learned of the migration late.
	e.resolve(abi.Source{Platform: "telegram", ChatType: abi.ChatForum, ChatID: other, ThreadID: "7"})
	if e.alias("telegram", "", other, group) {
		t.Fatal("aliased a chat with its own conversations")
	}
	if k := e.key(groupMsg(other, "111")); k != "agent:main:telegram:group:"+other+":111" {
		t.Fatalf("key %s", k)
	}

	if !e.alias("telegram", "", super, group) {
		t.Fatal("alias not recorded")
	}
	// The first alias wins; recording it again is a no-op; a cycle is refused.
	if e.alias("telegram", "", super, group) || e.alias("telegram", "", super, "-4999") || e.alias("telegram", "", group, super) {
		t.Fatal("a second alias was recorded")
	}
	if e.key(groupMsg(super, "1")) != e.key(groupMsg(group, "1")) {
		t.Fatal("alias lost")
	}
	// Chains collapse to the first chat.
	if !e.alias("telegram", "", "-1009", super) || e.key(groupMsg("-1009", "1")) != e.key(groupMsg(group, "1")) {
		t.Fatal("chain not collapsed")
	}
	// Aliases belong to a platform and a profile (key namespace).
	if e.key(abi.Source{Platform: "telegram", Profile: "work", ChatType: abi.ChatGroup, ChatID: super, UserID: "1"}) !=
		"agent:work:telegram:group:"+super+":1" {
		t.Fatal("alias leaked into another profile")
	}
	if e.key(abi.Source{Platform: "other", ChatType: abi.ChatGroup, ChatID: super, UserID: "1"}) != "agent:main:other:group:"+super+":1" {
		t.Fatal("alias leaked into another platform")
	}
	if _, err := e.k.AliasChat(e.ctx, "telegram", "", "", group); err == nil {
		t.Fatal("empty chat accepted")
	}
}

// chatInUse matches whole chat ids only: -100 is not in use because -1001 is.
func TestChatInUseMatchesWholeIDs(t *testing.T) {
	e := newEnv(t, Options{})
	e.resolve(groupMsg("-1001", "5"))
	for chat, want := range map[string]bool{"-1001": true, "-100": false, "-10011": false, "5": false} {
		got, err := e.k.chatInUse(e.ctx, abi.Source{Platform: "telegram", ChatID: chat})
		if err != nil || got != want {
			t.Errorf("chat %s: in use %v (%v), want %v", chat, got, err, want)
		}
	}
	e.resolve(dm("77"))
	e.resolve(abi.Source{Platform: "telegram", ChatType: abi.ChatThread, ChatID: "-55", ThreadID: "9"})
	for _, chat := range []string{"77", "-55"} {
		if got, _ := e.k.chatInUse(e.ctx, abi.Source{Platform: "telegram", ChatID: chat}); !got {
			t.Errorf("chat %s not in use", chat)
		}
	}
}

// Two hosts on one PostgreSQL database: an alias one host records reaches the other's keys
// within aliasRefresh, and the other host refuses to record a conflicting one.
func TestChatAliasSeenByAnotherHost(t *testing.T) {
	b := storetest.Postgres(t)
	ea, eb := newEnvOn(t, b, Options{}), newEnvOn(t, b, Options{})
	ea.t, eb.t = t, t
	const group, super = "-4002", "-1004002"
	if got, want := eb.key(groupMsg(super, "111")), eb.key(groupMsg(group, "111")); got == want {
		t.Fatal("keyed as the group before any alias")
	}
	if !ea.alias("telegram", "", super, group) {
		t.Fatal("alias not recorded")
	}
	want := ea.key(groupMsg(group, "111"))
	waitFor(t, "the other host to key the supergroup as the group", func() bool {
		k, _ := eb.k.Key(groupMsg(super, "111"))
		return k == want
	})
	if eb.alias("telegram", "", super, "-9999") {
		t.Fatal("the other host recorded a second alias of the supergroup")
	}
}
