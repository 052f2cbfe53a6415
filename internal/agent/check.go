package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Check asks the endpoint's GET {base_url}/models whether it is reachable, accepts the key and
// serves the configured model. The error says what is wrong in terms of the configuration.
func (o *OpenAI) Check(ctx context.Context) error {
	req, err := o.request(ctx, http.MethodGet, "/models", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := o.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("agent: cannot reach the model server at %s: %v (is it running? is agent.base_url right?)", o.base, o.redact(err.Error()))
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return fmt.Errorf("agent: GET %s/models answered HTTP %d with a redirect to %q; redirects are not followed (the request carries the API key): set agent.base_url to the final address",
			o.base, resp.StatusCode, resp.Header.Get("Location"))
	case resp.StatusCode == 401 || resp.StatusCode == 403:
		msg, _, _ := errorFields(raw)
		return fmt.Errorf("agent: the model server at %s rejected the API key (HTTP %d: %s): check agent.api_key", o.base, resp.StatusCode, o.redact(msg))
	case resp.StatusCode == 404 && !strings.HasSuffix(o.base, "/v1"):
		return fmt.Errorf("agent: GET %s/models: HTTP 404: agent.base_url probably needs /v1 at the end (like %s/v1)", o.base, o.base)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		msg, _, _ := errorFields(raw)
		if msg == "" {
			msg = clip(strings.Join(strings.Fields(string(raw)), " "), 200)
		}
		return fmt.Errorf("agent: GET %s/models: HTTP %d: %s", o.base, resp.StatusCode, o.redact(msg))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("agent: GET %s/models did not answer an OpenAI model list (%v): is agent.base_url an OpenAI-compatible API root?", o.base, err)
	}
	var ids []string
	for _, m := range list.Data {
		if m.ID == o.model || m.ID == o.model+":latest" { // Ollama lists "name:latest" for "name"
			return nil
		}
		ids = append(ids, m.ID)
	}
	if len(ids) == 0 {
		return fmt.Errorf("agent: the model server at %s serves no models", o.base)
	}
	return fmt.Errorf("agent: the model server at %s does not serve agent.model %q; it serves: %s", o.base, o.model, clip(strings.Join(ids, ", "), 400))
}

// ContextWindow returns the context window of model ("" for the configured one) in tokens:
// Config.ContextTokens for the configured model when set, else what the server's GET
// {base_url}/models says of the model where it says it (vLLM's max_model_len, the
// context_length some servers give, llama.cpp's meta.n_ctx), else 0. The server is asked once
// per model, and again at most every windowRetry while it gave no answer.
func (o *OpenAI) ContextWindow(ctx context.Context, model string) int {
	if model == "" {
		model = o.model
	}
	if model == o.model && o.contextTokens > 0 {
		return o.contextTokens
	}
	w := o.window
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.models[model]
	if e.known || (!e.asked.IsZero() && time.Since(e.asked) < windowRetry) {
		return e.tokens
	}
	e.asked = time.Now()
	n, err := o.serverWindow(ctx, model)
	if err == nil {
		e.tokens, e.known = n, true
	} else {
		o.log.Info("the model server does not say the model's context window; set agent.context_tokens for automatic compression",
			"model", model, "error", o.redact(err.Error()))
	}
	w.models[model] = e
	return e.tokens
}

// windowRetry is how long ContextWindow waits before asking a server that gave no answer again.
const windowRetry = 10 * time.Minute

// windowCache is what the server said of each model's context window. Shared by the copies of
// an OpenAI (a turn without tools or with another model uses one).
type windowCache struct {
	mu     sync.Mutex
	models map[string]windowEntry
}

type windowEntry struct {
	asked  time.Time
	known  bool
	tokens int // 0: the server lists the model without a context window
}

// serverWindow asks GET {base_url}/models for the model's context window.
func (o *OpenAI) serverWindow(ctx context.Context, model string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := o.request(ctx, http.MethodGet, "/models", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := o.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return 0, fmt.Errorf("GET %s/models: HTTP %d", o.base, resp.StatusCode)
	}
	var list struct {
		Data []struct {
			ID            string `json:"id"`
			MaxModelLen   int    `json:"max_model_len"`  // vLLM
			ContextLength int    `json:"context_length"` // LM Studio, OpenRouter and others
			Meta          struct {
				NCtx int `json:"n_ctx"` // llama.cpp server
			} `json:"meta"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponseBytes)).Decode(&list); err != nil {
		return 0, fmt.Errorf("GET %s/models: %v", o.base, err)
	}
	for _, m := range list.Data {
		if m.ID != model && m.ID != model+":latest" {
			continue
		}
		for _, n := range []int{m.MaxModelLen, m.ContextLength, m.Meta.NCtx} {
			if n > 0 {
				return n, nil
			}
		}
		return 0, nil
	}
	return 0, fmt.Errorf("GET %s/models does not list %q", o.base, model)
}
