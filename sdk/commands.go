package sdk

import (
	"slices"
	"strings"
)

// Commands are the host's slash commands, as a platform plugin recognizes them in a message's
// text (the host's turn intake applies them).
var Commands = []string{"new", "reset", "stop", "resume", "branch", "compress", "status", "sessions", "more", "last",
	"help", "model", "usage", "retry", "undo", "approve", "deny"}

// IsCommand reports whether text (after BangCommand) is one of the host's commands.
func IsCommand(text string) bool {
	word, _, _ := strings.Cut(strings.TrimSpace(text), " ")
	return strings.HasPrefix(word, "/") && slices.Contains(Commands, strings.ToLower(word[1:]))
}

// BangCommand rewrites "!cmd args" to "/cmd args" for the host's commands, for platforms whose
// clients take "/" for commands of their own (Slack in threads, Discord, Element); any other
// text is returned as it is.
func BangCommand(text string) string {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, "!") {
		return text
	}
	word, rest, _ := strings.Cut(t[1:], " ")
	for _, c := range Commands {
		if strings.EqualFold(word, c) {
			if rest == "" {
				return "/" + c
			}
			return "/" + c + " " + rest
		}
	}
	return text
}
