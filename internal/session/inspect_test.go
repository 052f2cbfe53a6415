package session

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

func TestTranscriptBranchRedactResume(t *testing.T) {
	e := newEnv(t, Options{})
	e.t = t
	src := dm("tr")
	r := e.resolve(src)
	key := r.Key
	e.k.WithBoundary(e.ctx, key, func(b *Boundary) error {
		b.Append(r.SessionID, Message{Text: "hello", PlatformMessageID: "m1"})
		b.Append(r.SessionID, Message{Role: "assistant", Text: "hi"})
		if _, err := b.Append("20200101_000000_00000000", Message{Text: "x"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("append to an unknown session: %v", err)
		}
		return b.SetTitle("first")
	})
	other := e.resolve(dm("tr2"))
	e.k.WithBoundary(e.ctx, key, func(b *Boundary) error {
		if _, err := b.Append(other.SessionID, Message{Text: "x"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("append to another key's session: %v", err)
		}
		return nil
	})
	br := e.r(e.k.Branch(e.ctx, key, "second"))
	bm := e.transcript(br.SessionID)
	if len(bm) != 2 || bm[0].Text != "hello" || bm[0].CopiedFrom == 0 || bm[1].Role != "assistant" {
		t.Fatalf("branch transcript %+v", bm)
	}
	if s := e.session(br.SessionID); s.BranchedFrom != r.SessionID || s.ParentID != r.SessionID || s.CreatedBy != createdBranch {
		t.Fatalf("branch row %+v", s)
	}
	if s := e.session(r.SessionID); s.EndReason != EndSwitch {
		t.Fatalf("original %+v", s)
	}
	// A recalled message is blanked everywhere in this key, and nowhere else.
	e.k.WithBoundary(e.ctx, other.Key, func(b *Boundary) error {
		_, err := b.Append(other.SessionID, Message{Text: "keep", PlatformMessageID: "m1"})
		return err
	})
	ok, err := e.k.Redact(e.ctx, key, "m1")
	if err != nil || !ok {
		t.Fatalf("redact %v %v", ok, err)
	}
	if m := e.transcript(r.SessionID); m[0].Text != "" || !m[0].Redacted {
		t.Fatalf("original not redacted: %+v", m[0])
	}
	if m := e.transcript(br.SessionID); m[0].Text != "" || !m[0].Redacted {
		t.Fatalf("branch copy not redacted: %+v", m[0])
	}
	if m := e.transcript(other.SessionID); m[0].Text != "keep" {
		t.Fatal("redacted another key's message")
	}
	if ok, _ := e.k.Redact(e.ctx, key, "nope"); ok {
		t.Fatal("redacted a missing message")
	}
	// /resume by title and by id; resuming the current session is a no-op.
	back := e.r(e.k.Resume(e.ctx, key, "first"))
	if back.SessionID != r.SessionID || back.Generation != br.Generation+1 || !e.session(r.SessionID).Live() {
		t.Fatalf("resume by title %+v", back)
	}
	if e.session(br.SessionID).EndReason != EndSwitch {
		t.Fatal("branch not ended by the switch")
	}
	if same := e.r(e.k.Resume(e.ctx, key, r.SessionID)); same != back {
		t.Fatalf("resume current %+v", same)
	}
	if _, err := e.k.Resume(e.ctx, key, other.SessionID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("resume another key's session: %v", err)
	}
	if _, err := e.k.Resume(e.ctx, key, "no such title"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("resume unknown title: %v", err)
	}
	// Resuming a compressed session resumes its continuation; tip walks skip branches.
	c := e.r(e.k.Compress(e.ctx, key, r.SessionID, "sum"))
	e.r(e.k.Reset(e.ctx, key, ""))
	res := e.r(e.k.Resume(e.ctx, key, r.SessionID))
	if res.SessionID != c.SessionID {
		t.Fatalf("resume of a compressed session: %+v, want tip %s", res, c.SessionID)
	}
	if tip, err := e.k.Tip(e.ctx, r.SessionID); err != nil || tip != c.SessionID {
		t.Fatalf("tip %s %v", tip, err)
	}
	if _, err := e.k.Stop(e.ctx, e.key(dm("nobody"))); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("stop without a session: %v", err)
	}
}

func TestListAndShow(t *testing.T) {
	e := newEnv(t, Options{})
	e.t = t
	a := e.resolve(dm("1"))
	e.resolve(abi.Source{Platform: "telegram", Profile: "work", ChatType: abi.ChatDM, ChatID: "1"})
	e.resolve(abi.Source{Platform: "slack", ChatType: abi.ChatGroup, ScopeID: "T1", ChatID: "C1", UserID: "U1"})
	e.k.WithBoundary(e.ctx, a.Key, func(b *Boundary) error {
		_, err := b.Append(a.SessionID, Message{Text: "first line\nsecond line"})
		return err
	})
	c := e.r(e.k.Compress(e.ctx, a.Key, a.SessionID, "summary"))
	n := e.r(e.k.Reset(e.ctx, a.Key, "fresh"))

	all, err := e.k.List(e.ctx, "")
	if err != nil || len(all) != 3 {
		t.Fatalf("list all: %d %v", len(all), err)
	}
	main, err := e.k.List(e.ctx, "agent:main:")
	if err != nil || len(main) != 2 || main[0].Key > main[1].Key {
		t.Fatalf("list main: %+v %v", main, err)
	}
	tg, _ := e.k.List(e.ctx, "agent:main:telegram")
	if len(tg) != 1 || tg[0].SessionID != n.SessionID || tg[0].Generation != n.Generation || tg[0].Title != "fresh" {
		t.Fatalf("list telegram: %+v", tg)
	}

	v, err := e.k.Show(e.ctx, a.Key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v.Current == nil || v.Current.ID != n.SessionID || v.Focus.ID != n.SessionID || v.Generation != n.Generation {
		t.Fatalf("show key: %+v", v)
	}
	if len(v.Ancestors) != 2 || v.Ancestors[0].ID != c.SessionID || v.Ancestors[1].ID != a.SessionID {
		t.Fatalf("ancestors %+v", v.Ancestors)
	}
	v, err = e.k.Show(e.ctx, a.SessionID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v.Focus.ID != a.SessionID || len(v.Continuations) != 1 || v.Continuations[0].ID != c.SessionID || len(v.Tail) != 1 || v.Key != a.Key {
		t.Fatalf("show id: %+v", v)
	}
	if v.Focus.EndedAt == nil || v.Focus.EndReason != "compression" || !strings.Contains(v.Tail[0].Text, "second line") {
		t.Errorf("show id: focus %+v, tail %+v", v.Focus, v.Tail)
	}
	if _, err := e.k.Show(e.ctx, "agent:main:telegram:dm:none", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("show unknown key: %v", err)
	}
	if _, err := e.k.Show(e.ctx, "20200101_000000_00000000", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("show unknown id: %v", err)
	}
}

func TestCacheBounded(t *testing.T) {
	c := newRouteCache(cacheShards * 2)
	for i := range 10000 {
		c.set(strings.Repeat("k", i%7)+string(rune(i)), cacheEntry{gen: int64(i)})
	}
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].m)
	}
	if n > cacheShards*2 {
		t.Fatalf("cache holds %d entries", n)
	}
	if newRouteCache(-1) != nil {
		t.Fatal("negative size should disable the cache")
	}
	var nilCache *routeCache
	nilCache.set("k", cacheEntry{})
	if _, ok := nilCache.get("k"); ok {
		t.Fatal("disabled cache returned an entry")
	}
}

func TestObserveAndGenerationHelpers(t *testing.T) {
	e := newEnv(t, Options{})
	e.t = t
	src := abi.Source{Platform: "telegram", ChatType: abi.ChatGroup, ChatID: "-5", UserID: "u1", MessageID: "m7"}
	res, err := e.k.Observe(e.ctx, src, ResolveOptions{Internal: true},
		Message{Text: "seed", Role: "user", PlatformMessageID: "m7"}, Message{Text: "more"})
	if err != nil || !res.Created {
		t.Fatalf("observe %+v %v", res, err)
	}
	if m := e.transcript(res.SessionID); len(m) != 2 || m[0].PlatformMessageID != "m7" {
		t.Fatalf("transcript %+v", m)
	}
	if s := e.session(res.SessionID); s.Origin.UserID != "u1" || s.Origin.ChatID != "-5" {
		t.Fatalf("origin %+v", s.Origin)
	}
	if ok, err := e.k.IsCurrent(e.ctx, res.Key, res.Generation); !ok || err != nil {
		t.Fatalf("IsCurrent %v %v", ok, err)
	}
	stop := e.r(e.k.Stop(e.ctx, res.Key))
	if ok, _ := e.k.IsCurrent(e.ctx, res.Key, res.Generation); ok || stop.SessionID != res.SessionID {
		t.Fatal("generation not bumped by /stop, or the session changed")
	}
	if r, ok, err := e.k.Current(e.ctx, res.Key); !ok || err != nil || r != stop {
		t.Fatalf("Current %+v %v %v", r, ok, err)
	}
	// A source for another key is refused inside a boundary.
	err = e.k.WithBoundary(e.ctx, res.Key, func(b *Boundary) error {
		_, err := b.Resolve(dm("elsewhere"), ResolveOptions{})
		return err
	})
	if !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("foreign source: %v", err)
	}
}

// ChatKeys finds every key of one chat, whatever its type, workspace, thread or participant,
// and no other chat's (not one whose id the chat's is a prefix of); an alias leads to the old
// chat's keys.
func TestChatKeys(t *testing.T) {
	e := newEnv(t, Options{})
	e.resolve(abi.Source{Platform: "telegram", ChatType: abi.ChatForum, ChatID: "-1001", ThreadID: "42", UserID: "111"})
	e.resolve(groupMsg("-1001", "222"))
	e.resolve(groupMsg("-10012", "111"))
	e.resolve(abi.Source{Platform: "slack", ChatType: abi.ChatGroup, ScopeID: "T1", ChatID: "C9", UserID: "U1"})
	keys := func(platform, chat string) []string {
		t.Helper()
		got, err := e.k.ChatKeys(e.ctx, platform, "", chat)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, k := range got {
			if k.Parsed.ChatID != chat && k.Parsed.ChatID != "-1001" {
				t.Errorf("%s: key %s of chat %s", chat, k.Info.Key, k.Parsed.ChatID)
			}
			out = append(out, k.Parsed.ChatType+"/"+k.Parsed.Scope)
		}
		return out
	}
	if got := keys("telegram", "-1001"); len(got) != 2 {
		t.Fatalf("-1001: %v", got)
	}
	if got := keys("slack", "C9"); len(got) != 1 || got[0] != "group/T1" {
		t.Fatalf("C9: %v", got)
	}
	if got := keys("slack", "-1001"); len(got) != 0 {
		t.Fatalf("another platform's chat: %v", got)
	}
	e.alias("telegram", "", "-1009", "-1001")
	if got := keys("telegram", "-1009"); len(got) != 2 {
		t.Fatalf("the alias: %v", got)
	}
	if !e.k.Scoped("slack") || e.k.Scoped("telegram") {
		t.Fatal("Scoped")
	}
}

// TestKeysSearchAndPages: Keys finds keys by a part of the key or the current session's title
// (any case), most recently active first, and pages through them without gaps or repeats.
func TestKeysSearchAndPages(t *testing.T) {
	// Each change a millisecond after the one before, so "most recently active" is decided by
	// time, not by the tie-break on the key (fast statements put them all in one millisecond).
	var now atomic.Int64
	now.Store(time.Now().UnixMilli())
	e := newEnv(t, Options{Now: func() time.Time { return time.UnixMilli(now.Add(1)) }})
	e.t = t
	a := e.resolve(dm("1"))
	e.resolve(abi.Source{Platform: "telegram", Profile: "work", ChatType: abi.ChatDM, ChatID: "1"})
	e.resolve(abi.Source{Platform: "slack", ChatType: abi.ChatGroup, ScopeID: "T1", ChatID: "C1", UserID: "U1"})
	e.r(e.k.Reset(e.ctx, a.Key, "Quarterly Report")) // the most recent change
	if got, err := e.k.Keys(e.ctx, KeyFilter{Search: "quarterly"}); err != nil || len(got) != 1 || got[0].Key != a.Key {
		t.Fatalf("search by title: %+v %v", got, err)
	}
	if got, _ := e.k.Keys(e.ctx, KeyFilter{Search: "SLACK"}); len(got) != 1 || !strings.Contains(got[0].Key, "slack") {
		t.Fatalf("search by key: %+v", got)
	}
	all, _ := e.k.Keys(e.ctx, KeyFilter{})
	if len(all) != 3 || all[0].Key != a.Key {
		t.Fatalf("newest first: %+v", all)
	}
	var paged []string
	for off := 0; off < 5; off += 2 {
		page, _ := e.k.Keys(e.ctx, KeyFilter{Offset: off, Limit: 2})
		for _, k := range page {
			paged = append(paged, k.Key)
		}
	}
	if len(paged) != 3 || paged[0] != all[0].Key || paged[1] != all[1].Key || paged[2] != all[2].Key {
		t.Fatalf("pages %v, want %+v", paged, all)
	}
}
