package main

import (
	"fmt"
	"regexp"
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

var platformRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

func parseTarget(s string) (targetSpec, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "origin":
		return targetSpec{kind: "origin"}, nil
	case "home", "all":
		return targetSpec{kind: "home"}, nil
	}
	platform, rest, explicit := strings.Cut(s, ":")
	if !platformRE.MatchString(platform) {
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
