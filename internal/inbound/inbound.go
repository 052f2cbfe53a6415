// Package inbound is the one door every inbound event passes on its way to a turn: the events a
// plugin's webhook or poll export returns, and the events a plugin hands over itself with
// hermes_dispatch. The door forces the event's platform and profile to the calling plugin's own
// (a plugin cannot speak for another platform or profile), then asks the Gate whether the sender
// may talk to the agent (internal/auth), before the turn engine records anything.
package inbound

import (
	"context"
	"log/slog"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/auth"
	"github.com/hermes-host/hermes-host/internal/plugin"
)

// Engine records an inbound event and acts on it (internal/turn's Engine).
type Engine interface {
	Dispatch(ctx context.Context, plugin, profile string, ev abi.InboundEvent) (abi.DispatchReply, error)
}

// Gate decides whether an event's sender may talk to the agent (internal/auth's Gate).
type Gate interface {
	Admit(ctx context.Context, plugin, profile string, ev abi.InboundEvent) (auth.Decision, error)
}

// Door passes admitted inbound events to the engine. It implements plugin.Dispatcher.
type Door struct {
	Engine Engine
	Gate   Gate // required: there is no door without a lock
	Log    *slog.Logger
}

// Dispatch records one event on behalf of the caller, if the gate admits it. A refused event
// reaches no turn and no tool; it is acknowledged (the gate recorded it), so the platform does
// not deliver it again.
func (d *Door) Dispatch(ctx context.Context, c plugin.Caller, ev abi.InboundEvent) (abi.DispatchReply, error) {
	ev.Source.Platform, ev.Source.Profile = c.Platform, c.Profile
	dec, err := d.Gate.Admit(ctx, c.Plugin, c.Profile, ev)
	if err != nil {
		return abi.DispatchReply{}, abi.Errorf(abi.CodeUnavailable, "authorizing the event: %v", err)
	}
	switch dec.Verdict {
	case auth.Allow:
	case auth.Observe:
		if ev.Kind == abi.EventCallback {
			return abi.DispatchReply{}, nil // a button press is acted on or dropped, never kept for the record
		}
		ev.Kind = abi.EventObserve // in the transcript, without a turn
	default:
		return abi.DispatchReply{}, nil
	}
	return d.Engine.Dispatch(ctx, c.Plugin, c.Profile, ev)
}

// DispatchAll records the events a plugin returned from webhook or poll, in order. A malformed
// event is logged and skipped (it will not improve on retry); any other error stops the batch
// and is returned, so that the caller does not acknowledge what was not recorded.
func (d *Door) DispatchAll(ctx context.Context, c plugin.Caller, events []abi.InboundEvent) error {
	for _, ev := range events {
		if _, err := d.Dispatch(ctx, c, ev); err != nil {
			if abi.CodeOf(err) == abi.CodeBadRequest {
				d.Log.Warn("inbound event rejected", "plugin", c.Plugin, "profile", c.Profile, "id", ev.ID, "error", err)
				continue
			}
			return err
		}
	}
	return nil
}
