// Package adminapi serves the operator's HTTP interface: health, Prometheus metrics, JSON views
// of the plugins, sessions, background processes, the delivery ledger and the auth log, and the
// pairing commands. It is mounted on the admin listener only, behind internal/httpguard's checks
// (token, Host, no cross-site requests). Every list is bounded: ?limit=N is capped at MaxLimit.
package adminapi

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/actions"
	"github.com/hermes-host/hermes-host/internal/auth"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/httpguard"
	"github.com/hermes-host/hermes-host/internal/httpjson"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// API holds what the views read.
type API struct {
	Plugins   *plugin.Runtime
	Sessions  *session.Kernel
	Processes *process.Registry
	Ledger    *delivery.Ledger
	Auth      *auth.Gate
	Metrics   *prometheus.Registry
	// Ping checks that the store answers.
	Ping func(context.Context) error
	// Writes is the store's write health, reported by the durable write paths (inbox, ledger,
	// kv, sessions, processes) and its probe (nil: not checked).
	Writes *store.Health
	// Loading lists the plugin files not loaded yet (nil: Plugins.Loading). The host's start
	// passes one that also covers the moment before the plugins directory was first scanned.
	Loading func() []string
	// Stopping reports that the host is draining (SIGTERM): /healthz answers 503 "draining", so a
	// load balancer or supervisor stops sending it work (nil: never).
	Stopping func() bool
	// Jobs hands job requests to scheduler plugins (nil: /api/cron answers 404).
	Jobs Jobs
	// Throttle limits wrong pairing codes per client (nil: not limited).
	Throttle *httpguard.Throttle
	// State is the database /metrics reads the state gauges from at each scrape (stateCollector:
	// deliveries, processes, queues, pairing requests); nil: none are reported.
	State *sql.DB
	// Actions are the operator's actions (kill, reload, retry); nil: ones on the fields above.
	Actions *actions.Actions
}

// Jobs routes a jobs request to the scheduler plugin (name, or the only one) serving profile
// (internal/scheduler's Service).
type Jobs interface {
	Jobs(ctx context.Context, plugin, profile string, req abi.JobsRequest) (string, *abi.JobsResult, error)
}

// MaxLimit caps every ?limit=; DefaultLimit is used without one.
const (
	MaxLimit     = 1000
	DefaultLimit = 100
)

// Register adds the API's routes to mux.
func (a *API) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", a.healthz)
	// The platforms' connection gauge is read from the plugins, and the state gauges from the
	// database, at each scrape, from a registry of their own: the host's registry is shared (the
	// console reads it too), and a second Register must not collide with it.
	own := prometheus.NewRegistry()
	own.MustRegister(connectedCollector{a.Plugins})
	if a.State != nil {
		own.MustRegister(stateCollector{db: a.State, now: time.Now})
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{a.Metrics, own}, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/plugins", a.plugins)
	mux.HandleFunc("GET /api/deliveries", a.deliveries)
	mux.HandleFunc("GET /api/sessions", a.sessions)
	mux.HandleFunc("GET /api/processes", a.processes)
	mux.HandleFunc("GET /api/pairing", a.pairing)
	mux.HandleFunc("POST /api/pairing/approve", a.approve)
	mux.HandleFunc("POST /api/pairing/revoke", a.revoke)
	mux.HandleFunc("GET /api/auth/log", a.authLog)
	a.registerActions(mux)
	if a.Jobs != nil {
		mux.HandleFunc("GET /api/cron", a.cron)
		mux.HandleFunc("POST /api/cron", a.cron)
	}
}

// IsOpen reports the requests that need no token: the health check (for probes).
func IsOpen(r *http.Request) bool { return r.Method == http.MethodGet && r.URL.Path == "/healthz" }

// limit reads ?limit=, bounded.
func limit(r *http.Request) int {
	n, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	if n <= 0 {
		return DefaultLimit
	}
	return min(n, MaxLimit)
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

// healthz answers the host's state (README, "Health"): 503 "draining" once the host is stopping;
// 503 "unhealthy" while the store does
// not answer or refuses writes, with the reason (each failing write path and its error);
// otherwise 200 with "loading" until the plugins present at start (and any being reloaded) have
// loaded or failed, "degraded" while a loaded plugin is failed or a platform profile reports
// itself stopped (it gave up and needs the operator: a permanent close, revoked credentials),
// else "ok".
func (a *API) healthz(w http.ResponseWriter, r *http.Request) {
	if a.Stopping != nil && a.Stopping() {
		httpjson.Write(w, http.StatusServiceUnavailable, map[string]any{"status": "draining",
			"error": "the host is stopping: it finishes its turns and deliveries, and takes no new events"})
		return
	}
	if err := a.Ping(r.Context()); err != nil {
		httpjson.Write(w, http.StatusServiceUnavailable, map[string]any{"status": "unhealthy", "error": "store: " + err.Error()})
		return
	}
	// A store that answers reads but refuses writes (a full disk, I/O errors, another writer
	// holding the lock) is unhealthy: events cannot be recorded nor outcomes kept. The host
	// retries and is ok again once the store takes writes (store.Health), without a restart.
	if err := a.Writes.Err(); err != nil {
		httpjson.Write(w, http.StatusServiceUnavailable, map[string]any{"status": "unhealthy", "error": err.Error(),
			"failing": a.Writes.Failing()})
		return
	}
	var failed []string
	stopped := []string{}
	plugins := a.Plugins.Plugins()
	for _, p := range plugins {
		if !p.Active() {
			failed = append(failed, p.Name())
			continue
		}
		// Named as plugin/profile only: /healthz needs no token, and a status message may quote
		// the platform (account ids, reasons); /api/plugins has the message.
		for profile, st := range p.Info().Status {
			if st.State == abi.StatusStopped {
				stopped = append(stopped, p.Name()+"/"+profile)
			}
		}
	}
	sort.Strings(stopped)
	// A failed plugin or a stopped profile degrades the host but does not make it unhealthy: the
	// others serve.
	status := "ok"
	if len(failed) > 0 || len(stopped) > 0 {
		status = "degraded"
	}
	// Files still loading (at start-up, or a reload) do not make the host unhealthy either: the
	// listener answers from the start and every loaded plugin serves. But the host is not ok
	// before they have loaded: their webhooks answer 503 meanwhile (internal/webhook).
	loading := a.Plugins.Loading
	if a.Loading != nil {
		loading = a.Loading
	}
	pending := loading()
	if len(pending) > 0 && status == "ok" {
		status = "loading"
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"status": status, "plugins": len(plugins), "failed": failed,
		"stopped": stopped, "loading": pending})
}

// connectedDesc is the platforms' connection gauge.
var connectedDesc = prometheus.NewDesc("hermes_platform_connected",
	"1 while a platform plugin's profile reports itself connected (its poll's status ok), 0 while it reports degraded (reconnecting) or stopped, or its plugin failed",
	[]string{"plugin", "profile"}, nil)

// connectedCollector reports hermes_platform_connected for every profile whose plugin reports a
// status (ABI 1.1, from poll: Yuanbao's socket); profiles that report none (webhook platforms)
// are not listed.
type connectedCollector struct{ plugins *plugin.Runtime }

// Describe implements prometheus.Collector.
func (c connectedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- connectedDesc }

// Collect implements prometheus.Collector.
func (c connectedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.plugins.Plugins() {
		info := p.Info()
		if info.Manifest.Kind != abi.KindPlatform {
			continue
		}
		active := p.Active()
		for profile, st := range info.Status {
			v := 0.0
			if active && st.State == abi.StatusOK {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(connectedDesc, prometheus.GaugeValue, v, info.Name, profile)
		}
	}
}

func (a *API) plugins(w http.ResponseWriter, r *http.Request) {
	var infos []plugin.Info
	for _, p := range a.Plugins.Plugins() {
		infos = append(infos, p.Info())
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"plugins": infos, "rejected": a.Plugins.Rejections()})
}

// deliveries lists ledger rows, newest first: ?state=dropped&key=PREFIX&q=TEXT&before=ID&limit=N
// (q: in the id, key, origin or text; before: the page after that row).
func (a *API) deliveries(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rows, err := a.Ledger.List(r.Context(), delivery.Filter{State: delivery.State(q.Get("state")), KeyPrefix: q.Get("key"),
		Search: q.Get("q"), Before: q.Get("before"), Limit: limit(r)})
	if err != nil {
		httpjson.Write(w, http.StatusInternalServerError, abi.Errorf(abi.CodeIO, "%v", err))
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"deliveries": rows})
}

// sessions lists session keys (?key=PREFIX&limit=N), or shows one key or session (?show=KEY|ID)
// with the last ?tail=N messages (default 20).
func (a *API) sessions(w http.ResponseWriter, r *http.Request) {
	if show := r.URL.Query().Get("show"); show != "" {
		tail, _ := strconv.Atoi(r.URL.Query().Get("tail"))
		if tail <= 0 {
			tail = 20
		}
		v, err := a.Sessions.Show(r.Context(), show, min(tail, MaxLimit))
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
	if n := limit(r); len(keys) > n {
		keys = keys[:n]
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"sessions": keys})
}

func (a *API) processes(w http.ResponseWriter, r *http.Request) {
	list, err := a.Processes.List(r.Context())
	if err != nil {
		httpjson.Write(w, http.StatusInternalServerError, abi.Errorf(abi.CodeIO, "%v", err))
		return
	}
	if n := limit(r); len(list) > n {
		list = list[len(list)-n:]
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"processes": list})
}

// pairing lists the open pairing codes and the approved users.
func (a *API) pairing(w http.ResponseWriter, r *http.Request) {
	pending, approved, err := a.Auth.Pairing(r.Context())
	if err != nil {
		httpjson.Write(w, http.StatusInternalServerError, abi.Errorf(abi.CodeIO, "%v", err))
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"pending": pending, "approved": approved})
}

// approve approves a pairing code: {"code": "ABCD2345"}. The user is told in their chat.
func (a *API) approve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Code string `json:"code"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil || req.Code == "" {
		httpjson.Write(w, http.StatusBadRequest, abi.Errorf(abi.CodeBadRequest, `want {"code": "…"}`))
		return
	}
	if !a.Throttle.Allow(w, r, "pairing code") {
		return
	}
	ap, err := a.Auth.Approve(r.Context(), req.Code)
	switch {
	case errors.Is(err, auth.ErrNoCode):
		a.Throttle.Fail(r)
		httpjson.Write(w, http.StatusNotFound, abi.Errorf(abi.CodeNotFound, "%v", err))
	case err != nil:
		httpjson.Write(w, http.StatusInternalServerError, abi.Errorf(abi.CodeIO, "%v", err))
	default:
		httpjson.Write(w, http.StatusOK, map[string]any{"approved": ap})
	}
}

// revoke removes a user's approvals: {"user": "111", "plugin": "", "profile": ""}.
func (a *API) revoke(w http.ResponseWriter, r *http.Request) {
	var req struct {
		User    string `json:"user"`
		Plugin  string `json:"plugin"`
		Profile string `json:"profile"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil || req.User == "" {
		httpjson.Write(w, http.StatusBadRequest, abi.Errorf(abi.CodeBadRequest, `want {"user": "…"}`))
		return
	}
	revoked, err := a.Auth.Revoke(r.Context(), req.User, req.Plugin, req.Profile)
	switch {
	case errors.Is(err, auth.ErrNotApproved):
		httpjson.Write(w, http.StatusNotFound, abi.Errorf(abi.CodeNotFound, "%v", err))
	case err != nil:
		httpjson.Write(w, http.StatusInternalServerError, abi.Errorf(abi.CodeIO, "%v", err))
	default:
		httpjson.Write(w, http.StatusOK, map[string]any{"revoked": revoked})
	}
}

// authLog lists refused events and operator decisions, newest first: ?plugin=P&limit=N.
func (a *API) authLog(w http.ResponseWriter, r *http.Request) {
	entries, err := a.Auth.Log(r.Context(), auth.LogFilter{Plugin: r.URL.Query().Get("plugin"), Limit: limit(r)})
	if err != nil {
		httpjson.Write(w, http.StatusInternalServerError, abi.Errorf(abi.CodeIO, "%v", err))
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"entries": entries})
}
