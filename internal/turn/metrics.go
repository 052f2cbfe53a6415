package turn

import (
	"context"
	"database/sql"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hermes-host/hermes-host/internal/store"
)

// Metrics counts the turns this host starts and ends, for /metrics. A nil *Metrics records
// nothing. The inbox's state (what waits to be applied or run) is read from the database at
// scrape time instead (ReadQueues).
type Metrics struct {
	started  *prometheus.CounterVec
	finished *prometheus.CounterVec
	approved *prometheus.CounterVec
}

// NewMetrics registers the engine's counters with reg:
//
//	hermes_turns_started_total{kind="message|command|notification"}
//	hermes_turns_finished_total{kind, outcome="done|failed|interrupted|dropped"}
//	hermes_approvals_total{outcome="approved|denied|expired|voided"}
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		started: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_turns_started_total",
			Help: "Turns this host started running, by kind (a user's message, a queued slash command, a process notification)."}, []string{"kind"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_turns_finished_total",
			Help: "Turns whose outcome this host recorded, by kind and outcome (dropped: cancelled before it ran, or a notification not delivered)."},
			[]string{"kind", "outcome"}),
		approved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_approvals_total",
			Help: "Commands that waited for a person's approval on this host, by outcome (expired: nobody answered in time; voided: the conversation moved on first)."},
			[]string{"outcome"}),
	}
	reg.MustRegister(m.started, m.finished, m.approved)
	return m
}

// Turn kinds as the metrics label them.
const (
	metricMessage      = "message"
	metricCommand      = "command"
	metricNotification = "notification"
)

func metricKind(it *item) string {
	switch {
	case it.kind == kindNotification:
		return metricNotification
	case it.cmd != "":
		return metricCommand
	}
	return metricMessage
}

func (m *Metrics) start(it *item) {
	if m != nil {
		m.started.WithLabelValues(metricKind(it)).Inc()
	}
}

// approval counts a request that waited and ended in state (approval.State*).
func (m *Metrics) approval(state string) {
	if m != nil {
		m.approved.WithLabelValues(state).Inc()
	}
}

// finish counts it ended in state, once t commits.
func (m *Metrics) finish(t *store.Tx, it *item, state string) {
	if m == nil {
		return
	}
	switch state {
	case stDone, stFailed, stInterrupted, stDropped:
		kind := metricKind(it)
		t.AfterCommit(func() { m.finished.WithLabelValues(kind, state).Inc() })
	}
}

// Queue is what waits in one of the inbox's queues: how many rows, and when the oldest was
// received (zero when none).
type Queue struct {
	Rows   int
	Oldest time.Time
}

// Queues are the inbox's queues at one moment, as /metrics reports them.
type Queues struct {
	// Inbound are the events recorded but not yet applied under their chat's boundary.
	Inbound Queue
	// Turns are the turns queued or running.
	Turns Queue
}

// ReadQueues reads the inbox's Queues from db (one grouped query on the partial indexes of the
// open rows): the whole deployment's when several hosts share it.
func ReadQueues(ctx context.Context, db *sql.DB) (Queues, error) {
	var q Queues
	rows, err := db.QueryContext(ctx, `SELECT state, COUNT(*), MIN(created_at) FROM turn_inbox
		WHERE state IN ('received', 'queued', 'running') GROUP BY state`)
	if err != nil {
		return q, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			state  string
			n      int
			oldest int64
		)
		if err := rows.Scan(&state, &n, &oldest); err != nil {
			return q, err
		}
		to := &q.Turns
		if state == stReceived {
			to = &q.Inbound
		}
		to.add(n, time.UnixMilli(oldest))
	}
	return q, rows.Err()
}

func (q *Queue) add(n int, oldest time.Time) {
	if q.Rows == 0 || oldest.Before(q.Oldest) {
		q.Oldest = oldest
	}
	q.Rows += n
}
