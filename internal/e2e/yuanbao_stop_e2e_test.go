package e2e

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ybt "github.com/hermes-host/hermes-host/conformance/yuanbaotest"
)

// touchPlugin rewrites the plugins directory's name.wasm with a Wasm custom section appended:
// the same code in other bytes, which the host's watcher reloads as it does a new version,
// without a rebuild. It returns the new file's sha256.
func touchPlugin(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name+".wasm")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	section := "hermes-e2e-reload"
	content := binary.AppendUvarint(nil, uint64(len(section)))
	content = append(append(content, section...), nonce[:]...)
	b = append(append(b, 0), binary.AppendUvarint(nil, uint64(len(content)))...) // custom section: id 0, size
	b = append(b, content...)
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ybPlugin is yuanbao's entry on /api/plugins.
type ybPlugin struct {
	SHA256 string
	Loaded time.Time
	Status map[string]struct{ State, Message string }
}

func (h *ybHost) plugin() ybPlugin {
	h.t.Helper()
	var api struct {
		Plugins []struct {
			Name string
			ybPlugin
		}
	}
	h.api("/api/plugins", &api)
	for _, p := range api.Plugins {
		if p.Name == "yuanbao" {
			return p.ybPlugin
		}
	}
	h.t.Fatal("no yuanbao plugin on /api/plugins")
	return ybPlugin{}
}

// health is /healthz's answer.
func (h *ybHost) health() (status string, stopped []string) {
	h.t.Helper()
	var v struct {
		Status  string
		Stopped []string
	}
	adminRequest(h.t, "GET", h.admin, h.data, "/healthz", "", &v)
	return v.Status, v.Stopped
}

// connectedGauge is hermes_platform_connected{plugin="yuanbao",profile="main"} on /metrics
// (-1 when absent).
func (h *ybHost) connectedGauge() float64 {
	h.t.Helper()
	var body string
	adminRequest(h.t, "GET", h.admin, h.data, "/metrics", "", &body)
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `hermes_platform_connected{plugin="yuanbao",profile="main"} `); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				h.t.Fatalf("gauge %q", sc.Text())
			}
			return f
		}
	}
	return -1
}

// TestYuanbaoReloadLiftsAStop (issue 29, item 5): after a permanent close (4012) the profile is
// stopped, and /healthz says degraded naming it, and hermes_platform_connected is 0; a reload of
// the plugin reconnects within 2 s of the new version's load (it took about a minute, while
// /api/plugins still said "reload the plugin"), the status shows the bound connection at once
// (it said "not connected" for 16-25 s), and health and the gauge follow. Times come from the
// host's load time and the fake's record of the AUTH_BIND.
func TestYuanbaoReloadLiftsAStop(t *testing.T) {
	h := startYuanbaoHost(t, "", "")
	bot := h.bot
	eventually(t, "the connection on /healthz and /metrics", func() bool {
		status, stopped := h.health()
		return status == "ok" && len(stopped) == 0 && h.connectedGauge() == 1
	})

	bot.Close(4012, "invalid token")
	eventually(t, "the stop on /api/plugins", func() bool { return h.plugin().Status["main"].State == "stopped" })
	if status, stopped := h.health(); status != "degraded" || len(stopped) != 1 || stopped[0] != "yuanbao/main" {
		t.Fatalf("/healthz while stopped: %s, stopped %q", status, stopped)
	}
	if g := h.connectedGauge(); g != 0 {
		t.Fatalf("hermes_platform_connected %v while stopped", g)
	}
	binds := bot.Binds()

	sum := touchPlugin(t, h.plugins, "yuanbao")
	var loaded time.Time
	eventually(t, "the reload", func() bool {
		p := h.plugin()
		loaded = p.Loaded
		return p.SHA256 == sum
	})
	h.waitFor("the bind after the reload", func() bool { return bot.Binds() == binds+1 && bot.Connected() })
	auths := bot.Requests(ybt.CmdAuthBind)
	bound := auths[len(auths)-1].At
	t.Logf("reconnected %v after the new version loaded", bound.Sub(loaded).Round(time.Millisecond))
	if d := bound.Sub(loaded); d > 2*time.Second {
		t.Fatalf("reconnected %v after the reload, want within 2 s", d)
	}
	eventually(t, "the bound connection on /api/plugins", func() bool {
		st := h.plugin().Status["main"]
		return st.State == "ok" && strings.Contains(st.Message, "connected as")
	})
	shown := time.Since(bound)
	t.Logf("status ok on /api/plugins %v after the bind", shown.Round(time.Millisecond))
	if shown > 5*time.Second {
		t.Fatalf("the status showed the connection %v after the bind", shown)
	}
	if status, stopped := h.health(); status != "ok" || len(stopped) != 0 {
		t.Fatalf("/healthz after the reload: %s, stopped %q", status, stopped)
	}
	if g := h.connectedGauge(); g != 1 {
		t.Fatalf("hermes_platform_connected %v after the reload", g)
	}
}
