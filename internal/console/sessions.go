package console

import (
	"errors"
	"net/http"
	"slices"

	"github.com/hermes-host/hermes-host/internal/session"
)

// sessionTail is how many transcript messages the session page shows.
const sessionTail = 30

type sessionsView struct {
	Prefix string
	Keys   []session.KeyInfo
}

func (c *Console) sessionsPage(w http.ResponseWriter, r *http.Request, s *login) {
	ctx, cancel := pageCtx(r)
	defer cancel()
	prefix := r.URL.Query().Get("key")
	keys, err := c.Sessions.List(ctx, prefix)
	if err != nil {
		c.fail(w, r, s, http.StatusInternalServerError, err)
		return
	}
	// The most recently active first: that is the one the operator is looking for.
	slices.SortStableFunc(keys, func(a, b session.KeyInfo) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	c.render(w, r, http.StatusOK, "sessions", s, "Sessions", sessionsView{Prefix: prefix, Keys: keys})
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
	Tree *treeNode
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
	c.render(w, r, http.StatusOK, "sessions-show", s, "Session "+v.Focus.ID, sessionView{SessionView: v, Tree: lineage(v)})
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
