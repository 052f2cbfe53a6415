// Package lease divides work between hermes-host instances that share one database: a lease is
// a named row saying which instance holds it and until when. An instance that holds a lease
// renews it well before it expires; an instance that dies (kill -9, a lost network) stops
// renewing, and after the lease expires another instance takes it over.
//
// Two uses: an Elector-style Campaign runs a function in exactly one instance at a time (the
// poll loop of a bot token, the tick loop of a scheduler; internal/loop), and ClaimExpired hands
// out the expired leases of abandoned work (delivery lanes, turns) to whoever asks first, each
// to one claimer only.
//
// # Clocks
//
// Expiry is a wall-clock time in the shared table (unix milliseconds), written by the holder
// from its own clock and compared by every other instance with its own clock. Instances must
// therefore have roughly synchronised clocks (NTP): a clock that runs ahead by d takes over
// leases d early. The margin is the renewal schedule: a holder renews every ttl/3 and gives up
// (cancels its work) as soon as a renewal fails, which leaves at least ttl/3 between the holder
// stopping and the lease expiring. Clock skew between instances must stay well under that.
//
// # Fencing
//
// Each lease carries a fence, a number that grows every time the lease is granted afresh: to
// another holder, or to the same holder after it had expired or been released. Renewing keeps
// it. A holder that was paused past its expiry (a stop-the-world pause, a partition) may still
// be running when the next holder starts; work that must not be done twice should carry the
// fence it was done under and be checked against the lease's current fence in the same
// transaction (Fence) that records it. Leases never lose their fence except by Delete.
package lease

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hermes-host/hermes-host/internal/clock"
	"github.com/hermes-host/hermes-host/internal/store"
)

var migrations = []store.Migration{
	{SQLite: `CREATE TABLE leases (
		name       TEXT PRIMARY KEY,
		holder     TEXT NOT NULL,
		expires_at INTEGER NOT NULL, -- unix ms, by the holder's clock
		fence      INTEGER NOT NULL  -- grows each time the lease is granted afresh
	) WITHOUT ROWID;
	CREATE INDEX leases_expires ON leases (expires_at);`,
		Postgres: `CREATE TABLE leases (
		name       TEXT PRIMARY KEY,
		holder     TEXT NOT NULL,
		expires_at BIGINT NOT NULL, -- unix ms, by the holder's clock
		fence      BIGINT NOT NULL  -- grows each time the lease is granted afresh
	);
	CREATE INDEX leases_expires ON leases (expires_at);`},
}

// Migrate creates the leases table (New does it).
func Migrate(ctx context.Context, db *sql.DB) error {
	return store.Migrate(ctx, db, "lease", migrations)
}

// ErrHeld is Hold's answer when another holder has the lease (or this Manager holds it already).
var ErrHeld = errors.New("lease: held by another holder")

// ErrLost is the answer when a lease that was held is not any more: it expired and was taken
// over, or it was released or deleted.
var ErrLost = errors.New("lease: lost")

// Manager takes, renews and releases leases on behalf of one holder (one instance). Its methods
// are safe for concurrent use. An instance has one Manager: two Managers with the same holder
// would each believe they hold what the other does.
type Manager struct {
	// Log receives what a Campaign cannot say otherwise: a database failing while it
	// campaigns (it keeps trying). Default slog.Default(). Set it before use.
	Log *slog.Logger

	db     *sql.DB
	holder string
	ttl    time.Duration
	clock  clock.Clock
	// qClaimExpired is ClaimExpired's statement in the database's dialect.
	qClaimExpired string

	mu   sync.Mutex
	held map[string]bool // names this Manager runs a Hold of
}

// New returns the Manager of holder's leases in db, creating the table if needed. ttl is how
// long a lease lasts without renewal, so how long a dead instance's work waits before another
// takes it over. clk tells the time and schedules renewals: clock.Real{} outside tests.
func New(ctx context.Context, db *sql.DB, holder string, ttl time.Duration, clk clock.Clock) (*Manager, error) {
	if holder == "" {
		return nil, errors.New("lease: empty holder")
	}
	if ttl < 3*time.Millisecond {
		return nil, fmt.Errorf("lease: ttl %v too short", ttl)
	}
	if err := Migrate(ctx, db); err != nil {
		return nil, err
	}
	return &Manager{db: db, holder: holder, ttl: ttl, clock: clk, qClaimExpired: qClaimExpired.For(db), held: map[string]bool{}}, nil
}

// InstanceID returns an identity for this process that no other instance, nor this one after
// a restart, shares: host name, process id and a random suffix.
func InstanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	b := make([]byte, 4)
	rand.Read(b)
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b))
}

func (m *Manager) log() *slog.Logger {
	if m.Log != nil {
		return m.Log
	}
	return slog.Default()
}

// Holder is the identity this Manager takes leases as.
func (m *Manager) Holder() string { return m.holder }

// TTL is how long a lease lasts without renewal.
func (m *Manager) TTL() time.Duration { return m.ttl }

// TryAcquire takes lease name if nobody holds it, it has expired, or this holder has it
// already (then it is renewed, keeping its fence). It is one atomic statement: of several
// instances trying at once, one gets it. ok is false, without error, when another holder has it.
func (m *Manager) TryAcquire(ctx context.Context, name string) (fence int64, ok bool, err error) {
	now := m.clock.Now().UnixMilli()
	err = m.db.QueryRowContext(ctx, `
		INSERT INTO leases (name, holder, expires_at, fence) VALUES ($1, $2, $3, 1)
		ON CONFLICT (name) DO UPDATE SET
			fence = CASE WHEN leases.holder = excluded.holder AND leases.expires_at >= $4
				THEN leases.fence ELSE leases.fence + 1 END,
			holder = excluded.holder,
			expires_at = excluded.expires_at
		WHERE leases.expires_at < $5 OR leases.holder = excluded.holder
		RETURNING fence`,
		name, m.holder, now+m.ttl.Milliseconds(), now, now).Scan(&fence)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("lease: acquire %s: %w", name, err)
	}
	return fence, true, nil
}

// Renew extends lease name, held under fence, by the ttl from now. It fails with ErrLost when
// the lease is no longer this holder's under that fence. A lease that expired but that nobody
// took meanwhile is still this holder's, and is renewed.
func (m *Manager) Renew(ctx context.Context, name string, fence int64) error {
	res, err := m.db.ExecContext(ctx, `UPDATE leases SET expires_at = $1 WHERE name = $2 AND holder = $3 AND fence = $4`,
		m.clock.Now().Add(m.ttl).UnixMilli(), name, m.holder, fence)
	if err != nil {
		return fmt.Errorf("lease: renew %s: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("lease: renew %s: %w", name, ErrLost)
	}
	return nil
}

// Release gives up lease name held under fence: it expires now, keeping its fence, so that
// another instance may take it at once (ClaimExpired included: release unfinished work, Delete
// finished work). Releasing a lease that is no longer this holder's does nothing.
func (m *Manager) Release(ctx context.Context, name string, fence int64) error {
	_, err := m.db.ExecContext(ctx, `UPDATE leases SET expires_at = 0 WHERE name = $1 AND holder = $2 AND fence = $3`,
		name, m.holder, fence)
	if err != nil {
		return fmt.Errorf("lease: release %s: %w", name, err)
	}
	return nil
}

// Delete removes lease name held under fence: the work it stood for is finished and nobody is to
// claim it. A later lease of the same name starts again at fence 1.
func (m *Manager) Delete(ctx context.Context, name string, fence int64) error {
	_, err := m.db.ExecContext(ctx, `DELETE FROM leases WHERE name = $1 AND holder = $2 AND fence = $3`,
		name, m.holder, fence)
	if err != nil {
		return fmt.Errorf("lease: delete %s: %w", name, err)
	}
	return nil
}

// Missing returns the names of names that have no lease (held, expired or claimed).
func (m *Manager) Missing(ctx context.Context, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	args := make([]any, len(names))
	for i, n := range names {
		args[i] = n
	}
	have, err := store.Strings(ctx, m.db, `SELECT name FROM leases WHERE name IN (`+store.Placeholders(1, len(names))+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("lease: look up %d leases: %w", len(names), err)
	}
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(have, n) }), nil
}

// Orphan records lease name as expired and held by nobody, unless there is a lease of that name,
// so that ClaimExpired hands it out: for work that still names a holder whose lease is gone (it
// was claimed and deleted, and the holder recorded more work before it stopped). It reports
// whether it recorded one. The holder itself, if it is still alive, takes it back as any
// expired lease (TryAcquire).
func (m *Manager) Orphan(ctx context.Context, name string) (bool, error) {
	res, err := m.db.ExecContext(ctx, `INSERT INTO leases (name, holder, expires_at, fence) VALUES ($1, '', 0, 0)
		ON CONFLICT (name) DO NOTHING`, name)
	if err != nil {
		return false, fmt.Errorf("lease: orphan %s: %w", name, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Fence returns lease name's current fence inside the unit of work tx, and whether this holder
// holds it under that fence and it has not expired. Work done under a lease can check it in the
// transaction that records the work (on PostgreSQL under SERIALIZABLE, as store.Update runs it,
// a concurrent takeover then makes one of the two transactions fail).
func (m *Manager) Fence(ctx context.Context, tx *store.Tx, name string) (fence int64, held bool, err error) {
	var holder string
	var expires int64
	err = tx.QueryRowContext(ctx, `SELECT holder, expires_at, fence FROM leases WHERE name = $1`, name).Scan(&holder, &expires, &fence)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("lease: fence of %s: %w", name, err)
	}
	return fence, holder == m.holder && expires >= m.clock.Now().UnixMilli(), nil
}

// qClaimExpired claims expired leases by name prefix. substr rather than LIKE: SQLite's LIKE
// ignores ASCII case, and '%' and '_' in a prefix would be wildcards. Lengths count characters
// on both. PostgreSQL locks the candidate rows FOR UPDATE SKIP LOCKED (see ClaimExpired); SQLite
// has no row locks and runs the statement alone.
var qClaimExpired = func() store.Query {
	q := `
		UPDATE leases SET holder = $1, expires_at = $2, fence = fence + 1
		WHERE expires_at < $3 AND name IN (
			SELECT name FROM leases
			WHERE expires_at < $4 AND substr(name, 1, $5) = $6
			ORDER BY expires_at, name LIMIT $7%s)
		RETURNING name, fence`
	return store.Query{SQLite: fmt.Sprintf(q, ""), Postgres: fmt.Sprintf(q, " FOR UPDATE SKIP LOCKED")}
}()

// Claim is a lease ClaimExpired took over.
type Claim struct {
	Name  string
	Fence int64 // the new fence, for Renew, Release and Delete
}

// ClaimExpired takes over up to n expired leases whose names start with prefix, the longest
// expired first, and returns them (none when none are expired). Concurrent claimers never
// get the same lease: on PostgreSQL the candidate rows are locked with FOR UPDATE SKIP LOCKED,
// so a claimer passes over the rows another is taking instead of waiting for them; on SQLite
// the statement runs alone.
func (m *Manager) ClaimExpired(ctx context.Context, prefix string, n int) ([]Claim, error) {
	if n <= 0 {
		return nil, nil
	}
	now := m.clock.Now().UnixMilli()
	rows, err := m.db.QueryContext(ctx, m.qClaimExpired,
		m.holder, now+m.ttl.Milliseconds(), now, now, utf8.RuneCountInString(prefix), prefix, n)
	if err != nil {
		return nil, fmt.Errorf("lease: claim expired %s*: %w", prefix, err)
	}
	defer rows.Close()
	var claims []Claim
	for rows.Next() {
		var c Claim
		if err := rows.Scan(&c.Name, &c.Fence); err != nil {
			return nil, fmt.Errorf("lease: claim expired %s*: %w", prefix, err)
		}
		claims = append(claims, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lease: claim expired %s*: %w", prefix, err)
	}
	return claims, nil
}
