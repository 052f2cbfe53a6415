package process

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The functions in this file serve `hermes-host ps` and `hermes-host ps log ID`. They read only
// the database and the log files, so they work from a separate process while `serve` runs, and
// they never consume a result (an operator reading a log does not suppress the agent's
// notification). They never write either, not even a migration: the database is a host's
// (store.OpenReader opens it read-only for them).

// ListProcesses returns every checkpointed process, newest first, with the delivery state of its
// completion (Info.Notice, Info.NoticeOutcome). For a running process OutputBytes is the current
// size of its log file.
func ListProcesses(ctx context.Context, db *sql.DB, dataDir string) ([]Info, error) {
	return inspect(ctx, db, dataDir, "", Filter{})
}

// Filter selects and pages the processes Page returns.
type Filter struct {
	Search string // processes whose id, command or session key holds it, case-insensitive
	Offset int    // processes to skip (the pages before)
	Limit  int    // at most this many (default 100, at most MaxPage); 0 in ListProcesses: all
}

// MaxPage caps Filter.Limit.
const MaxPage = 1000

// PageProcesses returns one page of the processes f selects, newest first, as ListProcesses
// does.
func PageProcesses(ctx context.Context, db *sql.DB, dataDir string, f Filter) ([]Info, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	f.Limit, f.Offset = min(f.Limit, MaxPage), max(f.Offset, 0)
	return inspect(ctx, db, dataDir, "", f)
}

// InspectProcess returns one process as ListProcesses does, or ErrNotFound.
func InspectProcess(ctx context.Context, db *sql.DB, dataDir, id string) (Info, error) {
	list, err := inspect(ctx, db, dataDir, id, Filter{})
	if err != nil {
		return Info{}, err
	}
	if len(list) == 0 {
		return Info{}, ErrNotFound
	}
	return list[0], nil
}

// inspect lists the processes (id == "") f selects, or the one with id.
func inspect(ctx context.Context, db *sql.DB, dataDir, id string, f Filter) ([]Info, error) {
	args := []any{id, id}
	search, page := "", ""
	if f.Search != "" {
		// Substring tests with replace: instr and strpos differ between the backends.
		args = append(args, strings.ToLower(f.Search))
		search = " AND (replace(lower(p.id), $3, '') <> lower(p.id) OR replace(lower(p.command), $3, '') <> lower(p.command) OR " +
			"replace(lower(p.session_key), $3, '') <> lower(p.session_key))"
	}
	if f.Limit > 0 {
		page = " LIMIT " + strconv.Itoa(f.Limit) + " OFFSET " + strconv.Itoa(f.Offset)
	}
	cols := "p." + strings.ReplaceAll(strings.Join(strings.Fields(rowColumns), " "), ", ", ", p.")
	rows, err := db.QueryContext(ctx, `SELECT `+cols+`, COALESCE(e.state, ''), COALESCE(e.outcome, ''),
		COALESCE(c.state, ''), COALESCE(c.outcome, '')
		FROM processes p LEFT JOIN process_events e ON e.proc_id = p.id AND e.kind = 'completion'
		LEFT JOIN process_events c ON c.proc_id = p.id AND c.kind = 'correction'
		WHERE ($1 = '' OR p.id = $2)`+search+`
		ORDER BY p.started_at DESC, p.id`+page, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Info
	for rows.Next() {
		var notice, outcome, corr, corrOutcome string
		in, err := scanRow(rowWith{rows, []any{&notice, &outcome, &corr, &corrOutcome}})
		if err != nil {
			return nil, err
		}
		in.Notice, in.NoticeOutcome = notice, outcome
		in.Correction, in.CorrectionOutcome = corr, corrOutcome
		if !in.State.Final() {
			if fi, err := os.Stat(filepath.Join(dataDir, "proc", in.ID+".log")); err == nil {
				in.OutputBytes = fi.Size()
			}
		}
		out = append(out, in)
	}
	return out, rows.Err()
}

// rowWith scans a process row followed by extra columns.
type rowWith struct {
	s     scanner
	extra []any
}

// Scan scans the row's columns into dst and the extra columns into extra.
func (r rowWith) Scan(dst ...any) error { return r.s.Scan(append(dst, r.extra...)...) }

// Page is PageProcesses on this registry's database and data directory.
func (r *Registry) Page(ctx context.Context, f Filter) ([]Info, error) {
	return PageProcesses(ctx, r.db, r.opt.DataDir, f)
}

// List is ListProcesses on this registry's database and data directory.
func (r *Registry) List(ctx context.Context) ([]Info, error) {
	return ListProcesses(ctx, r.db, r.opt.DataDir)
}

// Inspect is InspectProcess on this registry's database and data directory.
func (r *Registry) Inspect(ctx context.Context, id string) (Info, error) {
	return InspectProcess(ctx, r.db, r.opt.DataDir, id)
}

// ReadLog reads up to limit bytes of a process's output from its log file, from offset
// (negative: the last limit bytes). It does not consume the result.
func ReadLog(ctx context.Context, db *sql.DB, dataDir, id string, offset int64, limit int) (LogChunk, error) {
	in, err := loadRow(ctx, db, id)
	if err != nil {
		return LogChunk{}, err
	}
	if limit <= 0 || limit > maxLogRead {
		limit = maxLogRead
	}
	ch, err := readLogFile(filepath.Join(dataDir, "proc", id+".log"), offset, limit)
	ch.Ended = in.State.Final()
	return ch, err
}

// ReadLog is ReadLog on this registry's database and data directory: it reads output without
// consuming the result, for the operator's views.
func (r *Registry) ReadLog(ctx context.Context, id string, offset int64, limit int) (LogChunk, error) {
	return ReadLog(ctx, r.db, r.opt.DataDir, id, offset, limit)
}
