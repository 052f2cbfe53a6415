package adminapi

import (
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hermes-host/hermes-host/internal/auth"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/turn"
)

// StateTimeout bounds the state reads of one scrape (stateCollector): a store that does not
// answer in time leaves those series out and hermes_state_up 0, and the rest of /metrics is
// served.
const StateTimeout = 2 * time.Second

// The queues of hermes_queue_depth and hermes_queue_oldest_age_seconds.
const (
	QueueInbound       = "inbound"        // inbound events recorded, not yet applied under their chat's boundary
	QueueTurns         = "turns"          // turns queued or running
	QueueDeliveries    = "deliveries"     // ledger rows pending or sending
	QueueProcessEvents = "process_events" // process events (completions, watch matches) not yet handled
)

var (
	deliveriesDesc = prometheus.NewDesc("hermes_deliveries",
		"Ledger rows (message parts) by state and kind, in the database (every host's).", []string{"state", "kind"}, nil)
	uncertainDesc = prometheus.NewDesc("hermes_deliveries_uncertain",
		"Failed ledger rows whose send may have reached the platform (outcome unknown, not resent), by plugin and profile, in the database.",
		[]string{"plugin", "profile"}, nil)
	processesDesc = prometheus.NewDesc("hermes_processes",
		"Background-process records by state, in the database (every host's; ended ones until they are pruned, 7 days after their end by default).", []string{"state"}, nil)
	queueDepthDesc = prometheus.NewDesc("hermes_queue_depth",
		"Items waiting or in progress in a queue, in the database (every host's).", []string{"queue"}, nil)
	queueAgeDesc = prometheus.NewDesc("hermes_queue_oldest_age_seconds",
		"Age of the oldest item in a queue (0 when it is empty), in the database.", []string{"queue"}, nil)
	pairingDesc = prometheus.NewDesc("hermes_pairing_requests",
		"Open (unexpired) pairing requests of unknown users, by plugin and profile, in the database.", []string{"plugin", "profile"}, nil)
	stateUpDesc = prometheus.NewDesc("hermes_state_up",
		"1 when this scrape read the state gauges from the database, 0 when a read failed or took longer than "+StateTimeout.String()+" (those series are left out).", nil, nil)
	stateSecondsDesc = prometheus.NewDesc("hermes_state_read_seconds",
		"How long this scrape's reads of the state gauges took.", nil, nil)
)

// deliveryKinds are the kinds every hermes_deliveries state is reported for (0 when none).
var deliveryKinds = []string{delivery.KindReply, delivery.KindDraft, delivery.KindNotification, delivery.KindScheduled, delivery.KindNotice}

// deliveryStates are the states every kind is reported for.
var deliveryStates = []delivery.State{delivery.Pending, delivery.Sending, delivery.Delivered, delivery.Failed, delivery.Dropped}

// stateCollector reads the state gauges from the database at each scrape: the ledger's rows by
// state and kind and its uncertain rows, the background processes by state, the queues (inbox,
// ledger, process events) with the age of their oldest item, and the open pairing requests.
// Being read from the database, they are correct right after a restart and on every host of a
// deployment sharing one PostgreSQL (each host reports the same numbers). Each read is a
// grouped query on an index; all of them together are bounded by StateTimeout.
type stateCollector struct {
	db  *sql.DB
	now func() time.Time
}

// Describe implements prometheus.Collector.
func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{deliveriesDesc, uncertainDesc, processesDesc, queueDepthDesc, queueAgeDesc, pairingDesc, stateUpDesc, stateSecondsDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), StateTimeout)
	defer cancel()
	now := c.now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	queue := func(name string, n int, oldest time.Time) {
		gauge(queueDepthDesc, float64(n), name)
		age := 0.0
		if n > 0 {
			age = max(now.Sub(oldest).Seconds(), 0)
		}
		gauge(queueAgeDesc, age, name)
	}
	up := 1.0
	if st, err := delivery.ReadStats(ctx, c.db); err != nil {
		up = 0
	} else {
		counts := map[[2]string]int{}
		kinds := slices.Clone(deliveryKinds)
		for _, sc := range st.ByState {
			counts[[2]string{string(sc.State), sc.Kind}] += sc.Rows
			if !slices.Contains(kinds, sc.Kind) {
				kinds = append(kinds, sc.Kind) // a kind of an older or newer version
			}
		}
		for _, s := range deliveryStates {
			for _, k := range kinds {
				gauge(deliveriesDesc, float64(counts[[2]string{string(s), k}]), string(s), k)
			}
		}
		for _, u := range st.Uncertain {
			gauge(uncertainDesc, float64(u.Rows), u.Plugin, u.Profile)
		}
		queue(QueueDeliveries, st.Open, st.OldestOpen)
	}
	if q, err := turn.ReadQueues(ctx, c.db); err != nil {
		up = 0
	} else {
		queue(QueueInbound, q.Inbound.Rows, q.Inbound.Oldest)
		queue(QueueTurns, q.Turns.Rows, q.Turns.Oldest)
	}
	if st, err := process.ReadStats(ctx, c.db); err != nil {
		up = 0
	} else {
		for _, s := range process.States {
			gauge(processesDesc, float64(st.ByState[s]), string(s))
		}
		queue(QueueProcessEvents, st.Events, st.Oldest)
	}
	if pending, err := auth.PendingPairing(ctx, c.db, now); err != nil {
		up = 0
	} else {
		for _, p := range pending {
			gauge(pairingDesc, float64(p.Requests), p.Plugin, p.Profile)
		}
	}
	gauge(stateUpDesc, up)
	gauge(stateSecondsDesc, time.Since(start).Seconds())
}
