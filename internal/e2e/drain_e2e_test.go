package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
	"github.com/hermes-host/hermes-host/internal/e2e/e2etest"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

// drainModel is a model server for the drain tests: each request is answered "reply to <tag>"
// (the tag is the drain-N of the message it answers) once its gate opens: quick messages (even N)
// when the test opens quick, slow ones (odd N) only once the test says the host was restarted.
// Until then a request waits, as a slow model does, or ends with the host's cancellation.
type drainModel struct {
	srv       *agenttest.Server
	quick     chan struct{}
	restarted atomic.Bool
	mu        sync.Mutex
	asked     map[string]int // tag → requests
	askedCond *sync.Cond
}

var drainTag = regexp.MustCompile(`drain-\d+|late-\d+`)

func newDrainModel(t *testing.T) *drainModel {
	m := &drainModel{quick: make(chan struct{}), asked: map[string]int{}}
	m.askedCond = sync.NewCond(&m.mu)
	m.srv = agenttest.New(t)
	m.srv.Answer(func(w http.ResponseWriter, r *http.Request, req agenttest.Request) {
		tags := drainTag.FindAllString(string(req.Raw), -1)
		if len(tags) == 0 {
			agenttest.Text("no tag")(w, r, req)
			return
		}
		tag := tags[len(tags)-1] // the message being answered comes last
		m.mu.Lock()
		m.asked[tag]++
		m.askedCond.Broadcast()
		m.mu.Unlock()
		var n int
		fmt.Sscanf(tag, "drain-%d", &n)
		if !m.restarted.Load() && strings.HasPrefix(tag, "drain-") {
			gate := m.quick
			if n%2 == 1 {
				gate = nil // slow: answered only after the restart
			}
			select {
			case <-gate:
			case <-r.Context().Done():
				return // the host cancelled the turn
			}
		}
		agenttest.Text("reply to "+tag)(w, r, req)
	})
	return m
}

// waitAsked waits until n distinct tags have been asked for.
func (m *drainModel) waitAsked(t *testing.T, n int, within time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		for len(m.asked) < n {
			m.askedCond.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(within):
		m.mu.Lock()
		defer m.mu.Unlock()
		t.Fatalf("the model was asked about %d messages, want %d", len(m.asked), n)
	}
}

// drainHost writes the configuration of a host on the model m and the echo platform fake, with
// shutdown_timeout timeout and the store source ("": SQLite in its data directory), and starts
// it.
func drainHost(t *testing.T, fake *echotest.Server, m *drainModel, timeout time.Duration, source string) (*e2etest.Host, string) {
	t.Helper()
	bin, plugins := buildHost(t)
	data := t.TempDir()
	config := filepath.Join(data, "hermes.yaml")
	os.WriteFile(config, []byte(fmt.Sprintf(`
agent: {kind: openai, base_url: %q, model: test-model, check: off}
store: %q
shutdown_timeout: %v
demo: {plugin: ""}
plugins:
  echo:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {outbox_url: "%s/outbox"}
    access:
      main: {allow_all: true}
`, m.srv.URL, source, timeout, fake.URL())), 0o600)
	return serve(t, bin, plugins, data, "--config", config), config
}

// postEvent posts one message to echo's webhook and returns the answer's status and Retry-After
// (status 0: no answer). Safe from any goroutine.
func postEvent(t *testing.T, addr, id, chat string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"id": id, "chat_id": chat, "user_id": "u-" + chat, "text": "please answer " + id})
	resp, err := http.Post("http://"+addr+"/hooks/echo/main", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Errorf("posting %s: %v", id, err)
		return 0, ""
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// TestSIGTERMDrainsInFlightMessages: 100 messages in 100 chats are in flight (each turn waits
// on the model) when the host gets SIGTERM. It stops taking webhooks (503 with Retry-After),
// lets the turns the model answers during the drain (the even ones) finish and be delivered,
// hands back the others when shutdown_timeout is nearly up, and exits 0 within
// shutdown_timeout. After the restart every message, and the one refused during the drain
// (posted again, as a platform does), is answered exactly once, and no chat was told its
// message was interrupted.
func TestSIGTERMDrainsInFlightMessages(t *testing.T) {
	t.Parallel()
	const messages = 100
	fake := echotest.New()
	defer fake.Close()
	m := newDrainModel(t)
	timeout := testdeadline.Scale(16 * time.Second)
	h, _ := drainHost(t, fake, m, timeout, "")

	var wg sync.WaitGroup
	for w := range 10 {
		wg.Go(func() {
			for i := w; i < messages; i += 10 {
				if code, _ := postEvent(t, h.Addr, fmt.Sprintf("drain-%d", i), fmt.Sprintf("c%d", i)); code != http.StatusOK {
					t.Errorf("drain-%d: webhook answered %d", i, code)
				}
			}
		})
	}
	wg.Wait()
	m.waitAsked(t, messages, testdeadline.Scale(60*time.Second)) // every turn is waiting on the model
	if n := len(fake.Messages()); n != 0 {
		t.Fatalf("%d replies before the stop; the model answered nothing yet", n)
	}

	stopAt := time.Now()
	if err := h.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Intake stops: a new event is refused with Retry-After (the platform sends it again).
	for {
		code, retry := postEvent(t, h.Addr, "late-1", "late")
		if code == http.StatusServiceUnavailable {
			if retry == "" {
				t.Fatal("503 without Retry-After")
			}
			break
		}
		if code != http.StatusOK || time.Since(stopAt) > timeout {
			t.Fatalf("a webhook after SIGTERM answered %d", code)
		}
		time.Sleep(5 * time.Millisecond) // recorded just before the drain began: fine, it waits queued
	}
	close(m.quick) // the model answers the even messages while the host drains
	code, ok := h.Wait(timeout + testdeadline.Scale(30*time.Second))
	took := time.Since(stopAt)
	if !ok {
		t.Fatalf("the host did not exit %v after SIGTERM (shutdown_timeout %v)", took, timeout)
	}
	if code != 0 || took > timeout {
		t.Fatalf("the host exited %d after %v, want 0 within shutdown_timeout %v", code, took, timeout)
	}

	replies := func() map[string]int {
		out := map[string]int{}
		for _, msg := range fake.Messages() {
			if tag, ok := strings.CutPrefix(msg.Text, "reply to "); ok {
				out[tag]++
			}
		}
		return out
	}
	before := replies()
	for tag, n := range before {
		var i int
		fmt.Sscanf(tag, "drain-%d", &i)
		if n != 1 || i%2 == 1 {
			t.Errorf("before the restart %s was answered %d times (slow ones: 0, quick ones: at most 1)", tag, n)
		}
	}
	if len(before) == 0 {
		t.Error("no turn finished during the drain: the model answered the even messages right after SIGTERM")
	}
	t.Logf("SIGTERM to exit: %v (shutdown_timeout %v); %d of %d answered during the drain", took.Round(time.Millisecond), timeout, len(before), messages)

	m.restarted.Store(true)
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	if code, _ := postEvent(t, h.Addr, "late-1", "late"); code != http.StatusOK {
		t.Fatalf("the event refused during the drain, sent again: %d", code)
	}
	want := messages + 1
	deadline := time.Now().Add(testdeadline.Scale(90 * time.Second))
	for len(replies()) < want && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	after := replies()
	for i := range messages {
		if tag := fmt.Sprintf("drain-%d", i); after[tag] != 1 {
			t.Errorf("%s answered %d times, want once", tag, after[tag])
		}
	}
	if after["late-1"] != 1 {
		t.Errorf("late-1 answered %d times, want once", after["late-1"])
	}
	for _, msg := range fake.Messages() {
		if !strings.HasPrefix(msg.Text, "reply to ") {
			t.Errorf("the platform got %q in chat %s: nothing but the replies was due", msg.Text, msg.ChatID)
		}
	}
	if a := fake.Messages(); len(a) != want {
		t.Errorf("%d messages reached the platform, want %d", len(a), want)
	}
}

// TestSecondSIGTERMExitsAtOnce: a second SIGTERM during the drain ends the host at once (exit
// status 143, well before shutdown_timeout); it is a crash as far as the data is concerned, and
// the restart recovers from it as from one: the turn that was running is recorded interrupted
// and its chat told so, once.
func TestSecondSIGTERMExitsAtOnce(t *testing.T) {
	t.Parallel()
	fake := echotest.New()
	defer fake.Close()
	m := newDrainModel(t)
	timeout := testdeadline.Scale(5 * time.Minute)
	h, _ := drainHost(t, fake, m, timeout, "")
	if code, _ := postEvent(t, h.Addr, "drain-1", "c1"); code != http.StatusOK { // slow: waits on the model
		t.Fatalf("webhook %d", code)
	}
	m.waitAsked(t, 1, testdeadline.Scale(60*time.Second))
	stopAt := time.Now()
	h.Signal(syscall.SIGTERM)
	for {
		if code, _ := postEvent(t, h.Addr, "late-1", "late"); code == http.StatusServiceUnavailable {
			break // draining
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.Signal(syscall.SIGTERM)
	code, ok := h.Wait(testdeadline.Scale(30 * time.Second))
	if !ok || code != 128+int(syscall.SIGTERM) {
		t.Fatalf("after a second SIGTERM: exited %v, code %d (%v after the first); want 143 at once", ok, code, time.Since(stopAt))
	}
	m.restarted.Store(true)
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	mustWait(t, fake, "the restart notice", echotest.Has("please send it again"))
	// late-1 may have been taken just before the drain began: then it was running too, and its
	// chat gets a notice of its own, or its answer, once.
	time.Sleep(testdeadline.Scale(500 * time.Millisecond)) // nothing more for drain-1 follows
	in := func(chat, sub string) int {
		n := 0
		for _, msg := range fake.Messages() {
			if msg.ChatID == chat && strings.Contains(msg.Text, sub) {
				n++
			}
		}
		return n
	}
	if n, r := in("c1", "please send it again"), in("c1", "reply to drain-1"); n != 1 || r != 0 {
		t.Fatalf("drain-1: %d restart notices and %d replies, want the one notice: %+v", n, r, fake.Messages())
	}
	if n, r := in("late", "please send it again"), in("late", "reply to late-1"); n+r > 1 {
		t.Fatalf("late-1: %d restart notices and %d replies, want one at most: %+v", n, r, fake.Messages())
	}
}

// TestSIGTERMHandsBackToAnotherHost: two hosts share PostgreSQL; 40 messages in flight on one
// of them when it gets SIGTERM. It drains (the quick half is answered during the drain), exits 0
// within shutdown_timeout and releases its lease; the other host takes the handed-back turns
// over and answers each once, without a restart notice.
func TestSIGTERMHandsBackToAnotherHost(t *testing.T) {
	t.Parallel()
	backend := storetest.Postgres(t)
	const messages = 40
	fake := echotest.New()
	defer fake.Close()
	m := newDrainModel(t)
	timeout := testdeadline.Scale(12 * time.Second)
	a, _ := drainHost(t, fake, m, timeout, backend.Source)
	drainHost(t, fake, m, timeout, backend.Source) // b: serves, and takes a's work over when a stops
	for i := range messages {
		if code, _ := postEvent(t, a.Addr, fmt.Sprintf("drain-%d", i), fmt.Sprintf("c%d", i)); code != http.StatusOK {
			t.Fatalf("drain-%d: webhook answered %d", i, code)
		}
	}
	m.waitAsked(t, messages, testdeadline.Scale(60*time.Second))
	stopAt := time.Now()
	a.Signal(syscall.SIGTERM)
	for {
		if code, _ := postEvent(t, a.Addr, "late-1", "late"); code == http.StatusServiceUnavailable {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The quick half is answered now; a request b makes from here on is answered at once (a's
	// slow requests keep waiting until a cancels them).
	m.restarted.Store(true)
	close(m.quick)
	code, ok := a.Wait(timeout + testdeadline.Scale(30*time.Second))
	if took := time.Since(stopAt); !ok || code != 0 || took > timeout {
		t.Fatalf("the host exited %v with %d after %v, want 0 within shutdown_timeout %v", ok, code, took, timeout)
	}
	count := func() map[string]int {
		out := map[string]int{}
		for _, msg := range fake.Messages() {
			out[msg.Text]++
		}
		return out
	}
	// Wait for every drain reply by name: "late-1" may have been accepted before the drain began,
	// so its reply does not stand in for one of them.
	answered := func(got map[string]int) bool {
		for i := range messages {
			if got[fmt.Sprintf("reply to drain-%d", i)] == 0 {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(testdeadline.Scale(90 * time.Second))
	for !answered(count()) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	got := count()
	for i := range messages {
		if text := fmt.Sprintf("reply to drain-%d", i); got[text] != 1 {
			t.Errorf("%q reached the platform %d times, want once", text, got[text])
		}
	}
	for text, n := range got {
		if !strings.HasPrefix(text, "reply to ") {
			t.Errorf("the platform got %q (%d times): nothing but the replies was due", text, n)
		}
	}
}
