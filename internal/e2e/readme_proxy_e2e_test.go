package e2e

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	st "github.com/hermes-host/hermes-host/conformance/slacktest"
	"github.com/hermes-host/hermes-host/internal/config"
)

// readmeProxyExample is the README's Slack Socket Mode configuration behind a proxy or a fake
// (section "Pointing a platform plugin at a proxy or a fake").
func readmeProxyExample(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range regexp.MustCompile("(?s)```yaml\n(plugins:\n.*?)```").FindAllStringSubmatch(string(readme), -1) {
		if strings.Contains(b[1], "egress_alias:") && strings.Contains(b[1], "wss-primary.slack.com") {
			return b[1]
		}
	}
	t.Fatal("README.md has no Slack example with egress_alias for the socket")
	return ""
}

// TestReadmeSlackBehindAProxy (issue 29, item 4): the README's example of Slack in Socket Mode
// behind a proxy loads, and with its two addresses replaced by the fake's (the Web API and the
// socket, on ports of their own) the real binary connects, under strict_egress and the plugin's
// egress scopes, and answers a mention; without the socket's alias the socket is refused.
func TestReadmeSlackBehindAProxy(t *testing.T) {
	example := readmeProxyExample(t)
	s := st.New(t)
	s.SetSocketMode(true)
	team := s.Team()
	team.AddChannel(slackGeneral, "general")
	team.AddUser(slackAnn, "ann")
	host := func(raw string) string {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return u.Host
	}
	yaml := strings.NewReplacer("127.0.0.1:9001", host(s.URL()), "127.0.0.1:9002", host(s.SocketURL())).Replace(example)
	if yaml == example {
		t.Fatalf("the example's addresses are not 127.0.0.1:9001 and :9002:\n%s", example)
	}
	t.Setenv("SLACK_OFFICE_BOT_TOKEN", st.DefaultBotToken)
	t.Setenv("SLACK_OFFICE_APP_TOKEN", s.AppToken())
	bin, plugins := buildHost(t)
	write := func(yaml string) (data, path string) {
		data = t.TempDir()
		path = filepath.Join(data, "hermes.yaml")
		// The example as written, under strict_egress, with someone admitted to talk.
		os.WriteFile(path, []byte("strict_egress: true\n"+yaml+"    access:\n      office: {allow_all: true, groups: {\"*\": {allow_all: true}}}\n"), 0o600)
		return data, path
	}
	data, path := write(yaml)
	if _, err := config.Load(path); err != nil {
		t.Fatalf("the README's example does not load: %v\n%s", err, yaml)
	}
	h := serve(t, bin, plugins, data, "--config", path)
	stop, admin := h.Stop, h.Admin
	t.Cleanup(stop)
	if err := s.Wait(60*time.Second, func() bool { n, _ := s.SocketConns(); return n == 1 }); err != nil {
		t.Fatalf("the socket never connected: %v\nrequests %+v", err, s.Requests(""))
	}
	m := team.Mention(slackGeneral, slackAnn, "help")
	if err := s.Wait(60*time.Second, func() bool { return len(s.PostedTexts(team.ID, slackGeneral, m.TS)) > 0 }); err != nil {
		t.Fatalf("the mention was not answered: %v", err)
	}
	if denied := egressDenied(t, admin, data); denied != 0 {
		t.Fatalf("%d egress refusals with the README's aliases", denied)
	}
	stop()
	if err := s.Wait(30*time.Second, func() bool { n, _ := s.SocketConns(); return n == 0 }); err != nil {
		t.Fatalf("the stopped host's socket stays open: %v", err)
	}

	// Without the socket's alias, the WebSocket is outside the scopes and refused.
	one := regexp.MustCompile(`(?m)^.*wss-primary\.slack\.com.*\n`).ReplaceAllString(yaml, "")
	opened := len(s.Requests("apps.connections.open"))
	data, path = write(one)
	h = serve(t, bin, plugins, data, "--config", path)
	stop, admin = h.Stop, h.Admin
	t.Cleanup(stop)
	eventually(t, "the socket refused by the egress policy", func() bool { return egressDenied(t, admin, data) > 0 })
	if n, _ := s.SocketConns(); n != 0 || len(s.Requests("apps.connections.open")) == opened {
		t.Fatalf("%d sockets open (want none), %d apps.connections.open since", n, len(s.Requests("apps.connections.open"))-opened)
	}
}

// egressDenied is the slack plugin's count of refused egress calls, from /api/plugins.
func egressDenied(t *testing.T, admin, data string) int64 {
	t.Helper()
	var api struct {
		Plugins []struct {
			Name         string
			EgressDenied int64  `json:"egress_denied"`
			LastDenied   string `json:"last_denied"`
		}
	}
	adminRequest(t, "GET", admin, data, "/api/plugins", "", &api)
	for _, p := range api.Plugins {
		if p.Name == "slack" {
			if p.EgressDenied > 0 {
				t.Logf("last refusal: %s", p.LastDenied)
			}
			return p.EgressDenied
		}
	}
	t.Fatal("no slack plugin on /api/plugins")
	return 0
}
