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
