package delivery

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts the ledger's events for /metrics. A nil *Metrics records nothing. The ledger's
// state (rows by state and kind, uncertain rows, the open queue) is read from the database at
// scrape time instead (Stats): right after a restart and on every host sharing the database.
type Metrics struct {
	dropped *prometheus.CounterVec
}

// NewMetrics registers the ledger's counters with reg:
//
//	hermes_deliveries_dropped_total{reason="stale|unverifiable|suppressed|key_mismatch|cancelled|interrupted|no_answer|other"}
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_deliveries_dropped_total",
		Help: "Ledger rows (message parts) recorded dropped by this host, by reason class (DropClass)."}, []string{"reason"})}
	reg.MustRegister(m.dropped)
	return m
}

func (m *Metrics) observe(r Row) {
	if m != nil && r.State == Dropped {
		m.dropped.WithLabelValues(DropClass(r.Reason)).Inc()
	}
}

// Drop reason classes (DropClass).
const (
	DropStale        = "stale"        // the conversation it belonged to is gone (a /new, a move): session.Stale
	DropUnverifiable = "unverifiable" // whether it still belongs could not be checked, retries exhausted
	DropSuppressed   = "suppressed"   // what it was about was withdrawn (the agent read the process's result)
	DropKeyMismatch  = "key_mismatch" // its route is not its key's chat (never delivered across chats)
	DropCancelled    = "cancelled"    // a queued notification a /new, /reset or /stop cancelled before it ran
	DropInterrupted  = "interrupted"  // a running notification turn a command interrupted
	DropNoAnswer     = "no_answer"    // the agent gave no answer to a notification
	DropOther        = "other"
)

// DropClass is the class of a dropped row's reason, one of the Drop* constants: the bounded
// label of hermes_deliveries_dropped_total (the reason itself is free text).
func DropClass(reason string) string {
	head, _, _ := strings.Cut(reason, ":")
	switch {
	case head == DropStale, head == DropUnverifiable, head == DropSuppressed, head == DropKeyMismatch:
		return head
	case strings.HasPrefix(reason, "cancelled by "):
		return DropCancelled
	case strings.HasPrefix(reason, "interrupted"):
		return DropInterrupted
	case strings.HasPrefix(reason, "the agent gave no answer"):
		return DropNoAnswer
	}
	return DropOther
}
