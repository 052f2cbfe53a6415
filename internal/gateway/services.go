package gateway

import (
	"context"
	"errors"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/plugin"
)

// This file adapts the host's services to the interfaces the plugin runtime, the ledger and the
// turn engine expect.

// transport sends ledger rows through the platform plugins.
type transport struct{ g *Gateway }

func (t transport) Reserve(ctx context.Context, name string) (delivery.Sender, error) {
	p := t.g.runtime.Get(name)
	if p == nil {
		return nil, plugin.ErrUnloaded
	}
	r, err := p.Reserve(ctx)
	if err != nil {
		return nil, err
	}
	return reservedSend{r}, nil
}

// reservedSend is a send on a reserved plugin instance.
type reservedSend struct{ r *plugin.Reserved }

func (s reservedSend) Send(ctx context.Context, profile string, msg abi.OutboundMessage) (*abi.SendResult, error) {
	res, err := s.r.Send(ctx, profile, msg)
	var crash *plugin.CrashError
	if errors.As(err, &crash) {
		// The plugin died mid-send: the platform may have accepted the message.
		return nil, errors.Join(delivery.ErrOutcomeUnknown, err)
	}
	return res, err
}

func (s reservedSend) Release() { s.r.Release() }

func (t transport) Limit(name string) (abi.MessageLimit, bool) {
	p := t.g.runtime.Get(name)
	if p == nil || !p.Active() {
		return abi.MessageLimit{}, false
	}
	return p.Manifest().MessageLimit, true
}
