package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	st "github.com/hermes-host/hermes-host/conformance/slacktest"
)

// postsInThread are the chat.postMessage requests the fake received for a thread, in order.
func (h *slackHost) postsInThread(thread string) []st.Request {
	var out []st.Request
	for _, r := range h.s.Requests("chat.postMessage") {
		if r.Params["thread_ts"] == thread {
			out = append(out, r)
		}
	}
	return out
}

// TestSlackRetrySemantics (issue 29, item 3): Slack's answer decides the retry. An HTTP 200
// {"ok":false,"error":"ratelimited"} with Retry-After: 1 is retried after that second (it waited
// the 30 s default: only a 429's Retry-After was read); a 503 whose body says
// service_unavailable, which Slack documents as not executed, is retried and the user answered
// once (it was "uncertain": never retried, no answer). The gaps are measured from the fake's
// request times.
func TestSlackRetrySemantics(t *testing.T) {
	h := startSlackHost(t, "")
	team := h.s.Team()

	h.s.InjectFault("chat.postMessage", st.RateLimited(1).WithStatus(http.StatusOK))
	a := team.Mention(slackGeneral, slackAnn, "help")
	h.waitFor(t, "the reply after the rate limit", h.threadHas(team.ID, a.TS, "built-in agent"))
	reqs := h.postsInThread(a.TS)
	if len(reqs) != 2 || reqs[0].Status != 200 || reqs[0].Error != "ratelimited" || reqs[1].Error != "" {
		t.Fatalf("requests in the thread: %+v", reqs)
	}
	gap := reqs[1].Time.Sub(reqs[0].Time)
	t.Logf("ratelimited with Retry-After 1: retried %v later", gap.Round(time.Millisecond))
	if gap < time.Second {
		t.Fatalf("retried %v after a ratelimited answer with Retry-After: 1", gap)
	}
	if gap > 10*time.Second { // the 30 s default, or a back-off that ignored the header
		t.Fatalf("retried %v after Retry-After: 1", gap)
	}

	h.s.InjectFault("chat.postMessage", st.Error("service_unavailable").WithStatus(http.StatusServiceUnavailable))
	b := team.Mention(slackGeneral, slackAnn, "hello after the outage")
	h.waitFor(t, "the reply after service_unavailable", h.threadHas(team.ID, b.TS, "hello after the outage"))
	reqs = h.postsInThread(b.TS)
	if len(reqs) != 2 || reqs[0].Status != 503 || reqs[0].Error != "service_unavailable" || reqs[1].Error != "" {
		t.Fatalf("requests in the thread: %+v", reqs)
	}
	t.Logf("503 service_unavailable: retried %v later", reqs[1].Time.Sub(reqs[0].Time).Round(time.Millisecond))
	if got := h.s.PostedTexts(team.ID, slackGeneral, b.TS); len(got) != 1 {
		t.Fatalf("thread B holds %q: want the answer once", got)
	}
	eventually(t, "both replies recorded delivered", func() bool {
		out, err := runCLI(h.bin, h.data, "deliveries", "ls")
		return err == nil && strings.Count(out, "delivered") == 2 && !strings.Contains(out, "failed")
	})
}
