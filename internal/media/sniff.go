package media

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
)

// Sniffed types net/http.DetectContentType does not name.
const (
	TypeELF    = "application/x-elf"
	TypePE     = "application/vnd.microsoft.portable-executable"
	TypeMachO  = "application/x-mach-binary"
	TypeScript = "text/x-script"
	TypeWasm   = "application/wasm"
	TypeOgg    = "audio/ogg"
	TypeOpus   = "audio/ogg; codecs=opus"
	TypeM4A    = "audio/mp4"
	TypeMP4    = "video/mp4"
	TypeMOV    = "video/quicktime"
	TypeDOCX   = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
	TypeXLSX   = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
	TypePPTX   = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
	TypeODF    = "application/vnd.oasis.opendocument"
	TypeOLE    = "application/x-ole-storage" // .doc, .xls, .ppt of older Office versions
)

// Sniff names the type of data from its bytes alone (never from a name or a claimed type):
// net/http.DetectContentType, and before it the formats it does not know or misnames
// (executables and scripts, Ogg/Opus voice, MPEG-4 audio and video, Office documents).
func Sniff(data []byte) string {
	head := data[:min(len(data), 512)]
	switch {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return TypeELF
	case bytes.HasPrefix(head, []byte("MZ")):
		return TypePE
	case bytes.HasPrefix(head, []byte{0xfe, 0xed, 0xfa, 0xce}), bytes.HasPrefix(head, []byte{0xfe, 0xed, 0xfa, 0xcf}),
		bytes.HasPrefix(head, []byte{0xce, 0xfa, 0xed, 0xfe}), bytes.HasPrefix(head, []byte{0xcf, 0xfa, 0xed, 0xfe}),
		bytes.HasPrefix(head, []byte{0xca, 0xfe, 0xba, 0xbe}):
		return TypeMachO // thin and fat Mach-O (0xcafebabe is also a Java class: executable either way)
	case bytes.HasPrefix(head, []byte("#!")):
		return TypeScript
	case bytes.HasPrefix(head, []byte("\x00asm")):
		return TypeWasm
	case bytes.HasPrefix(head, []byte("OggS")):
		if bytes.Contains(head, []byte("OpusHead")) {
			return TypeOpus
		}
		return TypeOgg
	case len(head) >= 12 && string(head[4:8]) == "ftyp":
		switch brand := string(head[8:12]); {
		case brand == "M4A " || brand == "M4B " || brand == "M4P ":
			return TypeM4A
		case brand == "qt  ":
			return TypeMOV
		default:
			return TypeMP4
		}
	case len(head) >= 2 && head[0] == 0xff && head[1]&0xe0 == 0xe0 && head[1]&0x06 != 0:
		return "audio/mpeg" // an MPEG audio frame without an ID3 tag (layer bits not 00)
	case bytes.HasPrefix(head, []byte{0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1}):
		return TypeOLE
	case bytes.HasPrefix(head, []byte("PK\x03\x04")):
		switch {
		case bytes.Contains(head, []byte("word/")):
			return TypeDOCX
		case bytes.Contains(head, []byte("xl/")):
			return TypeXLSX
		case bytes.Contains(head, []byte("ppt/")):
			return TypePPTX
		case bytes.Contains(head, []byte("mimetypeapplication/vnd.oasis.opendocument")):
			return TypeODF
		}
	}
	return http.DetectContentType(data)
}

// Executable reports whether mime (as Sniff names it) is a program or a script.
func Executable(mime string) bool {
	switch mime {
	case TypeELF, TypePE, TypeMachO, TypeScript, TypeWasm:
		return true
	}
	return false
}

// base is mime without its parameters.
func base(mime string) string {
	b, _, _ := strings.Cut(mime, ";")
	return strings.TrimSpace(b)
}

// Fits checks that the sniffed type mime fits an attachment of kind: an image or a sticker
// must be an image (a sticker may be a video), voice and audio must be audio (Ogg counts), a
// video a video, and a document text, PDF, an Office or OpenDocument file, an archive, or
// media; nothing may be an executable. It returns "" if it fits, else why not, in words for
// the user ("it is an executable, not an image").
func Fits(kind, mime string) string {
	b := base(mime)
	what := map[string]string{abi.AttachImage: "an image", abi.AttachSticker: "a sticker", abi.AttachVoice: "a voice message",
		abi.AttachAudio: "audio", abi.AttachVideo: "a video", abi.AttachDocument: "a document"}[kind]
	if what == "" {
		return "its kind " + quote(kind) + " is unknown"
	}
	if Executable(b) {
		return "it is an executable, not " + what
	}
	ok := false
	switch kind {
	case abi.AttachImage:
		ok = strings.HasPrefix(b, "image/")
	case abi.AttachSticker:
		ok = strings.HasPrefix(b, "image/") || strings.HasPrefix(b, "video/") || b == "application/x-gzip"
	case abi.AttachVoice, abi.AttachAudio:
		ok = strings.HasPrefix(b, "audio/") || b == "application/ogg"
	case abi.AttachVideo:
		ok = strings.HasPrefix(b, "video/")
	case abi.AttachDocument:
		ok = strings.HasPrefix(b, "text/") || strings.HasPrefix(b, "image/") || strings.HasPrefix(b, "audio/") ||
			strings.HasPrefix(b, "video/") || strings.HasPrefix(b, "application/vnd.") || b == TypeOLE ||
			b == "application/pdf" || b == "application/zip" || b == "application/json" || b == "application/x-gzip" ||
			b == "application/ogg" || b == "application/rtf"
	}
	if ok {
		return ""
	}
	if b == "application/octet-stream" {
		return "its contents are not a format I recognise as " + what
	}
	return "it is " + b + ", not " + what
}

// KindOf is the attachment kind a file of the sniffed type mime is sent as.
func KindOf(mime string) string {
	b := base(mime)
	switch {
	case strings.HasPrefix(b, "image/"):
		return abi.AttachImage
	case strings.HasPrefix(b, "audio/"), b == "application/ogg":
		return abi.AttachAudio
	case strings.HasPrefix(b, "video/"):
		return abi.AttachVideo
	}
	return abi.AttachDocument
}

func quote(s string) string { return "\"" + s + "\"" }
