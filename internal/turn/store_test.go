package turn

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// The store suite, on both backends, at the inbox itself: an event id is recorded once per
// plugin and profile (a redelivery inserts nothing, another profile's same id does), events
// without an id never collide, a state move is a compare-and-set, and open and received rows
// come back in arrival order, only the host's own.
func TestStoreSuite(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		db := b.Open(t)
		if err := store.Migrate(ctx, db, "turn", migrations); err != nil {
			t.Fatal(err)
		}
		e := &Engine{db: db, opt: Options{Now: time.Now, Instance: "h1"}, log: slog.New(slog.DiscardHandler)}
		row := func(id, profile, eventID string) *inboxRow {
			return &inboxRow{id: id, plugin: "echo", profile: profile, eventID: eventID, kind: kindMessage, key: "k",
				text: "text of " + id, eventKind: abi.EventMessage, src: abi.Source{ChatID: "42", MessageID: eventID}}
		}
		for _, c := range []struct {
			r     *inboxRow
			state string
			want  bool
		}{
			{row("in_z", "main", "u1"), stQueued, true},
			{row("in_y", "main", "u1"), stQueued, false}, // the platform delivered u1 again
			{row("in_x", "work", "u1"), stQueued, true},  // another bot's u1
			{row("in_w", "main", ""), stReceived, true},
			{row("in_v", "main", ""), stReceived, true},
			{row("in_u", "main", "u2"), stQueued, true},
		} {
			fresh, err := e.insert(ctx, db, c.r, c.state)
			if err != nil || fresh != c.want {
				t.Fatalf("insert %s (event %q): fresh %v, %v; want %v", c.r.id, c.r.eventID, fresh, err, c.want)
			}
		}
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM turn_inbox WHERE event_id = ?`, "u1").Scan(&n); err != nil || n != 2 {
			t.Fatalf("%d rows for u1, %v", n, err)
		}

		// Another host moves none of h1's rows: the owner is the rows' fence.
		other := &Engine{db: db, opt: Options{Now: time.Now, Instance: "h2"}, log: slog.New(slog.DiscardHandler)}
		if moved, err := other.setState(ctx, db, []string{"in_z", "in_u"}, stDone, "stale host", stQueued); err != nil || len(moved) != 0 {
			t.Fatalf("another host moved %v, %v", moved, err)
		}
		moved, err := e.setState(ctx, db, []string{"in_z", "in_u"}, stRunning, "", stQueued)
		if err != nil || !slices.Equal(moved, []string{"in_z", "in_u"}) {
			t.Fatalf("moved %v, %v", moved, err)
		}
		if moved, err := e.setState(ctx, db, []string{"in_z"}, stRunning, "", stQueued); err != nil || len(moved) != 0 {
			t.Fatalf("moved again %v, %v", moved, err)
		}
		if moved, err := e.setState(ctx, db, []string{"in_u"}, stDone, "answered", stQueued, stRunning); err != nil || len(moved) != 1 {
			t.Fatalf("done: %v, %v", moved, err)
		}

		open, err := e.loadOpen(ctx, `owner = ?`, "h1")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range open {
			ids = append(ids, r.id+"/"+r.state)
		}
		if !slices.Equal(ids, []string{"in_z/running", "in_x/queued"}) {
			t.Fatalf("open rows %v", ids)
		}
		received, err := e.loadReceived(ctx, `owner = ?`, "h1")
		if err != nil || len(received) != 2 || received[0].id != "in_w" || received[1].id != "in_v" || received[0].src.ChatID != "42" {
			t.Fatalf("received %+v %v", received, err)
		}
		if other, err := e.loadOpen(ctx, `owner = ?`, "h2"); err != nil || len(other) != 0 {
			t.Fatalf("another host's open rows %+v %v", other, err)
		}
	})
}

// A queued notification keeps its process event as data through the inbox, on both backends.
func TestNoticeRoundTrip(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		db := b.Open(t)
		if err := store.Migrate(ctx, db, "turn", migrations); err != nil {
			t.Fatal(err)
		}
		e := &Engine{db: db, opt: Options{Now: time.Now, Instance: "h1"}, log: slog.New(slog.DiscardHandler)}
		three := 3
		n := agent.Notice{Kind: agent.NoticeWatchMatch, ProcID: "proc_1", Command: "tail -f log", State: agent.StateRunning,
			ExitCode: &three, Signal: "SIGTERM", Reason: "r", Output: "a\nERROR b", OutputCut: true, Pattern: "ERROR",
			Line: "ERROR b", Suppressed: 2, Message: "m"}
		row := &inboxRow{id: "in_n", plugin: "echo", profile: "main", eventID: "proc_1#7", kind: kindNotification, key: "k",
			text: n.Describe(), src: abi.Source{ChatID: "42"}, stamp: session.Stamp{Key: "k", SessionID: "s"}, notice: &n}
		if _, err := e.insert(ctx, db, row, stQueued); err != nil {
			t.Fatal(err)
		}
		open, err := e.loadOpen(ctx, `owner = ?`, "h1")
		if err != nil || len(open) != 1 {
			t.Fatalf("open %+v, %v", open, err)
		}
		if it := e.itemOf(open[0]); len(it.notices) != 1 || !reflect.DeepEqual(it.notices[0], n) {
			t.Fatalf("notice back %+v, want %+v", it.notices, n)
		}
	})
}
