package delivery

import (
	"context"
	"fmt"
	"testing"
)

// DropClass sorts the reasons the ledger and the turn engine record drops with into the bounded
// set hermes_deliveries_dropped_total labels with.
func TestDropClass(t *testing.T) {
	for reason, want := range map[string]string{
		"stale: user_boundary":                                 DropStale,
		"stale: superseded (generation 3, now 4)":              DropStale,
		"unverifiable: store_error":                            DropUnverifiable,
		"suppressed: the agent already read the result of p_1": DropSuppressed,
		"key_mismatch: route chat -9 is not the key's":         DropKeyMismatch,
		"cancelled by /new before it ran":                      DropCancelled,
		"interrupted by /reset":                                DropInterrupted,
		"the agent gave no answer to the notification":         DropNoAnswer,
		"":                                  DropOther,
		"stalemate: not a class of its own": DropOther,
		"something a later version writes":  DropOther,
	} {
		if got := DropClass(reason); got != want {
			t.Errorf("DropClass(%q) = %q, want %q", reason, got, want)
		}
	}
}

// BenchmarkReadStats measures one scrape's ledger reads (ReadStats) over a ledger of 100,000
// rows with message-sized targets.
func BenchmarkReadStats(b *testing.B) {
	const rows = 100000
	f := newFixture(b, nil, Options{})
	ctx := context.Background()
	if _, err := f.l.db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO deliveries (id, grp, part, parts, plugin, profile, lane, session_key,
		target, kind, state, reason, created_at, updated_at)
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)
		SELECT 'd' || i, 'd' || i, 1, 1, 'echo', 'main', 'k' || (i %% 100), 'k' || (i %% 100), '{"text":"' || hex(randomblob(400)) || '"}',
			CASE i %% 3 WHEN 0 THEN 'reply' WHEN 1 THEN 'notice' ELSE 'notification' END,
			CASE WHEN i %% 50 = 0 THEN 'failed' WHEN i %% 1000 = 1 THEN 'pending' ELSE 'delivered' END,
			CASE WHEN i %% 100 = 0 THEN 'outcome unknown (x)' ELSE '' END, i, i FROM n`, rows)); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		st, err := ReadStats(ctx, f.l.db)
		if err != nil || st.Open != rows/1000 || len(st.Uncertain) != 1 || st.Uncertain[0].Rows != rows/100 {
			b.Fatalf("%+v %v", st, err)
		}
		delivered := 0
		for _, c := range st.ByState {
			if c.State == Delivered {
				delivered += c.Rows
			}
		}
		if delivered != rows-rows/50-rows/1000 {
			b.Fatalf("%d delivered: %+v", delivered, st.ByState)
		}
	}
}
