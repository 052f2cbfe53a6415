package main

import (
	"fmt"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// pendingSend is a delivery of a job's last run the host answered "pending" for (it did not
// finish within the host's wait: a slow platform, a retry, a disconnected one). Later ticks ask
// the host for its outcome (hermes_send with delivery_id) until it is final, and then record the
// run's outcome on the job: a run recorded "pending" ends "ok", "delivery_failed" or "stale" as
// the ledger says.
type pendingSend struct {
	DeliveryID string `json:"delivery_id"`
	Platform   string `json:"platform"`
	Label      string `json:"label"`
	// Delivered counts the run's targets that were delivered when it ended (on the first entry
	// only), for the pause rule of a run that reached nobody (see execute).
	Delivered int `json:"delivered,omitempty"`
}

// reconcile asks the host about r's pending deliveries and records what it learns; it reports
// whether r changed. A delivery the host cannot say anything about yet stays pending.
func reconcile(c *sdk.Context, r *record) bool {
	var left []pendingSend
	var failed, stale []string
	cannot := false
	for _, p := range r.Pending {
		reply, err := c.SendTo(&abi.HostSendRequest{Target: abi.Source{Platform: p.Platform}, DeliveryID: p.DeliveryID})
		switch code := abi.CodeOf(err); {
		case code == abi.CodeStale:
			stale = append(stale, p.Label+": stale: the conversation the job is pinned to has ended ("+abi.AsError(err).Message+")")
		case code == abi.CodeNotFound:
			failed = append(failed, fmt.Sprintf("%s: the ledger has no delivery %s", p.Label, p.DeliveryID))
		case code == abi.CodeBadRequest:
			cannot = true // a host that cannot tell: stop asking
		case err != nil:
			left = append(left, p) // the host could not answer now: ask at the next tick
		case reply.State == "delivered":
		case reply.State == "pending":
			left = append(left, p)
		default:
			failed = append(failed, fmt.Sprintf("%s: %s: %s", p.Label, reply.State, reply.Reason))
		}
	}
	if len(left) == len(r.Pending) && !cannot {
		return false
	}
	delivered := r.Pending[0].Delivered + len(r.Pending) - len(left) - len(failed) - len(stale)
	if cannot {
		r.Pending = nil
		r.LastError += " (this host cannot report their outcome: see hermes-host deliveries ls)"
		return true
	}
	if len(left) > 0 {
		left[0].Delivered = delivered
		r.Pending = left
	} else {
		r.Pending = nil
	}
	problems := append(failed, stale...)
	if r.LastStatus != statusPending {
		// The run already failed for other targets: add what the ledger says of the rest.
		if len(problems) > 0 {
			r.LastError += "; " + strings.Join(problems, "; ")
		}
		return true
	}
	switch {
	case len(failed) > 0:
		r.LastStatus, r.LastError = statusFailed, strings.Join(problems, "; ")
		r.FailureStreak++
		c.Log(abi.LevelWarn, "cron: job run failed in the ledger", "job", r.ID, "name", r.Name, "error", r.LastError,
			"failure_streak", fmt.Sprint(r.FailureStreak))
	case len(stale) > 0:
		r.LastStatus, r.LastError = statusStale, strings.Join(problems, "; ")
		if delivered == 0 && len(left) == 0 && r.State == stateScheduled {
			r.State = statePaused
			r.PausedReason = pausedStale
		}
	case len(left) > 0:
		r.LastError = fmt.Sprintf("%d delivery(ies) still pending in the ledger", len(left))
	default:
		r.LastStatus, r.LastError = statusOK, ""
	}
	return true
}
