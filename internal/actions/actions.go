// Package actions are the operator's actions on a running host: kill a background process,
// reload a plugin, send a failed delivery again. The admin API (JSON, behind the admin token)
// and the console (forms, behind its login and CSRF token) both call these, so an action has one
// policy, one refusal and one log line whichever way the operator takes.
package actions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/process"
)

// KillReason is the end reason of a process the operator killed.
const KillReason = "killed by the operator"

// Timeout bounds one action (a kill waits for the process group to end, a reload for the
// compilation).
const Timeout = 30 * time.Second

// Actions holds what the actions act on; a nil field makes its actions answer ErrUnavailable.
type Actions struct {
	Processes *process.Registry
	Plugins   *plugin.Runtime
	Ledger    *delivery.Ledger
	Log       *slog.Logger
}

// Errors the actions return besides the domain's own (process.ErrNotFound,
// process.ErrNotRunning, plugin.ErrNoPlugin, delivery.ErrNoMessage, delivery.ErrNotRetryable).
var (
	ErrUnavailable = errors.New("not available on this host")
	ErrBadRequest  = errors.New("bad request")
)

func (a *Actions) log() *slog.Logger {
	if a.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Log
}

// KillProcess stops a running background process (SIGTERM to its group, SIGKILL after the
// grace) and returns it ended. Its completion is reported into its conversation as usual, with
// the reason KillReason: the agent did not ask for the kill, so the result is not consumed.
// by says who asked, for the log (the remote address).
func (a *Actions) KillProcess(ctx context.Context, id, by string) (process.Info, error) {
	if a.Processes == nil {
		return process.Info{}, fmt.Errorf("processes: %w", ErrUnavailable)
	}
	if id == "" {
		return process.Info{}, fmt.Errorf("%w: which process?", ErrBadRequest)
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	cur, err := a.Processes.Inspect(ctx, id)
	if err != nil {
		return cur, err
	}
	if cur.State.Final() {
		return cur, fmt.Errorf("%w: %s has ended already (%s)", process.ErrNotRunning, id, cur.State)
	}
	in, err := a.Processes.Kill(ctx, id, process.KillOptions{Reason: KillReason, Notify: true})
	if err != nil {
		return in, err
	}
	a.log().Info("process killed by the operator", "process", id, "state", in.State, "by", by)
	return in, nil
}

// ReloadPlugin loads plugin name again from its file (plugin.Runtime.Reload).
func (a *Actions) ReloadPlugin(ctx context.Context, name, by string) (plugin.Info, error) {
	if a.Plugins == nil {
		return plugin.Info{}, fmt.Errorf("plugins: %w", ErrUnavailable)
	}
	if name == "" {
		return plugin.Info{}, fmt.Errorf("%w: which plugin?", ErrBadRequest)
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	info, err := a.Plugins.Reload(ctx, name)
	if err != nil {
		return info, err
	}
	a.log().Info("plugin reloaded by the operator", "plugin", name, "version", info.Manifest.Version, "by", by)
	return info, nil
}

// RetryDelivery sends a failed delivery again, only when its failure certainly had no effect
// (delivery.Ledger.Retry); any other row is refused with the reason.
func (a *Actions) RetryDelivery(ctx context.Context, id, by string) (delivery.Row, error) {
	if a.Ledger == nil {
		return delivery.Row{}, fmt.Errorf("deliveries: %w", ErrUnavailable)
	}
	if id == "" {
		return delivery.Row{}, fmt.Errorf("%w: which delivery?", ErrBadRequest)
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	r, err := a.Ledger.Retry(ctx, id)
	if err != nil {
		if errors.Is(err, delivery.ErrNotRetryable) {
			a.log().Warn("delivery retry refused", "id", id, "why", err, "by", by)
		}
		return r, err
	}
	a.log().Info("delivery retried by the operator", "id", id, "key", r.Key, "by", by)
	return r, nil
}

// Status is the HTTP status an action's error answers with: 404 for something that does not
// exist, 409 for an action the thing's state refuses (not running, not retryable), 400 for a
// malformed request, 501 for an action this host does not offer, else 500.
func Status(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, process.ErrNotFound), errors.Is(err, plugin.ErrNoPlugin), errors.Is(err, delivery.ErrNoMessage):
		return http.StatusNotFound
	case errors.Is(err, process.ErrNotRunning), errors.Is(err, delivery.ErrNotRetryable):
		return http.StatusConflict
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrUnavailable):
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}
