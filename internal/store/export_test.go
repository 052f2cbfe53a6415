package store

import "context"

// ProbeOnce runs one probe write, for BenchmarkProbe.
func (h *Health) ProbeOnce(ctx context.Context) { h.probe(ctx) }
