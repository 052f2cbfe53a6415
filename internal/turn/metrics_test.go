package turn

import (
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The turn counters count each turn once, by how it ended: a /new interrupts the running turn
// and drops the one queued behind it (which never started); the turn after it is done; a
// queued command is a command.
func TestTurnCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewMetrics(prometheus.NewPedanticRegistry())
		a := newBlocking()
		h := newHarness(t, a, Options{Metrics: m})
		h.say(dm, "think hard")
		a.next(t)
		h.say(dm, "queued behind")
		h.say(dm, "/new")
		<-a.cancelled
		h.inboxOutcome(h.key(dm), "think hard", stInterrupted, "interrupted by /new")
		h.inboxOutcome(h.key(dm), "queued behind", stDropped, "cancelled by /new before it ran")
		h.say(dm, "again")
		a.next(t)
		a.release <- "the answer"
		h.inboxOutcome(h.key(dm), "again", stDone, "answered")
		h.say(dm, "/sessions")
		h.inboxOutcome(h.key(dm), "/sessions", stDone, "")
		synctest.Wait() // what runs after the commits
		for _, c := range []struct {
			name string
			c    prometheus.Collector
			want float64
		}{
			{"started message", m.started.WithLabelValues(metricMessage), 2},
			{"started command", m.started.WithLabelValues(metricCommand), 1},
			{"message interrupted", m.finished.WithLabelValues(metricMessage, stInterrupted), 1},
			{"message dropped", m.finished.WithLabelValues(metricMessage, stDropped), 1},
			{"message done", m.finished.WithLabelValues(metricMessage, stDone), 1},
			{"command done", m.finished.WithLabelValues(metricCommand, stDone), 1},
			{"message failed", m.finished.WithLabelValues(metricMessage, stFailed), 0},
		} {
			if got := testutil.ToFloat64(c.c); got != c.want {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
		}
	})
}
