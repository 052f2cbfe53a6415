package store

import (
	"database/sql"
)

// SQL dialects stay here. The host packages write their queries once, in the SQL both backends
// read: $1, $2, … placeholders (SQLite binds $N to the N-th argument as PostgreSQL does),
// ON CONFLICT upserts, RETURNING, booleans as 1/0, substr and replace, the rowid column (SQLite's
// implicit one; PostgreSQL's tables get it as an identity column in their migrations). Nothing
// rewrites a statement on its way to the database. What cannot be written once is written
// once per dialect and chosen here, when a package opens: its migrations (Migration), the odd
// statement (Query), a byte-order comparison (Bytewise). Whether the database may be shared by
// several hosts, which is what the packages need to know of the backend, is Shared.

// dialect is the SQL a database speaks.
type dialect int

const (
	sqliteDialect   dialect = iota // modernc.org/sqlite, the embedded default
	postgresDialect                // PostgreSQL through pgx
)

// dialectOf reports which dialect db, opened by this package, speaks.
func dialectOf(db *sql.DB) dialect {
	if _, ok := db.Driver().(*pgDriver); ok {
		return postgresDialect
	}
	return sqliteDialect
}

// Shared reports whether other hosts may share db: a PostgreSQL database (OpenPostgres) may be,
// a SQLite file (Open) is one host's. A package that keeps state of the database in memory
// (a cache of routes, the chats that moved) cannot trust it on a shared database, and work that
// must run in one host at a time (a lane, a poll loop) takes a lease there.
func Shared(db *sql.DB) bool { return dialectOf(db) == postgresDialect }

// Migration is one schema change, in each dialect. Most are written once (Same). A table
// differs: SQLite's INTEGER is 64 bits (PostgreSQL's BIGINT), BLOB is BYTEA, REAL is DOUBLE
// PRECISION, INTEGER PRIMARY KEY AUTOINCREMENT is an identity column, WITHOUT ROWID is SQLite's
// storage choice, and every other table, which SQLite gives an implicit rowid (queries order by
// it for insertion order), gets one in PostgreSQL as an identity column after the others.
type Migration struct {
	SQLite, Postgres string
}

// Same is a migration both dialects read alike.
func Same(stmt string) Migration { return Migration{SQLite: stmt, Postgres: stmt} }

// For returns m in db's dialect.
func (m Migration) For(db *sql.DB) string {
	if dialectOf(db) == postgresDialect {
		return m.Postgres
	}
	return m.SQLite
}

// Query is a statement that cannot be written once, in each dialect (a query planner's hint
// only SQLite takes, a row lock only PostgreSQL has). A package picks its text with For when it
// opens, and runs that.
type Query struct {
	SQLite, Postgres string
}

// For returns q in db's dialect.
func (q Query) For(db *sql.DB) string {
	if dialectOf(db) == postgresDialect {
		return q.Postgres
	}
	return q.SQLite
}

// Bytewise returns the SQL expression expr compared byte by byte: key ranges (a prefix and
// everything after it up to the next byte) assume byte order, which SQLite's default collation
// is and a PostgreSQL database's (en_US.UTF-8, say) need not be.
func Bytewise(db *sql.DB, expr string) string {
	if dialectOf(db) == postgresDialect {
		return expr + ` COLLATE "C"`
	}
	return expr
}
