// Package webhook serves POST /hooks/{plugin}/{profile}: it hands the request to the plugin's
// webhook export, records the events the plugin returns through the inbound door, and only then
// writes the plugin's answer, so a platform that sees a 2xx can rely on the events not being lost.
package webhook

import (
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/httpjson"
	"github.com/hermes-host/hermes-host/internal/inbound"
	"github.com/hermes-host/hermes-host/internal/plugin"
)

// MaxBody caps an inbound webhook request body.
const MaxBody = 1 << 20

// Handler routes webhook requests to plugins.
type Handler struct {
	Plugins *plugin.Runtime
	Door    *inbound.Door
	Log     *slog.Logger
}

// Pattern is the route the handler serves.
const Pattern = "POST /hooks/{plugin}/{profile}"

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, profile := r.PathValue("plugin"), r.PathValue("profile")
	p := h.Plugins.Get(name)
	if p == nil && len(h.Plugins.Loading()) > 0 {
		// It may be among the files still loading: the platform should retry, not give up.
		w.Header().Set("Retry-After", "1")
		httpjson.Write(w, http.StatusServiceUnavailable, abi.Errorf(abi.CodeUnavailable, "no plugin %q yet: plugins are loading; retry", name))
		return
	}
	if p == nil {
		httpjson.Write(w, http.StatusNotFound, abi.Errorf(abi.CodeNotFound, "no plugin %q", name))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		httpjson.Write(w, http.StatusRequestEntityTooLarge, abi.Errorf(abi.CodeTooLarge, "webhook body over %d bytes", MaxBody))
		return
	}
	res, err := p.Webhook(r.Context(), profile, abi.WebhookRequest{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Headers: r.Header, Body: body,
	})
	if err != nil {
		status := http.StatusInternalServerError
		var failed *plugin.FailedError
		switch code := abi.CodeOf(err); {
		case code == abi.CodeNotFound || code == abi.CodeUnsupported:
			status = http.StatusNotFound
		case code == abi.CodeDenied:
			status = http.StatusForbidden
		case errors.As(err, &failed):
			status = http.StatusServiceUnavailable
		}
		h.Log.Warn("webhook failed", "plugin", name, "profile", profile, "error", err)
		httpjson.Write(w, status, abi.AsError(err))
		return
	}
	if err := h.Door.DispatchAll(r.Context(), p.Caller(profile), res.Events); err != nil {
		// Not acknowledged: the platform will retry, and deduplication absorbs the repeat.
		h.Log.Error("webhook events not recorded", "plugin", name, "profile", profile, "error", err)
		httpjson.Write(w, http.StatusServiceUnavailable, abi.Errorf(abi.CodeUnavailable, "could not record the events; retry"))
		return
	}
	for k, vs := range res.Response.Headers {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	status := res.Response.Status
	if status < 100 || status > 599 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	w.Write(res.Response.Body)
}
