package agent

import "strings"

// Reasoning. Models that think before they answer send their reasoning apart from the answer
// (reasoning_content from vLLM's and llama.cpp's reasoning parsers and DeepSeek, reasoning from
// Ollama and others), or, on a server that does not parse it, inline at the start of the
// content between <think> and </think> (Qwen3, DeepSeek-R1). Either way it is kept out of the
// chat and out of the history, unless Config.ShowReasoning: then the answer starts with it,
// quoted, and the history keeps it as part of the answer.

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
	// reasoningMark starts the quoted reasoning of an answer (Config.ShowReasoning).
	reasoningMark = "💭 "
)

// splitThink takes a leading <think>…</think> block off content. open reports a block that has
// not closed yet (a stream in the middle of the reasoning): all of content is reasoning so far.
func splitThink(content string) (reasoning, answer string, open bool) {
	trimmed := strings.TrimLeft(content, " \t\r\n")
	if !strings.HasPrefix(trimmed, thinkOpen) {
		if strings.HasPrefix(thinkOpen, trimmed) && trimmed != "" {
			return "", "", true // the tag itself is still arriving
		}
		return "", content, false
	}
	rest := trimmed[len(thinkOpen):]
	end := strings.Index(rest, thinkClose)
	if end < 0 {
		return strings.TrimSpace(rest), "", true
	}
	return strings.TrimSpace(rest[:end]), strings.TrimLeft(rest[end+len(thinkClose):], " \t\r\n"), false
}

// visibleText is what a stream shows of the text so far: without the reasoning.
func visibleText(soFar string) string {
	_, answer, open := splitThink(soFar)
	if open {
		return ""
	}
	return answer
}

// withReasoning is the answer as the chat gets it when Config.ShowReasoning: the reasoning
// quoted, a blank line, then the answer.
func withReasoning(reasoning, answer string) string {
	reasoning = strings.TrimSpace(reasoning)
	if reasoning == "" {
		return answer
	}
	return reasoningMark + strings.ReplaceAll(reasoning, "\n", "\n> ") + "\n\n" + answer
}
