package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Lists update while they are shown. A list page carries the fingerprint of what it shows and
// follows GET live?src=<the page's address>&fp=<fingerprint>: the stream reads the page's data
// again every livePoll (the same bounded query the page ran) and sends a "changed" event when its
// fingerprint differs; the page's script then fetches the page again and swaps the list in.

// livePoll is how often a live list is read again.
const livePoll = time.Second

// pageSize and maxPage bound every list page (?limit=).
const (
	pageSize = 50
	maxPage  = 500
)

// liveSource reads a list page's data from its query, as the page itself does.
type liveSource func(c *Console, ctx context.Context, q url.Values) (any, error)

// liveSources are the pages that update live, by path.
var liveSources = map[string]liveSource{
	Prefix + "processes":  func(c *Console, ctx context.Context, q url.Values) (any, error) { return c.processesData(ctx, q) },
	Prefix + "deliveries": func(c *Console, ctx context.Context, q url.Values) (any, error) { return c.deliveriesData(ctx, q) },
	Prefix + "sessions":   func(c *Console, ctx context.Context, q url.Values) (any, error) { return c.sessionsData(ctx, q) },
}

// fingerprint names what v shows: equal data, equal fingerprint.
func fingerprint(v any) string {
	b, _ := json.Marshal(v)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:12])
}

// liveEvents follows a list page (?src=) and sends "changed" with the new fingerprint whenever
// the page's data no longer matches ?fp=.
func (c *Console) liveEvents(w http.ResponseWriter, r *http.Request, s *login) {
	src, err := url.Parse(r.URL.Query().Get("src"))
	var read liveSource
	if err == nil {
		read = liveSources[src.Path]
	}
	if read == nil {
		http.Error(w, "no live list there", http.StatusNotFound)
		return
	}
	st := startStream(w)
	last := r.URL.Query().Get("fp")
	tick := time.NewTicker(livePoll)
	defer tick.Stop()
	quiet := time.Now()
	for c.logins.alive(s) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		v, err := read(c, ctx, src.Query())
		cancel()
		if err == nil {
			if fp := fingerprint(v); fp != last {
				if st.send("changed", "", map[string]string{"fp": fp}) != nil {
					return
				}
				last, quiet = fp, time.Now()
			}
		}
		if time.Since(quiet) > keepAlive {
			if st.ping() != nil {
				return
			}
			quiet = time.Now()
		}
		select {
		case <-tick.C:
		case <-r.Context().Done():
			return
		case <-c.done:
			return
		}
	}
}

// paging reads ?offset= and ?limit= (bounded).
func paging(q url.Values) (offset, limit int) {
	offset, _ = strconv.Atoi(q.Get("offset"))
	limit, _ = strconv.Atoi(q.Get("limit"))
	if limit <= 0 {
		limit = pageSize
	}
	return max(offset, 0), min(limit, maxPage)
}

// pager is the links of a paged list: to the first page, the previous and the next, each the
// page's own query with another offset.
type pager struct {
	First, Prev, Next string // "" when there is none
	From, To          int    // the rows shown, from 1
}

// pagerOf builds the links of a page at offset that shows n of at most limit rows (a full page
// may have a next one).
func pagerOf(path string, q url.Values, offset, limit, n int) pager {
	at := func(o int) string {
		qq := url.Values{}
		for k, v := range q {
			qq[k] = v
		}
		qq.Del("offset")
		if o > 0 {
			qq.Set("offset", strconv.Itoa(o))
		}
		if len(qq) == 0 {
			return path
		}
		return path + "?" + qq.Encode()
	}
	p := pager{From: offset + 1, To: offset + n}
	if offset > 0 {
		p.First, p.Prev = at(0), at(max(offset-limit, 0))
	}
	if n == limit {
		p.Next = at(offset + limit)
	}
	return p
}
