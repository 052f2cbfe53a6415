package process

import (
	"context"
	"database/sql"
	"time"
)

// Stats are the registry's state at one moment, as /metrics reports it: read from the database,
// so they are the whole deployment's on several hosts sharing one, and right after a restart.
type Stats struct {
	// ByState is how many process records are in each state (ended ones until they are
	// pruned, Options.Retention after their end).
	ByState map[State]int
	// Events is how many process events wait for the delivery layer (pending or claimed), and
	// Oldest when the oldest of them was queued (zero when none).
	Events int
	Oldest time.Time
}

// ReadStats reads the registry's Stats from db: two grouped queries, on the indexes
// processes_state and process_events_ready.
func ReadStats(ctx context.Context, db *sql.DB) (Stats, error) {
	st := Stats{ByState: map[State]int{}}
	rows, err := db.QueryContext(ctx, `SELECT state, COUNT(*) FROM processes GROUP BY state`)
	if err != nil {
		return st, err
	}
	for rows.Next() {
		var (
			s State
			n int
		)
		if err := rows.Scan(&s, &n); err != nil {
			rows.Close()
			return st, err
		}
		st.ByState[s] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, err
	}
	var oldest sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*), MIN(created_at) FROM process_events WHERE state IN ('pending', 'claimed')`).
		Scan(&st.Events, &oldest); err != nil {
		return st, err
	}
	if oldest.Valid {
		st.Oldest = time.UnixMilli(oldest.Int64)
	}
	return st, nil
}
