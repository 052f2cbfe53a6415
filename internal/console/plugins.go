package console

import (
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hermes-host/hermes-host/internal/plugin"
)

// The plugin runtime's metrics the plugins page reads (internal/plugin/metrics.go).
const (
	metricCalls   = "hermes_plugin_calls_total"
	metricLatency = "hermes_plugin_call_seconds"
	metricCrashes = "hermes_plugin_crashes_total"
)

// exportStats are one export's calls since the host started.
type exportStats struct {
	Export   string
	Calls    uint64
	Failed   uint64            // calls whose outcome was not ok
	Outcomes map[string]uint64 // by outcome, ok included
	Mean     time.Duration
	P95      string // the histogram bucket the 95th percentile falls in, e.g. "≤ 3ms"
}

// pluginStats are a plugin's call and crash counts from the metrics.
type pluginStats struct {
	Exports []exportStats
	Crashes map[string]uint64 // by reason: trap, deadline
	Total   uint64            // crashes
}

// readStats reads the plugin metrics from g, by plugin name.
func readStats(g prometheus.Gatherer) (map[string]*pluginStats, error) {
	out := map[string]*pluginStats{}
	if g == nil {
		return out, nil
	}
	families, err := g.Gather()
	if err != nil {
		return nil, err
	}
	get := func(name string) *pluginStats {
		if out[name] == nil {
			out[name] = &pluginStats{Crashes: map[string]uint64{}}
		}
		return out[name]
	}
	export := func(ps *pluginStats, name string) *exportStats {
		for i := range ps.Exports {
			if ps.Exports[i].Export == name {
				return &ps.Exports[i]
			}
		}
		ps.Exports = append(ps.Exports, exportStats{Export: name, Outcomes: map[string]uint64{}})
		return &ps.Exports[len(ps.Exports)-1]
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			l := labels(m)
			switch f.GetName() {
			case metricCalls:
				es := export(get(l["plugin"]), l["export"])
				n := uint64(m.GetCounter().GetValue())
				es.Outcomes[l["outcome"]] += n
				if l["outcome"] != "ok" {
					es.Failed += n
				}
			case metricLatency:
				h := m.GetHistogram()
				es := export(get(l["plugin"]), l["export"])
				es.Calls = h.GetSampleCount()
				if es.Calls > 0 {
					es.Mean = roundDuration(time.Duration(h.GetSampleSum() / float64(es.Calls) * float64(time.Second)))
					es.P95 = quantileBucket(h, 0.95)
				}
			case metricCrashes:
				ps := get(l["plugin"])
				n := uint64(m.GetCounter().GetValue())
				ps.Crashes[l["reason"]] += n
				ps.Total += n
			}
		}
	}
	for _, ps := range out {
		slices.SortFunc(ps.Exports, func(a, b exportStats) int { return strings.Compare(a.Export, b.Export) })
	}
	return out, nil
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// quantileBucket names the bucket of h that holds quantile q: "≤ 3ms", or "> 30s" past the last.
func quantileBucket(h *dto.Histogram, q float64) string {
	want := uint64(math.Ceil(q * float64(h.GetSampleCount())))
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() >= want {
			return "≤ " + seconds(b.GetUpperBound())
		}
	}
	if bs := h.GetBucket(); len(bs) > 0 {
		return "> " + seconds(bs[len(bs)-1].GetUpperBound())
	}
	return "-"
}

// roundDuration keeps three significant digits or so: 15.4ms, 312µs, 2.31s.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).String()
}

type pluginsView struct {
	Plugins  []pluginRow
	Rejected []plugin.Rejection
	Pairing  pairingView
	Error    string
}

type pluginRow struct {
	plugin.Info
	Stats *pluginStats
}

// pluginsPage shows the loaded plugins (state, last error, profiles and their configuration
// problems, calls and crashes), the files that were rejected and why, and the pairing requests.
func (c *Console) pluginsPage(w http.ResponseWriter, r *http.Request, s *login) {
	v := pluginsView{Rejected: c.Plugins.Rejections(), Pairing: c.pairing(r)}
	stats, err := readStats(c.Metrics)
	if err != nil {
		v.Error = "reading the metrics failed: " + err.Error()
	}
	for _, p := range c.Plugins.Plugins() {
		info := p.Info()
		row := pluginRow{Info: info, Stats: stats[info.Name]}
		if row.Stats == nil {
			row.Stats = &pluginStats{}
		}
		v.Plugins = append(v.Plugins, row)
	}
	slices.SortFunc(v.Plugins, func(a, b pluginRow) int { return strings.Compare(a.Name, b.Name) })
	c.render(w, r, http.StatusOK, "plugins", s, "Plugins", v)
}
