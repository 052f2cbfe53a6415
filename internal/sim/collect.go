package sim

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
)

// collect reads the history: what the fakes hold and what the database holds now, with what
// the driver recorded on the way.
func (w *World) collect() *History {
	w.mu.Lock()
	h := w.rec
	h.Inbound = append([]Inbound(nil), w.rec.Inbound...)
	// Acceptance as each platform saw it.
	confirmed := w.tgBot.Confirmed()
	for k, id := range w.tgUpdates {
		h.Inbound[w.tgIn[k]].Accepted = id <= confirmed
	}
	for k, p := range w.pushes {
		h.Inbound[w.pushIn[k]].Accepted = w.ybBot.Acked(p) > 0
	}
	w.mu.Unlock()
	for _, i := range w.slackIn {
		h.Inbound[i].Accepted = w.slackAccepted(h.Inbound[i].EventID)
	}
	h.End = time.Now()
	now := w.now()
	h.Clock = append(h.Clock, ClockMove{At: h.End, From: now, To: now})

	// The platforms.
	for _, m := range w.tg.AllSent() {
		if m.Token != w.tgBot.Token() {
			continue
		}
		h.Posts = append(h.Posts, Post{Chat: ChatKey("telegram", strconv.FormatInt(m.Message.Chat.ID, 10), strconv.FormatInt(m.Message.MessageThreadID, 10)),
			ID: strconv.FormatInt(m.Message.MessageID, 10), Text: m.Message.Text, At: m.Time})
	}
	for _, m := range w.slack.AllPosted() {
		if m.BotID == "" {
			continue
		}
		h.Posts = append(h.Posts, Post{Chat: ChatKey("slack", m.Channel, m.ThreadTS), ID: m.TS, Text: m.Text, At: wallTime(h.Clock, m.Time)})
	}
	for i, m := range w.echo.Messages() {
		h.Posts = append(h.Posts, Post{Chat: ChatKey("echo", m.ChatID, m.ThreadID), ID: strconv.Itoa(i + 1), Text: m.Text, At: m.At, DeliveryID: m.DeliveryID})
	}
	for _, m := range w.ybBot.Sent("", "") {
		h.Posts = append(h.Posts, Post{Chat: ChatKey("yuanbao", m.ChatID, ""), ID: m.MsgID, Text: m.Text, At: wallTime(h.Clock, m.At)})
	}
	for _, r := range w.tg.Requests("getUpdates", 0) {
		p := Poll{Token: r.Token, At: r.Time, Status: r.Status}
		if r.Status == 409 && r.Fault == "" {
			p.Desc = "terminated by other getUpdates request"
		}
		h.Polls = append(h.Polls, p)
	}
	for _, r := range w.model.Chats() {
		for _, m := range r.Messages() {
			if c, ok := m["content"].(string); ok {
				h.ModelInputs = append(h.ModelInputs, c)
			}
		}
	}

	// The database.
	ctx := context.Background()
	rows, err := delivery.List(ctx, w.db, delivery.Filter{Limit: 1 << 30})
	if err != nil {
		w.tb.Fatalf("reading the ledger: %v", err)
	}
	for i := len(rows) - 1; i >= 0; i-- { // oldest first
		r := rows[i]
		h.Rows = append(h.Rows, Row{ID: r.ID, Group: r.Group, Part: r.Part, Plugin: r.Plugin,
			Chat: ChatKey(r.Plugin, r.Target.ChatID, r.Target.ThreadID), Kind: r.Kind, State: string(r.State), Reason: r.Reason,
			MessageIDs: r.MessageIDs, SessionID: r.SessionID, StampedID: r.Stamp.SessionID, Origin: r.Origin, Text: r.Target.Text,
			Edit: r.Target.EditMessageID, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt})
		if r.Plugin == "cron" || r.Kind == delivery.KindScheduled && r.Target.Text == "cron simtick" {
			h.CronRuns = append(h.CronRuns, CronRun{Job: "simtick", Created: r.CreatedAt})
		}
	}
	err = queryDB(w.db, `SELECT id, COALESCE(event_id, ''), kind, source, text, state, outcome, updated_at FROM turn_inbox`, func(rs *sql.Rows) error {
		var r InboxRow
		var src string
		var updated int64
		if err := rs.Scan(&r.ID, &r.EventID, &r.Kind, &src, &r.Text, &r.State, &r.Outcome, &updated); err != nil {
			return err
		}
		r.Updated = time.UnixMilli(updated)
		r.Chat = sourceChat(src)
		h.Inbox = append(h.Inbox, r)
		return nil
	})
	if err != nil {
		w.tb.Fatalf("reading the inbox: %v", err)
	}
	procs, err := process.ListProcesses(ctx, w.db, w.hosts[0].data)
	if err != nil {
		w.tb.Fatalf("reading the processes: %v", err)
	}
	completions, corrections := map[string][3]string{}, map[string][3]string{}
	err = queryDB(w.db, `SELECT proc_id, kind, state, outcome, payload FROM process_events WHERE kind IN ('completion', 'correction')`, func(rs *sql.Rows) error {
		var id, kind, state, outcome, payload string
		if err := rs.Scan(&id, &kind, &state, &outcome, &payload); err != nil {
			return err
		}
		var ev process.Event
		json.Unmarshal([]byte(payload), &ev)
		if kind == string(process.EventCorrection) {
			corrections[id] = [3]string{state, outcome, ev.Output}
		} else {
			completions[id] = [3]string{state, outcome, ev.Output}
		}
		return nil
	})
	if err != nil {
		w.tb.Fatalf("reading the process events: %v", err)
	}
	for _, p := range procs {
		c, k := completions[p.ID], corrections[p.ID]
		h.Processes = append(h.Processes, Proc{ID: p.ID, Chat: ChatKey(p.Stamp.Route.Platform, p.Stamp.Route.ChatID, p.Stamp.Route.ThreadID),
			SessionID: p.Stamp.SessionID, State: string(p.State), ExitCode: p.ExitCode, Owner: p.Owner, Printed: printedBy(p.Command),
			Completion: c[0], Outcome: c[1], Output: c[2], Correction: k[0], CorrectionOutcome: k[1], CorrectionOutput: k[2]})
	}
	err = queryDB(w.db, `SELECT id, session_key, COALESCE(parent_session_id, ''), created_by, COALESCE(end_reason, ''), started_at, COALESCE(ended_at, 0) FROM sessions`,
		func(rs *sql.Rows) error {
			var s Session
			var started, ended int64
			if err := rs.Scan(&s.ID, &s.Key, &s.Parent, &s.CreatedBy, &s.EndReason, &started, &ended); err != nil {
				return err
			}
			s.Started = time.UnixMilli(started)
			if ended != 0 {
				s.Ended = time.UnixMilli(ended)
			}
			h.Sessions = append(h.Sessions, s)
			return nil
		})
	if err != nil {
		w.tb.Fatalf("reading the sessions: %v", err)
	}
	err = queryDB(w.db, `SELECT COALESCE(event_id, ''), chat_id, reason FROM auth_log WHERE verdict = 'refuse'`, func(rs *sql.Rows) error {
		var r Refusal
		if err := rs.Scan(&r.EventID, &r.Chat, &r.Reason); err != nil {
			return err
		}
		h.Refusals = append(h.Refusals, r)
		return nil
	})
	if err != nil {
		w.tb.Fatalf("reading the auth log: %v", err)
	}
	if os.Getenv(KeepEnv) != "" {
		// The history itself, for a post-mortem (a PostgreSQL database is dropped with the test).
		if b, err := json.MarshalIndent(&h, "", " "); err == nil {
			os.WriteFile(filepath.Join(w.dir, "history.json"), b, 0o600)
		}
	}
	return &h
}

// wallTime converts a time on the plugins' clock (the Slack and Yuanbao fakes run on it) to the
// wall clock the other records use: the clock's lead is the jumps made before then.
func wallTime(moves []ClockMove, t time.Time) time.Time {
	lead := time.Duration(0)
	for _, m := range moves {
		if off := m.To.Sub(m.At); !t.Add(-off).Before(m.At) {
			lead = off
		}
	}
	return t.Add(-lead)
}

// slackAccepted reports whether the host acknowledged one of the Slack events that carry the
// message with the plugin's event id (a mention comes as two events).
func (w *World) slackAccepted(eventID string) bool {
	w.mu.Lock()
	ids := w.slackEventsOf[eventID]
	w.mu.Unlock()
	for _, id := range ids {
		if w.slack.Acked(id) {
			return true
		}
	}
	return false
}

// sourceChat is the ChatKey of an inbox row's source (JSON abi.Source).
func sourceChat(src string) string {
	var s struct {
		Platform string `json:"platform"`
		ChatID   string `json:"chat_id"`
		ThreadID string `json:"thread_id"`
	}
	json.Unmarshal([]byte(src), &s)
	return ChatKey(s.Platform, s.ChatID, s.ThreadID)
}

var printfRe = regexp.MustCompile(`printf 'OUT-%s\\n' (N[0-9]{4}x)`)

// printedBy is the output token a process's command prints at its end ("" if none).
func printedBy(command string) string {
	if m := printfRe.FindStringSubmatch(command); m != nil && !strings.Contains(command, "kill") {
		return PrintedToken(m[1])
	}
	return ""
}
