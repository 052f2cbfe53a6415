package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/hermes-host/hermes-host/internal/approval"
	"github.com/hermes-host/hermes-host/internal/session"
)

// sessionTail is how many transcript messages the session page shows.
const sessionTail = 30

type sessionsView struct {
	Prefix string
	Search string
	Keys   []session.KeyInfo
	Pages  pager
	FP     string `json:"-"` // the fingerprint of the rest (live updates)
}

func (c *Console) sessionsPage(w http.ResponseWriter, r *http.Request, s *login) {
	ctx, cancel := pageCtx(r)
	defer cancel()
	v, err := c.sessionsData(ctx, r.URL.Query())
	if err != nil {
		c.fail(w, r, s, http.StatusInternalServerError, err)
		return
	}
	v.FP = fingerprint(v)
	c.render(w, r, http.StatusOK, "sessions", s, "Sessions", v)
}

// sessionsData reads one page of session keys, the most recently active first (the one the
// operator is looking for): ?key=PREFIX, ?q=TEXT (in the key or the title), ?offset=N, ?limit=N.
func (c *Console) sessionsData(ctx context.Context, q url.Values) (sessionsView, error) {
	offset, limit := paging(q)
	v := sessionsView{Prefix: q.Get("key"), Search: q.Get("q")}
	keys, err := c.Sessions.Keys(ctx, session.KeyFilter{Prefix: v.Prefix, Search: v.Search, Offset: offset, Limit: limit})
	if err != nil {
		return v, err
	}
	v.Keys = keys
	v.Pages = pagerOf(Prefix+"sessions", q, offset, limit, len(keys))
	return v, nil
}

// treeNode is one session of the lineage tree: its ancestors lead to it, its compression
// continuations follow from it.
type treeNode struct {
	session.SessionInfo
	Current, Focus bool
	Child          *treeNode
}

type sessionView struct {
	*session.SessionView
	Tree      *treeNode
	Approvals []approval.Record // the key's requests of commands that waited for a person
}

// sessionPage shows a key (its current session) or one session: the lineage from the oldest
// ancestor through the session to its last compression continuation, and the transcript tail.
func (c *Console) sessionPage(w http.ResponseWriter, r *http.Request, s *login) {
	ctx, cancel := pageCtx(r)
	defer cancel()
	id := r.URL.Query().Get("id")
	v, err := c.Sessions.Show(ctx, id, sessionTail)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, session.ErrNotFound) || errors.Is(err, session.ErrMalformedKey) || id == "" {
			status = http.StatusNotFound
		}
		c.fail(w, r, s, status, err)
		return
	}
	view := sessionView{SessionView: v, Tree: lineage(v)}
	if c.Approvals != nil {
		if view.Approvals, err = c.Approvals.ForKey(ctx, v.Key); err != nil {
			c.fail(w, r, s, http.StatusInternalServerError, err)
			return
		}
	}
	c.render(w, r, http.StatusOK, "sessions-show", s, "Session "+v.Focus.ID, view)
}

// lineage links the view's sessions oldest first: ancestors (the view lists them nearest first),
// the focus, then its continuations.
func lineage(v *session.SessionView) *treeNode {
	var chain []session.SessionInfo
	for i := len(v.Ancestors) - 1; i >= 0; i-- {
		chain = append(chain, v.Ancestors[i])
	}
	chain = append(chain, v.Focus)
	chain = append(chain, v.Continuations...)
	var root, last *treeNode
	for _, si := range chain {
		n := &treeNode{SessionInfo: si, Focus: si.ID == v.Focus.ID, Current: v.Current != nil && si.ID == v.Current.ID}
		if root == nil {
			root = n
		} else {
			last.Child = n
		}
		last = n
	}
	return root
}
