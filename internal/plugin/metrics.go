package plugin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the runtime's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	calls     *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	instances *prometheus.GaugeVec
	crashes   *prometheus.CounterVec
	denied    *prometheus.CounterVec
}

// NewMetrics creates the runtime's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hermes_plugin_calls_total", Help: "Export calls by plugin, export and outcome.",
		}, []string{"plugin", "export", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "hermes_plugin_call_seconds", Help: "Export call latency.",
			Buckets: []float64{.00001, .00003, .0001, .0003, .001, .003, .01, .03, .1, .3, 1, 3, 10, 30},
		}, []string{"plugin", "export"}),
		instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hermes_plugin_instances", Help: "Live plugin instances.",
		}, []string{"plugin"}),
		crashes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hermes_plugin_crashes_total", Help: "Discarded instances by plugin and reason (trap, deadline).",
		}, []string{"plugin", "reason"}),
	}
	m.denied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hermes_plugin_egress_denied_total", Help: "Egress calls refused by the policy (host, scope, internal address), by plugin and export.",
	}, []string{"plugin", "export"})
	reg.MustRegister(m.calls, m.latency, m.instances, m.crashes, m.denied)
	return m
}

// pluginMetrics is Metrics curried with a plugin name. A nil *pluginMetrics records nothing.
type pluginMetrics struct {
	m      *Metrics
	plugin string
	gauge  prometheus.Gauge
}

func (m *Metrics) forPlugin(name string) *pluginMetrics {
	if m == nil {
		return nil
	}
	return &pluginMetrics{m: m, plugin: name, gauge: m.instances.WithLabelValues(name)}
}

func (pm *pluginMetrics) call(export, outcome string, start time.Time) {
	if pm == nil {
		return
	}
	pm.m.calls.WithLabelValues(pm.plugin, export, outcome).Inc()
	pm.m.latency.WithLabelValues(pm.plugin, export).Observe(time.Since(start).Seconds())
}

func (pm *pluginMetrics) instances(delta float64) {
	if pm == nil {
		return
	}
	pm.gauge.Add(delta)
}

func (pm *pluginMetrics) crash(reason string) {
	if pm == nil {
		return
	}
	pm.m.crashes.WithLabelValues(pm.plugin, reason).Inc()
}

func (pm *pluginMetrics) denied(export string) {
	if pm == nil {
		return
	}
	pm.m.denied.WithLabelValues(pm.plugin, export).Inc()
}
