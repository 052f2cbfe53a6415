// Package humanize renders durations, times and texts for people: the CLI's tables and the
// console's pages use the same forms.
package humanize

import (
	"fmt"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/internal/config"
)

// Duration renders d in its two largest units: 45s, 3m05s, 2h10m, 3d04h.
func Duration(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		s = fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
	}
	if neg {
		return "-" + s
	}
	return s
}

// Clock renders a time in UTC to the second, or "-" for none.
func Clock(t time.Time) string {
	if t.IsZero() || t.UnixMilli() == 0 {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// Clip puts s on one line and shortens it to n characters.
func Clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// Tools says what the tool grants of a profile (config.Tool* names) let a user do, for the
// operator about to approve or admit them.
func Tools(tools []string) string {
	if len(tools) == 0 {
		return "no tools: they can chat with the agent only"
	}
	var parts []string
	for _, t := range tools {
		switch t {
		case config.ToolShell:
			parts = append(parts, "shell (the agent runs commands on this machine as the host's user, at their request)")
		case config.ToolProcesses:
			parts = append(parts, "processes (listing, reading and stopping their chat's background processes)")
		case config.ToolCron:
			parts = append(parts, "cron (their chat's scheduled jobs)")
		default:
			parts = append(parts, t)
		}
	}
	return "tools: " + strings.Join(parts, ", ")
}
