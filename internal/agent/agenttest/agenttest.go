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
			h = modelList(s.models)
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

func modelList(ids []string) Reply {
	return func(w http.ResponseWriter, r *http.Request, req Request) {
		var data []any
		for _, id := range ids {
			data = append(data, map[string]any{"id": id, "object": "model", "created": 1735689600, "owned_by": "vllm"})
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
			streamText(w, r, splitChunks(text, 16), 0, reason)
			return
		}
		completion(w, req, map[string]any{"role": "assistant", "content": text}, reason)
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
		streamText(w, r, pieces, delay, "stop")
	}
}

// ToolCalls answers with tool calls (finish_reason "tool_calls"), streamed when asked.
func ToolCalls(calls ...Call) Reply {
	return func(w http.ResponseWriter, r *http.Request, req Request) {
		if req.Stream() {
			streamCalls(w, calls)
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
		"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
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

func streamText(w http.ResponseWriter, r *http.Request, pieces []string, delay time.Duration, reason string) {
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
	io.WriteString(w, "data: [DONE]\n\n")
	flush(w)
}

func streamCalls(w http.ResponseWriter, calls []Call) {
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
