package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// Catch-up policies for slots missed while the host was down.
const (
	catchUpOnce = "once" // run once, for the latest missed slot
	catchUpSkip = "skip" // run a slot only within its grace; otherwise wait for the next one
)

// profileConfig is a cron profile's configuration (plugins.cron.profiles.<name> in the host's
// config file).
type profileConfig struct {
	// TimeZone is the default zone of jobs (IANA name). Default UTC.
	TimeZone string `json:"timezone"`
	// CatchUp is the default catch-up policy: "once" (default) or "skip".
	CatchUp string `json:"catch_up"`
	// Home maps a platform to its home channel, "chat_id[:thread_id]": the target of a bare
	// platform name, "home" and of jobs without an origin or targets.
	Home map[string]string `json:"home"`
	// Jobs are defined by the operator in the config file; they cannot be removed from chat.
	Jobs []configJob `json:"jobs"`
	// ChatTargets are the targets a job created from a chat (/cron add) may deliver to besides
	// that chat itself, which is all it may by default: "home" (the home channels),
	// "PLATFORM:CHAT_ID" (that chat, any thread), "PLATFORM:CHAT_ID:THREAD_ID", "PLATFORM:*"
	// (any chat of that platform) or "*" (anywhere).
	ChatTargets stringList `json:"chat_targets"`
}

// configJob is a job written in the config file.
type configJob struct {
	Name     string     `json:"name"`
	Schedule string     `json:"schedule"`
	Text     string     `json:"text"`
	Prompt   string     `json:"prompt"`
	Deliver  stringList `json:"deliver"`
	TimeZone string     `json:"timezone"`
	CatchUp  string     `json:"catch_up"`
	Seed     bool       `json:"seed"`
}

var configSchema = json.RawMessage(`{"type":"object","properties":{
	"timezone":{"type":"string","description":"default time zone of jobs (IANA name); default UTC"},
	"catch_up":{"type":"string","description":"slots missed while down: once (default) or skip"},
	"home":{"type":"object","description":"platform → home channel chat_id[:thread_id]"},
	"jobs":{"type":"array","description":"jobs defined here: name, schedule, text or prompt, deliver, timezone, catch_up, seed"},
	"chat_targets":{"type":"array","description":"where jobs created from a chat may deliver besides that chat: home, PLATFORM:CHAT_ID[:THREAD_ID], PLATFORM:* or *; default none"}}}`)

// location loads a time zone name (empty: UTC). The plugin embeds the time zone database
// (time/tzdata): the Wasm sandbox has no /usr/share/zoneinfo.
func location(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q (want an IANA name like Europe/Berlin)", name)
	}
	return loc, nil
}

func checkCatchUp(s string) error {
	switch s {
	case "", catchUpOnce, catchUpSkip:
		return nil
	}
	return fmt.Errorf("catch_up %q: want %q or %q", s, catchUpOnce, catchUpSkip)
}

// problems validates a profile's configuration, for configure.
func (cfg *profileConfig) problems(now time.Time) []string {
	var out []string
	if _, err := location(cfg.TimeZone); err != nil {
		out = append(out, "timezone: "+err.Error())
	}
	if err := checkCatchUp(cfg.CatchUp); err != nil {
		out = append(out, err.Error())
	}
	for _, platform := range sortedKeys(cfg.Home) {
		if _, err := parseChat(platform, cfg.Home[platform]); err != nil {
			out = append(out, fmt.Sprintf("home.%s: %v", platform, err))
		}
	}
	for _, g := range cfg.ChatTargets {
		if _, err := parseGrant(g); err != nil {
			out = append(out, "chat_targets: "+err.Error())
		}
	}
	seen := map[string]bool{}
	for i, j := range cfg.Jobs {
		where := fmt.Sprintf("jobs[%d]", i)
		if !isJobName(j.Name) {
			out = append(out, where+": name is required (letters, digits, _ . -)")
			continue
		}
		where = "job " + j.Name
		if seen[j.Name] {
			out = append(out, where+": the name is used twice")
		}
		seen[j.Name] = true
		spec := j.spec()
		if _, _, err := cfg.validate(&spec, now, false); err != nil {
			out = append(out, where+": "+err.Error())
		}
	}
	return out
}

func (j configJob) spec() abi.JobSpec {
	no := false
	return abi.JobSpec{Name: j.Name, Schedule: j.Schedule, Text: j.Text, Prompt: j.Prompt, Deliver: j.Deliver,
		TimeZone: j.TimeZone, CatchUp: j.CatchUp, Seed: j.Seed, Pin: &no}
}

// configID is the id of a job defined in the config file.
func configID(name string) string { return "cfg-" + name }

// validate checks a job spec and parses its schedule (relative to now). fresh refuses one-shots
// that are already past (more than oneShotGrace): a job created now that could never run.
func (cfg *profileConfig) validate(spec *abi.JobSpec, now time.Time, fresh bool) (schedule, *time.Location, error) {
	spec.Text, spec.Prompt = strings.TrimSpace(spec.Text), strings.TrimSpace(spec.Prompt)
	switch {
	case spec.Text == "" && spec.Prompt == "":
		return schedule{}, nil, fmt.Errorf("give the text to send or a prompt for the agent")
	case spec.Text != "" && spec.Prompt != "":
		return schedule{}, nil, fmt.Errorf("give either a text or a prompt, not both")
	}
	tz := spec.TimeZone
	if tz == "" {
		tz = cfg.TimeZone
	}
	loc, err := location(tz)
	if err != nil {
		return schedule{}, nil, err
	}
	if err := checkCatchUp(spec.CatchUp); err != nil {
		return schedule{}, nil, err
	}
	sch, err := parseSchedule(spec.Schedule, now, loc)
	if err != nil {
		return schedule{}, nil, err
	}
	if fresh && sch.Kind == kindOnce && now.Sub(time.UnixMilli(sch.AtMs)) > oneShotGrace {
		return schedule{}, nil, fmt.Errorf("%s is in the past; a one-shot must be in the future",
			time.UnixMilli(sch.AtMs).In(loc).Format("2006-01-02 15:04 MST"))
	}
	spec.Deliver = splitList(spec.Deliver)
	for _, d := range spec.Deliver {
		t, err := parseTarget(d)
		if err != nil {
			return schedule{}, nil, err
		}
		switch {
		case t.kind == "origin" && spec.Origin == nil:
			return schedule{}, nil, fmt.Errorf("target origin: the job is not created from a chat")
		case t.kind == "home" && len(cfg.Home) == 0:
			return schedule{}, nil, fmt.Errorf("target %s: no home channel is configured (home: in the cron profile's config)", d)
		case t.kind == "platform" && cfg.Home[t.platform] == "" && (spec.Origin == nil || spec.Origin.Platform != t.platform):
			return schedule{}, nil, fmt.Errorf("target %s: no home channel is configured for %s; write %s:CHAT_ID[:THREAD_ID]", d, t.platform, t.platform)
		}
	}
	if len(spec.Deliver) == 0 && spec.Origin == nil && len(cfg.Home) == 0 {
		return schedule{}, nil, fmt.Errorf("nowhere to deliver: give a target (platform:chat_id[:thread_id]) or configure home channels")
	}
	return sch, loc, nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// stringList is a list of strings written as a YAML list or as one comma-separated string.
type stringList []string

func (l *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = splitList([]string{one})
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("want a list of targets or one comma-separated string")
	}
	*l = splitList(many)
	return nil
}

// splitList splits comma-separated entries and drops empty ones.
func splitList(in []string) []string {
	var out []string
	for _, s := range in {
		for _, part := range strings.Split(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}
