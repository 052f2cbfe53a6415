package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/echotest"
)

// host is a running hermes-host binary with the echo plugin pointed at a fake.
type host struct {
	t       *testing.T
	bin     string
	plugins string
	data    string
	config  string
	addr    string
	admin   string
	stop    func()
	pid     int
	n       int
}

func newHost(t *testing.T, fake *echotest.Server) *host {
	bin, plugins := buildHost(t)
	h := &host{t: t, bin: bin, plugins: plugins, data: t.TempDir()}
	h.config = filepath.Join(h.data, "hermes.yaml")
	os.WriteFile(h.config, []byte(fmt.Sprintf(`
demo: {plugin: ""}   # echo's main profile talks to the fake, not to the demo outbox
plugins:
  echo:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {outbox_url: "%s/outbox"}
    access:
      main: {allow_all: true, tools: [shell, processes]}
`, fake.URL())), 0o600)
	h.start()
	return h
}

func (h *host) start() {
	sh := serve(h.t, h.bin, h.plugins, h.data, "--config", h.config)
	h.addr, h.stop, h.pid, h.admin = sh.Addr, sh.Stop, sh.PID, sh.Admin
}

// kill9 kills the serving host without warning.
func (h *host) kill9() {
	syscall.Kill(h.pid, syscall.SIGKILL)
	h.stop()
}

// say posts a chat message to the echo plugin's webhook.
func (h *host) say(text string) {
	h.t.Helper()
	h.n++
	body, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("m%d-%d", time.Now().UnixNano(), h.n), "chat_id": "42", "user_id": "me", "text": text})
	resp, err := http.Post("http://"+h.addr+"/hooks/echo/main", "application/json", strings.NewReader(string(body)))
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		h.t.Fatalf("webhook answered %d", resp.StatusCode)
	}
}

type deliveryRow struct {
	ID, State, Reason, Kind string
	Target                  struct{ Text string }
}

func (h *host) deliveries(state string) []deliveryRow {
	var out struct{ Deliveries []deliveryRow }
	adminRequest(h.t, "GET", h.admin, h.data, "/api/deliveries?state="+state, "", &out)
	return out.Deliveries
}

func mustWait(t *testing.T, fake *echotest.Server, what string, match func(echotest.Message) bool) echotest.Message {
	t.Helper()
	m, ok := fake.Wait(30*time.Second, match)
	if !ok {
		var texts []string
		for _, m := range fake.Messages() {
			texts = append(texts, m.Text)
		}
		t.Fatalf("timed out waiting for %s; the platform got %q", what, texts)
	}
	return m
}

// TestSeedHowToTest is the seed pull request's "How to Test", end to end with the real binary,
// the real echo.wasm and a loopback platform: a notify-on-complete process, then /new: its output
// never reaches the chat and the drop is recorded; the same with compression instead: the
// completion reaches the continuation.
func TestSeedHowToTest(t *testing.T) {
	fake := echotest.New()
	defer fake.Close()
	h := newHost(t, fake)

	h.say("run sleep 1; echo stale-output-A")
	mustWait(t, fake, "the start confirmation", echotest.Has("Started"))
	h.say("/new")
	mustWait(t, fake, "the /new confirmation", echotest.Has("New conversation"))
	eventually(t, "the stale completion to be recorded as dropped", func() bool {
		for _, r := range h.deliveries("dropped") {
			if strings.Contains(r.Target.Text, "stale-output-A") && strings.Contains(r.Reason, "user_boundary") {
				return true
			}
		}
		return false
	})
	for _, m := range fake.Messages() {
		if strings.Contains(m.Text, "stale-output-A") && !strings.HasPrefix(m.Text, "Started") {
			t.Fatalf("stale output reached the chat after /new: %q", m.Text)
		}
	}

	h.say("run sleep 1; echo continued-output-B")
	mustWait(t, fake, "the second start", echotest.Has("continued-output-B"))
	h.say("/compress")
	mustWait(t, fake, "the compress confirmation", echotest.Has("Compressed"))
	mustWait(t, fake, "the completion in the continuation", func(m echotest.Message) bool {
		return strings.Contains(m.Text, "finished successfully") && strings.Contains(m.Text, "continued-output-B")
	})
	// ps log still shows the dropped process's output.
	out, err := exec.Command(h.bin, "--data-dir", h.data, "ps").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dropped: stale: user_boundary") {
		t.Fatalf("ps: %v\n%s", err, out)
	}
}

// TestCrashBetweenSendingAndAnswer kills the host while the platform holds a send unanswered;
// after restart the ledger reports the message as failed (outcome unknown) and nothing is sent
// twice.
func TestCrashBetweenSendingAndAnswer(t *testing.T) {
	fake := echotest.New()
	defer fake.Close()
	h := newHost(t, fake)
	fake.Fail(echotest.Fault{Hang: true})
	h.say("help")
	if !fake.WaitAttempt(30 * time.Second) {
		t.Fatal("the send never reached the platform")
	}
	h.kill9()
	h.start()
	var failed []deliveryRow
	eventually(t, "the interrupted delivery to be reconciled", func() bool {
		failed = h.deliveries("failed")
		return len(failed) == 1
	})
	if !strings.Contains(failed[0].Reason, "outcome unknown") || fake.Attempts(failed[0].ID) != 1 {
		t.Fatalf("reconciled %+v, attempts %d", failed[0], fake.Attempts(failed[0].ID))
	}
	// The host serves on: the next message is answered, the interrupted one is not resent.
	h.say("ps")
	mustWait(t, fake, "an answer after the restart", echotest.Has("No processes"))
	if fake.Attempts(failed[0].ID) != 1 || fake.Count("built-in agent") != 0 {
		t.Fatal("the interrupted message was resent")
	}
}

// TestProcessCrashRecovery kills the host with background processes running: after restart, a
// long one is re-adopted and its completion arrives once; one that finished while the host was
// down is reported once; a second restart reports nothing again.
func TestProcessCrashRecovery(t *testing.T) {
	fake := echotest.New()
	defer fake.Close()
	h := newHost(t, fake)
	h.say("run sleep 0.5; echo short-job-done")
	mustWait(t, fake, "short start", echotest.Has("short-job-done"))
	h.say("run sleep 4; echo long-job-done")
	mustWait(t, fake, "long start", echotest.Has("long-job-done"))
	h.kill9()
	time.Sleep(1500 * time.Millisecond) // the short job ends while the host is down
	h.start()
	mustWait(t, fake, "the short job's completion", func(m echotest.Message) bool {
		return strings.Contains(m.Text, "short-job-done") && strings.Contains(m.Text, "Last lines")
	})
	mustWait(t, fake, "the long job's completion", func(m echotest.Message) bool {
		return strings.Contains(m.Text, "long-job-done") && strings.Contains(m.Text, "Last lines")
	})
	h.kill9()
	h.start()
	h.say("ps")
	mustWait(t, fake, "ps after the second restart", echotest.Has("Processes"))
	time.Sleep(500 * time.Millisecond)
	for _, job := range []string{"short-job-done", "long-job-done"} {
		n := 0
		for _, m := range fake.Messages() {
			if strings.Contains(m.Text, job) && strings.Contains(m.Text, "Last lines") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s reported %d times", job, n)
		}
	}
}

// runCLI runs an inspection command of the binary against a data directory.
func runCLI(bin, data string, args ...string) (string, error) {
	out, err := exec.Command(bin, append([]string{"--data-dir", data}, args...)...).CombinedOutput()
	return string(out), err
}
