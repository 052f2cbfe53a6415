package media

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// Files as their formats start.
var (
	pngBytes  = append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), bytes.Repeat([]byte{1}, 64)...)
	jpegBytes = append([]byte{0xff, 0xd8, 0xff, 0xe0, 0, 0x10, 'J', 'F', 'I', 'F', 0}, bytes.Repeat([]byte{2}, 64)...)
	gifBytes  = []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;")
	webpBytes = []byte("RIFF\x24\x00\x00\x00WEBPVP8 \x18\x00\x00\x00")
	opusBytes = append([]byte("OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x13OpusHead\x01\x01"), bytes.Repeat([]byte{0}, 32)...)
	vorbisOgg = append([]byte("OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x1e\x01vorbis"), bytes.Repeat([]byte{0}, 32)...)
	mp3ID3    = append([]byte("ID3\x03\x00\x00\x00\x00\x00\x0a"), bytes.Repeat([]byte{0}, 32)...)
	mp3Frame  = append([]byte{0xff, 0xfb, 0x90, 0x64}, bytes.Repeat([]byte{0}, 64)...)
	m4aBytes  = append([]byte("\x00\x00\x00\x20ftypM4A \x00\x00\x00\x00M4A mp42isom"), bytes.Repeat([]byte{0}, 32)...)
	mp4Bytes  = append([]byte("\x00\x00\x00\x20ftypisom\x00\x00\x02\x00isomiso2avc1mp41"), bytes.Repeat([]byte{0}, 32)...)
	movBytes  = append([]byte("\x00\x00\x00\x14ftypqt  \x00\x00\x00\x00qt  "), bytes.Repeat([]byte{0}, 32)...)
	pdfBytes  = []byte("%PDF-1.7\n1 0 obj\n<< >>\nendobj\n")
	elfBytes  = append([]byte("\x7fELF\x02\x01\x01\x00"), bytes.Repeat([]byte{0}, 56)...)
	peBytes   = append([]byte("MZ\x90\x00\x03\x00\x00\x00"), bytes.Repeat([]byte{0}, 56)...)
	machO     = append([]byte{0xcf, 0xfa, 0xed, 0xfe, 0x07, 0x00, 0x00, 0x01}, bytes.Repeat([]byte{0}, 56)...)
	script    = []byte("#!/bin/sh\nrm -rf ~\n")
	wasm      = []byte("\x00asm\x01\x00\x00\x00")
	docx      = append([]byte("PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x13\x00\x00\x00word/document.xml"), bytes.Repeat([]byte{0}, 16)...)
	plainText = []byte("meeting notes: bring coffee\n")
)

func TestMediaSniffAndFits(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		mime string // Sniff's answer
		kind string // the attachment's claimed kind
		why  string // Fits' refusal ("" accepted)
	}{
		{"photo.png", pngBytes, "image/png", abi.AttachImage, ""},
		{"photo.jpg", jpegBytes, "image/jpeg", abi.AttachImage, ""},
		{"anim.gif", gifBytes, "image/gif", abi.AttachImage, ""},
		{"sticker.webp", webpBytes, "image/webp", abi.AttachSticker, ""},
		{"voice.ogg", opusBytes, TypeOpus, abi.AttachVoice, ""},
		{"song.ogg", vorbisOgg, TypeOgg, abi.AttachAudio, ""},
		{"song.mp3", mp3ID3, "audio/mpeg", abi.AttachAudio, ""},
		{"raw.mp3", mp3Frame, "audio/mpeg", abi.AttachAudio, ""},
		{"memo.m4a", m4aBytes, TypeM4A, abi.AttachVoice, ""},
		{"clip.mp4", mp4Bytes, TypeMP4, abi.AttachVideo, ""},
		{"clip.mov", movBytes, TypeMOV, abi.AttachVideo, ""},
		{"paper.pdf", pdfBytes, "application/pdf", abi.AttachDocument, ""},
		{"report.docx", docx, TypeDOCX, abi.AttachDocument, ""},
		{"notes.txt", plainText, "text/plain; charset=utf-8", abi.AttachDocument, ""},
		{"photo.png", elfBytes, TypeELF, abi.AttachImage, "it is an executable, not an image"},
		{"photo.png", peBytes, TypePE, abi.AttachImage, "it is an executable, not an image"},
		{"cat.jpg", machO, TypeMachO, abi.AttachImage, "it is an executable, not an image"},
		{"notes.txt", script, TypeScript, abi.AttachDocument, "it is an executable, not a document"},
		{"plugin.wasm", wasm, TypeWasm, abi.AttachDocument, "it is an executable, not a document"},
		{"voice.ogg", elfBytes, TypeELF, abi.AttachVoice, "it is an executable, not a voice message"},
		{"photo.png", pdfBytes, "application/pdf", abi.AttachImage, "it is application/pdf, not an image"},
		{"voice.ogg", pngBytes, "image/png", abi.AttachVoice, "it is image/png, not a voice message"},
		{"clip.mp4", m4aBytes, TypeM4A, abi.AttachVideo, "it is audio/mp4, not a video"},
		{"blob.bin", []byte{0, 1, 2, 3, 0xfe, 0xfd}, "application/octet-stream", abi.AttachDocument, "its contents are not a format I recognise as a document"},
	}
	for _, c := range cases {
		if got := Sniff(c.data); got != c.mime {
			t.Errorf("%s: Sniff = %q, want %q", c.name, got, c.mime)
			continue
		}
		if got := Fits(c.kind, c.mime); got != c.why {
			t.Errorf("%s as %s: Fits = %q, want %q", c.name, c.kind, got, c.why)
		}
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func open(t *testing.T, opt Options) (*Store, *clock) {
	t.Helper()
	b := storetest.Default(t)
	db := b.Open(t)
	c := &clock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	opt.Now = c.now
	s, err := Open(context.Background(), db, filepath.Join(b.Dir, "media"), opt)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func files(t *testing.T, s *Store) []string {
	t.Helper()
	ents, err := os.ReadDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func rows(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.db.QueryRow(`SELECT COUNT(*) FROM media_files`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMediaDedupeByHash(t *testing.T) {
	s, _ := open(t, Options{})
	ctx := context.Background()
	a, err := s.Put(ctx, Item{Plugin: "echo", Profile: "main", Kind: abi.AttachImage, Name: "a.png", Data: pngBytes})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Put(ctx, Item{Plugin: "echo", Profile: "main", Kind: abi.AttachDocument, Name: "again.png", Data: pngBytes})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Put(ctx, Item{Plugin: "echo", Profile: "other", Kind: abi.AttachImage, Name: "b.png", Data: pngBytes})
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash != b.Hash || a.Path != c.Path || a.MIMEType != "image/png" || a.Size != int64(len(pngBytes)) {
		t.Fatalf("same bytes stored differently: %+v %+v %+v", a, b, c)
	}
	if got := files(t, s); len(got) != 1 || got[0] != a.Hash {
		t.Fatalf("files %v, want the one named %s", got, a.Hash)
	}
	if n := rows(t, s); n != 2 {
		t.Fatalf("%d rows, want one per profile", n)
	}
	data, err := s.Load(a.Hash)
	if err != nil || !bytes.Equal(data, pngBytes) {
		t.Fatalf("Load: %v", err)
	}
}

func TestMediaCaps(t *testing.T) {
	s, c := open(t, Options{MaxFile: 2048, MaxProfile: 3000, Retention: time.Hour})
	ctx := context.Background()
	img := func(fill byte, n int) []byte {
		return append(append([]byte{}, pngBytes[:8]...), bytes.Repeat([]byte{fill}, n-8)...)
	}
	var ref *Refused
	if _, err := s.Put(ctx, Item{Plugin: "p", Profile: "a", Kind: abi.AttachImage, Data: img(1, 2049)}); !errors.As(err, &ref) ||
		!strings.Contains(ref.Reason, "more than the 2.0 KiB") {
		t.Fatalf("a file over the cap: %v", err)
	}
	if _, err := s.Put(ctx, Item{Plugin: "p", Profile: "a", Kind: abi.AttachImage, Data: img(2, 2000)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, Item{Plugin: "p", Profile: "a", Kind: abi.AttachImage, Data: img(3, 1500)}); !errors.As(err, &ref) ||
		!strings.Contains(ref.Reason, "already stores") {
		t.Fatalf("over the profile's cap: %v", err)
	}
	// The same bytes again are not counted twice; another profile has its own cap.
	if _, err := s.Put(ctx, Item{Plugin: "p", Profile: "a", Kind: abi.AttachImage, Data: img(2, 2000)}); err != nil {
		t.Fatalf("the same file again: %v", err)
	}
	if _, err := s.Put(ctx, Item{Plugin: "p", Profile: "b", Kind: abi.AttachImage, Data: img(3, 1500)}); err != nil {
		t.Fatalf("another profile: %v", err)
	}
	if n := len(files(t, s)); n != 2 {
		t.Fatalf("%d files after the refusals, want 2 (refused ones store nothing)", n)
	}
	// Past the retention the profile's earlier file no longer counts.
	c.t = c.t.Add(2 * time.Hour)
	if _, err := s.Put(ctx, Item{Plugin: "p", Profile: "a", Kind: abi.AttachImage, Data: img(3, 1500)}); err != nil {
		t.Fatalf("after the retention: %v", err)
	}
}

func TestMediaRefusesAnExecutableNamedPNG(t *testing.T) {
	s, _ := open(t, Options{})
	_, err := s.Put(context.Background(), Item{Plugin: "echo", Profile: "main", Kind: abi.AttachImage, Name: "photo.png", Data: elfBytes})
	var ref *Refused
	if !errors.As(err, &ref) || ref.Reason != "it is an executable, not an image" {
		t.Fatalf("Put = %v", err)
	}
	if got := files(t, s); len(got) != 0 || rows(t, s) != 0 {
		t.Fatalf("a refused file left files %v or rows", got)
	}
}

func TestMediaRetentionSweep(t *testing.T) {
	s, c := open(t, Options{Retention: 168 * time.Hour})
	ctx := context.Background()
	t0 := c.t
	old, err := s.Put(ctx, Item{Plugin: "echo", Profile: "main", Kind: abi.AttachImage, Data: pngBytes})
	if err != nil {
		t.Fatal(err)
	}
	c.t = t0.Add(100 * time.Hour)
	fresh, err := s.Put(ctx, Item{Plugin: "echo", Profile: "main", Kind: abi.AttachDocument, Data: pdfBytes})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, t0.Add(167*time.Hour)); err != nil || n != 0 {
		t.Fatalf("sweep before the retention: %d, %v", n, err)
	}
	n, err := s.Sweep(ctx, t0.Add(169*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v; want 1 file", n, err)
	}
	if _, err := os.Stat(old.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the expired file is still there: %v", err)
	}
	if _, err := s.Load(fresh.Hash); err != nil {
		t.Fatalf("the fresh file went too: %v", err)
	}
	if rows(t, s) != 1 {
		t.Fatalf("rows %d, want 1", rows(t, s))
	}
	// Storing a file again renews it: the same bytes after the sweep are stored anew.
	if _, err := s.Put(ctx, Item{Plugin: "echo", Profile: "main", Kind: abi.AttachImage, Data: pngBytes}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(old.Hash); err != nil {
		t.Fatalf("stored again: %v", err)
	}
}

func TestMediaWritesAreCrashSafe(t *testing.T) {
	s, _ := open(t, Options{})
	sum := "" // the hash is only known to the store; look for any non-temporary file
	var during []string
	testHookWriting = func(tmp string) {
		during = files(t, s)
		// A crash here leaves only the temporary file: simulate one by keeping a copy of it
		// with half the bytes, as a crash mid-write would.
		os.WriteFile(tmp+"-crashed", pngBytes[:len(pngBytes)/2], 0o600)
	}
	defer func() { testHookWriting = nil }()
	f, err := s.Put(context.Background(), Item{Plugin: "echo", Profile: "main", Kind: abi.AttachImage, Data: pngBytes})
	testHookWriting = nil
	if err != nil {
		t.Fatal(err)
	}
	sum = f.Hash
	for _, name := range during {
		if name == sum {
			t.Fatalf("the file was visible under its hash before its bytes were written: %v", during)
		}
	}
	var leftovers int
	for _, name := range files(t, s) {
		if strings.HasPrefix(name, ".tmp-") {
			leftovers++
		}
	}
	if leftovers != 1 {
		t.Fatalf("want the simulated crash's temporary file, got %v", files(t, s))
	}
	// A restart removes what the crash left; the complete file stays.
	s2, err := Open(context.Background(), s.db, s.Dir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := files(t, s2); len(got) != 1 || got[0] != sum {
		t.Fatalf("after a restart: %v", got)
	}
	// A file whose bytes are not those of its name is never served.
	if err := os.WriteFile(s2.Path(sum), pngBytes[:10], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Load(sum); err == nil {
		t.Fatal("Load served a file whose bytes do not match its hash")
	}
	// Storing the bytes again repairs it (the size differs: it is written anew).
	if _, err := s2.Put(context.Background(), Item{Plugin: "echo", Profile: "main", Kind: abi.AttachImage, Data: pngBytes}); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Load(sum); err != nil {
		t.Fatalf("not repaired: %v", err)
	}
}
