package turn

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/media"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

var (
	pngFile = append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), bytes.Repeat([]byte{7}, 100)...)
	elfFile = append([]byte("\x7fELF\x02\x01\x01\x00"), bytes.Repeat([]byte{0}, 100)...)
)

// platformFiles stands in for a platform plugin's fetch export (internal/gateway's tests fetch
// through the real echo plugin): the files by Ref, every call counted, and an optional gate a
// fetch waits on.
type platformFiles struct {
	mu       sync.Mutex
	files    map[string][]byte
	calls    int
	fetching chan string   // told each Ref as its fetch begins (if not nil)
	gate     chan struct{} // a fetch waits until it is closed (if not nil)
}

func (p *platformFiles) Fetch(ctx context.Context, plugin, profile string, att abi.Attachment, maxBytes int64) (*abi.FetchResult, error) {
	p.mu.Lock()
	p.calls++
	data, ok := p.files[att.Ref]
	p.mu.Unlock()
	if p.fetching != nil {
		p.fetching <- att.Ref
	}
	if p.gate != nil {
		<-p.gate
	}
	if !ok {
		return nil, abi.Errorf(abi.CodeNotFound, "no file %q", att.Ref)
	}
	return &abi.FetchResult{Data: data}, nil // a plugin that ignores maxBytes: the host checks
}

func (p *platformFiles) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// recorder is the builtin agent, with every turn it is given recorded.
type recorder struct {
	inner agent.Agent
	turns chan *agent.Turn
}

func (r *recorder) Turn(ctx context.Context, t *agent.Turn) (*agent.Reply, error) {
	r.turns <- t
	return r.inner.Turn(ctx, t)
}

func (r *recorder) next(t *testing.T) *agent.Turn {
	t.Helper()
	select {
	case turn := <-r.turns:
		return turn
	case <-time.After(testdeadline.Scale(20 * time.Second)):
		t.Fatal("no turn started")
		return nil
	}
}

type mediaHarness struct {
	*harness
	store *media.Store
	files *platformFiles
	a     *recorder
}

func newMediaHarness(t *testing.T, maxFile int64, canAttach bool) *mediaHarness {
	t.Helper()
	b := storetest.Default(t)
	st, err := media.Open(context.Background(), b.Open(t), filepath.Join(b.Dir, "media"), media.Options{MaxFile: maxFile})
	if err != nil {
		t.Fatal(err)
	}
	pf := &platformFiles{files: map[string][]byte{}}
	a := &recorder{inner: agent.NewBuiltin(agent.Config{}), turns: make(chan *agent.Turn, 16)}
	h := newHarness(t, a, Options{Media: st, Fetcher: pf, WorkRoot: filepath.Join(b.Dir, "work"),
		CanAttach: func(string) bool { return canAttach }})
	return &mediaHarness{harness: h, store: st, files: pf, a: a}
}

// send dispatches a user message carrying atts.
func (h *mediaHarness) send(id, text string, atts ...abi.Attachment) {
	h.t.Helper()
	src := dm
	src.MessageID = id
	if _, err := h.e.Dispatch(context.Background(), "echo", "main", abi.InboundEvent{ID: id, Source: src, Text: text, Attachments: atts}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *mediaHarness) stored() []string {
	h.t.Helper()
	ents, err := os.ReadDir(h.store.Dir())
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestAttachPhotoReachesTheTurn(t *testing.T) {
	h := newMediaHarness(t, 1<<20, true)
	h.files.files["ref-photo"] = pngFile
	h.send("m1", "what is this?", abi.Attachment{Kind: abi.AttachImage, Name: "holiday.jpg", MIMEType: "image/jpeg", Ref: "ref-photo", Caption: "look"})
	turn := h.a.next(t)
	if len(turn.Attachments) != 1 {
		t.Fatalf("attachments %+v", turn.Attachments)
	}
	a := turn.Attachments[0]
	if a.Kind != abi.AttachImage || a.MIMEType != "image/png" || a.Name != "holiday.jpg" || a.Size != int64(len(pngFile)) || a.Caption != "look" {
		t.Fatalf("attachment %+v: want the sniffed type, not the claimed one", a)
	}
	if data, err := os.ReadFile(a.Path); err != nil || !bytes.Equal(data, pngFile) {
		t.Fatalf("stored file %s: %v", a.Path, err)
	}
	h.chat.waitFor(t, "the answer listing the file", has("image holiday.jpg: image/png"))
}

func TestAttachExecutableNamedPNGIsRefused(t *testing.T) {
	h := newMediaHarness(t, 1<<20, true)
	h.files.files["ref-elf"] = elfFile
	h.files.files["ref-ok"] = pngFile
	h.send("m1", "two photos", abi.Attachment{Kind: abi.AttachImage, Name: "photo.png", Ref: "ref-elf"},
		abi.Attachment{Kind: abi.AttachImage, Name: "fine.png", Ref: "ref-ok"})
	turn := h.a.next(t)
	if len(turn.Attachments) != 1 || turn.Attachments[0].Name != "fine.png" {
		t.Fatalf("the turn got %+v; want only fine.png", turn.Attachments)
	}
	h.chat.waitFor(t, "the refusal", func(m abi.OutboundMessage) bool {
		return m.Text == "⚠️ photo.png was not accepted: it is an executable, not an image."
	})
	h.chat.waitFor(t, "the answer", has("image fine.png"))
	if n := h.chat.count("not accepted"); n != 1 {
		t.Fatalf("%d refusal lines; sent %q", n, h.chat.texts())
	}
	sum := h.stored()
	if len(sum) != 1 {
		t.Fatalf("stored %v; want only fine.png's file", sum)
	}
	if _, err := h.store.Load(sum[0]); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(h.store.Path(sum[0])); !bytes.Equal(data, pngFile) {
		t.Fatal("the stored file is not fine.png")
	}
}

func TestAttachOversizedIsRefused(t *testing.T) {
	h := newMediaHarness(t, 1000, true)
	big := append(append([]byte{}, pngFile[:8]...), bytes.Repeat([]byte{1}, 5000)...)
	h.files.files["ref-big"] = big
	// Claimed too large: refused before anything is fetched.
	h.send("m1", "big one", abi.Attachment{Kind: abi.AttachImage, Name: "big.png", Size: 5008, Ref: "ref-big"})
	if turn := h.a.next(t); len(turn.Attachments) != 0 {
		t.Fatalf("attachments %+v", turn.Attachments)
	}
	h.chat.waitFor(t, "the refusal before fetching", has("big.png was not accepted: it is 4.9 KiB, more than the 1000 bytes a file may have"))
	if n := h.files.count(); n != 0 {
		t.Fatalf("%d fetches of a file claimed too large", n)
	}
	// Size not claimed: fetched, then refused by its real size.
	h.send("m2", "big again", abi.Attachment{Kind: abi.AttachImage, Name: "quiet.png", Ref: "ref-big"})
	if turn := h.a.next(t); len(turn.Attachments) != 0 {
		t.Fatalf("attachments %+v", turn.Attachments)
	}
	h.chat.waitFor(t, "the refusal after fetching", has("quiet.png was not accepted: it is 4.9 KiB, more than"))
	if n := h.files.count(); n != 1 {
		t.Fatalf("%d fetches; want 1", n)
	}
	if s := h.stored(); len(s) != 0 {
		t.Fatalf("stored %v", s)
	}
}

// TestAttachNewDuringFetch: a /new while the turn's attachment is being fetched is applied at
// once (the fetch holds no boundary), and the turn, when the fetch returns, neither runs nor
// answers into the new conversation.
func TestAttachNewDuringFetch(t *testing.T) {
	h := newMediaHarness(t, 1<<20, true)
	h.files.files["ref-photo"] = pngFile
	h.files.fetching, h.files.gate = make(chan string, 4), make(chan struct{})
	h.send("m1", "slow photo", abi.Attachment{Kind: abi.AttachImage, Name: "slow.png", Ref: "ref-photo"})
	select {
	case <-h.files.fetching:
	case <-time.After(testdeadline.Scale(20 * time.Second)):
		t.Fatal("the fetch did not start")
	}
	h.send("m2", "/new")
	h.chat.waitFor(t, "the /new confirmation while the fetch is in progress", has("New conversation"))
	var st, out string
	if err := h.db.QueryRow(`SELECT state, outcome FROM turn_inbox WHERE text = $1`, "slow photo").Scan(&st, &out); err != nil {
		t.Fatal(err)
	}
	if st != stInterrupted || !strings.Contains(out, "interrupted by /new") {
		t.Fatalf("the fetching turn's row: %s %q", st, out)
	}
	close(h.files.gate)
	h.send("m3", "ping")
	turn := h.a.next(t)
	if turn.Text != "ping" || len(turn.Attachments) != 0 {
		t.Fatalf("the first turn the agent saw: %q %+v; the interrupted turn ran", turn.Text, turn.Attachments)
	}
	h.chat.waitFor(t, "ping's answer", has("ping"))
	for _, text := range h.chat.texts() {
		if strings.Contains(text, "slow.png") || strings.Contains(text, "slow photo") {
			t.Fatalf("the interrupted turn answered: %q", h.chat.texts())
		}
	}
}

func TestAttachSendFileFromWorkDir(t *testing.T) {
	h := newMediaHarness(t, 1<<20, true)
	dir, err := h.e.workDir(h.key(dm))
	if err != nil {
		t.Fatal(err)
	}
	report := []byte("%PDF-1.7\nthe report\n")
	if err := os.WriteFile(filepath.Join(dir, "report.pdf"), report, 0o600); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "secret.txt")
	os.WriteFile(outside, []byte("secret\n"), 0o600)
	if err := os.Symlink(outside, filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	h.send("m1", "sendfile report.pdf\nsendfile "+outside+"\nsendfile link.txt\nsendfile ../x.txt\nsendfile missing.txt")
	m := h.chat.waitFor(t, "the file", func(m abi.OutboundMessage) bool { return len(m.Attachments) == 1 })
	a := m.Attachments[0]
	hash, ok := media.ParseRef(a.Ref)
	if !ok || a.Name != "report.pdf" || a.MIMEType != "application/pdf" || a.Kind != abi.AttachDocument || len(a.Data) != 0 || m.Text != "" {
		t.Fatalf("sent %+v (text %q): want a reference to the stored report, no bytes in the row", a, m.Text)
	}
	if data, err := h.store.Load(hash); err != nil || !bytes.Equal(data, report) {
		t.Fatalf("the stored file: %v", err)
	}
	for _, want := range []string{
		"secret.txt was not sent: it is outside this conversation's working directory.",
		"link.txt was not sent: it leads outside this conversation's working directory.",
		"x.txt was not sent: it is outside this conversation's working directory.",
		"missing.txt was not sent: there is no such file.",
	} {
		h.chat.waitFor(t, want, has(want))
	}
	if n := len(h.stored()); n != 1 {
		t.Fatalf("%d files stored; want the report only", n)
	}
	for _, m := range h.chat.sentCopy() {
		if len(m.Attachments) > 0 && m.Attachments[0].Name != "report.pdf" {
			t.Fatalf("sent %+v", m.Attachments)
		}
	}
}

func TestAttachNoFilesOnPlatformWithout(t *testing.T) {
	h := newMediaHarness(t, 1<<20, false)
	dir, _ := h.e.workDir(h.key(dm))
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello\n"), 0o600)
	h.send("m1", "sendfile a.txt")
	h.chat.waitFor(t, "the line", has(NoFiles))
	for _, m := range h.chat.sentCopy() {
		if len(m.Attachments) > 0 {
			t.Fatalf("sent a file to a platform without attachments: %+v", m)
		}
	}
}

func TestAttachCommandsRunInTheWorkDir(t *testing.T) {
	h := newMediaHarness(t, 1<<20, true)
	h.send("m1", "sh pwd > made.txt && pwd")
	dir := h.e.WorkDir(h.key(dm))
	h.chat.waitFor(t, "pwd's output", has(dir))
	if _, err := os.Stat(filepath.Join(dir, "made.txt")); err != nil {
		t.Fatal(err)
	}
}

// TestAttachInlineOversizedStaysOutOfTheInbox: bytes a platform delivered inline over the cap
// are not kept in the inbox row, and the turn refuses the file by its size without a fetch.
func TestAttachInlineOversizedStaysOutOfTheInbox(t *testing.T) {
	h := newMediaHarness(t, 1000, true)
	big := append(append([]byte{}, pngFile[:8]...), bytes.Repeat([]byte{1}, 3000)...)
	h.send("m1", "inline", abi.Attachment{Kind: abi.AttachImage, Name: "inline.png", Data: big},
		abi.Attachment{Kind: abi.AttachImage, Name: "small.png", Data: pngFile})
	turn := h.a.next(t)
	if len(turn.Attachments) != 1 || turn.Attachments[0].Name != "small.png" {
		t.Fatalf("attachments %+v", turn.Attachments)
	}
	h.chat.waitFor(t, "the refusal", has("inline.png was not accepted: it is 2.9 KiB, more than the 1000 bytes"))
	var atts string
	if err := h.db.QueryRow(`SELECT attachments FROM turn_inbox WHERE text = 'inline'`).Scan(&atts); err != nil {
		t.Fatal(err)
	}
	if len(atts) > 1000 {
		t.Fatalf("the inbox row holds %d bytes of attachments", len(atts))
	}
	if n := h.files.count(); n != 0 {
		t.Fatalf("%d fetches", n)
	}
}
