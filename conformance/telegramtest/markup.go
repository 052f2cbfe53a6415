package telegramtest

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// utf16Len returns the length of s in UTF-16 code units, Telegram's unit for text lengths and
// entity offsets.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// parsed is a message text after parse_mode processing: what the user sees, and its entities.
type parsed struct {
	text     string
	entities []MessageEntity
}

// parseText applies parse_mode ("", "MarkdownV2", "Markdown" or "HTML", case-insensitive) the way
// the Bot API does, closely enough for adapter tests: markup is removed and becomes entities;
// leading and trailing whitespace is trimmed. An error is the description's tail after "Bad
// Request: ", e.g. "can't parse entities: Character '!' is reserved and must be escaped with
// the preceding '\'". The checks are a practical subset of Telegram's parser, not all of it.
func parseText(text, mode string) (parsed, string) {
	var p *markup
	switch strings.ToLower(mode) {
	case "":
		return trimParsed(parsed{text: text}), ""
	case "markdownv2":
		p = newMarkup(text)
		p.markdownV2()
	case "markdown":
		p = newMarkup(text)
		p.markdown()
	case "html":
		p = newMarkup(text)
		p.html()
	default:
		return parsed{}, "unsupported parse_mode"
	}
	if p.err != "" {
		return parsed{}, "can't parse entities: " + p.err
	}
	return trimParsed(parsed{text: p.out.String(), entities: p.entities}), ""
}

// trimParsed trims surrounding whitespace, shifting and clipping the entities.
func trimParsed(p parsed) parsed {
	t := strings.TrimLeftFunc(p.text, unicode.IsSpace)
	shift := utf16Len(p.text[:len(p.text)-len(t)])
	t = strings.TrimRightFunc(t, unicode.IsSpace)
	n := utf16Len(t)
	var ents []MessageEntity
	for _, e := range p.entities {
		start, end := max(e.Offset-shift, 0), min(e.Offset+e.Length-shift, n)
		if end > start {
			e.Offset, e.Length = start, end-start
			ents = append(ents, e)
		}
	}
	return parsed{text: t, entities: ents}
}

// markup is a small parser state shared by the three parse modes.
type markup struct {
	src      string
	i        int
	out      strings.Builder
	u16      int // UTF-16 length of out
	stack    []openEntity
	entities []MessageEntity
	err      string
}

type openEntity struct {
	kind   string // entity type
	marker string // the markup that opened it
	at     int    // byte offset in src
	start  int    // UTF-16 offset in out
	url    string
}

func newMarkup(src string) *markup { return &markup{src: src} }

func (p *markup) emit(s string) {
	p.out.WriteString(s)
	p.u16 += utf16Len(s)
}

// emitRune copies the code point at p.i to the output and advances.
func (p *markup) emitRune() {
	_, n := utf8.DecodeRuneInString(p.src[p.i:])
	p.emit(p.src[p.i : p.i+n])
	p.i += n
}

func (p *markup) fail(format string, args ...any) {
	if p.err == "" {
		p.err = fmt.Sprintf(format, args...)
	}
}

func (p *markup) push(kind, marker, url string) {
	p.stack = append(p.stack, openEntity{kind: kind, marker: marker, at: p.i, start: p.u16, url: url})
}

func (p *markup) pop() openEntity {
	e := p.stack[len(p.stack)-1]
	p.stack = p.stack[:len(p.stack)-1]
	if p.u16 > e.start {
		p.entities = append(p.entities, MessageEntity{Type: e.kind, Offset: e.start, Length: p.u16 - e.start, URL: e.url})
	}
	return e
}

// toggle closes the innermost entity if it was opened by marker, and opens one otherwise.
func (p *markup) toggle(kind, marker string) {
	if n := len(p.stack); n > 0 && p.stack[n-1].marker == marker {
		p.pop()
	} else {
		p.push(kind, marker, "")
	}
	p.i += len(marker)
}

const mdv2Reserved = "_*[]()~`>#+-=|{}.!"

// markdownV2 parses Telegram's MarkdownV2.
func (p *markup) markdownV2() {
	for p.i < len(p.src) && p.err == "" {
		c := p.src[p.i]
		rest := p.src[p.i:]
		switch {
		case c == '\\':
			if p.i+1 < len(p.src) && p.src[p.i+1] > ' ' && p.src[p.i+1] < 127 {
				p.emit(p.src[p.i+1 : p.i+2])
				p.i += 2
			} else {
				p.fail("Character '\\' is reserved and must be escaped with the preceding '\\'")
			}
		case strings.HasPrefix(rest, "```"):
			p.preV2()
		case c == '`':
			p.codeV2()
		case c == '*':
			p.toggle("bold", "*")
		case strings.HasPrefix(rest, "__"):
			p.toggle("underline", "__")
		case c == '_':
			p.toggle("italic", "_")
		case c == '~':
			p.toggle("strikethrough", "~")
		case strings.HasPrefix(rest, "||"):
			p.toggle("spoiler", "||")
		case c == '[' || strings.HasPrefix(rest, "!["):
			kind := "text_link"
			if c == '!' {
				kind = "custom_emoji"
				p.i++
			}
			p.push(kind, "[", "")
			p.i++
		case c == ']':
			p.closeLinkV2()
		case c == '>' && (p.i == 0 || p.src[p.i-1] == '\n'):
			p.i++ // block quote line
		case strings.IndexByte(mdv2Reserved, c) >= 0:
			p.fail("Character '%c' is reserved and must be escaped with the preceding '\\'", c)
		default:
			p.emitRune()
		}
	}
	if len(p.stack) > 0 {
		p.fail("Can't find end of the entity starting at byte offset %d", p.stack[len(p.stack)-1].at)
	}
}

// preV2 parses ```lang\ncode``` ; inside, only ` and \ are escaped.
func (p *markup) preV2() {
	at := p.i
	body := p.src[p.i+3:]
	end := -1
	for j := 0; j < len(body); j++ {
		if body[j] == '\\' {
			j++
			continue
		}
		if strings.HasPrefix(body[j:], "```") {
			end = j
			break
		}
	}
	if end < 0 {
		p.fail("Can't find end of PreCode entity at byte offset %d", at)
		return
	}
	code, lang := body[:end], ""
	if nl := strings.IndexByte(code, '\n'); nl >= 0 && !strings.ContainsAny(code[:nl], " \t`") {
		lang, code = code[:nl], code[nl+1:]
	}
	start := p.u16
	p.emit(unescapeCode(code))
	if p.u16 > start {
		p.entities = append(p.entities, MessageEntity{Type: "pre", Offset: start, Length: p.u16 - start, Lang: lang})
	}
	p.i += 3 + end + 3
}

func (p *markup) codeV2() {
	at := p.i
	body := p.src[p.i+1:]
	end := -1
	for j := 0; j < len(body); j++ {
		if body[j] == '\\' {
			j++
			continue
		}
		if body[j] == '`' {
			end = j
			break
		}
	}
	if end < 0 {
		p.fail("Can't find end of Code entity at byte offset %d", at)
		return
	}
	start := p.u16
	p.emit(unescapeCode(body[:end]))
	if p.u16 > start {
		p.entities = append(p.entities, MessageEntity{Type: "code", Offset: start, Length: p.u16 - start})
	}
	p.i += 1 + end + 1
}

func unescapeCode(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// closeLinkV2 handles ']': the end of a link's text, followed by (url).
func (p *markup) closeLinkV2() {
	n := len(p.stack)
	if n == 0 || p.stack[n-1].marker != "[" {
		p.fail("Character ']' is reserved and must be escaped with the preceding '\\'")
		return
	}
	p.i++
	url := ""
	if strings.HasPrefix(p.src[p.i:], "(") {
		end := -1
		for j := p.i + 1; j < len(p.src); j++ {
			if p.src[j] == '\\' {
				j++
			} else if p.src[j] == ')' {
				end = j - p.i
				break
			}
		}
		if end < 0 {
			p.fail("Can't find end of a URL at byte offset %d", p.i)
			return
		}
		url = unescapeCode(p.src[p.i+1 : p.i+end])
		p.i += end + 1
	}
	p.stack[n-1].url = url
	p.pop()
}

// markdown parses the legacy Markdown mode: *bold*, _italic_, `code`, ```pre```, [text](url),
// no nesting, and \ escaping only _ * ` [.
func (p *markup) markdown() {
	for p.i < len(p.src) && p.err == "" {
		c := p.src[p.i]
		switch {
		case c == '\\' && p.i+1 < len(p.src) && strings.IndexByte("_*`[", p.src[p.i+1]) >= 0:
			p.emit(p.src[p.i+1 : p.i+2])
			p.i += 2
		case strings.HasPrefix(p.src[p.i:], "```"):
			p.span("pre", "```")
		case c == '*':
			p.span("bold", "*")
		case c == '_':
			p.span("italic", "_")
		case c == '`':
			p.span("code", "`")
		case c == '[':
			p.linkMarkdown()
		default:
			p.emitRune()
		}
	}
}

// span parses marker text marker, with the text taken literally.
func (p *markup) span(kind, marker string) {
	body := p.src[p.i+len(marker):]
	end := strings.Index(body, marker)
	if end < 0 {
		p.fail("Can't find end of the entity starting at byte offset %d", p.i)
		return
	}
	text := body[:end]
	lang := ""
	if kind == "pre" {
		if nl := strings.IndexByte(text, '\n'); nl >= 0 && !strings.ContainsAny(text[:nl], " \t") {
			lang, text = text[:nl], text[nl+1:]
		}
	}
	start := p.u16
	p.emit(text)
	if p.u16 > start {
		p.entities = append(p.entities, MessageEntity{Type: kind, Offset: start, Length: p.u16 - start, Lang: lang})
	}
	p.i += len(marker) + end + len(marker)
}

func (p *markup) linkMarkdown() {
	at := p.i
	close := strings.Index(p.src[p.i:], "](")
	if close < 0 {
		p.fail("Can't find end of the entity starting at byte offset %d", at)
		return
	}
	urlEnd := strings.IndexByte(p.src[p.i+close+2:], ')')
	if urlEnd < 0 {
		p.fail("Can't find end of the entity starting at byte offset %d", at)
		return
	}
	start := p.u16
	p.emit(p.src[p.i+1 : p.i+close])
	url := p.src[p.i+close+2 : p.i+close+2+urlEnd]
	if p.u16 > start {
		p.entities = append(p.entities, MessageEntity{Type: "text_link", Offset: start, Length: p.u16 - start, URL: url})
	}
	p.i += close + 2 + urlEnd + 1
}

var htmlTags = map[string]string{
	"b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline", "ins": "underline",
	"s": "strikethrough", "strike": "strikethrough", "del": "strikethrough",
	"span": "spoiler", "tg-spoiler": "spoiler", "a": "text_link", "code": "code", "pre": "pre",
	"blockquote": "blockquote", "tg-emoji": "custom_emoji",
}

// html parses Telegram's HTML mode: the supported tags, properly nested, and the entities
// &lt; &gt; &amp; &quot; and numeric ones.
func (p *markup) html() {
	for p.i < len(p.src) && p.err == "" {
		switch p.src[p.i] {
		case '<':
			p.tag()
		case '&':
			p.charRef()
		default:
			p.emitRune()
		}
	}
	if n := len(p.stack); n > 0 && p.err == "" {
		p.fail("Can't find end tag corresponding to start tag \"%s\"", p.stack[n-1].marker)
	}
}

func (p *markup) tag() {
	at := p.i
	end := strings.IndexByte(p.src[p.i:], '>')
	if end < 0 {
		p.fail("Unclosed start tag at byte offset %d", at)
		return
	}
	inner := p.src[p.i+1 : p.i+end]
	p.i += end + 1
	if name, ok := strings.CutPrefix(inner, "/"); ok {
		name = strings.ToLower(strings.TrimSpace(name))
		n := len(p.stack)
		switch {
		case n == 0:
			p.fail("Unexpected end tag at byte offset %d", at)
		case p.stack[n-1].marker != name:
			p.fail("Unmatched end tag at byte offset %d, expected \"</%s>\", found \"</%s>\"", at, p.stack[n-1].marker, name)
		default:
			p.pop()
		}
		return
	}
	name, attrs, _ := strings.Cut(inner, " ")
	name = strings.ToLower(name)
	kind, ok := htmlTags[name]
	if !ok {
		p.fail("Unsupported start tag \"%s\" at byte offset %d", name, at)
		return
	}
	url := ""
	if name == "a" {
		url = attr(attrs, "href")
	}
	p.stack = append(p.stack, openEntity{kind: kind, marker: name, at: at, start: p.u16, url: url})
}

// attr extracts name="value" from a tag's attributes.
func attr(attrs, name string) string {
	_, v, ok := strings.Cut(attrs, name+"=")
	if !ok {
		return ""
	}
	if v != "" && (v[0] == '"' || v[0] == '\'') {
		if end := strings.IndexByte(v[1:], v[0]); end >= 0 {
			return v[1 : end+1]
		}
	}
	if f := strings.Fields(v); len(f) > 0 {
		return f[0]
	}
	return ""
}

var htmlEntities = map[string]string{"lt": "<", "gt": ">", "amp": "&", "quot": "\""}

func (p *markup) charRef() {
	end := strings.IndexByte(p.src[p.i:], ';')
	if end > 1 && end < 12 {
		name := p.src[p.i+1 : p.i+end]
		if s, ok := htmlEntities[name]; ok {
			p.emit(s)
			p.i += end + 1
			return
		}
		if num, ok := strings.CutPrefix(name, "#"); ok {
			base := 10
			if h, ok := strings.CutPrefix(strings.ToLower(num), "x"); ok {
				num, base = h, 16
			}
			if n, err := strconv.ParseUint(num, base, 32); err == nil && utf8.ValidRune(rune(n)) {
				p.emit(string(rune(n)))
				p.i += end + 1
				return
			}
		}
	}
	p.emit("&")
	p.i++
}
