package adminapi

import (
	"net/http"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/actions"
	"github.com/hermes-host/hermes-host/internal/httpjson"
)

// registerActions adds the operator's actions, each a POST without a body (the thing acted on
// is in the path) answering the thing as it is afterwards, or an error with the reason:
//
//	POST /api/processes/{id}/kill     {"process": …}   404 unknown, 409 not running
//	POST /api/plugins/{name}/reload   {"plugin": …}    404 unknown, 500 the file does not load
//	POST /api/deliveries/{id}/retry   {"delivery": …}  404 unknown, 409 not certainly unsent
//
// The admin listener's guard requires the token and refuses cross-site requests before these
// run (internal/httpguard); the console's forms call the same functions (internal/actions).
func (a *API) registerActions(mux *http.ServeMux) {
	act := a.actions()
	mux.HandleFunc("POST /api/processes/{id}/kill", func(w http.ResponseWriter, r *http.Request) {
		in, err := act.KillProcess(r.Context(), r.PathValue("id"), r.RemoteAddr)
		answer(w, err, "process", in)
	})
	mux.HandleFunc("POST /api/plugins/{name}/reload", func(w http.ResponseWriter, r *http.Request) {
		info, err := act.ReloadPlugin(r.Context(), r.PathValue("name"), r.RemoteAddr)
		answer(w, err, "plugin", info)
	})
	mux.HandleFunc("POST /api/deliveries/{id}/retry", func(w http.ResponseWriter, r *http.Request) {
		row, err := act.RetryDelivery(r.Context(), r.PathValue("id"), r.RemoteAddr)
		answer(w, err, "delivery", row)
	})
}

func (a *API) actions() *actions.Actions {
	if a.Actions != nil {
		return a.Actions
	}
	return &actions.Actions{Processes: a.Processes, Plugins: a.Plugins, Ledger: a.Ledger}
}

// actionCodes are the error codes of the actions' statuses.
var actionCodes = map[int]string{
	http.StatusNotFound: abi.CodeNotFound, http.StatusConflict: abi.CodeConflict,
	http.StatusBadRequest: abi.CodeBadRequest, http.StatusNotImplemented: abi.CodeUnavailable,
}

// answer writes an action's outcome: {name: v}, or the error with its status.
func answer(w http.ResponseWriter, err error, name string, v any) {
	if err != nil {
		status := actions.Status(err)
		code, ok := actionCodes[status]
		if !ok {
			code = abi.CodeInternal
		}
		httpjson.Write(w, status, abi.Errorf(code, "%v", err))
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{name: v})
}
