package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/abi"
)

// Limits of what a turn's attachments add to the model's request.
const (
	// DefaultDocumentBytes is Config.DocumentBytes's default: the text of one document inlined
	// into the user's message.
	DefaultDocumentBytes = 32 << 10
	// MaxImageBytes is the largest image sent to a vision model (a data URL is a third larger).
	MaxImageBytes = 20 << 20
	// imageTokens is what an image is guessed to take of the context when the server reports
	// no usage (OpenAI's high-detail tile).
	imageTokens = 765
)

// One-line notes a turn's answer carries about attachments the agent could not use. The turn
// still runs on the message's text (and on what it could use); when that leaves nothing, the
// note is the whole answer and no model is asked.
const (
	// NoVisionNote: the model cannot see images (Config.Vision is off for it).
	NoVisionNote = "(This model cannot see images, so I did not look at yours. The operator can turn on agent.vision for a model that accepts them.)"
	// VoiceNotSetUp: a voice message or audio file came and no transcription server is set.
	VoiceNotSetUp = "(Voice messages are not set up on this host: the operator can set agent.transcribe to an OpenAI-compatible transcription server, like whisper.cpp's, to have them turned into text.)"
	// transcribeFailedNote is the note of a failed transcription: the file, then what failed.
	transcribeFailedNote = "(I could not transcribe %s: %s. Try again, or send it as text.)"
	// unreadableNote is the note of an attachment whose stored file could not be read.
	unreadableNote = "(I could not read the attached %s.)"
)

// visionMIMEs are the image formats OpenAI-compatible vision models take.
var visionMIMEs = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

// Placeholder is the text a transcript keeps for an attachment instead of its bytes, e.g.
// "[image: photo.jpg, image/jpeg, 120 KB]": later turns see that the file was sent without
// the file being sent again.
func Placeholder(a Attachment) string {
	var fields []string
	if n := displayName(a.Name); n != "" {
		fields = append(fields, n)
	}
	if a.MIMEType != "" {
		fields = append(fields, baseMIME(a.MIMEType))
	}
	fields = append(fields, formatSize(a.Size))
	return "[" + orDefault(a.Kind, "file") + ": " + strings.Join(fields, ", ") + "]"
}

// HistoryText is the user's message as a transcript keeps it: its text, then one Placeholder
// line per attachment.
func HistoryText(text string, atts []Attachment) string {
	lines := []string{}
	if strings.TrimSpace(text) != "" {
		lines = append(lines, text)
	}
	for _, a := range atts {
		lines = append(lines, Placeholder(a))
	}
	return strings.Join(lines, "\n")
}

// displayName is a platform's file name as shown to people and models: one line without
// control characters or brackets, at most 80 characters.
func displayName(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '[' || r == ']' {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > 80 {
		s = string([]rune(s)[:79]) + "…"
	}
	return s
}

// formatSize renders n bytes for people: B below 1 KB, whole KB below 1 MB, MB with one
// decimal above.
func formatSize(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%d KB", (n+512)>>10)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
}

// baseMIME is a MIME type without parameters, lower case.
func baseMIME(m string) string {
	if t, _, err := mime.ParseMediaType(m); err == nil {
		return t
	}
	return strings.ToLower(strings.TrimSpace(m))
}

// isImage reports whether a is a picture a vision model can take: an image, a sticker or a
// document (a photo sent uncompressed) in one of the formats models read.
func isImage(a Attachment) bool {
	switch a.Kind {
	case abi.AttachImage, abi.AttachSticker, abi.AttachDocument:
		return visionMIMEs[baseMIME(a.MIMEType)]
	}
	return false
}

// isText reports whether a MIME type is text a model can read inline.
func isText(m string) bool {
	m = baseMIME(m)
	switch {
	case strings.HasPrefix(m, "text/"), strings.HasSuffix(m, "+json"), strings.HasSuffix(m, "+xml"):
		return true
	}
	switch m {
	case "application/json", "application/xml", "application/yaml", "application/x-yaml", "application/toml",
		"application/javascript", "application/x-javascript", "application/ecmascript", "application/x-sh",
		"application/x-shellscript", "application/sql", "application/csv", "application/x-ndjson",
		"application/ld+json", "application/x-subrip":
		return true
	}
	return false
}

var errAttachmentTooLarge = errors.New("agent: attachment too large")

// readAttachment reads a's stored file, refusing one larger than limit bytes.
func readAttachment(a Attachment, limit int64) ([]byte, error) {
	f, err := os.Open(a.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, errAttachmentTooLarge
	}
	return data, nil
}

// userInput is what a turn's message gives the model: text (the user's, transcripts,
// inlined documents and the placeholders of the rest) and images as data URLs.
type userInput struct {
	text   string
	images []string // data:<mime>;base64,… URLs
	notes  []string // one-line notes for the answer, in order, each once
	// empty: nothing in the message can be used (no text, and every attachment got a note):
	// the notes are the answer.
	empty bool
}

func (in *userInput) note(n string) {
	for _, have := range in.notes {
		if have == n {
			return
		}
	}
	in.notes = append(in.notes, n)
}

// withNotes appends the notes to an answer, one paragraph each.
func withNotes(text string, notes []string) string {
	return strings.TrimSpace(strings.Join(append([]string{text}, notes...), "\n\n"))
}

// mediaOptions say what a turn may do with its attachments.
type mediaOptions struct {
	vision   bool         // images go to the model
	tr       *Transcriber // nil: voice and audio are not transcribed
	docBytes int          // inline cap of one document
	log      *slog.Logger
	metrics  *Metrics
}

// readInput builds the user's input from t's text and attachments. Only ctx's end fails it.
func readInput(ctx context.Context, t *Turn, opt mediaOptions) (userInput, error) {
	if len(t.Attachments) == 0 {
		return userInput{text: t.Text}, nil
	}
	var (
		in     userInput
		blocks []string
		usable = strings.TrimSpace(t.Text) != ""
	)
	if usable {
		blocks = append(blocks, t.Text)
	}
	for _, a := range t.Attachments {
		if c := strings.TrimSpace(a.Caption); c != "" && !strings.Contains(t.Text, c) {
			// A caption the host did not make the message's text: the user's words all the same.
			blocks = append(blocks, c)
			usable = true
		}
		ph := Placeholder(a)
		switch {
		case isImage(a):
			if !opt.vision {
				blocks = append(blocks, ph+" (not shown: this model cannot see images)")
				in.note(NoVisionNote)
				continue
			}
			data, err := readAttachment(a, MaxImageBytes)
			if err != nil {
				blocks = append(blocks, ph+" (not shown: "+unreadable(err)+")")
				in.note(fmt.Sprintf(unreadableNote, describeFile(a)))
				opt.log.Warn("attachment not sent to the model", "kind", a.Kind, "mime", a.MIMEType, "size", a.Size, "error", unreadable(err))
				continue
			}
			blocks = append(blocks, ph)
			in.images = append(in.images, "data:"+baseMIME(a.MIMEType)+";base64,"+base64.StdEncoding.EncodeToString(data))
			usable = true
		case a.Kind == abi.AttachVoice || a.Kind == abi.AttachAudio:
			if opt.tr == nil {
				blocks = append(blocks, ph+" (not transcribed: voice messages are not set up)")
				in.note(VoiceNotSetUp)
				continue
			}
			text, err := opt.tr.Transcribe(ctx, a)
			if err != nil {
				if ctx.Err() != nil {
					return userInput{}, ctx.Err()
				}
				blocks = append(blocks, ph+" (transcription failed)")
				in.note(transcribeFailed(opt, a, err))
				continue
			}
			opt.metrics.transcribed("ok")
			usable = true
			switch {
			case text == "":
				blocks = append(blocks, ph+" (transcribed: no speech heard)")
			case a.Kind == abi.AttachVoice:
				blocks = append(blocks, "[voice note] "+text)
			default:
				blocks = append(blocks, ph+" transcript: "+text)
			}
		case a.Kind == abi.AttachDocument && isText(a.MIMEType):
			doc, err := inlineDocument(a, opt.docBytes)
			if err != nil {
				blocks = append(blocks, ph+" (not shown: "+unreadable(err)+")")
				in.note(fmt.Sprintf(unreadableNote, describeFile(a)))
				continue
			}
			blocks = append(blocks, doc)
			usable = true
		default:
			// Video, other documents, animated stickers: named, never read.
			blocks = append(blocks, ph)
			usable = true
		}
	}
	in.text = strings.Join(blocks, "\n\n")
	in.empty = !usable && len(t.Attachments) > 0
	return in, nil
}

// transcribeFailed logs and counts a failed transcription of a and returns its note.
func transcribeFailed(opt mediaOptions, a Attachment, err error) string {
	opt.log.Warn("transcription failed", "kind", a.Kind, "mime", a.MIMEType, "size", a.Size, "error", err.Error())
	why, reason := "the transcription failed", "bad_response"
	var te *TranscribeError
	if errors.As(err, &te) {
		why, reason = te.describe(), te.Reason
	}
	opt.metrics.transcribed(reason)
	return fmt.Sprintf(transcribeFailedNote, describeFile(a), why)
}

// describeFile names an attachment in a note: its name, or its kind.
func describeFile(a Attachment) string {
	if n := displayName(a.Name); n != "" {
		return n
	}
	switch a.Kind {
	case abi.AttachVoice:
		return "your voice message"
	case "":
		return "file"
	}
	return "your " + a.Kind
}

// unreadable says why an attachment was not used, without its path.
func unreadable(err error) string {
	if errors.Is(err, errAttachmentTooLarge) {
		return "too large"
	}
	return "the stored file could not be read"
}

// inlineDocument renders a text document for the model: its placeholder, its text (at most
// limit bytes, cut at a character boundary, with a note saying so) fenced as data.
func inlineDocument(a Attachment, limit int) (string, error) {
	if limit <= 0 {
		limit = DefaultDocumentBytes
	}
	f, err := os.Open(a.Path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return "", err
	}
	cut := len(data) > limit
	if cut {
		data = data[:limit]
		// Drop the last character if the cut split it.
		i := len(data) - 1
		for i > 0 && i > len(data)-utf8.UTFMax && !utf8.RuneStart(data[i]) {
			i--
		}
		if i >= 0 && utf8.RuneStart(data[i]) && !utf8.FullRune(data[i:]) {
			data = data[:i]
		}
	}
	text := strings.ToValidUTF8(string(data), "\uFFFD")
	out := Placeholder(a) + "\n" + fence("The document the user attached", text)
	if cut {
		out += fmt.Sprintf("\n[The document was cut: only its first %s of %s are shown.]", formatSize(int64(len(data))), formatSize(max(a.Size, int64(limit)+1)))
	}
	return out, nil
}
