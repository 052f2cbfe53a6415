package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// fakeModel is a loopback chat-completions server that answers from a script and records every
// request it receives.
type fakeModel struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []modelRequest
	script []http.HandlerFunc
}

type modelRequest struct {
	Method, Path string
	Header       http.Header
	Body         map[string]any
}

func newFakeModel(t *testing.T, script ...http.HandlerFunc) *fakeModel {
	f := &fakeModel{t: t, script: script}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeModel) serve(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		f.t.Errorf("fake model: read body: %v", err)
		return
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		f.t.Errorf("fake model: request is not JSON: %v\n%s", err, raw)
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, modelRequest{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	n := len(f.reqs)
	var h http.HandlerFunc
	if n <= len(f.script) {
		h = f.script[n-1]
	}
	f.mu.Unlock()
	if h == nil {
		f.t.Errorf("fake model: unscripted request %d", n)
		http.Error(w, `{"error":{"message":"unscripted"}}`, http.StatusInternalServerError)
		return
	}
	h(w, r)
}

func (f *fakeModel) requests() []modelRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]modelRequest(nil), f.reqs...)
}

func (f *fakeModel) agent(t *testing.T, cfg Config) *OpenAI {
	t.Helper()
	cfg.BaseURL = f.srv.URL + "/v1/"
	if cfg.Model == "" {
		cfg.Model = "test-model"
	}
	o, err := NewOpenAI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// answer scripts a final text answer.
func answer(text string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "choices": []any{
			map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": text}},
		}})
	}
}

type scriptedCall struct{ id, name, args string }

// callTools scripts a response asking for tool calls.
func callTools(calls ...scriptedCall) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var tcs []any
		for _, c := range calls {
			tcs = append(tcs, map[string]any{"id": c.id, "type": "function",
				"function": map[string]any{"name": c.name, "arguments": c.args}})
		}
		writeJSON(w, 200, map[string]any{"choices": []any{
			map[string]any{"index": 0, "finish_reason": "tool_calls", "message": map[string]any{"role": "assistant", "content": nil, "tool_calls": tcs}},
		}})
	}
}

func status(code int, header map[string]string, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

// asJSON round-trips v through JSON, so it compares equal to a decoded request body.
func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func jsonEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	g, w := asJSON(t, got), asJSON(t, want)
	if !reflect.DeepEqual(g, w) {
		gb, _ := json.MarshalIndent(g, "", "  ")
		wb, _ := json.MarshalIndent(w, "", "  ")
		t.Errorf("%s:\n got %s\nwant %s", what, gb, wb)
	}
}

type msg = map[string]any

func TestOpenAIToolLoop(t *testing.T) {
	fm := newFakeModel(t,
		callTools(scriptedCall{"call_1", "terminal", `{"command":"make test","background":true,"notify_on_complete":true}`}),
		answer("Started the tests; I'll tell you when they finish."),
	)
	ft := &fakeTools{spawn: SpawnResult{ID: "proc_0123456789ab", State: StateRunning}}
	o := fm.agent(t, Config{APIKey: "sk-test", SystemPrompt: "You are a test."})
	rep, err := o.Turn(context.Background(), &Turn{
		Key: "agent:main:telegram:dm:42", SessionID: "s1",
		Source:  abi.Source{Platform: "telegram", ChatType: abi.ChatDM, UserName: "Ada"},
		History: []Message{{Role: RoleUser, Text: "hi"}, {Role: RoleAssistant, Text: "hello"}, {Role: RoleTool, Text: "earlier output"}},
		Text:    "run the tests in the background",
		Tools:   ft,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Text != "Started the tests; I'll tell you when they finish." || rep.ToolCalls != 1 || rep.Media != nil {
		t.Errorf("reply %+v", rep)
	}
	if calls := ft.Calls(); !reflect.DeepEqual(calls, []toolCallRec{{Method: "Spawn", Req: SpawnRequest{Command: "make test", Background: true, NotifyOnComplete: true}}}) {
		t.Errorf("tool calls %+v", calls)
	}

	reqs := fm.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	for i, r := range reqs {
		if r.Method != "POST" || r.Path != "/v1/chat/completions" {
			t.Errorf("request %d: %s %s", i, r.Method, r.Path)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer sk-test" {
			t.Errorf("request %d: Authorization %q", i, got)
		}
		if got := r.Header.Get("Content-Type"); got != "application/json" {
			t.Errorf("request %d: Content-Type %q", i, got)
		}
		if r.Body["model"] != "test-model" {
			t.Errorf("request %d: model %v", i, r.Body["model"])
		}
		jsonEqual(t, fmt.Sprintf("request %d tools", i), r.Body["tools"], toolSchemas(DefaultCommandTimeout))
	}

	system := "You are a test.\n\n" + toolGuide + "\n\nConversation: platform telegram, chat type dm, user Ada."
	first := []any{
		msg{"role": "system", "content": system},
		msg{"role": "user", "content": "hi"},
		msg{"role": "assistant", "content": "hello"},
		msg{"role": "user", "content": fence(sourceToolOutput, "earlier output") + "\n\nrun the tests in the background"},
	}
	jsonEqual(t, "first request messages", reqs[0].Body["messages"], first)
	second := append(first,
		msg{"role": "assistant", "content": nil, "tool_calls": []any{msg{"id": "call_1", "type": "function",
			"function": msg{"name": "terminal", "arguments": `{"command":"make test","background":true,"notify_on_complete":true}`}}}},
		msg{"role": "tool", "tool_call_id": "call_1", "content": `{"id":"proc_0123456789ab","notify_on_complete":true,"state":"running"}`},
	)
	jsonEqual(t, "second request messages", reqs[1].Body["messages"], second)
}

// The tools schema: terminal and process with the parameters the brief names.
func TestOpenAIToolSchema(t *testing.T) {
	var tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string `json:"name"`
			Parameters struct {
				Type       string                     `json:"type"`
				Properties map[string]json.RawMessage `json:"properties"`
				Required   []string                   `json:"required"`
			} `json:"parameters"`
		} `json:"function"`
	}
	o, err := NewOpenAI(Config{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(o.tools, &tools); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"terminal": {"background", "command", "notify_on_complete", "timeout", "watch_patterns"},
		"process":  {"action", "id", "offset", "timeout"},
	}
	if len(tools) != 2 {
		t.Fatalf("%d tools", len(tools))
	}
	for _, tl := range tools {
		var props []string
		for p := range tl.Function.Parameters.Properties {
			props = append(props, p)
		}
		sortStrings(props)
		if tl.Type != "function" || tl.Function.Parameters.Type != "object" || !reflect.DeepEqual(props, want[tl.Function.Name]) {
			t.Errorf("tool %s: type %s, properties %v", tl.Function.Name, tl.Type, props)
		}
	}
	if !strings.Contains(string(tools[1].Function.Parameters.Properties["action"]), `"enum":["list","poll","log","wait","kill"]`) {
		t.Errorf("process.action: %s", tools[1].Function.Parameters.Properties["action"])
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// Several calls in one response run in order, each answered by its own tool message; results
// of every process action are JSON.
func TestOpenAIProcessActions(t *testing.T) {
	fm := newFakeModel(t,
		callTools(
			scriptedCall{"a", "process", `{"action":"list"}`},
			scriptedCall{"b", "process", `{"action":"poll","id":"proc_1"}`},
			scriptedCall{"c", "process", `{"action":"log","id":"proc_1","offset":"10"}`},
			scriptedCall{"d", "process", `{"action":"log","id":"proc_1"}`},
			scriptedCall{"e", "process", `{"action":"wait","id":"proc_1","timeout":5}`},
			scriptedCall{"f", "process", `{"action":"kill","id":"proc_1"}`},
		),
		callTools(
			scriptedCall{"g", "process", `{"action":"explode","id":"proc_1"}`},
			scriptedCall{"h", "process", `{"action":"poll"}`},
			scriptedCall{"i", "process", `{not json`},
			scriptedCall{"j", "browser", `{}`},
			scriptedCall{"k", "terminal", `{"command":"sleep 999","timeout":99999}`},
			scriptedCall{"l", "terminal", `{"command":"  "}`},
		),
		answer("MEDIA:/tmp/report.png\nAll done.\n  MEDIA: https://example.com/a b.pdf  "),
	)
	ft := &fakeTools{
		list: []ProcessInfo{{ID: "proc_1", Command: "sleep 5", State: StateRunning}},
		info: ProcessInfo{ID: "proc_1", Command: "sleep 5", State: StateExited, ExitCode: intp(0), Output: "done\n"},
		log:  LogChunk{Text: "<ok> & done\n", Offset: 10, Next: 22, Total: 22, Ended: true},
	}
	rep, err := fm.agent(t, Config{}).Turn(context.Background(), &Turn{Text: "check on it", Tools: ft})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Text != "All done." || !reflect.DeepEqual(rep.Media, []string{"/tmp/report.png", "https://example.com/a b.pdf"}) || rep.ToolCalls != 12 {
		t.Errorf("reply %+v", rep)
	}
	wantCalls := []toolCallRec{
		{Method: "List"},
		{Method: "Poll", ID: "proc_1"},
		{Method: "Log", ID: "proc_1", Offset: 10, Limit: toolLogBytes},
		{Method: "Log", ID: "proc_1", Offset: -1, Limit: toolLogBytes},
		{Method: "Wait", ID: "proc_1", Timeout: 5 * time.Second},
		{Method: "Kill", ID: "proc_1"},
		{Method: "Spawn", Req: SpawnRequest{Command: "sleep 999", Timeout: MaxCommandTimeout}},
	}
	if got := ft.Calls(); !reflect.DeepEqual(got, wantCalls) {
		t.Errorf("tool calls:\n got %+v\nwant %+v", got, wantCalls)
	}
	reqs := fm.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	if got := reqs[0].Header.Get("Authorization"); got != "" {
		t.Errorf("Authorization without a key: %q", got)
	}
	info := `{"id":"proc_1","command":"sleep 5","state":"exited","exit_code":0,"output":"done\n"}`
	wantResults := map[string]string{
		"a": `{"processes":[{"id":"proc_1","command":"sleep 5","state":"running"}]}`,
		"b": info,
		"c": `{"ended":true,"id":"proc_1","next":22,"offset":10,"output":"<ok> & done\n","total":22}`,
		"d": `{"ended":true,"id":"proc_1","next":22,"offset":10,"output":"<ok> & done\n","total":22}`,
		"e": info,
		"f": info,
		"g": `{"error":"unknown action \"explode\": want list, poll, log, wait or kill"}`,
		"h": `{"error":"id is required for action \"poll\""}`,
		"i": `{"error":"invalid arguments for process: invalid character 'n' looking for beginning of object key string"}`,
		"j": `{"error":"unknown tool \"browser\": the tools are terminal and process"}`,
		"k": `{"output":""}`,
		"l": `{"error":"command is empty"}`,
	}
	order := []string{}
	for _, m := range reqs[2].Body["messages"].([]any) {
		m := m.(map[string]any)
		if m["role"] != "tool" {
			continue
		}
		id := m["tool_call_id"].(string)
		order = append(order, id)
		if got := m["content"]; got != wantResults[id] {
			t.Errorf("tool result %s:\n got %s\nwant %s", id, got, wantResults[id])
		}
	}
	if strings.Join(order, "") != "abcdefghijkl" {
		t.Errorf("tool result order %v", order)
	}
}

// A synthetic turn: terminal and process(kill) are refused without reaching Tools; other
// process actions run; media is dropped; the system prompt says what the turn is.
func TestOpenAISyntheticTurn(t *testing.T) {
	fm := newFakeModel(t,
		callTools(
			scriptedCall{"1", "terminal", `{"command":"make deploy","background":true,"notify_on_complete":true}`},
			scriptedCall{"2", "process", `{"action":"kill","id":"proc_1"}`},
			scriptedCall{"3", "process", `{"action":"KILL","id":"proc_1"}`},
			scriptedCall{"4", "process", `{"action":"poll","id":"proc_1"}`},
			scriptedCall{"5", "terminal", `{"command":"echo hi"}`},
		),
		answer("Your tests passed.\nMEDIA:/tmp/chart.png"),
	)
	ft := &fakeTools{info: ProcessInfo{ID: "proc_1", State: StateExited, ExitCode: intp(0)}}
	note := "[Background process proc_1 completed with exit code 0]\nCommand: make test\nOutput:\nPASS"
	rep, err := fm.agent(t, Config{}).Turn(context.Background(), &Turn{Text: note, Synthetic: true, Tools: ft})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Text != "Your tests passed." || rep.Media != nil || rep.ToolCalls != 5 {
		t.Errorf("reply %+v", rep)
	}
	if got := ft.methods(); !reflect.DeepEqual(got, []string{"Poll"}) {
		t.Errorf("tools reached: %v", got)
	}
	reqs := fm.requests()
	msgs := reqs[1].Body["messages"].([]any)
	sys := msgs[0].(map[string]any)["content"].(string)
	if !strings.HasSuffix(sys, syntheticGuide) {
		t.Errorf("system prompt lacks the synthetic guide: %q", sys)
	}
	if u := msgs[1].(map[string]any); u["role"] != "user" || u["content"] != note {
		t.Errorf("notification message %v", u)
	}
	refused := jsonResult(map[string]string{"error": RefusedOnNotification})
	for _, m := range msgs {
		m := m.(map[string]any)
		if m["role"] != "tool" {
			continue
		}
		id := m["tool_call_id"]
		isRefused := m["content"] == refused
		if want := id != "4"; isRefused != want {
			t.Errorf("tool result %v: %v", id, m["content"])
		}
	}
}

func TestOpenAIMaxRounds(t *testing.T) {
	list := callTools(scriptedCall{"x", "process", `{"action":"list"}`})
	fm := newFakeModel(t, list, list, list)
	ft := &fakeTools{}
	rep, err := fm.agent(t, Config{MaxRounds: 3}).Turn(context.Background(), &Turn{Text: "loop", Tools: ft})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(MaxRoundsNote, 3); rep.Text != want || rep.ToolCalls != 2 {
		t.Errorf("reply %+v, want text %q and 2 tool calls", rep, want)
	}
	if n := len(fm.requests()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
	if n := len(ft.Calls()); n != 2 {
		t.Errorf("%d tool calls ran, want 2 (the last round's calls are not run)", n)
	}
}

func TestOpenAIHTTPErrors(t *testing.T) {
	cases := []struct {
		name     string
		h        http.HandlerFunc
		is       error
		status   int
		retry    time.Duration
		msg      string
		userText string
	}{
		{
			name: "401", h: status(401, nil, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`),
			is: ErrUnauthorized, status: 401, msg: "Incorrect API key provided",
			userText: "The model rejected the gateway's credentials. The operator needs to check the agent's API key.",
		},
		{
			name: "429 seconds", h: status(429, map[string]string{"Retry-After": "30"}, `{"error":{"message":"Rate limit reached","code":429}}`),
			is: ErrRateLimited, status: 429, retry: 30 * time.Second, msg: "Rate limit reached",
			userText: "The model is rate limited right now. Try again in 30s.",
		},
		{
			name: "429 ms", h: status(429, map[string]string{"retry-after-ms": "1500", "Retry-After": "2"}, `{"error":"slow down"}`),
			is: ErrRateLimited, status: 429, retry: 1500 * time.Millisecond, msg: "slow down",
			userText: "The model is rate limited right now. Try again in 2s.",
		},
		{
			name: "429 minutes", h: status(429, map[string]string{"Retry-After": "600"}, ``),
			is: ErrRateLimited, status: 429, retry: 10 * time.Minute, msg: "Too Many Requests",
			userText: "The model is rate limited right now. Try again in 10m0s.",
		},
		{
			name: "503 html", h: status(503, nil, "<html><body>Service\n  Unavailable</body></html>"),
			is: ErrUnavailable, status: 503, msg: "Service Unavailable",
			userText: "The model service failed (HTTP 503: Service Unavailable). Try again later.",
		},
		{
			name: "400", h: status(400, nil, `{"error":{"message":"context too long"}}`),
			status: 400, msg: "context too long",
			userText: "The model server refused the request (HTTP 400: context too long). Start over with /new if it keeps happening.",
		},
		{
			name: "malformed JSON", h: status(200, nil, `{"choices":[{"message":`),
			is: ErrBadResponse, userText: "The model sent an answer I could not read. Try again.",
		},
		{
			name: "no choices", h: status(200, nil, `{"choices":[]}`),
			is: ErrBadResponse, userText: "The model sent an answer I could not read. Try again.",
		},
		{
			name: "error in 200", h: status(200, nil, `{"error":{"message":"upstream failed"}}`),
			is: ErrBadResponse, userText: "The model sent an answer I could not read. Try again.",
		},
		{
			name: "bad content", h: status(200, nil, `{"choices":[{"message":{"content":42}}]}`),
			is: ErrBadResponse, userText: "The model sent an answer I could not read. Try again.",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fm := newFakeModel(t, c.h)
			rep, err := fm.agent(t, Config{}).Turn(context.Background(), &Turn{Text: "hi", Tools: &fakeTools{}})
			if err == nil {
				t.Fatalf("no error; reply %+v", rep)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("err %v is not %v", err, c.is)
			}
			var ae *APIError
			if c.status != 0 {
				if !errors.As(err, &ae) {
					t.Fatalf("err %T %v is not an *APIError", err, err)
				}
				if ae.Status != c.status || ae.RetryAfter != c.retry || ae.Message != c.msg {
					t.Errorf("APIError %+v", ae)
				}
			}
			if got := UserMessage(err); got != c.userText {
				t.Errorf("UserMessage = %q, want %q", got, c.userText)
			}
		})
	}
}

// Content given as a list of parts, and tool-call arguments given as an object.
func TestOpenAILenientResponses(t *testing.T) {
	fm := newFakeModel(t,
		status(200, nil, `{"choices":[{"message":{"content":null,"tool_calls":[{"function":{"name":"terminal","arguments":{"command":"ls","background":"true","watch_patterns":"ready"}}}]}}]}`),
		status(200, nil, `{"choices":[{"message":{"content":[{"type":"text","text":"Hello "},{"type":"image_url"},{"type":"text","text":"there"}]}}]}`),
	)
	ft := &fakeTools{spawn: SpawnResult{ID: "proc_9", Note: "n"}}
	rep, err := fm.agent(t, Config{}).Turn(context.Background(), &Turn{Text: "hi", Tools: ft})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Text != "Hello there" {
		t.Errorf("text %q", rep.Text)
	}
	if got := ft.Calls(); !reflect.DeepEqual(got, []toolCallRec{{Method: "Spawn", Req: SpawnRequest{Command: "ls", Background: true, WatchPatterns: []string{"ready"}}}}) {
		t.Errorf("calls %+v", got)
	}
	msgs := fm.requests()[1].Body["messages"].([]any)
	jsonEqual(t, "echoed tool call and result", msgs[2:], []any{
		msg{"role": "assistant", "content": nil, "tool_calls": []any{msg{"id": "call_0", "type": "function",
			"function": msg{"name": "terminal", "arguments": `{"command":"ls","background":"true","watch_patterns":"ready"}`}}}},
		msg{"role": "tool", "tool_call_id": "call_0", "content": `{"id":"proc_9","note":"n","notify_on_complete":false,"state":"running","watch_patterns":["ready"]}`},
	})
}

func TestOpenAITimeout(t *testing.T) {
	fm := newFakeModel(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	_, err := fm.agent(t, Config{Timeout: 50 * time.Millisecond}).Turn(context.Background(), &Turn{Text: "hi"})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a request timeout must not look like the turn's cancellation: %v", err)
	}
}

// A /stop cancels ctx: Turn returns at once, whether it is waiting on the model or on a tool,
// and makes no further request.
func TestOpenAICancel(t *testing.T) {
	t.Run("during the model call", func(t *testing.T) {
		arrived := make(chan struct{})
		fm := newFakeModel(t, func(w http.ResponseWriter, r *http.Request) {
			close(arrived)
			<-r.Context().Done()
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := fm.agent(t, Config{}).Turn(ctx, &Turn{Text: "hi"})
			done <- err
		}()
		<-arrived
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})
	t.Run("during a tool call", func(t *testing.T) {
		fm := newFakeModel(t, callTools(
			scriptedCall{"w", "process", `{"action":"wait","id":"proc_1","timeout":300}`},
			scriptedCall{"p", "process", `{"action":"poll","id":"proc_1"}`},
		))
		ft := &fakeTools{waiting: make(chan struct{})}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := fm.agent(t, Config{}).Turn(ctx, &Turn{Text: "wait for it", Tools: ft})
			done <- err
		}()
		<-ft.waiting
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if got := ft.methods(); !reflect.DeepEqual(got, []string{"Wait"}) {
			t.Errorf("tools after cancel: %v", got)
		}
		if n := len(fm.requests()); n != 1 {
			t.Errorf("%d model requests, want 1", n)
		}
	})
	t.Run("before the turn", func(t *testing.T) {
		fm := newFakeModel(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := fm.agent(t, Config{}).Turn(ctx, &Turn{Text: "hi"}); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		if n := len(fm.requests()); n != 0 {
			t.Errorf("%d requests", n)
		}
	})
}

// The model runs a real command through a real Tools (sh -c).
func TestOpenAIRealShell(t *testing.T) {
	fm := newFakeModel(t,
		callTools(scriptedCall{"c1", "terminal", `{"command":"echo from-sh; exit 2","timeout":30}`}),
		callTools(scriptedCall{"c2", "terminal", `{"command":"echo start; exec sleep 60","timeout":0.2}`}),
		answer("It printed from-sh and failed."),
	)
	rep, err := fm.agent(t, Config{}).Turn(context.Background(), &Turn{Text: "try it", Tools: newShellTools(t)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Text != "It printed from-sh and failed." {
		t.Errorf("reply %q", rep.Text)
	}
	msgs := fm.requests()[2].Body["messages"].([]any)
	if res := msgs[len(msgs)-3].(map[string]any)["content"].(string); res != `{"exit_code":2,"id":"proc_000000000001","output":"from-sh\n","state":"exited"}` {
		t.Errorf("tool result %s", res)
	}
	// The foreground timeout kills the command (its output so far depends on timing).
	var killed map[string]any
	res := msgs[len(msgs)-1].(map[string]any)["content"].(string)
	if err := json.Unmarshal([]byte(res), &killed); err != nil {
		t.Fatal(err)
	}
	if killed["id"] != "proc_000000000002" || killed["state"] != "killed" || killed["timed_out"] != true || killed["exit_code"] != nil {
		t.Errorf("tool result %s", res)
	}
}

func TestNew(t *testing.T) {
	for _, kind := range []string{"", "builtin"} {
		a, err := New(kind, Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := a.(*Builtin); !ok {
			t.Errorf("New(%q) = %T", kind, a)
		}
	}
	if _, err := New("magic", Config{}); err == nil {
		t.Error("unknown kind accepted")
	}
	if _, err := New("openai", Config{}); err == nil {
		t.Error("openai without a model accepted")
	}
	if _, err := New("openai", Config{Model: "m", BaseURL: "ftp://x"}); err == nil {
		t.Error("non-HTTP base URL accepted")
	}
	t.Setenv("HERMES_AGENT_TEST_KEY", "sk-env")
	a, err := New("openai", Config{Model: "m", APIKeyEnv: "HERMES_AGENT_TEST_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	o := a.(*OpenAI)
	if o.key != "sk-env" || o.url != DefaultBaseURL+"/chat/completions" || o.maxRounds != DefaultMaxRounds || o.timeout != DefaultTimeout {
		t.Errorf("defaults: %+v", o)
	}
	a, _ = New("openai", Config{Model: "m", APIKey: "sk-cfg", APIKeyEnv: "HERMES_AGENT_TEST_KEY"})
	if a.(*OpenAI).key != "sk-cfg" {
		t.Error("config key must win over the environment")
	}
	var f Func = func(ctx context.Context, t *Turn) (*Reply, error) { return &Reply{Text: t.Text}, nil }
	if rep, _ := f.Turn(context.Background(), &Turn{Text: "x"}); rep.Text != "x" {
		t.Error("Func")
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		ms, ra string
		want   time.Duration
	}{
		{"", "", 0},
		{"", "7", 7 * time.Second},
		{"", "0.5", 500 * time.Millisecond},
		{"", "-3", 0},
		{"250", "9", 250 * time.Millisecond},
		{"", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{"", now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"", "soon", 0},
	}
	for _, c := range cases {
		if got := parseRetryAfter(c.ms, c.ra, now); got != c.want {
			t.Errorf("parseRetryAfter(%q, %q) = %v, want %v", c.ms, c.ra, got, c.want)
		}
	}
}

func TestUserMessage(t *testing.T) {
	cases := map[error]string{
		nil:                                 "",
		context.Canceled:                    "Stopped.",
		fmt.Errorf("x: %w", ErrTimeout):     "The model took too long to answer. Try again.",
		context.DeadlineExceeded:            "The model took too long to answer. Try again.",
		errors.New("dial tcp: refused"):     "Something went wrong while answering. Try again.",
		&APIError{Status: 429}:              "The model is rate limited right now. Try again in a little while.",
		&APIError{Status: 403}:              "The model rejected the gateway's credentials. The operator needs to check the agent's API key.",
		&APIError{Status: 502}:              "The model service is unavailable right now. Try again later.",
		fmt.Errorf("w: %w", ErrBadResponse): "The model sent an answer I could not read. Try again.",
	}
	for err, want := range cases {
		if got := UserMessage(err); got != want {
			t.Errorf("UserMessage(%v) = %q, want %q", err, got, want)
		}
	}
	if got := (&APIError{Status: 429, Message: "slow", RetryAfter: time.Second}).Error(); got != "agent: model endpoint: HTTP 429: slow (retry after 1s)" {
		t.Errorf("Error() = %q", got)
	}
}

func TestOpenAICallsPerRound(t *testing.T) {
	var many []scriptedCall
	for i := range maxCallsPerRound + 2 {
		many = append(many, scriptedCall{fmt.Sprint("c", i), "process", `{"action":"list"}`})
	}
	fm := newFakeModel(t, callTools(many...), answer("ok"))
	ft := &fakeTools{}
	rep, err := fm.agent(t, Config{}).Turn(context.Background(), &Turn{Text: "x", Tools: ft})
	if err != nil {
		t.Fatal(err)
	}
	if rep.ToolCalls != maxCallsPerRound+2 || len(ft.Calls()) != maxCallsPerRound {
		t.Errorf("ToolCalls %d, run %d", rep.ToolCalls, len(ft.Calls()))
	}
	msgs := fm.requests()[1].Body["messages"].([]any)
	last := msgs[len(msgs)-1].(map[string]any)
	if last["tool_call_id"] != fmt.Sprint("c", maxCallsPerRound+1) || last["content"] != `{"error":"not run: at most 16 tool calls per response"}` {
		t.Errorf("last tool result %v", last)
	}
}
