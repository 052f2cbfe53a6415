package agenttest

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Transcription is one request a Transcriptions server received, as its multipart body said.
type Transcription struct {
	Header http.Header
	// Fields are the form's text fields (model, response_format, language…).
	Fields map[string]string
	// FileName, FileType and File are the "file" part's name, Content-Type and bytes.
	FileName, FileType string
	File               []byte
}

// TranscribeReply answers one transcription request.
type TranscribeReply func(w http.ResponseWriter, r *http.Request, req Transcription)

// Transcriptions is a loopback OpenAI-compatible transcription server: it serves POST
// /v1/audio/transcriptions, reads the multipart/form-data body strictly (one "file" part, a
// "model" field, response_format json if given: anything else fails the test and gets a 400
// naming the fault) and answers from a script.
type Transcriptions struct {
	// URL is the API root with /v1, as an operator would write agent.transcribe.url.
	URL string

	t      testing.TB
	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []Transcription
	script []TranscribeReply
}

// NewTranscriptions starts a transcription server answering with script, in order; an
// unscripted request fails the test.
func NewTranscriptions(t testing.TB, script ...TranscribeReply) *Transcriptions {
	s := &Transcriptions{t: t, script: script}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	s.URL = s.srv.URL + "/v1"
	return s
}

// Requests returns the well-formed requests received so far.
func (s *Transcriptions) Requests() []Transcription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Transcription(nil), s.reqs...)
}

func (s *Transcriptions) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/audio/transcriptions" {
		s.t.Errorf("agenttest: transcription server: %s %s, want POST /v1/audio/transcriptions", r.Method, r.URL.Path)
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	req, err := readTranscription(r)
	if err != nil {
		s.t.Errorf("agenttest: transcription server: %v", err)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error"}}`, err.Error())
		return
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	n := len(s.reqs)
	var h TranscribeReply
	if n <= len(s.script) {
		h = s.script[n-1]
	}
	s.mu.Unlock()
	if h == nil {
		s.t.Errorf("agenttest: unscripted transcription request %d", n)
		http.Error(w, `{"error":{"message":"unscripted"}}`, http.StatusInternalServerError)
		return
	}
	h(w, r, req)
}

// readTranscription parses and checks a transcription request's body.
func readTranscription(r *http.Request) (Transcription, error) {
	req := Transcription{Header: r.Header.Clone(), Fields: map[string]string{}}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return req, fmt.Errorf("Content-Type %q: want multipart/form-data with a boundary", r.Header.Get("Content-Type"))
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return req, err
	}
	files := 0
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return req, fmt.Errorf("multipart body: %v", err)
		}
		data, err := io.ReadAll(p)
		if err != nil {
			return req, fmt.Errorf("multipart part %q: %v", p.FormName(), err)
		}
		switch name := p.FormName(); {
		case name == "file":
			files++
			if p.FileName() == "" {
				return req, fmt.Errorf(`part "file" has no filename`)
			}
			req.FileName, req.FileType, req.File = p.FileName(), p.Header.Get("Content-Type"), data
		case name == "":
			return req, fmt.Errorf("a part without a form name")
		case p.FileName() != "":
			return req, fmt.Errorf("part %q is a file; only \"file\" may be", name)
		default:
			if _, dup := req.Fields[name]; dup {
				return req, fmt.Errorf("field %q given twice", name)
			}
			req.Fields[name] = string(data)
		}
	}
	switch {
	case files != 1:
		return req, fmt.Errorf(`%d "file" parts, want 1`, files)
	case len(req.File) == 0:
		return req, fmt.Errorf(`"file" is empty`)
	case req.Fields["model"] == "":
		return req, fmt.Errorf(`field "model" is missing`)
	}
	if f, ok := req.Fields["response_format"]; ok && f != "json" {
		return req, fmt.Errorf("response_format %q: this server answers json", f)
	}
	return req, nil
}

// Transcript answers {"text": text}, as OpenAI and whisper.cpp's server do.
func Transcript(text string) TranscribeReply {
	return func(w http.ResponseWriter, r *http.Request, req Transcription) {
		writeJSON(w, 200, map[string]any{"text": text})
	}
}

// TranscribeFail answers status with body.
func TranscribeFail(status int, body string) TranscribeReply {
	return func(w http.ResponseWriter, r *http.Request, req Transcription) {
		Error(status, body)(w, r, Request{})
	}
}

// TranscribeHang never answers; it returns when the client goes away.
func TranscribeHang() TranscribeReply {
	return func(w http.ResponseWriter, r *http.Request, req Transcription) { <-r.Context().Done() }
}
