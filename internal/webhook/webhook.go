// Package webhook serves POST /hooks/{plugin}/{profile}: it hands the request to the plugin's
// webhook export, records the events the plugin returns through the inbound door, and only then
// writes the plugin's answer, so a platform that sees a 2xx can rely on the events not being lost.
//
// The answer is the plugin's, within limits: only a safe set of response headers passes, a
// status outside 200-599 (a missing status, or an informational 1xx, is no answer) is a plugin
// error, and an error is answered with a fixed text and an id to find the details in the host's log, never
// with internal error text or the guest's stderr.
package webhook

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"

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
	// Hidden, if set, reports plugin profiles this handler does not serve (the demo platform
	// is served only on the admin listener).
	Hidden func(plugin, profile string) bool
	// Loading lists the plugin files not loaded yet (nil: Plugins.Loading). The host's start
	// passes one that also covers the moment before the plugins directory was first scanned.
	Loading func() []string
	// Stopping, if set, reports that the host is draining before it stops: every request is
	// answered 503 with Retry-After, before the plugin sees it, so the platform delivers the
	// event again later (to this host after its restart, or to another one).
	Stopping func() bool
}

// SafeHeaders are the response headers a plugin may set on its webhook answer. Anything else
// (cookies, CORS grants, redirects, framing headers) is dropped.
var SafeHeaders = []string{"Content-Type", "Content-Language", "Cache-Control", "Retry-After", "WWW-Authenticate"}

// Pattern is the route the handler serves.
const Pattern = "POST /hooks/{plugin}/{profile}"

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, profile := r.PathValue("plugin"), r.PathValue("profile")
	p := h.Plugins.Get(name)
	if h.Hidden != nil && h.Hidden(name, profile) {
		httpjson.Write(w, http.StatusNotFound, abi.Errorf(abi.CodeNotFound, "no such webhook"))
		return
	}
	if h.Stopping != nil && h.Stopping() {
		w.Header().Set("Retry-After", "5")
		httpjson.Write(w, http.StatusServiceUnavailable, abi.Errorf(abi.CodeUnavailable, "the host is stopping; retry"))
		return
	}
	loading := h.Plugins.Loading
	if h.Loading != nil {
		loading = h.Loading
	}
	if p == nil && len(loading()) > 0 {
		// It may be among the files still loading: the platform should retry, not give up.
		w.Header().Set("Retry-After", "1")
		httpjson.Write(w, http.StatusServiceUnavailable, abi.Errorf(abi.CodeUnavailable, "plugins are loading; retry"))
		return
	}
	if p == nil {
		httpjson.Write(w, http.StatusNotFound, abi.Errorf(abi.CodeNotFound, "no such webhook"))
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
	if err == nil && (res.Response.Status < 200 || res.Response.Status > 599) {
		err = abi.Errorf(abi.CodeInternal, "webhook answered HTTP status %d (want 200-599)", res.Response.Status)
	}
	if err != nil {
		status, code, text := http.StatusInternalServerError, abi.CodeInternal, "the plugin failed to handle the request"
		var failed *plugin.FailedError
		switch c := abi.CodeOf(err); {
		case c == abi.CodeNotFound || c == abi.CodeUnsupported:
			status, code, text = http.StatusNotFound, abi.CodeNotFound, "no such webhook"
		case c == abi.CodeDenied:
			status, code, text = http.StatusForbidden, abi.CodeDenied, "refused"
		case errors.As(err, &failed):
			status, code, text = http.StatusServiceUnavailable, abi.CodeUnavailable, "the plugin is failed; retry later"
		}
		id := errorID()
		h.Log.Warn("webhook failed", "plugin", name, "profile", profile, "error_id", id, "error", err)
		httpjson.Write(w, status, abi.Errorf(code, "%s (error id %s in the host's log)", text, id))
		return
	}
	if err := h.Door.DispatchAll(r.Context(), p.Caller(profile), res.Events); err != nil {
		// Not acknowledged: the platform will retry, and deduplication absorbs the repeat.
		id := errorID()
		h.Log.Error("webhook events not recorded", "plugin", name, "profile", profile, "error_id", id, "error", err)
		httpjson.Write(w, http.StatusServiceUnavailable, abi.Errorf(abi.CodeUnavailable, "could not record the events; retry (error id %s)", id))
		return
	}
	for k, vs := range res.Response.Headers {
		if k = http.CanonicalHeaderKey(k); slices.Contains(SafeHeaders, k) {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(res.Response.Status)
	w.Write(res.Response.Body)
}

// errorID names one failure, so an operator can find it in the log from what a caller saw.
func errorID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
