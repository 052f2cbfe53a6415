package adminapi

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hermes-host/hermes-host/internal/store"
)

// A store that does not answer the state reads leaves the state series out and reports
// hermes_state_up 0; the scrape itself succeeds (the host's other series are still served).
func TestStateSeriesWithoutTheStore(t *testing.T) {
	for name, prepare := range map[string]func(t *testing.T) *stateCollector{
		"closed": func(t *testing.T) *stateCollector {
			db, err := store.Open(filepath.Join(t.TempDir(), "hermes.db"), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			return &stateCollector{db: db, now: time.Now}
		},
		"no tables": func(t *testing.T) *stateCollector {
			db, err := store.Open(filepath.Join(t.TempDir(), "hermes.db"), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return &stateCollector{db: db, now: time.Now}
		},
	} {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(prepare(t))
			families, err := reg.Gather()
			if err != nil {
				t.Fatalf("the scrape failed: %v", err)
			}
			var names []string
			for _, f := range families {
				names = append(names, f.GetName())
			}
			if got := strings.Join(names, " "); got != "hermes_state_read_seconds hermes_state_up" {
				t.Fatalf("series %s", got)
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP hermes_state_up 1 when this scrape read the state gauges from the database, 0 when a read failed or took longer than 2s (those series are left out).
# TYPE hermes_state_up gauge
hermes_state_up 0
`), "hermes_state_up"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
