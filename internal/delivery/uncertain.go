package delivery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// An uncertain message is never silent. A message whose outcome is unknown is not resent (it may
// be in the chat), but it may also never have arrived, and only the operator's ledger would say
// so. So when a reply, notification or scheduled message ends "outcome unknown", the ledger
// queues one short notice into the same chat: the answer may not have arrived, and /last sends
// it again as a new message, only if the user asks.
//
// The notice waits until the platform answers again: it is due UncertainDelay after the
// uncertain outcome, and while the platform plugin's profile has given no certain answer since
// (every send since was uncertain too, or none was made) it waits on, without using attempts,
// looking again every UncertainDelay, for at most UncertainHold; then it is sent anyway (it is
// the only message the chat may get). One
// pending notice per chat at a time: the parts of a long answer, or several answers in a row,
// share one. A notice is itself never the subject of a notice.
//
// Not connected is not an attempt. A send the plugin answers "retryable, not_connected"
// (abi.SendNotConnected: nothing was sent, the plugin's socket is down) waits for the connection,
// looking again after the plugin's retry_after, without using up the message's attempts; after
// Options.UndeliveredAfter from when it was written it fails ("not connected ...; not sent"),
// and the chat gets UndeliveredNotice, which waits for the connection in turn.

// UncertainNotice is the line a chat gets after a message whose outcome is unknown.
const UncertainNotice = "⚠️ My previous message may not have arrived (the platform did not confirm it). Send /last to get it again."

// UndeliveredNotice is the line a chat gets, once its platform is connected again, after a
// message that failed because the platform stayed disconnected past deliveries.undelivered_after.
const UndeliveredNotice = "⚠️ A message could not be delivered while the connection to this chat was down. Send /last to get it now."

// A chat notice about an earlier message: its text, and the prefix of its Origin (the group of
// the message it is about follows).
type chatNotice struct{ text, origin string }

var (
	noticeUncertain   = chatNotice{UncertainNotice, "uncertain:"}
	noticeUndelivered = chatNotice{UndeliveredNotice, "undelivered:"}
)

// Defaults of Options.UncertainDelay and Options.UncertainHold.
const (
	defaultUncertainDelay = 2 * time.Second
	defaultUncertainHold  = 30 * time.Second
)

// uncertainKinds are the kinds of message whose unknown outcome the chat is told about: the
// ones a user waits for. Drafts are followed by their completion (see turn's draft rule); host
// notices are not worth a notice.
func uncertainKind(kind string) bool {
	return kind == KindReply || kind == KindNotification || kind == KindScheduled
}

// oweNotice queues notice n about r (which just ended with an unknown outcome, or undelivered),
// unless such a notice is pending for its chat already.
func (l *Ledger) oweNotice(ctx context.Context, r Row, n chatNotice) {
	if !uncertainKind(r.Kind) {
		return
	}
	ctx = context.WithoutCancel(ctx)
	var one int
	err := l.db.QueryRowContext(ctx, `SELECT 1 FROM deliveries WHERE plugin = ? AND profile = ? AND chat_id = ? AND state = ?
		AND substr(origin, 1, ?) = ? LIMIT 1`, r.Plugin, r.Profile, r.Target.ChatID, string(Pending), len(n.origin), n.origin).Scan(&one)
	switch {
	case err == nil:
		return // the chat will hear once
	case !errors.Is(err, sql.ErrNoRows):
		l.log.Error("delivery: looking for a pending notice failed; queueing one", "id", r.ID, "error", err)
	}
	t := r.Target
	target := abi.OutboundMessage{ChatType: t.ChatType, ChatID: t.ChatID, ThreadID: t.ThreadID, UserID: t.UserID, ScopeID: t.ScopeID}
	m := Message{Plugin: r.Plugin, Profile: r.Profile, Key: r.Key, Target: target, Text: n.text, Kind: KindNotice,
		Origin: n.origin + r.Group}
	due := l.opt.Now()
	if n == noticeUncertain {
		due = due.Add(l.opt.UncertainDelay)
	}
	tx := &Tx{l: l}
	if _, err := tx.insertDue(ctx, m, []string{n.text}, due); err != nil {
		l.log.Error("delivery: queueing a notice about a message failed", "id", r.ID, "notice", n.text, "error", err)
		return
	}
	tx.Committed()
}

// answered notes that plugin's profile gave a certain answer to a send now.
func (l *Ledger) answered(plugin, profile string) {
	l.mu.Lock()
	l.lastAnswer[plugin+"\x00"+profile] = l.opt.Now()
	l.mu.Unlock()
}

// holdNotice reports how long an uncertain-outcome notice r should still wait for its platform
// to answer again (0: send it now).
func (l *Ledger) holdNotice(r Row) time.Duration {
	if !strings.HasPrefix(r.Origin, noticeUncertain.origin) {
		return 0
	}
	now := l.opt.Now()
	if now.Sub(r.CreatedAt) >= l.opt.UncertainHold {
		return 0
	}
	l.mu.Lock()
	last := l.lastAnswer[r.Plugin+"\x00"+r.Profile]
	l.mu.Unlock()
	if last.After(r.CreatedAt) {
		return 0
	}
	return min(l.opt.UncertainDelay, r.CreatedAt.Add(l.opt.UncertainHold).Sub(now)) // look again then
}

// waitConnected handles a send r that plugin reported certainly not sent for want of a connection
// (e): not an attempt; r waits for the connection, or fails once it has waited
// Options.UndeliveredAfter since it was written.
func (l *Ledger) waitConnected(ctx context.Context, ln *lane, r Row, e *abi.SendError) {
	r.Attempts-- // the claim counted it; nothing was tried
	left := r.CreatedAt.Add(l.opt.UndeliveredAfter).Sub(l.opt.Now())
	if left <= 0 {
		why := fmt.Sprintf("not connected for %v (deliveries.undelivered_after); not sent: %s", l.opt.UndeliveredAfter, sendErr(e))
		if l.settle(ctx, r, Failed, why, nil, "") {
			l.oweNotice(ctx, r, noticeUndelivered)
		}
		return
	}
	wait := time.Duration(e.RetryAfterMs) * time.Millisecond
	if wait <= 0 {
		wait = l.opt.Backoff
	}
	l.postpone(ctx, ln, r, min(wait, left), false, "waiting for the connection: "+sendErr(e))
}

// Last returns the message /last sends again in the chat of key: the latest message that may not
// have arrived (a reply, notification or scheduled message that failed: outcome unknown, or
// undelivered) and that no /last has delivered since; else the latest such message that was
// delivered. It is rebuilt for sending as a new message: the same parts, to the same chat and
// thread, guarded by the same conversation (GuardLineage: it goes nowhere the user has left), and
// linked to the message it repeats. ok is false when there is none.
func (l *Ledger) Last(ctx context.Context, key string) (m Message, ok bool, err error) {
	var group string
	err = l.db.QueryRowContext(ctx, `SELECT grp FROM deliveries d WHERE session_key = ? AND kind IN (?, ?, ?) AND state = ?
		AND NOT EXISTS (SELECT 1 FROM deliveries x WHERE x.link = d.grp AND x.state = ?)
		ORDER BY rowid DESC LIMIT 1`, key, KindReply, KindNotification, KindScheduled, string(Failed), string(Delivered)).Scan(&group)
	if errors.Is(err, sql.ErrNoRows) {
		err = l.db.QueryRowContext(ctx, `SELECT grp FROM deliveries WHERE session_key = ? AND kind IN (?, ?, ?) AND state = ?
			ORDER BY rowid DESC LIMIT 1`, key, KindReply, KindNotification, KindScheduled, string(Delivered)).Scan(&group)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return Message{}, false, nil
	}
	if err != nil {
		return Message{}, false, err
	}
	rows, err := l.query(ctx, `WHERE grp = ? ORDER BY part`, group)
	if err != nil || len(rows) == 0 {
		return Message{}, false, err
	}
	first := rows[0]
	t := first.Target
	m = Message{Plugin: first.Plugin, Profile: first.Profile, Key: first.Key, Kind: first.Kind, Guard: first.Guard, Stamp: first.Stamp, Link: group,
		Target: abi.OutboundMessage{ChatType: t.ChatType, ChatID: t.ChatID, ThreadID: t.ThreadID, UserID: t.UserID, ScopeID: t.ScopeID}}
	if m.Guard == GuardWork {
		m.Guard = GuardLineage // asked for now: the generation it was written at has no say
	}
	for _, r := range rows {
		m.Parts = append(m.Parts, r.Target.Text)
	}
	m.Text = strings.Join(m.Parts, "")
	return m, true, nil
}
