package wire

import (
	"encoding/base64"
	"strconv"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
)

// encoder appends JSON to b.
type encoder struct{ b []byte }

// key starts a member of the object being written: a comma unless it is the first, then the
// quoted name (names are plain ASCII, written as they are) and a colon.
//
//go:noinline
func (e *encoder) key(name string) {
	if e.b[len(e.b)-1] != '{' {
		e.b = append(e.b, ',')
	}
	e.b = append(e.b, '"')
	e.b = append(e.b, name...)
	e.b = append(e.b, '"', ':')
}

// str writes s as encoding/json does with HTML escaping on (json.Marshal's default).
func (e *encoder) str(s string) {
	const hex = "0123456789abcdef"
	e.b = append(e.b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			e.b = append(e.b, s[start:i]...)
			switch c {
			case '"', '\\':
				e.b = append(e.b, '\\', c)
			case '\b':
				e.b = append(e.b, '\\', 'b')
			case '\f':
				e.b = append(e.b, '\\', 'f')
			case '\n':
				e.b = append(e.b, '\\', 'n')
			case '\r':
				e.b = append(e.b, '\\', 'r')
			case '\t':
				e.b = append(e.b, '\\', 't')
			default:
				e.b = append(e.b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			e.b = append(e.b, s[start:i]...)
			e.b = append(e.b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			e.b = append(e.b, s[start:i]...)
			e.b = append(e.b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	e.b = append(e.b, s[start:]...)
	e.b = append(e.b, '"')
}

func (e *encoder) int(n int64) { e.b = strconv.AppendInt(e.b, n, 10) }

func (e *encoder) bool(v bool) { e.b = strconv.AppendBool(e.b, v) }

// bytes writes b in standard base64, or null for a nil slice.
func (e *encoder) bytes(b []byte) {
	if b == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '"')
	e.b = base64.StdEncoding.AppendEncode(e.b, b)
	e.b = append(e.b, '"')
}

func (e *encoder) strs(v []string) {
	if v == nil {
		e.b = append(e.b, "null"...)
		return
	}
	e.b = append(e.b, '[')
	for i, s := range v {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.str(s)
	}
	e.b = append(e.b, ']')
}

// headers writes a header map with its keys sorted, as encoding/json does.
func (e *encoder) headers(h map[string][]string) {
	if h == nil {
		e.b = append(e.b, "null"...)
		return
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		// Insertion sort: a message has a few headers, and package sort would add its generic
		// sort's code to every plugin.
		i := len(keys)
		keys = append(keys, k)
		for ; i > 0 && keys[i-1] > k; i-- {
			keys[i] = keys[i-1]
		}
		keys[i] = k
	}
	e.b = append(e.b, '{')
	for i, k := range keys {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.str(k)
		e.b = append(e.b, ':')
		e.strs(h[k])
	}
	e.b = append(e.b, '}')
}

// The omitempty helpers write a member only when its value is not empty.

//go:noinline
func (e *encoder) optStr(name, v string) {
	if v != "" {
		e.key(name)
		e.str(v)
	}
}

//go:noinline
func (e *encoder) optInt(name string, v int64) {
	if v != 0 {
		e.key(name)
		e.int(v)
	}
}

//go:noinline
func (e *encoder) optBytes(name string, v []byte) {
	if len(v) != 0 {
		e.key(name)
		e.bytes(v)
	}
}

//go:noinline
func (e *encoder) optStrs(name string, v []string) {
	if len(v) != 0 {
		e.key(name)
		e.strs(v)
	}
}

//go:noinline
func (e *encoder) optHeaders(name string, v map[string][]string) {
	if len(v) != 0 {
		e.key(name)
		e.headers(v)
	}
}

// appendSendResult appends the JSON of r, as json.Marshal writes it.
func appendSendResult(b []byte, r *abi.SendResult) []byte {
	e := encoder{append(b, '{')}
	e.optStrs("message_ids", r.MessageIDs)
	if se := r.Error; se != nil {
		e.key("error")
		e.b = append(e.b, '{')
		e.key("kind")
		e.str(se.Kind)
		e.optStr("code", se.Code)
		e.key("message")
		e.str(se.Message)
		e.optInt("retry_after_ms", se.RetryAfterMs)
		e.optStr("migrate_to_chat_id", se.MigrateToChatID)
		e.optStrs("accepted", se.Accepted)
		e.b = append(e.b, '}')
	}
	if r.ThreadID != nil {
		e.key("thread_id")
		e.str(*r.ThreadID)
	}
	return append(e.b, '}')
}

// appendHTTPRequest appends the JSON of r, as json.Marshal writes it.
func appendHTTPRequest(b []byte, r *abi.HTTPRequest) []byte {
	e := encoder{append(b, '{')}
	e.key("method")
	e.str(r.Method)
	e.key("url")
	e.str(r.URL)
	e.optHeaders("headers", r.Headers)
	e.optBytes("body", r.Body)
	e.optInt("timeout_ms", r.TimeoutMs)
	e.optInt("max_bytes", r.MaxBytes)
	return append(e.b, '}')
}

// appendWebhookResult appends the JSON of r, as json.Marshal writes it.
func appendWebhookResult(b []byte, r *abi.WebhookResult) []byte {
	e := encoder{append(b, '{')}
	e.key("response")
	e.httpResponse(&r.Response)
	e.events(r.Events)
	return append(e.b, '}')
}

// appendPollResult appends the JSON of r, as json.Marshal writes it.
func appendPollResult(b []byte, r *abi.PollResult) []byte {
	e := encoder{append(b, '{')}
	e.events(r.Events)
	e.optInt("backoff_ms", r.BackoffMs)
	if st := r.Status; st != nil {
		e.key("status")
		e.b = append(e.b, '{')
		e.key("state")
		e.str(st.State)
		e.optStr("message", st.Message)
		e.b = append(e.b, '}')
	}
	return append(e.b, '}')
}

// appendDispatchRequest appends the JSON of r, as json.Marshal writes it.
func appendDispatchRequest(b []byte, r *abi.DispatchRequest) []byte {
	e := encoder{append(b, '{')}
	e.key("event")
	e.event(&r.Event)
	return append(e.b, '}')
}

func (e *encoder) httpResponse(r *abi.HTTPResponse) {
	e.b = append(e.b, '{')
	e.key("status")
	e.int(int64(r.Status))
	e.optHeaders("headers", r.Headers)
	e.optBytes("body", r.Body)
	e.b = append(e.b, '}')
}

// events writes the omitempty member "events".
func (e *encoder) events(evs []abi.InboundEvent) {
	if len(evs) == 0 {
		return
	}
	e.key("events")
	e.b = append(e.b, '[')
	for i := range evs {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.event(&evs[i])
	}
	e.b = append(e.b, ']')
}

// event writes ev as abi.InboundEvent's MarshalJSON does: an empty kind is EventMessage.
func (e *encoder) event(ev *abi.InboundEvent) {
	e.b = append(e.b, '{')
	e.optStr("id", ev.ID)
	e.key("kind")
	if ev.Kind == "" {
		e.str(abi.EventMessage)
	} else {
		e.str(ev.Kind)
	}
	e.key("source")
	e.source(&ev.Source)
	e.optStr("text", ev.Text)
	e.optStr("reply_to", ev.ReplyTo)
	if ev.Mentioned {
		e.key("mentioned")
		e.bool(true)
	}
	e.optStr("addressed", ev.Addressed)
	e.optInt("unix_ms", ev.UnixMs)
	e.optStr("migrate_from_chat_id", ev.MigrateFromChatID)
	if len(ev.Attachments) != 0 {
		e.key("attachments")
		e.b = append(e.b, '[')
		for i := range ev.Attachments {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.attachment(&ev.Attachments[i])
		}
		e.b = append(e.b, ']')
	}
	e.optStr("callback_id", ev.CallbackID)
	e.b = append(e.b, '}')
}

func (e *encoder) source(s *abi.Source) {
	e.b = append(e.b, '{')
	e.optStr("platform", s.Platform)
	e.optStr("profile", s.Profile)
	e.key("chat_type")
	e.str(s.ChatType)
	e.optStr("chat_id", s.ChatID)
	e.optStr("chat_name", s.ChatName)
	e.optStr("thread_id", s.ThreadID)
	e.optStr("user_id", s.UserID)
	e.optStr("user_name", s.UserName)
	e.optStr("scope_id", s.ScopeID)
	e.optStr("message_id", s.MessageID)
	e.b = append(e.b, '}')
}

func (e *encoder) attachment(a *abi.Attachment) {
	e.b = append(e.b, '{')
	e.key("kind")
	e.str(a.Kind)
	e.optStr("mime_type", a.MIMEType)
	e.optStr("name", a.Name)
	e.optInt("size", a.Size)
	e.optStr("ref", a.Ref)
	e.optStr("caption", a.Caption)
	e.optBytes("data", a.Data)
	e.b = append(e.b, '}')
}
