package agent

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts model calls for /metrics. A nil *Metrics records nothing.
type Metrics struct {
	profile  string // the profile whose turn calls the model (forProfile); label of calls and failures
	calls    *prometheus.CounterVec
	failures *prometheus.CounterVec
	refused  *prometheus.CounterVec
	timeouts *prometheus.CounterVec
	heard    *prometheus.CounterVec
}

// NewMetrics registers the agent's counters with reg:
//
//	hermes_agent_model_calls_total{profile,outcome="ok|error"}
//	hermes_agent_model_failures_total{profile,reason="http_4xx|http_5xx|http_NNN|timeout|connect|redirect|bad_response|too_large|stream"}
//	hermes_agent_tool_calls_refused_total{reason="tools_off|not_granted|notification"}
//	hermes_agent_timeouts_total{limit="model_call|turn"}
//	hermes_agent_transcriptions_total{outcome="ok|connect|timeout|redirect|http|bad_response|too_large|read"}
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_agent_model_calls_total",
			Help: "Calls to the model endpoint, by the profile whose turn made them and outcome."}, []string{"profile", "outcome"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_agent_model_failures_total",
			Help: "Failed calls to the model endpoint, by the profile whose turn made them and reason (HTTP status, timeout, connect, redirect, bad_response, too_large, stream)."}, []string{"profile", "reason"}),
	}
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_agent_tool_calls_refused_total",
		Help: "Tool calls of the model that were refused, not run, by reason (tools_off, not_granted, notification)."}, []string{"reason"})
	m.timeouts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_agent_timeouts_total",
		Help: "Timeouts that ended a model call (agent.timeout) or a whole turn (agent.turn_timeout), by limit."}, []string{"limit"})
	m.heard = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hermes_agent_transcriptions_total",
		Help: "Voice messages and audio files sent to the transcription server (agent.transcribe), by outcome (ok, or why it failed)."}, []string{"outcome"})
	reg.MustRegister(m.calls, m.failures, m.refused, m.timeouts, m.heard)
	return m
}

// forProfile is m counting the calls of profile's turns (a profile is a configured bot
// identity: a bounded label).
func (m *Metrics) forProfile(profile string) *Metrics {
	if m == nil || m.profile == profile {
		return m
	}
	c := *m
	c.profile = profile
	return &c
}

func (m *Metrics) ok() {
	if m != nil {
		m.calls.WithLabelValues(m.profile, "ok").Inc()
	}
}

func (m *Metrics) failed(reason string) {
	if m != nil {
		m.calls.WithLabelValues(m.profile, "error").Inc()
		m.failures.WithLabelValues(m.profile, reason).Inc()
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

func (m *Metrics) transcribed(outcome string) {
	if m != nil {
		m.heard.WithLabelValues(outcome).Inc()
	}
}
