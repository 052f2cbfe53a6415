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

func (t transport) Send(ctx context.Context, name, profile string, msg abi.OutboundMessage) (*abi.SendResult, error) {
	p := t.g.runtime.Get(name)
	if p == nil {
		return nil, plugin.ErrUnloaded
	}
	res, err := p.Send(ctx, profile, msg)
	var crash *plugin.CrashError
	if errors.As(err, &crash) {
		// The plugin died mid-send: the platform may have accepted the message.
		return nil, errors.Join(delivery.ErrOutcomeUnknown, err)
	}
	return res, err
}

func (t transport) Limit(name string) (abi.MessageLimit, bool) {
	p := t.g.runtime.Get(name)
	if p == nil || !p.Active() {
		return abi.MessageLimit{}, false
	}
	return p.Manifest().MessageLimit, true
}

// notifier sends the auth gate's notices (pairing codes, approvals) through the ledger, like any
// host notice.
type notifier struct{ g *Gateway }

func (n notifier) Notice(ctx context.Context, plugin, profile string, src abi.Source, text, origin string) (string, error) {
	key, err := n.g.kernel.Key(src)
	if err != nil {
		return "", err
	}
	return n.g.ledger.Enqueue(context.WithoutCancel(ctx), delivery.Message{Plugin: plugin, Profile: profile, Key: key,
		Target: abi.OutboundMessage{ChatType: src.ChatType, ChatID: src.ChatID, ThreadID: src.ThreadID, UserID: src.UserID, ScopeID: src.ScopeID},
		Text:   text, Kind: delivery.KindNotice, Origin: origin})
}
