package wire

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
)

// maxDepth bounds the nesting of a value the decoder skips; deeper input goes to
// encoding/json.
const maxDepth = 64

// decoder reads one JSON value from b. Once ok is false every method returns at once and the
// caller hands the whole input to encoding/json: the decoder never has to phrase an error.
type decoder struct {
	b     []byte
	i     int
	ok    bool
	depth int
}

func newDecoder(b []byte) *decoder { return &decoder{b: b, ok: true} }

// end reports whether the input held one value and nothing after it but white space.
func (d *decoder) end() bool {
	d.ws()
	return d.ok && d.i == len(d.b)
}

func (d *decoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, failing at the end of the input.
func (d *decoder) peek() byte {
	d.ws()
	if d.i >= len(d.b) {
		d.ok = false
		return 0
	}
	return d.b[d.i]
}

// object reads an object, calling member for each key with the decoder at the member's value;
// member must read the value (or fail).
func (d *decoder) object(member func(key []byte)) {
	d.list('{', '}', func() {
		if d.peek() != '"' {
			d.ok = false
			return
		}
		key := d.quoted()
		if !d.ok || d.peek() != ':' {
			d.ok = false
			return
		}
		d.i++
		member(key)
	})
}

// array reads an array, calling elem with the decoder at each element.
func (d *decoder) array(elem func()) { d.list('[', ']', elem) }

// list reads what lies between open and close, calling elem for each comma-separated item.
func (d *decoder) list(open, close byte, elem func()) {
	if !d.ok || d.peek() != open {
		d.ok = false
		return
	}
	d.i++
	if d.peek() == close {
		d.i++
		return
	}
	for d.ok {
		elem()
		if !d.ok {
			return
		}
		switch d.peek() {
		case ',':
			d.i++
		case close:
			d.i++
			return
		default:
			d.ok = false
		}
	}
}

// members reads an object whose member names are names, calling member with the index of
// each name read, the decoder at its value. A name read twice fails (encoding/json merges
// duplicates in ways not worth copying). Any other key is ignored by encoding/json unless it
// matches a name case-insensitively; rather than copy that folding, a key that does or could
// (any non-ASCII byte) fails, and any other is skipped.
func (d *decoder) members(names []string, member func(i int)) {
	var seen uint64
	d.object(func(key []byte) {
		for i, n := range names {
			if string(key) == n {
				if seen&(1<<i) != 0 {
					d.ok = false
					return
				}
				seen |= 1 << i
				member(i)
				return
			}
		}
		for _, c := range key {
			if c >= utf8.RuneSelf {
				d.ok = false
				return
			}
		}
		for _, n := range names {
			if asciiEqualFold(key, n) {
				d.ok = false
				return
			}
		}
		d.skip()
	})
}

func asciiEqualFold(a []byte, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// quoted reads a string and returns its contents. Escapes are decoded; an invalid UTF-8 byte
// or a lone surrogate (which encoding/json replaces with U+FFFD) fails.
func (d *decoder) quoted() []byte {
	if !d.ok || d.peek() != '"' {
		d.ok = false
		return nil
	}
	d.i++
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			return s
		case c == '\\':
			return d.escaped(start)
		case c < 0x20:
			d.ok = false
			return nil
		case c < utf8.RuneSelf:
			d.i++
		default:
			r, size := utf8.DecodeRune(d.b[d.i:])
			if r == utf8.RuneError && size == 1 {
				d.ok = false
				return nil
			}
			d.i += size
		}
	}
	d.ok = false
	return nil
}

// escaped finishes a string that has an escape at d.i, copying what it decodes.
func (d *decoder) escaped(start int) []byte {
	out := append([]byte(nil), d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return out
		case c == '\\':
			if d.i+1 >= len(d.b) {
				d.ok = false
				return nil
			}
			e := d.b[d.i+1]
			d.i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r := d.hex4()
				if r >= 0xD800 && r < 0xE000 {
					// Only a high surrogate followed by an escaped low one makes a rune.
					if r >= 0xDC00 || d.i+1 >= len(d.b) || d.b[d.i] != '\\' || d.b[d.i+1] != 'u' {
						d.ok = false
						return nil
					}
					d.i += 2
					lo := d.hex4()
					if lo < 0xDC00 || lo >= 0xE000 {
						d.ok = false
						return nil
					}
					r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				}
				if !d.ok {
					return nil
				}
				out = utf8.AppendRune(out, r)
			default:
				d.ok = false
				return nil
			}
		case c < 0x20:
			d.ok = false
			return nil
		case c < utf8.RuneSelf:
			out = append(out, c)
			d.i++
		default:
			r, size := utf8.DecodeRune(d.b[d.i:])
			if r == utf8.RuneError && size == 1 {
				d.ok = false
				return nil
			}
			out = append(out, d.b[d.i:d.i+size]...)
			d.i += size
		}
	}
	d.ok = false
	return nil
}

func (d *decoder) hex4() rune {
	if d.i+4 > len(d.b) {
		d.ok = false
		return 0
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			d.ok = false
			return 0
		}
		r = r<<4 | rune(c)
	}
	d.i += 4
	return r
}

//go:noinline
func (d *decoder) str() string { return string(d.quoted()) }

// number reads a JSON number and returns its text.
func (d *decoder) number() []byte {
	if !d.ok {
		return nil
	}
	d.ws()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.b) && d.b[d.i] == '0':
		d.i++
	case d.i < len(d.b) && '1' <= d.b[d.i] && d.b[d.i] <= '9':
		d.digits()
	default:
		d.ok = false
		return nil
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if !d.digits() {
			d.ok = false
			return nil
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if !d.digits() {
			d.ok = false
			return nil
		}
	}
	return d.b[start:d.i]
}

func (d *decoder) digits() bool {
	start := d.i
	for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}

// int reads an integer; a fraction, an exponent or an overflow fails, as each is an error for
// encoding/json too.
//
//go:noinline
func (d *decoder) int() int64 {
	s := d.number()
	if !d.ok {
		return 0
	}
	n, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil {
		d.ok = false
	}
	return n
}

func (d *decoder) bool() bool {
	switch {
	case !d.ok:
	case d.literal("true"):
		return true
	case d.literal("false"):
	default:
		d.ok = false
	}
	return false
}

func (d *decoder) literal(word string) bool {
	if d.peek() != word[0] || len(d.b)-d.i < len(word) || string(d.b[d.i:d.i+len(word)]) != word {
		return false
	}
	d.i += len(word)
	return true
}

// bytes reads a base64 string as encoding/json does: "" is an empty, non-nil slice.
func (d *decoder) bytes() []byte {
	s := d.quoted()
	if !d.ok {
		return nil
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(b, s)
	if err != nil {
		d.ok = false
		return nil
	}
	return b[:n]
}

func (d *decoder) strs() []string {
	v := []string{}
	d.array(func() { v = append(v, d.str()) })
	return v
}

func (d *decoder) headers() map[string][]string {
	h := map[string][]string{}
	d.object(func(key []byte) { h[string(key)] = d.strs() })
	return h
}

// skip reads any value (null too) and discards it.
func (d *decoder) skip() {
	switch c := d.peek(); {
	case !d.ok:
	case c == '{' || c == '[':
		if d.depth++; d.depth > maxDepth {
			d.ok = false
			return
		}
		if c == '{' {
			d.object(func([]byte) { d.skip() })
		} else {
			d.array(d.skip)
		}
		d.depth--
	case c == '"':
		d.quoted()
	case c == '-' || '0' <= c && c <= '9':
		d.number()
	case !d.literal("true") && !d.literal("false") && !d.literal("null"):
		d.ok = false
	}
}

// raw reads any value except null and returns a copy of its bytes, as json.RawMessage keeps it.
func (d *decoder) raw() json.RawMessage {
	if d.peek() == 'n' {
		d.ok = false
		return nil
	}
	start := d.i
	d.skip()
	if !d.ok {
		return nil
	}
	return append(json.RawMessage(nil), d.b[start:d.i]...)
}

var sendRequestMembers = append(callMembers[:len(callMembers):len(callMembers)], "message")

// decodeSendRequest decodes a send export's input into r (which must be zero), and reports
// false if the input needs encoding/json.
func decodeSendRequest(b []byte, r *abi.SendRequest) bool {
	d := newDecoder(b)
	d.members(sendRequestMembers, func(i int) {
		if i == 3 {
			d.outbound(&r.Message)
		} else {
			d.call(&r.Call, i)
		}
	})
	return d.end()
}

var outboundMessageMembers = []string{"chat_type", "chat_id", "thread_id", "user_id", "scope_id", "text", "reply_to",
	"edit_message_id", "action", "part", "parts", "delivery_id", "attachments", "buttons"}

func (d *decoder) outbound(m *abi.OutboundMessage) {
	d.members(outboundMessageMembers, func(i int) {
		switch i {
		case 0:
			m.ChatType = d.str()
		case 1:
			m.ChatID = d.str()
		case 2:
			m.ThreadID = d.str()
		case 3:
			m.UserID = d.str()
		case 4:
			m.ScopeID = d.str()
		case 5:
			m.Text = d.str()
		case 6:
			m.ReplyTo = d.str()
		case 7:
			m.EditMessageID = d.str()
		case 8:
			m.Action = d.str()
		case 9:
			m.Part = int(d.int())
		case 10:
			m.Parts = int(d.int())
		case 11:
			m.DeliveryID = d.str()
		case 12:
			m.Attachments = []abi.Attachment{}
			d.array(func() {
				m.Attachments = append(m.Attachments, abi.Attachment{})
				d.attachment(&m.Attachments[len(m.Attachments)-1])
			})
		case 13:
			m.Buttons = []abi.Button{}
			d.array(func() {
				m.Buttons = append(m.Buttons, abi.Button{})
				d.button(&m.Buttons[len(m.Buttons)-1])
			})
		}
	})
}

var attachmentMembers = []string{"kind", "mime_type", "name", "size", "ref", "caption", "data"}

func (d *decoder) attachment(a *abi.Attachment) {
	d.members(attachmentMembers, func(i int) {
		switch i {
		case 0:
			a.Kind = d.str()
		case 1:
			a.MIMEType = d.str()
		case 2:
			a.Name = d.str()
		case 3:
			a.Size = d.int()
		case 4:
			a.Ref = d.str()
		case 5:
			a.Caption = d.str()
		case 6:
			a.Data = d.bytes()
		}
	})
}

var buttonMembers = []string{"id", "label", "style"}

func (d *decoder) button(btn *abi.Button) {
	d.members(buttonMembers, func(i int) {
		switch i {
		case 0:
			btn.ID = d.str()
		case 1:
			btn.Label = d.str()
		case 2:
			btn.Style = d.str()
		}
	})
}

// callMembers are abi.Call's members, embedded first in every export's request.
var callMembers = []string{"profile", "config", "deadline_ms"}

// call reads member i of callMembers into c.
func (d *decoder) call(c *abi.Call, i int) {
	switch i {
	case 0:
		c.Profile = d.str()
	case 1:
		c.Config = d.raw()
	case 2:
		c.DeadlineMs = d.int()
	}
}

var webhookRequestMembers = append(callMembers[:len(callMembers):len(callMembers)], "method", "path", "query", "headers", "body")

// decodeWebhookRequest decodes a webhook export's input into r (which must be zero), and
// reports false if the input needs encoding/json.
func decodeWebhookRequest(b []byte, r *abi.WebhookRequest) bool {
	d := newDecoder(b)
	d.members(webhookRequestMembers, func(i int) {
		switch i {
		case 3:
			r.Method = d.str()
		case 4:
			r.Path = d.str()
		case 5:
			r.Query = d.str()
		case 6:
			r.Headers = d.headers()
		case 7:
			r.Body = d.bytes()
		default:
			d.call(&r.Call, i)
		}
	})
	return d.end()
}

var pollRequestMembers = append(callMembers[:len(callMembers):len(callMembers)], "wait_ms")

// decodePollRequest decodes a poll export's input into r (which must be zero), and reports
// false if the input needs encoding/json.
func decodePollRequest(b []byte, r *abi.PollRequest) bool {
	d := newDecoder(b)
	d.members(pollRequestMembers, func(i int) {
		if i == 3 {
			r.WaitMs = d.int()
		} else {
			d.call(&r.Call, i)
		}
	})
	return d.end()
}

// decodeReply decodes a host function's reply envelope {"ok": …, "result": …}, reading the
// result with result (nil: the result is skipped). It reports the envelope's ok, and handled
// false if the reply needs encoding/json, which includes every reply with an error member.
func decodeReply(b []byte, result func(*decoder)) (ok, handled bool) {
	d := newDecoder(b)
	d.members(replyMembers, func(i int) {
		switch i {
		case 0:
			ok = d.bool()
		case 1:
			if result == nil {
				d.skip()
			} else if d.peek() == 'n' {
				d.ok = false // null leaves the result to encoding/json's rules
			} else {
				result(d)
			}
		case 2:
			d.ok = false // an error: encoding/json reads it
		}
	})
	return ok, d.end()
}

var replyMembers = []string{"ok", "result", "error"}

// httpResponse reads an abi.HTTPResponse into r (which must be zero).
func (d *decoder) httpResponse(r *abi.HTTPResponse) {
	d.members(httpResponseMembers, func(i int) {
		switch i {
		case 0:
			r.Status = int(d.int())
		case 1:
			r.Headers = d.headers()
		case 2:
			r.Body = d.bytes()
		}
	})
}

var httpResponseMembers = []string{"status", "headers", "body"}

// dispatchReply reads an abi.DispatchReply into r (which must be zero).
func (d *decoder) dispatchReply(r *abi.DispatchReply) {
	d.members(dispatchReplyMembers, func(i int) {
		if i == 0 {
			r.Duplicate = d.bool()
			return
		}
		d.members(sessionRefMembers, func(i int) {
			switch i {
			case 0:
				r.Session.Key = d.str()
			case 1:
				r.Session.SessionID = d.str()
			case 2:
				r.Session.Generation = d.int()
			}
		})
	})
}

var (
	dispatchReplyMembers = []string{"duplicate", "session"}
	sessionRefMembers    = []string{"key", "session_id", "generation"}
)
