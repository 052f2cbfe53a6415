package telegramtest

import (
	"testing"
)

func TestParseText(t *testing.T) {
	for _, c := range []struct {
		mode, in, text, err string
		entities            []MessageEntity
	}{
		{"", "  plain *text*  ", "plain *text*", "", nil},
		{"MarkdownV2", `*bold* \_x\_ _it_ __u__ ~s~ ||sp||`, "bold _x_ it u s sp", "", []MessageEntity{
			{Type: "bold", Offset: 0, Length: 4}, {Type: "italic", Offset: 9, Length: 2},
			{Type: "underline", Offset: 12, Length: 1}, {Type: "strikethrough", Offset: 14, Length: 1},
			{Type: "spoiler", Offset: 16, Length: 2}}},
		{"markdownv2", "😀 *b*", "😀 b", "", []MessageEntity{{Type: "bold", Offset: 3, Length: 1}}},
		{"MarkdownV2", "[link](http://x.org/a\\)b) `co\\`de`", "link co`de", "", []MessageEntity{
			{Type: "text_link", Offset: 0, Length: 4, URL: "http://x.org/a)b"}, {Type: "code", Offset: 5, Length: 5}}},
		{"MarkdownV2", "```go\nfmt.Println(\"x.y\")\n```", "fmt.Println(\"x.y\")", "", []MessageEntity{
			{Type: "pre", Offset: 0, Length: 18, Lang: "go"}}},
		{"MarkdownV2", "Hello.", "", `can't parse entities: Character '.' is reserved and must be escaped with the preceding '\'`, nil},
		{"MarkdownV2", "a-b", "", `can't parse entities: Character '-' is reserved and must be escaped with the preceding '\'`, nil},
		{"MarkdownV2", "*bold", "", "can't parse entities: Can't find end of the entity starting at byte offset 0", nil},
		{"MarkdownV2", "ok ```code", "", "can't parse entities: Can't find end of PreCode entity at byte offset 3", nil},
		{"MarkdownV2", "> quoted", "quoted", "", nil},
		{"Markdown", "*bold* and _it_ [l](http://x) a-b.", "bold and it l a-b.", "", []MessageEntity{
			{Type: "bold", Offset: 0, Length: 4}, {Type: "italic", Offset: 9, Length: 2},
			{Type: "text_link", Offset: 12, Length: 1, URL: "http://x"}}},
		{"Markdown", "snake_case", "", "can't parse entities: Can't find end of the entity starting at byte offset 5", nil},
		{"HTML", `<b>bold</b> &lt;tag&gt; &amp; <a href="http://x">l</a> <i>x</i>`, "bold <tag> & l x", "", []MessageEntity{
			{Type: "bold", Offset: 0, Length: 4}, {Type: "text_link", Offset: 13, Length: 1, URL: "http://x"},
			{Type: "italic", Offset: 15, Length: 1}}},
		{"HTML", "<foo>x</foo>", "", `can't parse entities: Unsupported start tag "foo" at byte offset 0`, nil},
		{"HTML", "<b><i>x</b></i>", "", `can't parse entities: Unmatched end tag at byte offset 7, expected "</i>", found "</b>"`, nil},
		{"HTML", "x</b>", "", "can't parse entities: Unexpected end tag at byte offset 1", nil},
		{"HTML", "a <b", "", "can't parse entities: Unclosed start tag at byte offset 2", nil},
		{"HTML", "&#128512; &#x41; &bogus;", "😀 A &bogus;", "", nil},
	} {
		got, err := parseText(c.in, c.mode)
		if err != c.err {
			t.Errorf("%s %q: error %q, want %q", c.mode, c.in, err, c.err)
			continue
		}
		if err != "" {
			continue
		}
		if got.text != c.text {
			t.Errorf("%s %q: text %q, want %q", c.mode, c.in, got.text, c.text)
		}
		if len(got.entities) != len(c.entities) {
			t.Errorf("%s %q: entities %+v, want %+v", c.mode, c.in, got.entities, c.entities)
			continue
		}
		for i := range c.entities {
			if got.entities[i] != c.entities[i] {
				t.Errorf("%s %q: entity %d %+v, want %+v", c.mode, c.in, i, got.entities[i], c.entities[i])
			}
		}
	}
}
