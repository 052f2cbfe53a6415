package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance/echotest"
)

// sayWith sends a chat message with attachments through the echo plugin's webhook.
func (w *world) sayWith(chat, text string, atts ...echotest.Attachment) {
	w.t.Helper()
	body, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("m%d", w.n.Add(1)), "chat_id": chat, "chat_type": abi.ChatDM,
		"user_id": "u1", "text": text, "attachments": atts})
	resp, err := http.Post(w.srv.URL+"/hooks/echo/main", "application/json", bytes.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		w.t.Fatalf("webhook %d", resp.StatusCode)
	}
}

// TestMediaThroughEcho: a photo posted to the echo platform is fetched through echo.wasm's
// fetch export, sniffed and handed to the agent; an executable named .png is refused with one
// line and not stored; a file of the conversation's working directory goes back through echo
// as an attachment (its bytes loaded from the media store at send time), and one outside it
// is refused.
func TestMediaThroughEcho(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	png := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), bytes.Repeat([]byte{9}, 200)...)
	elf := append([]byte("\x7fELF\x02\x01\x01\x00"), bytes.Repeat([]byte{0}, 200)...)
	w.sayWith("c1", "", echotest.Attachment{Kind: abi.AttachImage, Name: "cat.png", MIMEType: "image/png", URL: echotest.DataURL("image/png", png)},
		echotest.Attachment{Kind: abi.AttachImage, Name: "photo.png", MIMEType: "image/png", URL: echotest.DataURL("image/png", elf)})
	w.wait("the refusal", func(m echotest.Message) bool {
		return m.Text == "⚠️ photo.png was not accepted: it is an executable, not an image."
	})
	w.wait("the answer listing the photo", func(m echotest.Message) bool {
		return strings.Contains(m.Text, fmt.Sprintf("- image cat.png: image/png, %d bytes", len(png)))
	})
	ents, err := os.ReadDir(filepath.Join(w.g.cfg.DataDir, "media"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("media dir: %v %v; want cat.png's file only", ents, err)
	}

	key, err := w.g.kernel.Key(src("c1", ""))
	if err != nil {
		t.Fatal(err)
	}
	dir := w.g.engine.WorkDir(key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	report := []byte("%PDF-1.7\nquarterly numbers\n")
	if err := os.WriteFile(filepath.Join(dir, "report.pdf"), report, 0o600); err != nil {
		t.Fatal(err)
	}
	w.say("c1", "", "sendfile report.pdf\nsendfile /etc/hostname")
	m := w.wait("the file", func(m echotest.Message) bool { return len(m.Attachments) == 1 })
	a := m.Attachments[0]
	data, err := a.Bytes()
	if err != nil || !bytes.Equal(data, report) || a.Name != "report.pdf" || a.Kind != abi.AttachDocument || a.MIMEType != "application/pdf" {
		t.Fatalf("the platform got %+v (%v)", a, err)
	}
	w.wait("the refusal of a file outside", func(m echotest.Message) bool {
		return m.Text == "⚠️ hostname was not sent: it is outside this conversation's working directory."
	})
	// The ledger row holds a reference to the file, not its bytes.
	var target string
	if err := w.g.db.QueryRow(`SELECT target FROM deliveries WHERE target LIKE '%hermes-media:%'`).Scan(&target); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(target, `"data"`) {
		t.Fatalf("the ledger row holds the file's bytes: %s", target)
	}
}
