// Package auth decides who may talk to the agent. The inbound door (internal/inbound) asks the
// Gate about every event before the turn engine records it: webhook, poll and hermes_dispatch
// events alike.
//
// The policy is the operator's, per plugin and profile, and denies by default: a DM is admitted
// from listed users and from users the operator approved through DM pairing; a group only if
// the operator listed it, and then only its admitted members (a group may require a mention
// before a message starts a turn); AllowAll admits everyone and must be written out. An unknown
// user's DM gets a one-time pairing code, once per code lifetime and within a cap of open codes,
// sent through the delivery ledger like any host notice; the operator approves it with
// `hermes-host pairing approve CODE`. Chatter of unknown group members is kept in the
// transcript only where the group is configured to observe it.
//
// Every refusal is recorded durably (the auth log, `hermes-host auth log`), counted in the
// metrics, and deduplicated by event id, so a replayed event is neither logged nor answered
// twice.
package auth

import (
	"context"
	"database/sql"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/config"
	"github.com/hermes-host/hermes-host/internal/store"
)

// Policy is one plugin profile's access rules.
type Policy struct {
	// AllowAll admits everyone, in DMs and in every group (a group's mention rule still applies).
	AllowAll bool
	// Users are the platform user ids admitted in DMs, and in groups without users of their own.
	Users []string
	// Pairing answers an unknown user's DM with a one-time code the operator may approve.
	Pairing bool
	// Groups are the group chats admitted, by chat id; "*" matches any group.
	Groups map[string]Group
	// Shell and Processes are the tools admitted senders get: starting commands, and inspecting
	// and stopping their own chat's processes. Cron lets them manage their chat's scheduled jobs.
	Shell, Processes, Cron bool
}

// Tools names the tools p grants (config.ToolShell, ToolProcesses, ToolCron, in that order);
// empty, never nil, when it grants none.
func (p Policy) Tools() []string {
	tools := []string{}
	for _, t := range []struct {
		on   bool
		name string
	}{{p.Shell, config.ToolShell}, {p.Processes, config.ToolProcesses}, {p.Cron, config.ToolCron}} {
		if t.on {
			tools = append(tools, t.name)
		}
	}
	return tools
}

// Group is the rule of one group chat.
type Group struct {
	AllowAll bool
	// Users admitted in the group; nil: the policy's users and the approved users.
	Users []string
	// RequireMention makes a message that does not address the bot an observation, not a turn.
	RequireMention bool
	// Observe keeps messages of members who are not admitted in the transcript, without a turn.
	Observe bool
}

// Verdicts of Admit.
const (
	Allow   = "allow"   // pass the event on as it is
	Observe = "observe" // record it in the transcript without a turn
	Refuse  = "refuse"  // drop it (recorded in the auth log)
)

// Reasons recorded with a refusal (and the metric's reason label).
const (
	ReasonUnknownUser    = "unknown_user"      // the sender is not admitted here
	ReasonUnknownChat    = "unknown_chat"      // the group is not admitted
	ReasonPairingSent    = "pairing_code_sent" // an unknown DM: a pairing code was sent
	ReasonPairingPending = "pairing_pending"   // an unknown DM whose code is still open: nothing sent
	ReasonPairingLimit   = "pairing_limit"     // too many open codes for the profile: nothing sent
	ReasonObserved       = "observed_only"     // an unknown group member's message kept without a turn
)

// Decision is what Admit decided.
type Decision struct {
	Verdict string // Allow, Observe or Refuse
	Reason  string // Reason* values, for Refuse and for an observation of an unknown member
}

// Notifier sends a host notice into a chat through the delivery ledger and returns its id.
type Notifier interface {
	Notice(ctx context.Context, plugin, profile string, src abi.Source, text, origin string) (string, error)
}

// Options configure a Gate.
type Options struct {
	// Policies by plugin, then profile. A profile without a policy admits only approved users
	// (pairing on, no groups, no tools).
	Policies map[string]map[string]Policy
	Notifier Notifier
	Logger   *slog.Logger
	// Registerer receives the refusal and pairing counters; nil: not registered.
	Registerer prometheus.Registerer
	Now        func() time.Time
	// PairingTTL is how long a pairing code stays valid; an unknown user gets no second code
	// before it expires. Default 1 hour.
	PairingTTL time.Duration
	// MaxPending caps the open pairing codes of one plugin profile. Default 10.
	MaxPending int
	// LogRows is how many auth log rows are kept. Default 10000.
	LogRows int
}

// Gate applies the policies. It is safe for concurrent use.
type Gate struct {
	db      *sql.DB
	opt     Options
	log     *slog.Logger
	refused *prometheus.CounterVec
	codes   *prometheus.CounterVec
}

// Open migrates the auth tables and returns a Gate.
func Open(ctx context.Context, db *sql.DB, opt Options) (*Gate, error) {
	if err := Migrate(ctx, db); err != nil {
		return nil, err
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.PairingTTL <= 0 {
		opt.PairingTTL = time.Hour
	}
	if opt.MaxPending <= 0 {
		opt.MaxPending = 10
	}
	if opt.LogRows <= 0 {
		opt.LogRows = 10000
	}
	g := &Gate{db: db, opt: opt, log: opt.Logger,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_auth_refused_total",
			Help: "Inbound events refused a turn by the authorization policy, by reason."}, []string{"plugin", "profile", "reason"}),
		codes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_auth_pairing_codes_total",
			Help: "Pairing codes sent to unknown users."}, []string{"plugin", "profile"}),
	}
	if opt.Registerer != nil {
		opt.Registerer.MustRegister(g.refused, g.codes)
	}
	return g, nil
}

// Migrate creates or updates the auth tables (the CLI calls it before reading them).
func Migrate(ctx context.Context, db *sql.DB) error {
	return store.Migrate(ctx, db, "auth", migrations)
}

var migrations = []store.Migration{{SQLite: `
CREATE TABLE auth_pairing (
	code       TEXT PRIMARY KEY,
	plugin     TEXT NOT NULL,
	profile    TEXT NOT NULL,
	user_id    TEXT NOT NULL,
	user_name  TEXT NOT NULL DEFAULT '',
	source     TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX auth_pairing_user ON auth_pairing (plugin, profile, user_id);
CREATE TABLE auth_approved (
	plugin      TEXT NOT NULL,
	profile     TEXT NOT NULL,
	user_id     TEXT NOT NULL,
	user_name   TEXT NOT NULL DEFAULT '',
	code        TEXT NOT NULL DEFAULT '',
	approved_at INTEGER NOT NULL,
	PRIMARY KEY (plugin, profile, user_id)
);
CREATE TABLE auth_log (
	seq       INTEGER PRIMARY KEY AUTOINCREMENT,
	at        INTEGER NOT NULL,
	plugin    TEXT NOT NULL,
	profile   TEXT NOT NULL,
	event_id  TEXT,
	kind      TEXT NOT NULL,
	chat_type TEXT NOT NULL DEFAULT '',
	chat_id   TEXT NOT NULL DEFAULT '',
	user_id   TEXT NOT NULL DEFAULT '',
	user_name TEXT NOT NULL DEFAULT '',
	verdict   TEXT NOT NULL,
	reason    TEXT NOT NULL,
	detail    TEXT NOT NULL DEFAULT '',
	text      TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX auth_log_event ON auth_log (plugin, profile, event_id) WHERE event_id IS NOT NULL;`,
	Postgres: `
CREATE TABLE auth_pairing (
	code       TEXT PRIMARY KEY,
	plugin     TEXT NOT NULL,
	profile    TEXT NOT NULL,
	user_id    TEXT NOT NULL,
	user_name  TEXT NOT NULL DEFAULT '',
	source     TEXT NOT NULL,
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL,
	rowid BIGINT GENERATED BY DEFAULT AS IDENTITY -- SQLite's implicit rowid
);
CREATE UNIQUE INDEX auth_pairing_user ON auth_pairing (plugin, profile, user_id);
CREATE TABLE auth_approved (
	plugin      TEXT NOT NULL,
	profile     TEXT NOT NULL,
	user_id     TEXT NOT NULL,
	user_name   TEXT NOT NULL DEFAULT '',
	code        TEXT NOT NULL DEFAULT '',
	approved_at BIGINT NOT NULL,
	PRIMARY KEY (plugin, profile, user_id),
	rowid BIGINT GENERATED BY DEFAULT AS IDENTITY -- SQLite's implicit rowid
);
CREATE TABLE auth_log (
	seq       BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	at        BIGINT NOT NULL,
	plugin    TEXT NOT NULL,
	profile   TEXT NOT NULL,
	event_id  TEXT,
	kind      TEXT NOT NULL,
	chat_type TEXT NOT NULL DEFAULT '',
	chat_id   TEXT NOT NULL DEFAULT '',
	user_id   TEXT NOT NULL DEFAULT '',
	user_name TEXT NOT NULL DEFAULT '',
	verdict   TEXT NOT NULL,
	reason    TEXT NOT NULL,
	detail    TEXT NOT NULL DEFAULT '',
	text      TEXT NOT NULL DEFAULT '',
	rowid BIGINT GENERATED BY DEFAULT AS IDENTITY -- SQLite's implicit rowid
);
CREATE UNIQUE INDEX auth_log_event ON auth_log (plugin, profile, event_id) WHERE event_id IS NOT NULL;`},
}

func (g *Gate) policy(plugin, profile string) Policy {
	if p, ok := g.opt.Policies[plugin][profile]; ok {
		return p
	}
	return Policy{Pairing: true}
}

// Admit decides what becomes of one inbound event whose source carries the plugin's own platform
// and profile. A refusal is recorded (once per event id) and counted; an unknown user's DM may
// be answered with a pairing code. An error means nothing was decided: the caller must not
// acknowledge the event, so the platform delivers it again.
func (g *Gate) Admit(ctx context.Context, plugin, profile string, ev abi.InboundEvent) (Decision, error) {
	kind := ev.Kind
	if kind == "" {
		kind = abi.EventMessage
	}
	if kind == abi.EventRedact {
		// A recall only blanks a message already in a transcript; it creates and answers nothing.
		return Decision{Verdict: Allow}, nil
	}
	pol := g.policy(plugin, profile)
	src := ev.Source
	if src.ChatType == abi.ChatDM {
		ok, err := g.admitted(ctx, plugin, profile, pol, nil, src.UserID)
		if err != nil || ok {
			return Decision{Verdict: Allow}, err
		}
		if kind == abi.EventMessage && pol.Pairing && src.UserID != "" {
			return g.pair(ctx, plugin, profile, ev)
		}
		return g.refuse(ctx, plugin, profile, ev, ReasonUnknownUser)
	}
	grp, ok := pol.Groups[src.ChatID]
	if !ok {
		grp, ok = pol.Groups["*"]
	}
	if !ok && pol.AllowAll {
		grp, ok = Group{AllowAll: true, RequireMention: true}, true
	}
	if !ok {
		return g.refuse(ctx, plugin, profile, ev, ReasonUnknownChat)
	}
	admitted, err := g.admitted(ctx, plugin, profile, pol, &grp, src.UserID)
	if err != nil {
		return Decision{}, err
	}
	switch {
	case admitted && kind == abi.EventMessage && grp.RequireMention && !ev.Mentioned && ev.Addressed == "":
		// Addressed: the plugin's own addressing (a followed thread, a free-response channel, a
		// command) counts as a mention; the door's rule is for plugins that mark nothing.
		return Decision{Verdict: Observe}, nil
	case admitted:
		return Decision{Verdict: Allow}, nil
	case grp.Observe && kind == abi.EventObserve:
		return Decision{Verdict: Allow}, nil
	case grp.Observe && kind == abi.EventMessage:
		if _, err := g.record(ctx, plugin, profile, ev, Observe, ReasonObserved, ""); err != nil {
			return Decision{}, err
		}
		return Decision{Verdict: Observe, Reason: ReasonObserved}, nil
	}
	return g.refuse(ctx, plugin, profile, ev, ReasonUnknownUser)
}

// admitted reports whether user may talk in a DM (grp nil) or in grp.
func (g *Gate) admitted(ctx context.Context, plugin, profile string, pol Policy, grp *Group, user string) (bool, error) {
	switch {
	case pol.AllowAll || grp != nil && grp.AllowAll:
		return true, nil
	case user == "":
		return false, nil
	case grp != nil && grp.Users != nil:
		return slices.Contains(grp.Users, user), nil
	case slices.Contains(pol.Users, user):
		return true, nil
	}
	return isApproved(ctx, g.db, plugin, profile, user)
}

// Tools reports the tools a turn for src gets: the profile's grants, if src's sender is still
// admitted there (an approval revoked after the message was queued takes the tools away too).
func (g *Gate) Tools(ctx context.Context, plugin, profile string, src abi.Source) (shell, processes bool) {
	pol := g.policy(plugin, profile)
	if !pol.Shell && !pol.Processes || !g.grantable(ctx, plugin, profile, pol, src) {
		return false, false
	}
	return pol.Shell, pol.Processes
}

// MayManageJobs reports whether src's sender may manage their chat's scheduled jobs (/cron): the
// profile grants the cron tool and the sender is admitted there.
func (g *Gate) MayManageJobs(ctx context.Context, plugin, profile string, src abi.Source) bool {
	pol := g.policy(plugin, profile)
	return pol.Cron && g.grantable(ctx, plugin, profile, pol, src)
}

// grantable reports whether src's sender is admitted in src's chat under pol, so the profile's
// grants apply to them.
func (g *Gate) grantable(ctx context.Context, plugin, profile string, pol Policy, src abi.Source) bool {
	var grp *Group
	if src.ChatType != abi.ChatDM {
		gr, ok := pol.Groups[src.ChatID]
		if !ok {
			gr, ok = pol.Groups["*"]
		}
		if !ok && !pol.AllowAll {
			return false
		}
		grp = &gr
	}
	ok, err := g.admitted(ctx, plugin, profile, pol, grp, src.UserID)
	return err == nil && ok
}

// refuse records and counts a refusal (once per event id).
func (g *Gate) refuse(ctx context.Context, plugin, profile string, ev abi.InboundEvent, reason string) (Decision, error) {
	if _, err := g.record(ctx, plugin, profile, ev, Refuse, reason, ""); err != nil {
		return Decision{}, err
	}
	return Decision{Verdict: Refuse, Reason: reason}, nil
}

// record writes one auth log row for ev and counts it, unless ev's id was recorded before; it
// reports whether the row is new.
func (g *Gate) record(ctx context.Context, plugin, profile string, ev abi.InboundEvent, verdict, reason, detail string) (bool, error) {
	var fresh bool
	err := store.WithTx(ctx, g.db, func(tx *sql.Tx) error {
		var err error
		fresh, err = g.insertLog(ctx, tx, plugin, profile, ev, verdict, reason, detail)
		return err
	})
	if err == nil && fresh {
		g.count(plugin, profile, reason)
	}
	return fresh, err
}

func (g *Gate) count(plugin, profile, reason string) {
	g.refused.WithLabelValues(plugin, profile, reason).Inc()
	g.log.Info("inbound event refused a turn", "plugin", plugin, "profile", profile, "reason", reason)
}
