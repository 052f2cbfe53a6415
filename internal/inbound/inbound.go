// Package inbound is the one door every inbound event passes on its way to a turn: the events a
// plugin's webhook or poll export returns, and the events a plugin hands over itself with
// hermes_dispatch. The door forces the event's platform and profile to the calling plugin's own
// (a plugin cannot speak for another platform or profile) before the turn engine records it.
package inbound

import (
	"context"
	"log/slog"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/plugin"
)

// Engine records an inbound event and acts on it (internal/turn's Engine).
type Engine interface {
	Dispatch(ctx context.Context, plugin, profile string, ev abi.InboundEvent) (abi.DispatchReply, error)
}

// Door passes inbound events to the engine. It implements plugin.Dispatcher.
type Door struct {
	Engine Engine
	Log    *slog.Logger
}

// Dispatch records one event on behalf of the caller.
func (d *Door) Dispatch(ctx context.Context, c plugin.Caller, ev abi.InboundEvent) (abi.DispatchReply, error) {
	ev.Source.Platform, ev.Source.Profile = c.Platform, c.Profile
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
