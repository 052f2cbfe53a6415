package delivery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
)

// TestRetryOnlyWhatCertainlyWasNotSent: the operator's retry sends a failure that happened
// before the platform acted (a refusal) again, through the lane, once; it refuses a message whose
// outcome is unknown, one the platform accepted a part of, one dropped on purpose, one sent
// already, and an unknown id, each with its reason, and leaves them as they were.
func TestRetryOnlyWhatCertainlyWasNotSent(t *testing.T) {
	p := &platform{}
	p.answers = append(p.answers,
		func(abi.OutboundMessage) (*abi.SendResult, error) { // refused: certainly not sent
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Code: "chat_not_found", Message: "no"}}, nil
		},
		func(abi.OutboundMessage) (*abi.SendResult, error) { // the plugin died mid-send
			return nil, fmt.Errorf("%w: plugin crashed mid-send", ErrOutcomeUnknown)
		},
		func(abi.OutboundMessage) (*abi.SendResult, error) { // the platform answered, maybe after posting
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendUncertain, Code: "uncertain", Message: "reset"}}, nil
		},
		func(abi.OutboundMessage) (*abi.SendResult, error) { // one part posted, then refused
			return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Code: "too_long", Accepted: []string{"77"}}}, nil
		})
	f := newFixture(t, p, Options{})
	ctx := context.Background()
	st := f.stamp()
	enqueue := func(text string) Row {
		t.Helper()
		id, err := f.l.Enqueue(ctx, f.msg(st, text, GuardNone))
		if err != nil {
			t.Fatal(err)
		}
		return f.waitFinal(id)
	}
	refused, crashed, uncertain, partly := enqueue("refused"), enqueue("crashed"), enqueue("uncertain"), enqueue("partly")
	if refused.State != Failed || crashed.State != Failed || uncertain.State != Failed || partly.State != Failed {
		t.Fatalf("setup: %+v %+v %+v %+v", refused, crashed, uncertain, partly)
	}
	sentBefore := len(p.texts())

	for _, c := range []struct {
		row  Row
		want string
	}{
		{crashed, "outcome unknown"},
		{uncertain, "outcome unknown"},
		{partly, "partly accepted"},
	} {
		_, err := f.l.Retry(ctx, c.row.ID)
		if !errors.Is(err, ErrNotRetryable) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("retrying %q: %v, want not retryable: %s", c.row.Target.Text, err, c.want)
		}
		rows, _ := f.l.query(ctx, `WHERE id = $1`, c.row.ID)
		if len(rows) != 1 || rows[0].State != Failed || rows[0].Reason != c.row.Reason {
			t.Errorf("a refused retry changed the row: %+v", rows)
		}
	}
	if _, err := f.l.Retry(ctx, "d_nosuchrow"); !errors.Is(err, ErrNoMessage) {
		t.Errorf("an unknown id: %v", err)
	}

	// The certain failure goes again, through the lane, and is delivered.
	f.mu.Lock()
	delete(f.final, refused.ID)
	f.mu.Unlock()
	r, err := f.l.Retry(ctx, refused.ID)
	if err != nil || r.State != Pending {
		t.Fatalf("retrying a refused message: %+v %v", r, err)
	}
	if got := f.waitFinal(refused.ID); got.State != Delivered || got.Attempts != 1 {
		t.Fatalf("after the retry: %+v", got)
	}
	if sent := p.texts(); len(sent) != sentBefore+1 || sent[len(sent)-1] != "refused" {
		t.Fatalf("sent %q, want one more: refused", sent)
	}
	// Delivered now: not again.
	if _, err := f.l.Retry(ctx, refused.ID); !errors.Is(err, ErrNotRetryable) || !strings.Contains(err.Error(), "not failed") {
		t.Fatalf("retrying a delivered message: %v", err)
	}

	// Dropped on purpose (stale after /new): never.
	dropped, err := f.l.Record(ctx, f.msg(st, "stale", GuardWork), Dropped, "stale: the user started a new conversation")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.Retry(ctx, dropped); !errors.Is(err, ErrNotRetryable) || !strings.Contains(err.Error(), "dropped on purpose") {
		t.Fatalf("retrying a dropped message: %v", err)
	}

	// A refusal repeated by /last already: not again.
	p.answers = append(p.answers, func(abi.OutboundMessage) (*abi.SendResult, error) {
		return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Code: "chat_not_found"}}, nil
	})
	again := enqueue("refused twice")
	m := f.msg(st, "refused twice", GuardNone)
	m.Link = again.Group
	if id, err := f.l.Enqueue(ctx, m); err != nil || f.waitFinal(id).State != Delivered {
		t.Fatalf("the repeat: %v", err)
	}
	if _, err := f.l.Retry(ctx, again.ID); !errors.Is(err, ErrNotRetryable) || !strings.Contains(err.Error(), "sent again already") {
		t.Fatalf("retrying a repeated message: %v", err)
	}
}

// TestListSearchAndPages: Search finds rows by text (any case) or key; Before pages through the
// ledger newest first without gaps or repeats.
func TestListSearchAndPages(t *testing.T) {
	f := newFixture(t, &platform{}, Options{})
	ctx := context.Background()
	st := f.stamp()
	var ids []string
	for i := range 7 {
		id, err := f.l.Enqueue(ctx, f.msg(st, fmt.Sprintf("message %d %s", i, map[bool]string{true: "Needle", false: "hay"}[i%3 == 0]), GuardNone))
		if err != nil {
			t.Fatal(err)
		}
		f.waitFinal(id)
		ids = append(ids, id)
	}
	found, err := f.l.List(ctx, Filter{Search: "needle"})
	if err != nil || len(found) != 3 || found[0].ID != ids[6] || found[2].ID != ids[0] {
		t.Fatalf("search needle: %d rows %v", len(found), err)
	}
	if byKey, _ := f.l.List(ctx, Filter{Search: st.Key[3:12]}); len(byKey) != 7 {
		t.Fatalf("search by key: %d rows", len(byKey))
	}
	var seen []string
	before := ""
	for range 10 {
		page, err := f.l.List(ctx, Filter{Limit: 3, Before: before})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			seen = append(seen, r.ID)
		}
		before = page[len(page)-1].ID
	}
	for i, id := range seen {
		if id != ids[len(ids)-1-i] || len(seen) != len(ids) {
			t.Fatalf("pages %v, want %v newest first", seen, ids)
		}
	}
}
