package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/internal/clock"
	"github.com/hermes-host/hermes-host/internal/lease"
	"github.com/hermes-host/hermes-host/internal/store"
)

// Several hosts on one PostgreSQL database (config store: postgres://...). Each host has an
// identity (lease.InstanceID) and keeps the lease "host:<id>" while it runs; a host whose lease
// expired (or that released it, stopping) is gone, and the others take its work over:
//
//   - its open inbox rows: a survivor claims the gone host's lease (lease.ClaimExpired: FOR
//     UPDATE SKIP LOCKED, so one survivor per gone host), recovers its rows as a restart would
//     (turn.Engine.Adopt), then deletes the lease; a survivor that dies meanwhile lets its claim
//     expire in turn, and another finishes;
//   - what it recorded after it was taken over: a host paused past its lease goes on when it
//     resumes, and records events, turns and processes as its own until it holds its lease
//     again; if it stops before, a survivor finds that work naming a host with no lease and
//     records the lease as expired, to be claimed as above (orphans);
//   - its deliveries (delivery.Options.Sweep): sends it left "sending" become failed (outcome
//     unknown, never resent) and its lanes' pending rows are sent by whoever holds the chat;
//   - its poll and tick loops (loop.Supervisor's leases): one poller per bot token, one
//     scheduler per profile, in whichever host holds "loop:<plugin>/<profile>".
//
// The boundary lock is a PostgreSQL advisory lock (session.Open picks it for a PostgreSQL
// database), so the in-lock checks of every host exclude each other. Background processes stay
// with the host that spawned them (it watches their pids); their completions are queued in the
// database and delivered by whichever host claims them. When a survivor takes a stopped host
// over it records that host's running processes as lost (process.Registry.TakeOver: "the host
// running it stopped; its outcome is unknown", once, to their chats); a host that comes back
// (it was only paused, or it restarts with its data directory) reconciles what it knows of them
// (process.Registry.Reassert, Recover): see internal/process, "Takeover by another host".
const (
	hostTTL   = 5 * time.Second // a dead host's work waits this long before another takes it
	sweepEach = 2 * time.Second // how often a host looks for a dead host's deliveries
)

// shared is what a host needs when it shares its database; nil for SQLite (one host).
type shared struct {
	id     string
	leases *lease.Manager
}

func openShared(ctx context.Context, g *Gateway) (*shared, error) {
	if !store.Shared(g.db) {
		return nil, nil
	}
	id := lease.InstanceID()
	m, err := lease.New(ctx, g.db, id, hostTTL, clock.Real{})
	if err != nil {
		return nil, err
	}
	m.Log = g.log
	g.log.Info("sharing the database with other hosts", "host", id)
	return &shared{id: id, leases: m}, nil
}

// reap takes over the work of hosts that are gone, every sweepEach until ctx ends.
func (s *shared) reap(ctx context.Context, g *Gateway) {
	t := time.NewTicker(sweepEach)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.sweep(ctx, g)
	}
}

// sweep claims the leases of hosts that are gone (expired or released) and takes their work
// over: their open turns (turn.Engine.Adopt) and their running processes, recorded as lost
// (process.Registry.TakeOver). A claim whose takeover failed is left to expire, so this host or
// another tries again; a finished one is deleted.
func (s *shared) sweep(ctx context.Context, g *Gateway) {
	claims, err := s.leases.ClaimExpired(ctx, "host:", 4)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("looking for hosts that stopped failed", "error", err)
		}
		return
	}
	for _, c := range claims {
		dead := strings.TrimPrefix(c.Name, "host:")
		if dead == s.id {
			continue // this host's own lease lapsed (a database outage): keepAlive takes it again
		}
		n, err := g.engine.Adopt(ctx, dead)
		if err != nil {
			g.log.Error("taking over the turns of a host that stopped failed; retried when the claim expires", "host", dead, "error", err)
			continue
		}
		procs, err := g.procs.TakeOver(ctx, dead)
		if err != nil {
			g.log.Error("recording the processes of a host that stopped as lost failed; retried when the claim expires", "host", dead, "error", err)
			continue
		}
		if err := s.leases.Delete(ctx, c.Name, c.Fence); err != nil {
			g.log.Warn("deleting the lease of a host that stopped failed", "host", dead, "error", err)
		}
		g.log.Info("took over the work of a host that stopped", "host", dead, "turns", n, "lost_processes", procs)
	}
	s.orphans(ctx, g)
}

// orphans looks for hosts that still own open turns or running processes but have no lease: a
// host taken over while it was paused goes on when it resumes, and until it holds its lease
// again (a third of the lease later) what it records is its own; if it stops before then,
// no lease would ever expire to hand that work to a survivor. Such a host's lease is recorded
// as expired (lease.Manager.Orphan), after the claims of this sweep: the next sweep claims it
// and takes the work over, unless the host, alive after all, took its lease back first.
func (s *shared) orphans(ctx context.Context, g *Gateway) {
	owners, err := g.engine.Owners(ctx)
	if err == nil {
		var hosts []string
		hosts, err = g.procs.Hosts(ctx)
		owners = append(owners, hosts...)
	}
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("looking for work of hosts without a lease failed", "error", err)
		}
		return
	}
	// Hosts alive (or taken over and not done) have a lease: one read in the usual case, a
	// write only for a host that has none.
	var names []string
	for _, host := range owners {
		if name := "host:" + host; host != "" && host != s.id && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	missing, err := s.leases.Missing(ctx, names)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("looking for work of hosts without a lease failed", "error", err)
		}
		return
	}
	for _, name := range missing {
		created, err := s.leases.Orphan(ctx, name)
		if err != nil {
			if ctx.Err() == nil {
				g.log.Warn("recording the lease of a host without one failed", "lease", name, "error", err)
			}
			continue
		}
		if created {
			g.log.Warn("found work of a host that has no lease (it went on after another host took it over, then stopped?); taking it over at the next sweep", "host", strings.TrimPrefix(name, "host:"))
		}
	}
}

// keepAlive takes this host's lease, before the host records anything as its own, and holds it
// until ctx ends, taking it again if it was lost (a database outage or a pause longer than the
// lease). Holding it again after losing it, the host re-records its running processes: a
// survivor may have taken it over and recorded them as lost meanwhile (process.Registry.Reassert
// reconciles them).
func (s *shared) keepAlive(ctx context.Context, g *Gateway) error {
	if _, _, err := s.leases.TryAcquire(ctx, "host:"+s.id); err != nil {
		return fmt.Errorf("taking this host's lease: %w", err)
	}
	g.bg.Go(func() { s.campaign(ctx, g) })
	return nil
}

// campaign holds this host's lease until ctx ends (keepAlive).
func (s *shared) campaign(ctx context.Context, g *Gateway) {
	held := 0 // runs of fn: each after the first follows a loss of the lease
	s.leases.Campaign(ctx, "host:"+s.id, func(ctx context.Context) {
		if held++; held > 1 {
			if n, err := g.procs.Reassert(ctx); err != nil && ctx.Err() == nil {
				g.log.Error("re-recording this host's processes after its lease was lost failed", "error", err)
			} else if n > 0 {
				g.log.Warn("this host's lease was taken over while it was away; its processes recorded as lost were reconciled", "processes", n)
			}
		}
		<-ctx.Done()
	})
}
