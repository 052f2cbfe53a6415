// Package agenttest is a loopback OpenAI-compatible model server for tests: it answers
// POST /v1/chat/completions from a script, in the shapes real servers (vLLM, llama.cpp server,
// Ollama) use, non-streamed or as server-sent events when the request asks for "stream": true,
// serves GET /v1/models, and records every request. Faults are scripted replies too: HTTP errors
// with the servers' real error bodies (see bodies.go), redirects, hangs and broken streams.
package agenttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Request is one request the server received.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         map[string]any // the decoded JSON body (nil for GET)
	Raw          []byte

	usage *[2]int // the usage a reply reports (WithUsage); nil: 10 prompt, 5 completion tokens
}

// WithUsage makes r report prompt and completion tokens in its usage (in the last chunk of a
// streamed answer when the request asks for it with stream_options.include_usage).
func WithUsage(prompt, completion int, r Reply) Reply {
	return func(w http.ResponseWriter, hr *http.Request, req Request) {
		req.usage = &[2]int{prompt, completion}
		r(w, hr, req)
	}
}

func (r Request) usageFields() map[string]any {
	u := [2]int{10, 5}
	if r.usage != nil {
		u = *r.usage
	}
	return map[string]any{"prompt_tokens": u[0], "completion_tokens": u[1], "total_tokens": u[0] + u[1]}
}

// wantsUsage reports whether a streamed request asked for its usage.
func (r Request) wantsUsage() bool {
	o, _ := r.Body["stream_options"].(map[string]any)
	b, _ := o["include_usage"].(bool)
	return b
}

// Messages returns the request's "messages" as maps.
func (r Request) Messages() []map[string]any {
	var out []map[string]any
	list, _ := r.Body["messages"].([]any)
	for _, m := range list {
		if mm, ok := m.(map[string]any); ok {
			out = append(out, mm)
		}
	}
	return out
}

// Stream reports whether the request asked for a streamed answer.
func (r Request) Stream() bool { b, _ := r.Body["stream"].(bool); return b }

// Reply answers one chat-completions request.
type Reply func(w http.ResponseWriter, r *http.Request, req Request)

// Server is the fake model server.
type Server struct {
	// URL is the API root with /v1, as an operator would write base_url.
	URL string
	// Root is the server's address without /v1.
	Root string

	t       testing.TB
	srv     *httptest.Server
	mu      sync.Mutex
	reqs    []Request
	script  []Reply
	next    int
	models  []string
	window  int // max_model_len of the listed models; 0: not given
	modelsR Reply
	noRoute Reply
	answer  Reply
}

// New starts a server answering chat requests with script, in order; an unscripted request
// fails the test and gets a 500 (unless Answer says how to answer it). The served model list is "test-model".
func New(t testing.TB, script ...Reply) *Server {
	s := NewUnstarted(t, script...)
	s.srv = httptest.NewServer(s)
	t.Cleanup(s.srv.Close)
	s.Root = s.srv.URL
	s.URL = s.srv.URL + "/v1"
	return s
}

// NewUnstarted returns a server that is not listening: serve it in-process with Transport (for
// tests in a testing/synctest bubble, where network I/O would stop fake time).
func NewUnstarted(t testing.TB, script ...Reply) *Server {
	return &Server{t: t, script: script, models: []string{"test-model"}, URL: "http://model.test/v1", Root: "http://model.test"}
}

// Push appends replies to the script.
func (s *Server) Push(r ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, r...)
}

// Answer answers every chat request the script does not (once it is used up, or when there is
// none) with r: a model driven by what a request says rather than by the order requests come
// in, for tests whose turns run concurrently.
func (s *Server) Answer(r Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = r
}

// SetModels sets the ids GET /v1/models lists.
func (s *Server) SetModels(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = ids
}

// SetContextWindow makes GET /v1/models give each model's max_model_len, as vLLM does.
func (s *Server) SetContextWindow(tokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.window = tokens
}

// SetModelsReply answers GET /v1/models with r instead of the list.
func (s *Server) SetModelsReply(r Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.modelsR = r
}

// SetNoRoute answers requests for paths the server does not serve with r (default: vLLM's 404).
func (s *Server) SetNoRoute(r Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noRoute = r
}

// Requests returns the requests received so far (model listings included).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Chats returns the chat-completions requests received so far.
func (s *Server) Chats() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if strings.HasSuffix(r.Path, "/chat/completions") {
			out = append(out, r)
		}
	}
	return out
}

// ServeHTTP records the request and answers it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	req := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &req.Body); err != nil {
			s.t.Errorf("agenttest: request body is not JSON: %v", err)
		}
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	var h Reply
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		h = s.modelsR
		if h == nil {
			h = modelList(s.models, s.window)
		}
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
		if s.next < len(s.script) {
			h = s.script[s.next]
			s.next++
		} else if s.answer != nil {
			h = s.answer
		} else {
			s.t.Errorf("agenttest: unscripted chat request %d", s.next+1)
			h = Error(500, `{"error":{"message":"unscripted request","type":"server_error"}}`)
		}
	default:
		h = s.noRoute
		if h == nil {
			h = Error(404, VLLMNoRoute) // what vLLM (FastAPI) answers for a path it does not serve
		}
	}
	s.mu.Unlock()
	h(w, r, req)
}

func modelList(ids []string, window int) Reply {
	return func(w http.ResponseWriter, r *http.Request, req Request) {
		var data []any
		for _, id := range ids {
			m := map[string]any{"id": id, "object": "model", "created": 1735689600, "owned_by": "vllm"}
			if window > 0 {
				m["max_model_len"] = window
			}
			data = append(data, m)
		}
		writeJSON(w, 200, map[string]any{"object": "list", "data": data})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Call is a tool call a scripted reply makes.
type Call struct{ ID, Name, Args string }

// Text answers text with finish_reason "stop", streamed when the request asks for it.
func Text(text string) Reply { return Finish(text, "stop") }

// Length answers text cut off by max_tokens (finish_reason "length").
func Length(text string) Reply { return Finish(text, "length") }

// Finish answers text with the given finish_reason.
func Finish(text, reason string) Reply {
	return func(w http.ResponseWriter, r *http.Request, req Request) {
		if req.Stream() {
			streamText(w, r, req, splitChunks(text, 16), 0, reason)
			return
		}
		completion(w, req, map[string]any{"role": "assistant", "content": text}, reason)
	}
}

// Thinking answers text after reasoning, in reasoning_content as vLLM's and llama.cpp's
// reasoning parsers send it (streamed as reasoning_content deltas first when asked).
func Thinking(reasoning, text string) Reply {
	return func(w http.ResponseWriter, r *http.Request, req Request) {
		if req.Stream() {
			sseHeader(w)
			event(w, chunk(map[string]any{"role": "assistant", "content": ""}, nil))
			for _, p := range splitChunks(reasoning, 16) {
				event(w, chunk(map[string]any{"reasoning_content": p}, nil))
			}
			for _, p := range splitChunks(text, 16) {
				event(w, chunk(map[string]any{"content": p}, nil))
			}
			event(w, chunk(map[string]any{}, "stop"))
			usageChunk(w, req)
			io.WriteString(w, "data: [DONE]\n\n")
			flush(w)
			return
		}
		completion(w, req, map[string]any{"role": "assistant", "content": text, "reasoning_content": reasoning}, "stop")
	}
}

// Chunks streams text in the given pieces, delay apart (the request must ask for a stream;
// otherwise the pieces are answered joined).
func Chunks(delay time.Duration, pieces ...string) Reply {
	return func(w http.ResponseWriter, r *http.Request, req Request) {
		if !req.Stream() {
			completion(w, req, map[string]any{"role": "assistant", "content": strings.Join(pieces, "")}, "stop")
			return
		}
		streamText(w, r, req, pieces, delay, "stop")
	}
}

// ToolCalls answers with tool calls (finish_reason "tool_calls"), streamed when asked.
func ToolCalls(calls ...Call) Reply {
	return func(w http.ResponseWriter, r *http.Request, req Request) {
		if req.Stream() {
			streamCalls(w, req, calls)
			return
		}
		var tcs []any
		for _, c := range calls {
			tcs = append(tcs, map[string]any{"id": c.ID, "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": c.Args}})
		}
		completion(w, req, map[string]any{"role": "assistant", "content": nil, "tool_calls": tcs}, "tool_calls")
	}
}

func completion(w http.ResponseWriter, req Request, message map[string]any, reason string) {
	model, _ := req.Body["model"].(string)
	writeJSON(w, 200, map[string]any{
		"id": "chatcmpl-agenttest", "object": "chat.completion", "created": 1735689600, "model": model,
		"choices": []any{map[string]any{"index": 0, "message": message, "logprobs": nil, "finish_reason": reason}},
		"usage":   req.usageFields(),
	})
}

// Error answers status with body (JSON unless it does not start with '{').
func Error(status int, body string, header ...string) Reply {
	return func(w http.ResponseWriter, r *http.Request, req Request) {
		ct := "application/json"
		if !strings.HasPrefix(strings.TrimSpace(body), "{") {
			ct = "text/plain; charset=utf-8"
		}
		w.Header().Set("Content-Type", ct)
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// Redirect answers with a redirect to location.
func Redirect(status int, location string) Reply {
	return func(w http.ResponseWriter, r *http.Request, req Request) {
		w.Header().Set("Location", location)
		w.WriteHeader(status)
	}
}

// Hang never answers; it returns when the client goes away.
func Hang() Reply {
	return func(w http.ResponseWriter, r *http.Request, req Request) { <-r.Context().Done() }
}

// StreamError streams pieces, then an error event as llama.cpp and vLLM send one mid-stream.
func StreamError(errJSON string, pieces ...string) Reply {
	return func(w http.ResponseWriter, r *http.Request, req Request) {
		sseHeader(w)
		for _, p := range pieces {
			event(w, chunk(map[string]any{"content": p}, nil))
		}
		fmt.Fprintf(w, "data: %s\n\n", errJSON)
		flush(w)
	}
}

func sseHeader(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
}

func chunk(delta map[string]any, reason any) map[string]any {
	return map[string]any{"id": "chatcmpl-agenttest", "object": "chat.completion.chunk", "created": 1735689600,
		"model": "test-model", "choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": reason}}}
}

func event(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(w, "data: %s\n\n", b)
	flush(w)
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// usageChunk is the last chunk of a stream whose request asked for its usage.
func usageChunk(w http.ResponseWriter, req Request) {
	if req.wantsUsage() {
		event(w, map[string]any{"id": "chatcmpl-agenttest", "object": "chat.completion.chunk", "created": 1735689600,
			"model": "test-model", "choices": []any{}, "usage": req.usageFields()})
	}
}

func streamText(w http.ResponseWriter, r *http.Request, req Request, pieces []string, delay time.Duration, reason string) {
	sseHeader(w)
	event(w, chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for _, p := range pieces {
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		event(w, chunk(map[string]any{"content": p}, nil))
	}
	event(w, chunk(map[string]any{}, reason))
	usageChunk(w, req)
	io.WriteString(w, "data: [DONE]\n\n")
	flush(w)
}

func streamCalls(w http.ResponseWriter, req Request, calls []Call) {
	sseHeader(w)
	event(w, chunk(map[string]any{"role": "assistant", "content": nil}, nil))
	for i, c := range calls {
		event(w, chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.ID, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": ""}}}}, nil))
		for _, p := range splitChunks(c.Args, 8) {
			event(w, chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i,
				"function": map[string]any{"arguments": p}}}}, nil))
		}
	}
	event(w, chunk(map[string]any{}, "tool_calls"))
	usageChunk(w, req)
	io.WriteString(w, "data: [DONE]\n\n")
	flush(w)
}

// splitChunks cuts s into pieces of about n bytes, never inside a UTF-8 sequence.
func splitChunks(s string, n int) []string {
	var out []string
	for len(s) > n {
		i := n
		for i < len(s) && s[i]&0xC0 == 0x80 {
			i++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}
