package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"strings"
	"time"
)

// Transcriber's defaults and limits.
const (
	DefaultTranscribeModel   = "whisper-1"
	DefaultTranscribeTimeout = 60 * time.Second
	// MaxTranscribeBytes is the largest file sent for transcription (OpenAI's own limit).
	MaxTranscribeBytes = 25 << 20
	maxTranscriptBytes = 1 << 20 // the largest answer read
)

// Transcriber turns voice messages and audio files into text through an OpenAI-compatible
// transcription endpoint: POST {URL}/audio/transcriptions as multipart/form-data with the
// fields file, model and response_format=json; the answer is {"text": "..."} (OpenAI,
// whisper.cpp's server, faster-whisper servers, vLLM, LocalAI). The URL is the operator's, like
// the model's base URL: loopback is allowed, redirects are never followed (the request carries
// the key and the recording), and each request has its own timeout.
type Transcriber struct {
	url     string
	model   string
	key     string
	timeout time.Duration
	client  *http.Client
	secrets []string
}

// NewTranscriber returns the client cfg describes; transport replaces the HTTP transport (nil:
// the default), and secrets are more values no error of it may show.
func NewTranscriber(cfg TranscribeConfig, transport http.RoundTripper, secrets []string) (*Transcriber, error) {
	base := strings.TrimRight(strings.TrimSpace(cfg.URL), "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("agent: transcribe: URL %q: want http:// or https:// and a host", redactURL(cfg.URL))
	}
	key := cfg.APIKey
	if key == "" && cfg.APIKeyEnv != "" {
		key = os.Getenv(cfg.APIKeyEnv)
	}
	tr := &Transcriber{
		url:     base + "/audio/transcriptions",
		model:   cfg.Model,
		key:     key,
		timeout: cfg.Timeout,
		client: &http.Client{
			Transport:     transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	if tr.model == "" {
		tr.model = DefaultTranscribeModel
	}
	if tr.timeout <= 0 {
		tr.timeout = DefaultTranscribeTimeout
	}
	tr.secrets = secretsOf(key, base, nil, secrets)
	return tr, nil
}

// redactURL drops a URL's password for an error message.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	return s
}

// ErrTranscribe is what every transcription failure matches (errors.Is); the *TranscribeError
// says which.
var ErrTranscribe = errors.New("agent: transcription failed")

// TranscribeError is a failed transcription. Its texts never hold the key.
type TranscribeError struct {
	// Reason is one of connect, timeout, redirect, http, bad_response, too_large, read.
	Reason string
	Status int    // the HTTP status for Reason http
	Detail string // the server's message or the cause, secrets redacted
	After  time.Duration
}

// Error says what failed.
func (e *TranscribeError) Error() string {
	return "agent: transcription failed: " + e.describe()
}

// Is matches ErrTranscribe.
func (e *TranscribeError) Is(target error) bool { return target == ErrTranscribe }

// describe renders the failure for people: what happened and, where it helps, what the
// operator can do.
func (e *TranscribeError) describe() string {
	switch e.Reason {
	case "timeout":
		return fmt.Sprintf("the transcription server did not answer within %s (agent.transcribe.timeout)", roundDuration(e.After))
	case "connect":
		return "the transcription server cannot be reached (the operator needs to check agent.transcribe.url)"
	case "redirect":
		return "the transcription server answered with a redirect, which is not followed (agent.transcribe.url must be its real address)"
	case "http":
		if e.Status == 401 || e.Status == 403 {
			return fmt.Sprintf("the transcription server refused the credentials (HTTP %d; the operator needs to check agent.transcribe's key)", e.Status)
		}
		if e.Detail != "" {
			return fmt.Sprintf("the transcription server failed (HTTP %d: %s)", e.Status, clip(e.Detail, 160))
		}
		return fmt.Sprintf("the transcription server failed (HTTP %d)", e.Status)
	case "too_large":
		return "the file is larger than the " + formatSize(MaxTranscribeBytes) + " a transcription may take"
	}
	if e.Detail != "" {
		return "the transcription server's answer could not be used (" + clip(e.Detail, 160) + ")"
	}
	return "the transcription server's answer could not be used"
}

// Transcribe sends a's stored file and returns its transcript (trimmed; "" when the server
// heard no speech). ctx's cancellation is returned as is; every other failure is a
// *TranscribeError.
func (tr *Transcriber) Transcribe(ctx context.Context, a Attachment) (string, error) {
	data, err := readAttachment(a, MaxTranscribeBytes)
	if err != nil {
		if errors.Is(err, errAttachmentTooLarge) {
			return "", &TranscribeError{Reason: "too_large"}
		}
		return "", &TranscribeError{Reason: "read", Detail: "the stored file could not be read"}
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="%s"`, quoteEscaper.Replace(uploadName(a))))
	h.Set("Content-Type", orDefault(a.MIMEType, "application/octet-stream"))
	part, err := mw.CreatePart(h)
	if err != nil {
		return "", err
	}
	if _, err := part.Write(data); err != nil {
		return "", err
	}
	for _, f := range [][2]string{{"model", tr.model}, {"response_format", "json"}} {
		if err := mw.WriteField(f[0], f[1]); err != nil {
			return "", err
		}
	}
	if err := mw.Close(); err != nil {
		return "", err
	}
	rctx, cancel := context.WithTimeout(ctx, tr.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, tr.url, &body)
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Accept", "application/json")
	if tr.key != "" {
		req.Header.Set("Authorization", "Bearer "+tr.key)
	}
	text, err := tr.do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if rctx.Err() != nil {
			return "", &TranscribeError{Reason: "timeout", After: tr.timeout}
		}
		return "", err
	}
	return text, nil
}

// do sends req and reads the transcript.
func (tr *Transcriber) do(req *http.Request) (string, error) {
	resp, err := tr.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && (errors.Is(ue.Err, context.DeadlineExceeded) || errors.Is(ue.Err, context.Canceled)) {
			return "", ue.Err
		}
		return "", &TranscribeError{Reason: "connect", Detail: tr.redact(err.Error())}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return "", &TranscribeError{Reason: "redirect", Status: resp.StatusCode}
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
		msg, _, _ := errorFields(raw)
		if msg == "" {
			msg = clip(strings.Join(strings.Fields(reTag.ReplaceAllString(string(raw), " ")), " "), 300)
		}
		return "", &TranscribeError{Reason: "http", Status: resp.StatusCode, Detail: tr.redact(msg)}
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxTranscriptBytes+1))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return "", err
		}
		return "", &TranscribeError{Reason: "bad_response", Detail: tr.redact(err.Error())}
	}
	if len(raw) > maxTranscriptBytes {
		return "", &TranscribeError{Reason: "bad_response", Detail: "answer larger than " + formatSize(maxTranscriptBytes)}
	}
	var out struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Text == nil {
		return "", &TranscribeError{Reason: "bad_response", Detail: `want JSON {"text": ...}`}
	}
	return strings.TrimSpace(*out.Text), nil
}

// redact removes the key (and the other secrets) and bearer tokens from s.
func (tr *Transcriber) redact(s string) string {
	for _, sec := range tr.secrets {
		s = strings.ReplaceAll(s, sec, "[redacted]")
	}
	return reBearer.ReplaceAllString(s, "Bearer [redacted]")
}

// quoteEscaper escapes a multipart file name as mime/multipart does.
var quoteEscaper = strings.NewReplacer("\\", "\\\\", `"`, "\\\"", "\r", "", "\n", "")

// uploadName is the file name sent with a: the platform's name without any directory, or a
// name from its type (servers guess the format from the extension).
func uploadName(a Attachment) string {
	name := a.Name
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	if name = strings.TrimSpace(name); name != "" && name != "." && name != ".." {
		return name
	}
	ext := map[string]string{"audio/ogg": ".ogg", "audio/mpeg": ".mp3", "audio/wav": ".wav", "audio/x-wav": ".wav",
		"audio/mp4": ".m4a", "audio/webm": ".webm", "audio/flac": ".flac", "video/mp4": ".mp4", "video/webm": ".webm"}[baseMIME(a.MIMEType)]
	return "audio" + orDefault(ext, ".bin")
}
