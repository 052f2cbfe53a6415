package auth

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store"
)

// Request is an open pairing code: an unknown user who wrote to the bot in a DM.
type Request struct {
	Code      string     `json:"code"`
	Plugin    string     `json:"plugin"`
	Profile   string     `json:"profile"`
	UserID    string     `json:"user_id"`
	UserName  string     `json:"user_name,omitempty"`
	Source    abi.Source `json:"-"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	// Tools are what approving the code grants the user: the profile's tools (config.Tool*
	// names), set by the Gate; none means the user may chat only.
	Tools []string `json:"tools"`
}

// Approval is a user the operator approved through pairing.
type Approval struct {
	Plugin     string    `json:"plugin"`
	Profile    string    `json:"profile"`
	UserID     string    `json:"user_id"`
	UserName   string    `json:"user_name,omitempty"`
	Code       string    `json:"code,omitempty"`
	ApprovedAt time.Time `json:"approved_at"`
	// Source is the DM the code was asked from (set by ApproveCode, to tell the user).
	Source abi.Source `json:"-"`
	// Tools are what the approval grants: the profile's tools (config.Tool* names), set by the
	// Gate; none means the user may chat only.
	Tools []string `json:"tools"`
}

// Errors of the operator's pairing commands.
var (
	ErrNoCode      = errors.New("auth: no open pairing code")
	ErrNotApproved = errors.New("auth: no approved user")
)

// codeAlphabet has no look-alikes (0/O, 1/I/L).
const codeAlphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"

func newCode() string {
	b := make([]byte, 8)
	rand.Read(b)
	for i := range b {
		b[i] = codeAlphabet[int(b[i])%len(codeAlphabet)]
	}
	return string(b)
}

// PairingText is the notice an unknown user's DM gets.
func PairingText(code string, ttl time.Duration) string {
	return fmt.Sprintf("🔒 I don't know you yet, so I can't act on your messages. If you should have access, "+
		"send this pairing code to the operator of this bot: %s\n(They approve it with: hermes-host pairing approve %s. "+
		"The code is valid for %s.)", code, code, ttl.Round(time.Minute))
}

// ApprovedText is the notice an approved user gets.
const ApprovedText = "✅ The operator approved you. Please send your message again."

// pair handles a DM from an unknown user: a new pairing code if the user has none open and the
// profile is under its cap, else nothing; the event is refused either way, and logged once.
func (g *Gate) pair(ctx context.Context, plugin, profile string, ev abi.InboundEvent) (Decision, error) {
	src := ev.Source
	var reason, code string
	fresh := false
	err := store.WithTx(ctx, g.db, func(tx *sql.Tx) error {
		reason, code, fresh = "", "", false
		if ev.ID != "" {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM auth_log WHERE plugin = $1 AND profile = $2 AND event_id = $3`,
				plugin, profile, ev.ID).Scan(&n); err != nil || n > 0 {
				return err // a replay: answered (or not) the first time
			}
		}
		now := g.opt.Now()
		if _, err := tx.ExecContext(ctx, `DELETE FROM auth_pairing WHERE expires_at <= $1`, now.UnixMilli()); err != nil {
			return err
		}
		var open string
		err := tx.QueryRowContext(ctx, `SELECT code FROM auth_pairing WHERE plugin = $1 AND profile = $2 AND user_id = $3`,
			plugin, profile, src.UserID).Scan(&open)
		var pending int
		switch {
		case err == nil:
			reason = ReasonPairingPending
		case !errors.Is(err, sql.ErrNoRows):
			return err
		default:
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM auth_pairing WHERE plugin = $1 AND profile = $2`,
				plugin, profile).Scan(&pending); err != nil {
				return err
			}
			if pending >= g.opt.MaxPending {
				reason = ReasonPairingLimit
				break
			}
			reason, code = ReasonPairingSent, newCode()
			srcJSON, _ := json.Marshal(src)
			if _, err := tx.ExecContext(ctx, `INSERT INTO auth_pairing (code, plugin, profile, user_id, user_name, source, created_at, expires_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, code, plugin, profile, src.UserID, src.UserName, string(srcJSON),
				now.UnixMilli(), now.Add(g.opt.PairingTTL).UnixMilli()); err != nil {
				return err
			}
		}
		detail := ""
		if code != "" {
			detail = "code " + code
		}
		fresh, err = g.insertLog(ctx, tx, plugin, profile, ev, Refuse, reason, detail)
		return err
	})
	if err != nil {
		return Decision{}, err
	}
	if !fresh {
		return Decision{Verdict: Refuse, Reason: ReasonPairingPending}, nil
	}
	g.count(plugin, profile, reason)
	if code == "" {
		return Decision{Verdict: Refuse, Reason: reason}, nil
	}
	g.codes.WithLabelValues(plugin, profile).Inc()
	if g.opt.Notifier == nil {
		return Decision{Verdict: Refuse, Reason: reason}, nil
	}
	id, err := g.opt.Notifier.Notice(ctx, plugin, profile, src, PairingText(code, g.opt.PairingTTL), "pairing:"+code)
	if err != nil {
		// Not sent: withdraw the code, so the user's next message gets one.
		g.log.Error("auth: pairing code not sent", "plugin", plugin, "profile", profile, "user", src.UserID, "error", err)
		g.db.ExecContext(context.WithoutCancel(ctx), `DELETE FROM auth_pairing WHERE code = $1`, code)
		g.setDetail(ctx, plugin, profile, ev.ID, "code "+code+" not sent: "+err.Error())
		return Decision{Verdict: Refuse, Reason: reason}, nil
	}
	g.setDetail(ctx, plugin, profile, ev.ID, "code "+code+" sent as "+id)
	return Decision{Verdict: Refuse, Reason: reason}, nil
}

func isApproved(ctx context.Context, db *sql.DB, plugin, profile, user string) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM auth_approved WHERE plugin = $1 AND profile = $2 AND user_id = $3`,
		plugin, profile, user).Scan(&n)
	return n > 0, err
}

// Approve approves an open pairing code and tells the user.
func (g *Gate) Approve(ctx context.Context, code string) (Approval, error) {
	a, err := ApproveCode(ctx, g.db, code, g.opt.Now())
	if err != nil {
		return a, err
	}
	a.Tools = g.policy(a.Plugin, a.Profile).Tools()
	g.log.Info("pairing approved", "plugin", a.Plugin, "profile", a.Profile, "user", a.UserID, "tools", a.Tools)
	if g.opt.Notifier != nil {
		if _, err := g.opt.Notifier.Notice(ctx, a.Plugin, a.Profile, a.Source, ApprovedText, "pairing:approved"); err != nil {
			g.log.Error("auth: approval notice not recorded", "error", err)
		}
	}
	return a, nil
}

// Revoke removes the approvals of user (narrowed to plugin and profile when they are set).
func (g *Gate) Revoke(ctx context.Context, user, plugin, profile string) ([]Approval, error) {
	return RevokeUser(ctx, g.db, user, plugin, profile, g.opt.Now())
}

// Pairing lists the open codes and the approved users, each with the tools its profile grants.
func (g *Gate) Pairing(ctx context.Context) ([]Request, []Approval, error) {
	pending, approved, err := ListPairing(ctx, g.db, g.opt.Now())
	for i, r := range pending {
		pending[i].Tools = g.policy(r.Plugin, r.Profile).Tools()
	}
	for i, a := range approved {
		approved[i].Tools = g.policy(a.Plugin, a.Profile).Tools()
	}
	return pending, approved, err
}

// ApproveCode approves an open pairing code: its user is admitted from now on. It works on the
// database directly (the CLI uses it when no host is serving).
func ApproveCode(ctx context.Context, db *sql.DB, code string, now time.Time) (Approval, error) {
	code = strings.ToUpper(strings.TrimSpace(code))
	var a Approval
	err := store.WithTx(ctx, db, func(tx *sql.Tx) error {
		var src string
		err := tx.QueryRowContext(ctx, `SELECT plugin, profile, user_id, user_name, source FROM auth_pairing
			WHERE code = $1 AND expires_at > $2`, code, now.UnixMilli()).Scan(&a.Plugin, &a.Profile, &a.UserID, &a.UserName, &src)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w %q (unknown or expired; `hermes-host pairing ls` lists the open ones)", ErrNoCode, code)
		}
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(src), &a.Source); err != nil {
			return fmt.Errorf("auth: pairing %s: corrupt source: %w", code, err)
		}
		a.Code, a.ApprovedAt = code, now
		if _, err := tx.ExecContext(ctx, `INSERT INTO auth_approved (plugin, profile, user_id, user_name, code, approved_at)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (plugin, profile, user_id) DO UPDATE
			SET user_name = excluded.user_name, code = excluded.code, approved_at = excluded.approved_at`, a.Plugin, a.Profile, a.UserID, a.UserName, code, now.UnixMilli()); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM auth_pairing WHERE code = $1`, code); err != nil {
			return err
		}
		return operatorLog(ctx, tx, now, a, Approved, "code "+code)
	})
	return a, err
}

// RevokeUser removes the approvals of user (narrowed to plugin and profile when set) and any
// open code of theirs, and returns what it removed.
func RevokeUser(ctx context.Context, db *sql.DB, user, plugin, profile string, now time.Time) ([]Approval, error) {
	var out []Approval
	err := store.WithTx(ctx, db, func(tx *sql.Tx) error {
		out = nil
		where := `user_id = $1 AND ($2 = '' OR plugin = $3) AND ($4 = '' OR profile = $5)`
		args := []any{user, plugin, plugin, profile, profile}
		rows, err := tx.QueryContext(ctx, `SELECT plugin, profile, user_id, user_name, code, approved_at FROM auth_approved WHERE `+where, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var a Approval
			var at int64
			if err := rows.Scan(&a.Plugin, &a.Profile, &a.UserID, &a.UserName, &a.Code, &at); err != nil {
				rows.Close()
				return err
			}
			a.ApprovedAt = time.UnixMilli(at)
			out = append(out, a)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM auth_pairing WHERE `+where, args...); err != nil {
			return err
		}
		if len(out) == 0 {
			return fmt.Errorf("%w %q", ErrNotApproved, user)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM auth_approved WHERE `+where, args...); err != nil {
			return err
		}
		for _, a := range out {
			if err := operatorLog(ctx, tx, now, a, Revoked, ""); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// ListPairing returns the open (unexpired) pairing codes and the approved users.
func ListPairing(ctx context.Context, db *sql.DB, now time.Time) ([]Request, []Approval, error) {
	pending := []Request{}
	rows, err := db.QueryContext(ctx, `SELECT code, plugin, profile, user_id, user_name, source, created_at, expires_at
		FROM auth_pairing WHERE expires_at > $1 ORDER BY created_at`, now.UnixMilli())
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var r Request
		var src string
		var created, expires int64
		if err := rows.Scan(&r.Code, &r.Plugin, &r.Profile, &r.UserID, &r.UserName, &src, &created, &expires); err != nil {
			rows.Close()
			return nil, nil, err
		}
		if err := json.Unmarshal([]byte(src), &r.Source); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("auth: pairing %s: corrupt source: %w", r.Code, err)
		}
		r.CreatedAt, r.ExpiresAt = time.UnixMilli(created), time.UnixMilli(expires)
		pending = append(pending, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	approved := []Approval{}
	rows, err = db.QueryContext(ctx, `SELECT plugin, profile, user_id, user_name, code, approved_at FROM auth_approved ORDER BY approved_at`)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var a Approval
		var at int64
		if err := rows.Scan(&a.Plugin, &a.Profile, &a.UserID, &a.UserName, &a.Code, &at); err != nil {
			return nil, nil, err
		}
		a.ApprovedAt = time.UnixMilli(at)
		approved = append(approved, a)
	}
	return pending, approved, rows.Err()
}

// PendingCount is how many pairing requests (open codes) one plugin's profile has.
type PendingCount struct {
	Plugin, Profile string
	Requests        int
}

// PendingPairing counts the pairing requests still open at now (not expired), by plugin and
// profile, as /metrics reports them: read from db, so right on every host sharing it.
func PendingPairing(ctx context.Context, db *sql.DB, now time.Time) ([]PendingCount, error) {
	rows, err := db.QueryContext(ctx, `SELECT plugin, profile, COUNT(*) FROM auth_pairing WHERE expires_at > $1
		GROUP BY plugin, profile ORDER BY plugin, profile`, now.UnixMilli())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PendingCount
	for rows.Next() {
		var c PendingCount
		if err := rows.Scan(&c.Plugin, &c.Profile, &c.Requests); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
