package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/media"
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
	return reservedSend{r, t.g.media}, nil
}

// reservedSend is a send on a reserved plugin instance.
type reservedSend struct {
	r     *plugin.Reserved
	files *media.Store
}

func (s reservedSend) Send(ctx context.Context, profile string, msg abi.OutboundMessage) (*abi.SendResult, error) {
	// A file the ledger row names by its hash is read now, at send time: rows hold no bytes.
	if len(msg.Attachments) > 0 {
		atts := slices.Clone(msg.Attachments)
		for i, a := range atts {
			hash, ok := media.ParseRef(a.Ref)
			if !ok || len(a.Data) > 0 {
				continue
			}
			if s.files == nil {
				return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Code: "no_media", Message: "the host has no media store"}}, nil
			}
			data, err := s.files.Load(hash)
			if err != nil {
				return &abi.SendResult{Error: &abi.SendError{Kind: abi.SendPermanent, Code: "file_gone", Message: err.Error()}}, nil
			}
			atts[i].Data, atts[i].Ref = data, ""
		}
		msg.Attachments = atts
	}
	res, err := s.r.Send(ctx, profile, msg)
	var crash *plugin.CrashError
	if errors.As(err, &crash) {
		// The plugin died mid-send: the platform may have accepted the message.
		return nil, errors.Join(delivery.ErrOutcomeUnknown, err)
	}
	return res, err
}

func (s reservedSend) Release() { s.r.Release() }

func (t transport) Limit(name string) (abi.MessageLimit, error) {
	p := t.g.runtime.Get(name)
	switch {
	case p == nil && len(t.g.pluginsLoading()) > 0:
		return abi.MessageLimit{}, fmt.Errorf("plugin %s is not loaded yet: %w", name, delivery.ErrPluginStarting)
	case p == nil:
		return abi.MessageLimit{}, fmt.Errorf("plugin %s is not loaded", name)
	}
	if err := p.Status(); err != nil {
		return abi.MessageLimit{}, err // failed after repeated crashes: say so, with its last error
	}
	return p.Manifest().MessageLimit, nil
}

// fetcher gets an attachment's bytes through the platform plugin that received it.
type fetcher struct{ g *Gateway }

func (f fetcher) Fetch(ctx context.Context, name, profile string, att abi.Attachment, maxBytes int64) (*abi.FetchResult, error) {
	p := f.g.runtime.Get(name)
	if p == nil || !p.Active() {
		return nil, plugin.ErrUnloaded
	}
	return p.Fetch(ctx, profile, att, maxBytes)
}

// typist shows "typing" through a platform plugin that declares the typing capability.
type typist struct{ g *Gateway }

func (t typist) Typing(ctx context.Context, name, profile string, target abi.OutboundMessage) {
	p := t.g.runtime.Get(name)
	if p == nil || !p.Active() || !p.Manifest().Has(abi.CapTyping) {
		return
	}
	target.Action, target.Text, target.ReplyTo = "typing", "", ""
	res, err := p.Send(ctx, profile, target)
	if err == nil && res.Error != nil {
		err = res.Error
	}
	if err != nil {
		t.g.log.Debug("typing indicator not shown", "plugin", name, "profile", profile, "chat", target.ChatID, "error", err)
	}
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
