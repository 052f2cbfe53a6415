package plugin

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// withSection returns mod with its section id (for a custom section, the one called custom)
// replaced by body, or body appended as a new section when mod has none.
func withSection(t testing.TB, mod []byte, id byte, custom string, body []byte) []byte {
	t.Helper()
	r := reader{b: mod, off: 8}
	for r.off < len(r.b) {
		start := r.off
		sid, s, err := r.section()
		if err != nil {
			t.Fatal(err)
		}
		match := sid == id
		if match && id == 0 {
			n, _ := s.name()
			match = n == custom
		}
		if match {
			return bytes.Join([][]byte{mod[:start], section(id, body), mod[r.off:]}, nil)
		}
	}
	return append(bytes.Clone(mod), section(id, body)...)
}

// hugeCounts are Wasm sections that declare far more than they hold, each an allocation of
// GiBs in wazero's decoder: the file must be refused before it is compiled.
func hugeCounts(t testing.TB, mod []byte) map[string][]byte {
	const huge = 0xffffffff
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	return map[string][]byte{
		"data segments":    withSection(t, mod, 11, "", cat(leb(huge), []byte{0, 0x41, 0, 0x0b}, leb(1), []byte("a"))),
		"data bytes":       withSection(t, mod, 11, "", cat(leb(1), []byte{0, 0x41, 0, 0x0b}, leb(huge), []byte("a"))),
		"code bodies":      withSection(t, mod, 10, "", cat(leb(huge), leb(2), leb(0), []byte{0x0b})),
		"locals":           withSection(t, mod, 10, "", cat(leb(1), leb(7), leb(1), leb(huge), []byte{0x7f, 0x0b})),
		"type parameters":  withSection(t, mod, 1, "", cat(leb(1), []byte{0x60}, leb(huge), []byte{0x7f})),
		"element indices":  withSection(t, mod, 9, "", cat(leb(1), leb(0), []byte{0x41, 0, 0x0b}, leb(huge), leb(0))),
		"function names":   withSection(t, mod, 0, "name", cat(name("name"), []byte{1}, leb(6), leb(huge), leb(0))),
		"imports":          withSection(t, mod, 2, "", cat(leb(huge), name("m"))),
		"element exprs":    withSection(t, mod, 9, "", cat(leb(1), leb(5), []byte{0x70}, leb(huge), []byte{0xd2, 0, 0x0b})),
		"local name lists": withSection(t, mod, 0, "name", cat(name("name"), []byte{2}, leb(8), leb(1), leb(0), leb(huge), leb(0))),
	}
}

func TestCheckBoundsRefusesHugeCounts(t *testing.T) {
	for what, mod := range hugeCounts(t, wasmModule()) {
		err := checkBounds(mod)
		if err == nil {
			t.Errorf("%s: accepted", what)
			continue
		}
		if !strings.Contains(err.Error(), "section") {
			t.Errorf("%s: %q does not name the section", what, err)
		}
	}
}

// TestCheckBoundsAcceptsRealModules: every first-party plugin (with its thousands of data
// segments, elements and names) passes, as do the hostile fixtures that are meant to load.
func TestCheckBoundsAcceptsRealModules(t *testing.T) {
	dirs, _ := filepath.Glob("../../plugins/*")
	dirs = append(dirs, probeDir, hostileTD+"loop", hostileTD+"recurse")
	for _, dir := range dirs {
		wasm, err := os.ReadFile(wasmbuild.MustBuild(t, dir))
		if err != nil {
			t.Fatal(err)
		}
		if err := checkBounds(wasm); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
	}
}

// TestHugeCountsAreRejectedAtLoad: echo.wasm with each of its sections swapped for one that
// declares billions of entries is rejected at load with the section named, and the host goes
// on serving its other plugin. Before checkBounds, the first of them ended the process with
// "fatal error: runtime: out of memory" inside wazero's decoder.
func TestHugeCountsAreRejectedAtLoad(t *testing.T) {
	echo, err := os.ReadFile(wasmbuild.MustBuild(t, echoDir))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bad := hugeCounts(t, echo)
	i := 0
	for _, mod := range bad {
		i++
		if err := os.WriteFile(filepath.Join(dir, "bad"+string(rune('a'+i))+".wasm"), mod, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := newRuntime(t, map[string]string{"probe.wasm": probeDir}, Config{Dir: dir})
	rej := r.Scan(context.Background())
	if len(rej) != len(bad) {
		t.Fatalf("%d rejections, want %d: %v", len(rej), len(bad), rej)
	}
	for _, x := range rej {
		if !strings.Contains(x.Error, "section") || !strings.Contains(x.Error, "declared") && !strings.Contains(x.Error, "locals") {
			t.Errorf("%s: %q", x.Path, x.Error)
		}
	}
	if _, err := probeSend(t, r.Get("probe"), "main", "version"); err != nil {
		t.Fatalf("the probe after the rejections: %v", err)
	}
}
