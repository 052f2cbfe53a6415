package main

import (
	"fmt"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
)

// A target names where a job's output goes:
//
//	origin                       the chat and thread the job was created in
//	home                         every home channel of the profile (also "all")
//	telegram                     the origin if it is on telegram, else telegram's home channel
//	telegram:-1001234[:42]       that chat (and thread)
type targetSpec struct {
	kind     string // "origin", "home", "platform" or "chat"
	platform string
	chat     abi.Source
}

func parseTarget(s string) (targetSpec, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "origin":
		return targetSpec{kind: "origin"}, nil
	case "home", "all":
		return targetSpec{kind: "home"}, nil
	}
	platform, rest, explicit := strings.Cut(s, ":")
	if !isPlatformName(platform) {
		return targetSpec{}, fmt.Errorf("target %q: want origin, home, a platform name, or platform:chat_id[:thread_id]", s)
	}
	if !explicit {
		return targetSpec{kind: "platform", platform: platform}, nil
	}
	src, err := parseChat(platform, rest)
	if err != nil {
		return targetSpec{}, fmt.Errorf("target %q: %v", s, err)
	}
	return targetSpec{kind: "chat", platform: platform, chat: src}, nil
}

// parseChat reads "chat_id[:thread_id]" of platform. The chat type is left to the host, which
// knows it for chats it has seen.
func parseChat(platform, s string) (abi.Source, error) {
	chat, thread, _ := strings.Cut(strings.TrimSpace(s), ":")
	if chat == "" || strings.ContainsAny(chat, " \t\n") || strings.ContainsAny(thread, ": \t\n") {
		return abi.Source{}, fmt.Errorf("want chat_id[:thread_id]")
	}
	return abi.Source{Platform: platform, ChatID: chat, ThreadID: thread}, nil
}

// destination is one resolved target of a run.
type destination struct {
	label string
	src   abi.Source
	pin   string // the session the delivery is pinned to ("" for none)
}

// resolve turns a job's targets into destinations, deduplicated by platform, chat and thread
// (the first occurrence wins, so the origin keeps its pin). Targets that cannot be resolved are
// reported, the others still delivered.
func resolve(j *record, cfg *profileConfig) ([]destination, []string) {
	deliver := j.Deliver
	if len(deliver) == 0 {
		if j.Origin != nil {
			deliver = []string{"origin"}
		} else {
			deliver = []string{"home"}
		}
	}
	var out []destination
	var problems []string
	seen := map[string]bool{}
	add := func(label string, src abi.Source) {
		k := src.Platform + "\x00" + src.ChatID + "\x00" + src.ThreadID
		if seen[k] {
			return
		}
		seen[k] = true
		d := destination{label: label, src: src}
		// The pin belongs to the origin's conversation: it applies to the origin chat only.
		if j.pinned() && j.Origin != nil && sameChat(src, *j.Origin) {
			d.src, d.pin = *j.Origin, j.OriginSessionID
		}
		out = append(out, d)
	}
	home := func(platform string) bool {
		h, ok := cfg.Home[platform]
		if !ok {
			return false
		}
		src, err := parseChat(platform, h)
		if err != nil {
			return false
		}
		add(platform+" home", src)
		return true
	}
	for _, raw := range deliver {
		t, err := parseTarget(raw)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		switch t.kind {
		case "origin":
			if j.Origin == nil {
				problems = append(problems, "origin: the job was not created from a chat")
				continue
			}
			add("origin", *j.Origin)
		case "home":
			platforms := sortedKeys(cfg.Home)
			if len(platforms) == 0 {
				problems = append(problems, "home: no home channel is configured")
			}
			for _, p := range platforms {
				home(p)
			}
		case "platform":
			if j.Origin != nil && j.Origin.Platform == t.platform {
				add("origin", *j.Origin)
			} else if !home(t.platform) {
				problems = append(problems, t.platform+": no home channel is configured for it")
			}
		case "chat":
			add(raw, t.chat)
		}
	}
	return out, problems
}

func sameChat(a, b abi.Source) bool {
	return a.Platform == b.Platform && a.ChatID == b.ChatID && a.ThreadID == b.ThreadID
}

// A grant is one entry of chat_targets: where a job created from a chat may deliver besides
// that chat.
type grant struct {
	any      bool   // "*"
	home     bool   // "home": the profile's home channels
	platform string // "PLATFORM:*", "PLATFORM:CHAT_ID[:THREAD_ID]"
	chat     string // "" with platform: any chat of it
	thread   string // "" with chat: any thread of it
}

func parseGrant(s string) (grant, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "*":
		return grant{any: true}, nil
	case "home", "all":
		return grant{home: true}, nil
	}
	platform, rest, ok := strings.Cut(s, ":")
	if !isPlatformName(platform) {
		return grant{}, fmt.Errorf("%q: want home, PLATFORM:CHAT_ID[:THREAD_ID], PLATFORM:* or *", s)
	}
	if !ok {
		return grant{}, fmt.Errorf("%q: write %s:* for any %s chat, or %s:CHAT_ID for one", s, platform, platform, platform)
	}
	if rest == "*" {
		return grant{platform: platform}, nil
	}
	src, err := parseChat(platform, rest)
	if err != nil {
		return grant{}, fmt.Errorf("%q: %v", s, err)
	}
	return grant{platform: platform, chat: src.ChatID, thread: src.ThreadID}, nil
}

// allows reports whether g lets a job created in a chat deliver to dest.
func (g grant) allows(dest abi.Source, cfg *profileConfig) bool {
	switch {
	case g.any:
		return true
	case g.home:
		for _, platform := range sortedKeys(cfg.Home) {
			if h, err := parseChat(platform, cfg.Home[platform]); err == nil && h.Platform == dest.Platform && h.ChatID == dest.ChatID &&
				(h.ThreadID == "" || h.ThreadID == dest.ThreadID) {
				return true
			}
		}
		return false
	}
	return g.platform == dest.Platform && (g.chat == "" || (g.chat == dest.ChatID && (g.thread == "" || g.thread == dest.ThreadID)))
}

// chatMay reports whether a job created in the chat from may deliver to dest: into that chat (any
// of its threads, as the chat's scope goes) always, elsewhere only where chat_targets grants.
func (cfg *profileConfig) chatMay(from, dest abi.Source) bool {
	if dest.Platform == from.Platform && dest.ChatID == from.ChatID {
		return true
	}
	for _, s := range cfg.ChatTargets {
		if g, err := parseGrant(s); err == nil && g.allows(dest, cfg) {
			return true
		}
	}
	return false
}

// errNotGranted is the refusal of a chat's target outside it.
func errNotGranted(label string) error {
	return abi.Errorf(abi.CodeDenied, "target %s: a job created in this chat posts only into this chat; the operator can allow other targets with chat_targets in the cron profile (plugins/cron/README.md)", label)
}
