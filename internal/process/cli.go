package process

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// The functions in this file serve `hermes-host ps` and `hermes-host ps log ID`. They read only
// the database and the log files, so they work from a separate process while `serve` runs, and
// they never consume a result (an operator reading a log does not suppress the agent's
// notification).

// ListProcesses returns every checkpointed process, newest first, with the delivery state of its
// completion (Info.Notice, Info.NoticeOutcome). For a running process OutputBytes is the current
// size of its log file.
func ListProcesses(ctx context.Context, db *sql.DB, dataDir string) ([]Info, error) {
	if err := Migrate(ctx, db); err != nil {
		return nil, err
	}
	cols := "p." + strings.ReplaceAll(strings.Join(strings.Fields(rowColumns), " "), ", ", ", p.")
	rows, err := db.QueryContext(ctx, `SELECT `+cols+`, COALESCE(e.state, ''), COALESCE(e.outcome, '')
		FROM processes p LEFT JOIN process_events e ON e.proc_id = p.id AND e.kind = 'completion'
		ORDER BY p.started_at DESC, p.id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Info
	for rows.Next() {
		var notice, outcome string
		in, err := scanRow(rowWith{rows, &notice, &outcome})
		if err != nil {
			return nil, err
		}
		in.Notice, in.NoticeOutcome = notice, outcome
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
	extra *string
	more  *string
}

// Scan scans the row's columns into dst and the extra columns into the extra fields.
func (r rowWith) Scan(dst ...any) error { return r.s.Scan(append(dst, r.extra, r.more)...) }

// List is ListProcesses on this registry's database and data directory.
func (r *Registry) List(ctx context.Context) ([]Info, error) {
	return ListProcesses(ctx, r.db, r.opt.DataDir)
}

// WriteList renders list as the plain-text table of `hermes-host ps`.
func WriteList(w io.Writer, list []Info, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tEXIT\tAGE\tMAX AGE\tSESSION KEY\tSPAWNED IN\tNOTICE\tCOMMAND")
	for _, in := range list {
		exit := "-"
		switch {
		case in.ExitCode != nil:
			exit = fmt.Sprint(*in.ExitCode)
		case in.State.Final():
			exit = "?"
		}
		if in.Signal != "" {
			exit += " (" + in.Signal + ")"
		}
		state := string(in.State)
		if in.Reason != "" && in.Reason != ReasonExit {
			state += ": " + in.Reason
		}
		if in.Adopted {
			state += " [adopted]"
		}
		maxAge := "-"
		if in.MaxAge > 0 {
			maxAge = shortDuration(in.MaxAge)
			if !in.State.Final() {
				maxAge += " (" + shortDuration(in.MaxAge-in.Age(now)) + " left)"
			}
		}
		notice := in.Notice
		if notice == "" {
			notice = "-"
		}
		if in.NoticeOutcome != "" {
			notice += ": " + in.NoticeOutcome
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", in.ID, state, exit, shortDuration(in.Age(now)),
			maxAge, orDash(in.Stamp.Key), orDash(in.Stamp.SessionID), notice, clip(oneLine(in.Command), 60))
	}
	return tw.Flush()
}

// ReadLog reads up to limit bytes of a process's output from its log file, from offset
// (negative: the last limit bytes). It does not consume the result.
func ReadLog(ctx context.Context, db *sql.DB, dataDir, id string, offset int64, limit int) (LogChunk, error) {
	if err := Migrate(ctx, db); err != nil {
		return LogChunk{}, err
	}
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

// WriteLog copies a process's whole retained output to w (what `hermes-host ps log ID` prints).
func WriteLog(ctx context.Context, w io.Writer, db *sql.DB, dataDir, id string) error {
	for off := int64(0); ; {
		ch, err := ReadLog(ctx, db, dataDir, id, off, maxLogRead)
		if err != nil {
			return err
		}
		if _, err := w.Write(ch.Data); err != nil {
			return err
		}
		if len(ch.Data) == 0 || ch.Next >= ch.Total {
			return nil
		}
		off = ch.Next
	}
}

func shortDuration(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		s = fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
	}
	if neg {
		return "-" + s
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
