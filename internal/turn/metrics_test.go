package turn

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The turn counters count each turn once, by how it ended: a /new interrupts the running turn
// and drops the one queued behind it (which never started); the turn after it is done; a
// queued command is a command. The turns queue (ReadQueues) holds what runs and waits.
func TestTurnCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewMetrics(prometheus.NewPedanticRegistry())
		a := newBlocking()
		h := newHarness(t, a, Options{Metrics: m})
		h.say(dm, "think hard")
		a.next(t)
		h.say(dm, "queued behind")
		// The turns queue holds both, since the running one was received.
		var first int64
		if err := h.db.QueryRow(`SELECT created_at FROM turn_inbox WHERE text = 'think hard'`).Scan(&first); err != nil {
			t.Fatal(err)
		}
		until(t, "the second turn queued", func() bool {
			q, err := ReadQueues(context.Background(), h.db)
			if err != nil {
				t.Fatal(err)
			}
			return q.Turns.Rows == 2 && q.Turns.Oldest.Equal(time.UnixMilli(first)) && q.Inbound.Rows == 0
		})
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
		if q, err := ReadQueues(context.Background(), h.db); err != nil || q.Turns.Rows != 0 || !q.Turns.Oldest.IsZero() {
			t.Fatalf("the turns queue after the turns: %+v %v", q, err)
		}
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
