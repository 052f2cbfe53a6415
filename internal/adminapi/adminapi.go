// Package adminapi serves the operator's HTTP interface: health, Prometheus metrics, and JSON views
// of the plugins, sessions, background processes and the delivery ledger.
package adminapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/httpjson"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
)

// API holds what the views read.
type API struct {
	Plugins   *plugin.Runtime
	Sessions  *session.Kernel
	Processes *process.Registry
	Ledger    *delivery.Ledger
	Metrics   *prometheus.Registry
	// Ping checks the store.
	Ping func(context.Context) error
	// Jobs hands job requests to scheduler plugins (nil: /api/cron answers 404).
	Jobs Jobs
}

// Jobs routes a jobs request to the scheduler plugin (name, or the only one) serving profile
// (internal/scheduler's Service).
type Jobs interface {
	Jobs(ctx context.Context, plugin, profile string, req abi.JobsRequest) (string, *abi.JobsResult, error)
}

// Register adds the API's routes to mux.
func (a *API) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.Metrics, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/plugins", a.plugins)
	mux.HandleFunc("GET /api/deliveries", a.deliveries)
	mux.HandleFunc("GET /api/sessions", a.sessions)
	mux.HandleFunc("GET /api/processes", a.processes)
	if a.Jobs != nil {
		mux.HandleFunc("GET /api/cron", a.cron)
		mux.HandleFunc("POST /api/cron", a.cron)
	}
}

// jobStatus is the HTTP status of a jobs call's error code.
var jobStatus = map[string]int{
	abi.CodeBadRequest: http.StatusBadRequest, abi.CodeNotFound: http.StatusNotFound,
	abi.CodeConflict: http.StatusConflict, abi.CodeTooLarge: http.StatusRequestEntityTooLarge,
	abi.CodeUnsupported: http.StatusNotImplemented, abi.CodeTimeout: http.StatusGatewayTimeout,
}

// cron lists a scheduler's jobs (GET /api/cron?profile=main&plugin=cron) or hands it a change
// as the operator (POST /api/cron with {"plugin", "profile", "op", "id", "job"}; see
// abi.JobsRequest). plugin may be omitted when one scheduler serves the profile.
func (a *API) cron(w http.ResponseWriter, r *http.Request) {
	var req abi.JobsRequest
	var target struct {
		Plugin string `json:"plugin"`
	}
	if r.Method == http.MethodGet {
		q := r.URL.Query()
		req.Op, req.Profile, target.Plugin = abi.JobsList, q.Get("profile"), q.Get("plugin")
	} else {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err == nil {
			err = json.Unmarshal(body, &req)
		}
		if err == nil {
			err = json.Unmarshal(body, &target)
		}
		if err != nil {
			httpjson.Write(w, http.StatusBadRequest, abi.Errorf(abi.CodeBadRequest, "malformed request: %v", err))
			return
		}
	}
	if req.Profile == "" {
		req.Profile = "main"
	}
	req.Config, req.By = nil, "operator"
	name, res, err := a.Jobs.Jobs(r.Context(), target.Plugin, req.Profile, req)
	if err != nil {
		status, ok := jobStatus[abi.CodeOf(err)]
		if !ok {
			status = http.StatusInternalServerError
		}
		httpjson.Write(w, status, abi.AsError(err))
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"plugin": name, "profile": req.Profile, "jobs": res.Jobs})
}

func (a *API) healthz(w http.ResponseWriter, r *http.Request) {
	var failed []string
	plugins := a.Plugins.Plugins()
	for _, p := range plugins {
		if !p.Active() {
			failed = append(failed, p.Name())
		}
	}
	if err := a.Ping(r.Context()); err != nil {
		httpjson.Write(w, http.StatusServiceUnavailable, map[string]any{"status": "unhealthy", "error": "store: " + err.Error()})
		return
	}
	// A failed plugin degrades the host but does not make it unhealthy: the others serve.
	status := "ok"
	if len(failed) > 0 {
		status = "degraded"
	}
	// Files still loading (at start-up, or a reload) do not make the host unhealthy either: the
	// listener answers from the start and every loaded plugin serves.
	loading := a.Plugins.Loading()
	if len(loading) > 0 && status == "ok" {
		status = "loading"
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"status": status, "plugins": len(plugins), "failed": failed, "loading": loading})
}

func (a *API) plugins(w http.ResponseWriter, r *http.Request) {
	var infos []plugin.Info
	for _, p := range a.Plugins.Plugins() {
		infos = append(infos, p.Info())
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"plugins": infos, "rejected": a.Plugins.Rejections()})
}

// deliveries lists ledger rows: ?state=dropped&key=PREFIX&limit=N.
func (a *API) deliveries(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	rows, err := a.Ledger.List(r.Context(), delivery.Filter{State: delivery.State(q.Get("state")), KeyPrefix: q.Get("key"), Limit: limit})
	if err != nil {
		httpjson.Write(w, http.StatusInternalServerError, abi.Errorf(abi.CodeIO, "%v", err))
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"deliveries": rows})
}

// sessions lists session keys (?key=PREFIX), or shows one key or session (?show=KEY|ID).
func (a *API) sessions(w http.ResponseWriter, r *http.Request) {
	if show := r.URL.Query().Get("show"); show != "" {
		v, err := a.Sessions.Show(r.Context(), show, 20)
		if err != nil {
			httpjson.Write(w, http.StatusNotFound, abi.Errorf(abi.CodeNotFound, "%v", err))
			return
		}
		httpjson.Write(w, http.StatusOK, v)
		return
	}
	keys, err := a.Sessions.List(r.Context(), r.URL.Query().Get("key"))
	if err != nil {
		httpjson.Write(w, http.StatusInternalServerError, abi.Errorf(abi.CodeIO, "%v", err))
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"sessions": keys})
}

func (a *API) processes(w http.ResponseWriter, r *http.Request) {
	list, err := a.Processes.List(r.Context())
	if err != nil {
		httpjson.Write(w, http.StatusInternalServerError, abi.Errorf(abi.CodeIO, "%v", err))
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"processes": list})
}
