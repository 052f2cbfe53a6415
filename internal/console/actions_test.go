package console

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/actions"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
)

// TestKillFromTheProcessesPage: a running process has a Kill form on the processes page; the
// post needs the session's CSRF token; with it the process ends with the operator's reason, and
// the page the form was on says so once.
func TestKillFromTheProcessesPage(t *testing.T) {
	f := newFixture(t)
	cl := f.client()
	f.login(cl, testToken)
	token := f.csrf(cl)
	ctx := context.Background()
	res, err := f.procs.Spawn(ctx, process.SpawnRequest{Command: "sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	_, page := f.do(cl, "GET", Prefix+"processes", nil)
	kill := Prefix + "processes/" + res.ID + "/kill"
	if !strings.Contains(page, `action="`+kill+`"`) || strings.Contains(page, `action="`+Prefix+"processes/"+f.proc+`/kill"`) {
		t.Fatalf("the page should offer Kill for the running process only:\n%s", page)
	}
	if resp, _ := f.do(cl, "POST", kill, url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a kill without the CSRF token: %d", resp.StatusCode)
	}
	if in, _ := f.procs.Inspect(ctx, res.ID); in.State != process.StateRunning {
		t.Fatalf("a refused kill killed it: %+v", in)
	}
	resp, _ := f.do(cl, "POST", kill, url.Values{"csrf": {token}, "back": {Prefix + "processes?q=sleep"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != Prefix+"processes?q=sleep" {
		t.Fatalf("the kill: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if in, _ := f.procs.Inspect(ctx, res.ID); !in.State.Final() || in.Reason != actions.KillReason {
		t.Fatalf("after the kill: %+v", in)
	}
	_, page = f.do(cl, "GET", Prefix+"processes?q=sleep", nil)
	if !strings.Contains(page, `id="notice"`) || !strings.Contains(page, "Killed "+res.ID) {
		t.Fatalf("the page does not say what was done:\n%s", page)
	}
	// The search kept only the sleep; the notice is shown once.
	if strings.Contains(page, f.proc) || !strings.Contains(page, res.ID) {
		t.Fatalf("?q=sleep lists the wrong processes:\n%s", page)
	}
	if _, again := f.do(cl, "GET", Prefix+"processes", nil); strings.Contains(again, `id="notice"`) {
		t.Fatal("the notice was shown twice")
	}
	// An ended process cannot be killed: 409 with the reason.
	if resp, body := f.do(cl, "POST", kill, url.Values{"csrf": {token}}); resp.StatusCode != http.StatusConflict || !strings.Contains(body, "ended already") {
		t.Fatalf("killing it again: %d %s", resp.StatusCode, body)
	}
}

// TestRetryFromTheDeliveriesPage: Retry is offered for a refused delivery, not for one whose
// outcome is unknown; posting the retry of the uncertain one anyway is refused (409, with the
// reason) and changes nothing; the refused one goes back to pending.
func TestRetryFromTheDeliveriesPage(t *testing.T) {
	f := newFixture(t)
	cl := f.client()
	f.login(cl, testToken)
	token := f.csrf(cl)
	ctx := context.Background()
	msg := delivery.Message{Plugin: "echo", Profile: "main", Key: f.c.ChatKey, Target: abi.OutboundMessage{ChatID: "42"}, Text: "an answer", Kind: delivery.KindReply}
	uncertain, err := f.c.Ledger.Record(ctx, msg, delivery.Failed, delivery.UncertainMark+" (not resent to avoid a duplicate): reset")
	if err != nil {
		t.Fatal(err)
	}
	refused, err := f.c.Ledger.Record(ctx, msg, delivery.Failed, "chat_not_found: no")
	if err != nil {
		t.Fatal(err)
	}
	_, page := f.do(cl, "GET", Prefix+"deliveries?state=failed", nil)
	retry := func(id string) string { return Prefix + "deliveries/" + id + "/retry" }
	if !strings.Contains(page, `action="`+retry(refused)+`"`) || strings.Contains(page, `action="`+retry(uncertain)+`"`) {
		t.Fatalf("Retry should be offered for the refused delivery only:\n%s", page)
	}
	resp, body := f.do(cl, "POST", retry(uncertain), url.Values{"csrf": {token}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "may have reached the platform") {
		t.Fatalf("retrying the uncertain delivery: %d %s", resp.StatusCode, body)
	}
	if rows, _ := f.c.Ledger.List(ctx, delivery.Filter{Uncertain: true}); len(rows) != 1 {
		t.Fatalf("the refused retry changed the row: %+v", rows)
	}
	if resp, _ := f.do(cl, "POST", retry(refused), url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a retry without the CSRF token: %d", resp.StatusCode)
	}
	if resp, _ := f.do(cl, "POST", retry(refused), url.Values{"csrf": {token}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("retrying the refused delivery: %d", resp.StatusCode)
	}
	if rows, _ := f.c.Ledger.List(ctx, delivery.Filter{State: delivery.Pending}); len(rows) != 1 || rows[0].ID != refused {
		t.Fatalf("after the retry: %+v", rows)
	}
	// The search box finds it by its text; the page after the last row is empty.
	if _, page := f.do(cl, "GET", Prefix+"deliveries?q=AN+ANSWER", nil); strings.Count(page, `<tr data-id=`) != 2 {
		t.Fatalf("searching the text:\n%s", page)
	}
	if _, page := f.do(cl, "GET", Prefix+"deliveries?before="+uncertain, nil); strings.Contains(page, `<tr data-id=`) {
		t.Fatalf("the page before the first row is not empty:\n%s", page)
	}
}

var liveFP = regexp.MustCompile(`data-fp="([0-9a-f]+)"`)

// TestLiveListSaysWhenItChanged: the stream a list page follows says nothing while the page's
// data is what the page shows, and "changed" once a process starts.
func TestLiveListSaysWhenItChanged(t *testing.T) {
	f := newFixture(t)
	cl := f.client()
	f.login(cl, testToken)
	_, page := f.do(cl, "GET", Prefix+"processes", nil)
	m := liveFP.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no fingerprint on the page:\n%s", page)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testdeadline.Scale(30*time.Second))
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+Prefix+"live?src="+url.QueryEscape(Prefix+"processes")+"&fp="+m[1], nil)
	resp, err := cl.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the live stream: %v %v", err, resp)
	}
	defer resp.Body.Close()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
		close(lines)
	}()
	// Two polls with nothing new: no event.
	quiet := time.After(2*livePoll + livePoll/2)
	for waiting := true; waiting; {
		select {
		case l := <-lines:
			if strings.HasPrefix(l, "event:") {
				t.Fatalf("an event while nothing changed: %s", l)
			}
		case <-quiet:
			waiting = false
		}
	}
	if _, err := f.procs.Spawn(context.Background(), process.SpawnRequest{Command: "sleep 30"}); err != nil {
		t.Fatal(err)
	}
	for l := range lines {
		if l == "event: changed" {
			return
		}
	}
	t.Fatal("the stream ended without saying the list changed")
}

// TestReloadOfAnUnknownPlugin: the reload form of a plugin the host does not have answers 404
// with the reason (the fixture's runtime has no plugins); without the CSRF token, 403.
func TestReloadOfAnUnknownPlugin(t *testing.T) {
	f := newFixture(t)
	cl := f.client()
	f.login(cl, testToken)
	if resp, _ := f.do(cl, "POST", Prefix+"plugins/echo/reload", url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a reload without the CSRF token: %d", resp.StatusCode)
	}
	resp, body := f.do(cl, "POST", Prefix+"plugins/echo/reload", url.Values{"csrf": {f.csrf(cl)}})
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "no such plugin") {
		t.Fatalf("reloading an unknown plugin: %d %s", resp.StatusCode, body)
	}
}
