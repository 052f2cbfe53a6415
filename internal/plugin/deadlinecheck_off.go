//go:build hermes_nodeadlinecheck

package plugin

// closeOnDeadline is off under the hermes_nodeadlinecheck build tag: a spinning guest cannot be
// stopped. For benchmarks only (see deadlinecheck.go).
const closeOnDeadline = false
