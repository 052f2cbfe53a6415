package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/plugin"
)

// maxWebhookBody caps an inbound webhook request body.
const maxWebhookBody = 1 << 20

// Handler is the gateway's HTTP interface.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", g.healthz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/plugins", g.apiPlugins)
	mux.HandleFunc("GET /api/deliveries", g.apiDeliveries)
	mux.HandleFunc("GET /api/sessions", g.apiSessions)
	mux.HandleFunc("GET /api/processes", g.apiProcesses)
	mux.HandleFunc("POST /hooks/{plugin}/{profile}", g.hook)
	mux.HandleFunc("POST /demo/outbox", g.demo.post)
	mux.HandleFunc("GET /demo/outbox", g.demo.list)
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func (g *Gateway) healthz(w http.ResponseWriter, r *http.Request) {
	var failed []string
	plugins := g.runtime.Plugins()
	for _, p := range plugins {
		if !p.Active() {
			failed = append(failed, p.Name())
		}
	}
	if err := g.db.PingContext(r.Context()); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unhealthy", "error": "store: " + err.Error()})
		return
	}
	// A failed plugin degrades the host but does not make it unhealthy: the others serve.
	status := "ok"
	if len(failed) > 0 {
		status = "degraded"
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": status, "plugins": len(plugins), "failed": failed})
}

func (g *Gateway) apiPlugins(w http.ResponseWriter, r *http.Request) {
	var infos []plugin.Info
	for _, p := range g.runtime.Plugins() {
		infos = append(infos, p.Info())
	}
	writeJSON(w, http.StatusOK, map[string]any{"plugins": infos, "rejected": g.runtime.Rejections()})
}

// apiDeliveries lists ledger rows: ?state=dropped&key=PREFIX&limit=N.
func (g *Gateway) apiDeliveries(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	rows, err := g.ledger.List(r.Context(), delivery.Filter{State: delivery.State(q.Get("state")), KeyPrefix: q.Get("key"), Limit: limit})
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, abi.Errorf(abi.CodeIO, "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"deliveries": rows})
}

// apiSessions lists session keys (?key=PREFIX), or shows one key or session (?show=KEY|ID).
func (g *Gateway) apiSessions(w http.ResponseWriter, r *http.Request) {
	if show := r.URL.Query().Get("show"); show != "" {
		v, err := g.kernel.Show(r.Context(), show, 20)
		if err != nil {
			writeJSON(w, http.StatusNotFound, abi.Errorf(abi.CodeNotFound, "%v", err))
			return
		}
		writeJSON(w, http.StatusOK, v)
		return
	}
	keys, err := g.kernel.List(r.Context(), r.URL.Query().Get("key"))
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, abi.Errorf(abi.CodeIO, "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": keys})
}

func (g *Gateway) apiProcesses(w http.ResponseWriter, r *http.Request) {
	list, err := g.procs.List(r.Context())
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, abi.Errorf(abi.CodeIO, "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"processes": list})
}

// hook routes POST /hooks/{plugin}/{profile} into the plugin's webhook export. The events it
// returns are dispatched (durably recorded) before the plugin's answer is written, so a
// platform that sees a 2xx can rely on the event not being lost.
func (g *Gateway) hook(w http.ResponseWriter, r *http.Request) {
	name, profile := r.PathValue("plugin"), r.PathValue("profile")
	p := g.runtime.Get(name)
	if p == nil {
		writeJSON(w, http.StatusNotFound, abi.Errorf(abi.CodeNotFound, "no plugin %q", name))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, abi.Errorf(abi.CodeTooLarge, "webhook body over %d bytes", maxWebhookBody))
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
		g.log.Warn("webhook failed", "plugin", name, "profile", profile, "error", err)
		writeJSON(w, status, abi.AsError(err))
		return
	}
	m := p.Manifest()
	caller := plugin.Caller{Plugin: name, Kind: m.Kind, Platform: m.Platform, Profile: profile}
	if err := g.dispatch(r.Context(), caller, res.Events); err != nil {
		// Not acknowledged: the platform will retry, and deduplication absorbs the repeat.
		g.log.Error("webhook events not recorded", "plugin", name, "profile", profile, "error", err)
		writeJSON(w, http.StatusServiceUnavailable, abi.Errorf(abi.CodeUnavailable, "could not record the events; retry"))
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

// demoChat is the loopback chat the embedded defaults point the echo plugin at: the echo
// plugin POSTs replies here, and GET /demo/outbox shows them. It lets a new user watch the
// whole flow (webhook in, agent turn, background process, notification out) with curl.
type demoChat struct {
	mu   sync.Mutex
	msgs []map[string]any
	next int
}

func newDemoChat() *demoChat { return &demoChat{} }

func (d *demoChat) post(w http.ResponseWriter, r *http.Request) {
	var m map[string]any
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxWebhookBody)).Decode(&m); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"ok": false, "error": "bad_json"})
		return
	}
	d.mu.Lock()
	d.next++
	id := d.next
	m["message_id"] = id
	m["at"] = time.Now().UTC().Format(time.RFC3339)
	d.msgs = append(d.msgs, m)
	if len(d.msgs) > 1000 {
		d.msgs = d.msgs[len(d.msgs)-1000:]
	}
	d.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "message_id": itoa(id)})
}

func (d *demoChat) list(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	out := append([]map[string]any{}, d.msgs...)
	d.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"messages": out})
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
