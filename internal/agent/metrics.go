package agent

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts model calls for /metrics.
type Metrics struct {
	calls    *prometheus.CounterVec
	failures *prometheus.CounterVec
	refused  *prometheus.CounterVec
	timeouts *prometheus.CounterVec
}

// NewMetrics registers the agent's counters with reg:
//
//	hermes_agent_model_calls_total{outcome="ok|error"}
//	hermes_agent_model_failures_total{reason="http_4xx|http_5xx|http_NNN|timeout|connect|redirect|bad_response|too_large|stream"}
//	hermes_agent_tool_calls_refused_total{reason="tools_off|not_granted|notification"}
//	hermes_agent_timeouts_total{limit="model_call|turn"}
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_agent_model_calls_total",
			Help: "Calls to the model endpoint, by outcome."}, []string{"outcome"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_agent_model_failures_total",
			Help: "Failed calls to the model endpoint, by reason (HTTP status, timeout, connect, redirect, bad_response, too_large, stream)."}, []string{"reason"}),
	}
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_agent_tool_calls_refused_total",
		Help: "Tool calls of the model that were refused, not run, by reason (tools_off, not_granted, notification)."}, []string{"reason"})
	m.timeouts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_agent_timeouts_total",
		Help: "Timeouts that ended a model call (agent.timeout) or a whole turn (agent.turn_timeout), by limit."}, []string{"limit"})
	reg.MustRegister(m.calls, m.failures, m.refused, m.timeouts)
	return m
}

func (m *Metrics) ok() {
	if m != nil {
		m.calls.WithLabelValues("ok").Inc()
	}
}

func (m *Metrics) failed(reason string) {
	if m != nil {
		m.calls.WithLabelValues("error").Inc()
		m.failures.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) refusedCall(reason string) {
	if m != nil {
		m.refused.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) timedOut(limit string) {
	if m != nil {
		m.timeouts.WithLabelValues(limit).Inc()
	}
}
