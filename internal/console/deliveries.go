package console

import (
	"context"
	"net/http"
	"net/url"

	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
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
	Search  string
	Before  string // the page starts after this row (keyset paging)
	Limit   int
	Rows    []delivery.Row
	// Commands are the commands of the processes rows come from, by process id.
	Commands map[string]string
	// Older is the address of the next page, Newest of the first ("" when there is none).
	Older, Newest string
	FP            string `json:"-"` // the fingerprint of the rest (live updates)
}

// deliveriesPage lists the ledger, newest first: ?state=dropped|failed|uncertain|pending|
// delivered, ?key=PREFIX, ?q=TEXT (in the id, key, origin or text), ?before=ID (the page after
// that row), ?limit=N (default 50, at most 500).
func (c *Console) deliveriesPage(w http.ResponseWriter, r *http.Request, s *login) {
	ctx, cancel := pageCtx(r)
	defer cancel()
	v, err := c.deliveriesData(ctx, r.URL.Query())
	if err != nil {
		c.fail(w, r, s, http.StatusInternalServerError, err)
		return
	}
	v.FP = fingerprint(v)
	c.render(w, r, http.StatusOK, "deliveries", s, "Deliveries", v)
}

func (c *Console) deliveriesData(ctx context.Context, q url.Values) (deliveriesView, error) {
	_, limit := paging(q)
	v := deliveriesView{Filter: q.Get("state"), Filters: deliveryFilters, Key: q.Get("key"), Search: q.Get("q"),
		Before: q.Get("before"), Limit: limit}
	f := delivery.Filter{KeyPrefix: v.Key, Search: v.Search, Before: v.Before, Limit: v.Limit}
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
		return v, err
	}
	v.Rows = rows
	// The commands of the processes rows come from, among the newest processes (one bounded read).
	v.Commands = map[string]string{}
	if procs, err := c.Processes.Page(ctx, process.Filter{Limit: maxPage}); err == nil {
		origins := map[string]bool{}
		for _, r := range rows {
			origins[r.Origin] = true
		}
		for _, p := range procs {
			if origins[p.ID] {
				v.Commands[p.ID] = p.Command
			}
		}
	}
	same := url.Values{}
	for k, val := range map[string]string{"state": v.Filter, "key": v.Key, "q": v.Search} {
		if val != "" {
			same.Set(k, val)
		}
	}
	if q.Get("limit") != "" {
		same.Set("limit", q.Get("limit"))
	}
	if v.Before != "" {
		v.Newest = Prefix + "deliveries?" + same.Encode()
	}
	if len(rows) == v.Limit {
		same.Set("before", rows[len(rows)-1].ID)
		v.Older = Prefix + "deliveries?" + same.Encode()
	}
	return v, nil
}
