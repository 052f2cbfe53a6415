package agenttest

import "strings"

// ImageURLs returns the URLs of the image_url content parts of the request's user messages, in
// order (data: URLs for uploaded images).
func (r Request) ImageURLs() []string {
	var out []string
	for _, m := range r.Messages() {
		if m["role"] != "user" {
			continue
		}
		parts, _ := m["content"].([]any)
		for _, p := range parts {
			pm, _ := p.(map[string]any)
			if pm["type"] != "image_url" {
				continue
			}
			iu, _ := pm["image_url"].(map[string]any)
			if u, ok := iu["url"].(string); ok {
				out = append(out, u)
			}
		}
	}
	return out
}

// ContentText returns a message's content as text: the string, or its text parts joined.
func ContentText(m map[string]any) string {
	switch c := m["content"].(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			if pm, ok := p.(map[string]any); ok && pm["type"] == "text" {
				s, _ := pm["text"].(string)
				b.WriteString(s)
			}
		}
		return b.String()
	}
	return ""
}

// LastUser returns the text of the request's last user message ("" if it has none).
func (r Request) LastUser() string {
	ms := r.Messages()
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i]["role"] == "user" {
			return ContentText(ms[i])
		}
	}
	return ""
}
