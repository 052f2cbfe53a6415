package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
	"github.com/hermes-host/hermes-host/internal/config"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

// scrape is one /metrics exposition, parsed.
type scrape map[string]*dto.MetricFamily

// scrapeMetrics GETs /metrics from admin with the token and parses the text exposition.
func scrapeMetrics(t *testing.T, admin, token string) scrape {
	t.Helper()
	req, _ := http.NewRequest("GET", admin+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return families
}

// value is the value of the series name{labels} ("k=v" pairs; every label of the series must be
// given), and whether it is there.
func (s scrape) value(name string, labels ...string) (float64, bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
	want := map[string]string{}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		want[k] = v
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if len(got) != len(want) {
			continue
		}
		match := true
		for k, v := range want {
			match = match && got[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		}
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}

// series lists name's series as "name{k=v,...} value", for failure messages.
func (s scrape) series(name string) []string {
	var out []string
	for _, m := range s[name].GetMetric() {
		var ls []string
		for _, lp := range m.GetLabel() {
			ls = append(ls, lp.GetName()+"="+lp.GetValue())
		}
		v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		out = append(out, fmt.Sprintf("%s{%s} %g", name, strings.Join(ls, ","), v))
	}
	slices.Sort(out)
	return out
}

// TestMetricsAfterASession: after a scripted session on the real echo plugin with the OpenAI
// agent on a loopback model server (turns, one failing at the model; a background process
// dropped by /new, one still running; an uncertain send; a pairing request; a queued command;
// a notification turn; a reply held by the platform's flood control), /metrics shows each
// series with the values the session produced; on SQLite and on PostgreSQL (the state series'
// queries run on both), where a second host reports the same state and none of the events.
func TestMetricsAfterASession(t *testing.T) {
	t.Parallel()
	storetest.Each(t, metricsAfterASession)
}

func metricsAfterASession(t *testing.T, backend storetest.Backend) {
	llm := agenttest.New(t)
	llm.Answer(func(w http.ResponseWriter, r *http.Request, req agenttest.Request) {
		msgs := req.Messages()
		last, _ := msgs[len(msgs)-1]["content"].(string)
		agenttest.Text("answer to "+last)(w, r, req)
	})
	fake := echotest.New()
	t.Cleanup(fake.Close)
	source := backend.Fresh(t).Source
	configure := func(cfg *config.Config) {
		no := false
		cfg.Agent = config.Agent{Kind: "openai", BaseURL: llm.URL, Model: "test-model", Check: "off", Stream: &no,
			ContextTokens: 100000, Tools: &no}
		echo := cfg.Plugins["echo"]
		echo.Profiles["locked"] = map[string]any{"outbox_url": fake.URL() + "/outbox"}
		echo.Access["locked"] = config.Access{} // pairing (the default), nobody approved
		cfg.Plugins["echo"] = echo
	}
	w := newWorldConfigured(t, source, fake, nil, configure)
	const token = "metrics-token"
	admin := httptest.NewServer(w.g.AdminHandler(token))
	t.Cleanup(admin.Close)
	deadline := testdeadline.Scale(30 * time.Second)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(deadline); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				for _, r := range w.rows("") {
					t.Logf("%s %s %q %s", r.State, r.Kind, r.Target.Text, r.Reason)
				}
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}

	start := time.Now()
	step := func(what string) { t.Logf("%6.2fs %s", time.Since(start).Seconds(), what) }
	// A turn, answered by the model.
	w.say("1", "", "hi")
	w.wait("the answer", echotest.Has("answer to hi"))
	step("the answer")
	// A background process whose completion /new makes stale: dropped, not delivered.
	stale := w.spawn(src("1", ""), "sleep 0.3; echo stale-output", nil)
	w.say("1", "", "/new")
	w.wait("the /new confirmation", echotest.Has("New conversation"))
	if rec := w.event(stale); !strings.Contains(rec.Outcome, "user_boundary") {
		t.Fatalf("the stale completion: %q", rec.Outcome)
	}
	step("the stale completion")
	// A background process that is still running at the scrape.
	running := w.spawn(src("1", ""), "sleep 600", nil)
	t.Cleanup(func() { w.g.procs.Kill(context.Background(), running, process.KillOptions{}) })
	// A turn the model fails (HTTP 500): the user is told.
	llm.Push(agenttest.Error(500, `{"error":{"message":"boom"}}`))
	w.say("1", "", "fail please")
	waitFor("the failed turn's notice", func() bool { return len(fake.Messages()) == 3 })
	step("the failed turn")
	// An uncertain send: the platform takes the answer and cuts the connection.
	fake.Fail(echotest.Fault{Cut: true})
	w.say("1", "", "cut")
	waitFor("the uncertain send", func() bool {
		rows, _ := w.g.ledger.List(context.Background(), delivery.Filter{Uncertain: true})
		return len(rows) == 1
	})
	step("the uncertain send")
	// The platform answers again: the next answer goes out, and the chat is told about the
	// uncertain one.
	w.say("1", "", "after")
	w.wait("the next answer", echotest.Has("answer to after"))
	w.wait("the uncertain notice", echotest.Has(delivery.UncertainNotice))
	step("the uncertain notice")
	// An unknown user writes to the locked profile: a pairing code.
	body, _ := json.Marshal(map[string]string{"id": "p1", "chat_id": "77", "chat_type": "dm", "user_id": "stranger", "text": "let me in"})
	resp, err := http.Post(w.srv.URL+"/hooks/echo/locked", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	w.wait("the pairing code", echotest.Has("pairing code"))
	waitFor("every delivery settled", func() bool { return len(w.rows(delivery.Pending))+len(w.rows(delivery.Sending)) == 0 })

	step("the pairing code")
	// A queued command, and a process whose completion becomes a notification turn.
	w.say("1", "", "/sessions")
	w.wait("the list of sessions", echotest.Has("Sessions of this chat"))
	done := w.spawn(src("1", ""), "echo done-output", nil)
	w.wait("the notification turn's answer", echotest.Has("done-output"))
	if rec := w.event(done); rec.QueueState != "done" {
		t.Fatalf("the completion: %+v", rec)
	}
	step("the notification")
	// A reply the platform's flood control holds: the ledger's queue has one row, as old as it is.
	fake.Throttle(true)
	said := time.Now()
	w.say("1", "", "held")
	var held delivery.Row
	waitFor("the held reply", func() bool {
		rows := w.rows(delivery.Pending)
		if len(rows) == 1 && rows[0].Attempts > 0 {
			held = rows[0]
		}
		return held.ID != "" && time.Since(held.CreatedAt) >= time.Second
	})
	s := scrapeMetrics(t, admin.URL, token)
	if n, _ := s.value("hermes_queue_depth", "queue=deliveries"); n != 1 {
		t.Errorf("deliveries queue depth %v with one reply held; %q", n, s.series("hermes_queue_depth"))
	}
	// The row's time is stored in whole milliseconds: at most 1 ms older than it is.
	if age, _ := s.value("hermes_queue_oldest_age_seconds", "queue=deliveries"); age < 1 || age > time.Since(said).Seconds()+0.001 {
		t.Errorf("the held reply's age %vs: want between 1s and %v", age, time.Since(said))
	}
	fake.Throttle(false)
	w.wait("the held reply", echotest.Has("answer to held"))
	waitFor("every delivery settled", func() bool { return len(w.rows(delivery.Pending))+len(w.rows(delivery.Sending)) == 0 })
	step("the final scrape")

	s = scrapeMetrics(t, admin.URL, token)
	type series struct {
		name   string
		labels []string
		value  float64
	}
	want := []series{
		// Deliveries by state and kind: the four answers (one of them the failed turn's
		// apology, which answers its message), the uncertain one, the notices (/new's
		// confirmation, the uncertain-outcome notice, the pairing code, the list of sessions), the
		// notification turn's answer and the stale completion's drop record.
		{"hermes_deliveries", []string{"state=delivered", "kind=reply"}, 4},
		{"hermes_deliveries", []string{"state=failed", "kind=reply"}, 1},
		{"hermes_deliveries", []string{"state=delivered", "kind=notice"}, 4},
		{"hermes_deliveries", []string{"state=delivered", "kind=notification"}, 1},
		{"hermes_deliveries", []string{"state=dropped", "kind=notification"}, 1},
		{"hermes_deliveries", []string{"state=pending", "kind=reply"}, 0},
		{"hermes_deliveries", []string{"state=dropped", "kind=reply"}, 0},
		{"hermes_deliveries_uncertain", []string{"plugin=echo", "profile=main"}, 1},
		{"hermes_deliveries_dropped_total", []string{"reason=stale"}, 1},
		// Turns: hi, fail please, cut, after, held; /sessions; the completion's. The /new acted
		// at once, not as a turn.
		{"hermes_turns_started_total", []string{"kind=message"}, 5},
		{"hermes_turns_finished_total", []string{"kind=message", "outcome=done"}, 4},
		{"hermes_turns_finished_total", []string{"kind=message", "outcome=failed"}, 1},
		{"hermes_turns_started_total", []string{"kind=command"}, 1},
		{"hermes_turns_finished_total", []string{"kind=command", "outcome=done"}, 1},
		{"hermes_turns_started_total", []string{"kind=notification"}, 1},
		{"hermes_turns_finished_total", []string{"kind=notification", "outcome=done"}, 1},
		// The model: the message turns but the failed one, and the notification turn.
		{"hermes_agent_model_calls_total", []string{"profile=main", "outcome=ok"}, 5},
		{"hermes_agent_model_calls_total", []string{"profile=main", "outcome=error"}, 1},
		{"hermes_agent_model_failures_total", []string{"profile=main", "reason=http_500"}, 1},
		{"hermes_processes", []string{"state=running"}, 1},
		{"hermes_processes", []string{"state=exited"}, 2},
		{"hermes_processes", []string{"state=killed"}, 0},
		{"hermes_pairing_requests", []string{"plugin=echo", "profile=locked"}, 1},
		{"hermes_auth_pairing_codes_total", []string{"plugin=echo", "profile=locked"}, 1},
		{"hermes_state_up", nil, 1},
	}
	for _, q := range []string{"inbound", "turns", "deliveries", "process_events"} {
		want = append(want, series{"hermes_queue_depth", []string{"queue=" + q}, 0},
			series{"hermes_queue_oldest_age_seconds", []string{"queue=" + q}, 0})
	}
	for _, c := range want {
		got, ok := s.value(c.name, c.labels...)
		if !ok || got != c.value {
			t.Errorf("%s%v = %v (present %v), want %v; the series: %q", c.name, c.labels, got, ok, c.value, s.series(c.name))
		}
	}
	// Every model call the server saw is counted, and nothing else.
	if n := len(llm.Chats()); n != 6 {
		t.Errorf("the model server saw %d chat requests, want 6", n)
	}
	// No series carries a chat id, a session key or a user's text as a label.
	for name, f := range s {
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v := lp.GetValue(); v == "1" || v == "77" || v == "stranger" || strings.Contains(v, "agent:") || strings.Contains(v, "answer") {
					t.Errorf("%s has label %s=%q", name, lp.GetName(), v)
				}
			}
		}
	}
	if backend.Name == "postgres" {
		// A second host of the deployment reports the same state, and none of the first
		// host's events.
		w2 := newWorldConfigured(t, source, fake, nil, configure)
		admin2 := httptest.NewServer(w2.g.AdminHandler(token))
		t.Cleanup(admin2.Close)
		s2 := scrapeMetrics(t, admin2.URL, token)
		for _, c := range want {
			got, _ := s2.value(c.name, c.labels...)
			switch {
			case strings.HasSuffix(c.name, "_total") && got != 0:
				t.Errorf("the second host counts %s%v = %v of the first host's events", c.name, c.labels, got)
			case !strings.HasSuffix(c.name, "_total") && got != c.value:
				t.Errorf("the second host reports %s%v = %v, the first %v", c.name, c.labels, got, c.value)
			}
		}
	}
	// The README's table of series lists every one /metrics has.
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "\n### Metrics\n")
	section, _, _ = strings.Cut(section, "\n### ")
	documented := regexp.MustCompile("`(hermes_[a-z_]+)`").FindAllStringSubmatch(section, -1)
	for name := range s {
		if strings.HasPrefix(name, "hermes_") && !slices.ContainsFunc(documented, func(m []string) bool { return m[1] == name }) {
			t.Errorf("%s is not in the README's table of series (### Metrics)", name)
		}
	}
	// The alerting rules there parse, and name series of the table.
	_, rules, _ := strings.Cut(section, "```yaml\n")
	rules, _, _ = strings.Cut(rules, "```")
	var parsed struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal([]byte(rules), &parsed); err != nil || len(parsed.Groups) != 1 || len(parsed.Groups[0].Rules) == 0 {
		t.Fatalf("the README's alerting rules: %v %+v", err, parsed)
	}
	for _, r := range parsed.Groups[0].Rules {
		names := regexp.MustCompile(`hermes_[a-z_]+`).FindAllString(r.Expr, -1)
		if r.Alert == "" || len(names) == 0 {
			t.Errorf("rule %+v: no alert name or no series", r)
		}
		for _, name := range names {
			if !slices.ContainsFunc(documented, func(m []string) bool { return m[1] == name }) {
				t.Errorf("rule %s names %s, which the table does not list", r.Alert, name)
			}
		}
	}
	step("done")
}
