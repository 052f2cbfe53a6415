package console

import (
	"net/http"
	"strconv"

	"github.com/hermes-host/hermes-host/internal/delivery"
)

// deliveryFilters are the deliveries page's filters, in the order its tabs show them.
var deliveryFilters = []struct{ Name, Label string }{
	{"", "All"},
	{"dropped", "Dropped"},
	{"failed", "Failed"},
	{"uncertain", "Uncertain"},
	{"pending", "Pending"},
	{"delivered", "Delivered"},
}

type deliveriesView struct {
	Filter  string
	Filters []struct{ Name, Label string }
	Key     string
	Limit   int
	Rows    []delivery.Row
	// Commands are the commands of the processes rows come from, by process id.
	Commands map[string]string
}

// deliveriesPage lists the ledger, newest first: ?state=dropped|failed|uncertain|pending|
// delivered, ?key=PREFIX, ?limit=N (default 100, at most 1000).
func (c *Console) deliveriesPage(w http.ResponseWriter, r *http.Request, s *login) {
	ctx, cancel := pageCtx(r)
	defer cancel()
	q := r.URL.Query()
	v := deliveriesView{Filter: q.Get("state"), Filters: deliveryFilters, Key: q.Get("key"), Limit: 100}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n > 0 {
		v.Limit = min(n, 1000)
	}
	f := delivery.Filter{KeyPrefix: v.Key, Limit: v.Limit}
	switch v.Filter {
	case "":
	case "uncertain":
		f.Uncertain = true
	case "dropped", "failed", "pending", "delivered":
		f.State = delivery.State(v.Filter)
	default:
		v.Filter = ""
	}
	rows, err := c.Ledger.List(ctx, f)
	if err != nil {
		c.fail(w, r, s, http.StatusInternalServerError, err)
		return
	}
	v.Rows = rows
	v.Commands = map[string]string{}
	if procs, err := c.Processes.List(ctx); err == nil {
		for _, p := range procs {
			v.Commands[p.ID] = p.Command
		}
	}
	c.render(w, r, http.StatusOK, "deliveries", s, "Deliveries", v)
}
