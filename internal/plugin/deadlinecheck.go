//go:build !hermes_nodeadlinecheck

package plugin

// closeOnDeadline is whether compiled guest code checks, at every loop header and function entry,
// whether its call's deadline passed (wazero's WithCloseOnContextDone). It is what stops a
// guest that spins; it also costs about half of a send (RATIONALE.md, Throughput). The build tag
// hermes_nodeadlinecheck turns it off, for benchmarks only: it shows what a cheaper check in
// wazero (its issue 2466) would give. Never build a host to run with that tag.
const closeOnDeadline = true
