package delivery

import (
	"context"
	"database/sql"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

// StateCount is how many ledger rows (message parts) are in one state, of one kind.
type StateCount struct {
	State State
	Kind  string
	Rows  int
}

// ProfileCount is how many rows of a plugin's profile match.
type ProfileCount struct {
	Plugin, Profile string
	Rows            int
}

// Stats is the ledger's state at one moment, as /metrics reports it: read from the database, so
// it is the whole deployment's on several hosts sharing one, and right after a restart.
type Stats struct {
	ByState []StateCount
	// Uncertain are the failed rows whose send may have reached the platform (Row.Uncertain).
	Uncertain []ProfileCount
	// Open is how many rows are pending or sending, and OldestOpen when the oldest of them was
	// written (zero when none is).
	Open       int
	OldestOpen time.Time
}

// ReadStats reads the ledger's Stats from db, on indexes only: one statement (one snapshot) for
// the rows by state and kind (all rows by kind on deliveries_kind, the open ones on
// deliveries_open, the failed and dropped ones on deliveries_ended; delivered is the rest),
// one for the uncertain rows (deliveries_ended) and one for the open queue (deliveries_open).
func ReadStats(ctx context.Context, db *sql.DB) (Stats, error) {
	var st Stats
	// Each part's condition is its partial index's, as SQLite needs it to use the index.
	rows, err := db.QueryContext(ctx, `SELECT '', kind, COUNT(*) FROM deliveries GROUP BY kind
		UNION ALL SELECT state, kind, COUNT(*) FROM deliveries WHERE state IN ('pending', 'sending') GROUP BY state, kind
		UNION ALL SELECT state, kind, COUNT(*) FROM deliveries WHERE state IN ('failed', 'dropped') GROUP BY state, kind`)
	if err != nil {
		return st, err
	}
	all := map[string]int{}
	var kinds []string
	for rows.Next() {
		var c StateCount
		if err := rows.Scan(&c.State, &c.Kind, &c.Rows); err != nil {
			rows.Close()
			return st, err
		}
		if c.State == "" {
			all[c.Kind] = c.Rows
			kinds = append(kinds, c.Kind)
			continue
		}
		all[c.Kind] -= c.Rows
		st.ByState = append(st.ByState, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, err
	}
	for _, k := range kinds {
		if all[k] > 0 {
			st.ByState = append(st.ByState, StateCount{State: Delivered, Kind: k, Rows: all[k]})
		}
	}
	var args store.Args
	rows, err = db.QueryContext(ctx, `SELECT plugin, profile, COUNT(*) FROM deliveries WHERE state IN ('failed', 'dropped') AND `+
		uncertainWhere(&args)+` GROUP BY plugin, profile ORDER BY plugin, profile`, args...)
	if err != nil {
		return st, err
	}
	for rows.Next() {
		var c ProfileCount
		if err := rows.Scan(&c.Plugin, &c.Profile, &c.Rows); err != nil {
			rows.Close()
			return st, err
		}
		st.Uncertain = append(st.Uncertain, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, err
	}
	var oldest sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*), MIN(created_at) FROM deliveries WHERE state IN ('pending', 'sending')`).
		Scan(&st.Open, &oldest); err != nil {
		return st, err
	}
	if oldest.Valid {
		st.OldestOpen = time.UnixMilli(oldest.Int64)
	}
	return st, nil
}

// uncertainWhere is the condition of the failed rows whose outcome is unknown (Row.Uncertain),
// its arguments added to args: reason holds the mark when removing it changes reason (instr is
// SQLite's, strpos PostgreSQL's; replace is both's).
func uncertainWhere(args *store.Args) string {
	return "state = " + args.Add(string(Failed)) + " AND replace(reason, " + args.Add(UncertainMark) + ", '') <> reason"
}
