package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/session"
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

// router finds the platform plugin serving a platform for a profile.
type router struct{ g *Gateway }

func (r router) PluginFor(platform, profile string) (string, bool) {
	for _, p := range r.g.runtime.Plugins() {
		m := p.Manifest()
		if m.Kind != abi.KindPlatform || m.Platform != platform {
			continue
		}
		for _, prof := range p.Profiles() {
			if prof == profile {
				return p.Name(), true
			}
		}
	}
	return "", false
}

// sessions implements the session host functions on the kernel.
type sessions struct{ g *Gateway }

func (s sessions) Resolve(ctx context.Context, c plugin.Caller, src abi.Source) (abi.SessionRef, error) {
	res, err := s.g.kernel.Resolve(ctx, src, session.ResolveOptions{Internal: true})
	return res.Ref(), hostErr(err)
}

func (s sessions) Observe(ctx context.Context, c plugin.Caller, req abi.ObserveRequest) (abi.SessionRef, error) {
	res, err := s.g.kernel.Observe(ctx, req.Source, session.ResolveOptions{Internal: true},
		session.Message{Role: role(req.Role), Text: req.Text, PlatformMessageID: req.Source.MessageID})
	return res.Ref(), hostErr(err)
}

func (s sessions) Redact(ctx context.Context, c plugin.Caller, src abi.Source) (bool, error) {
	key, err := s.g.kernel.Key(src)
	if err != nil {
		return false, abi.Errorf(abi.CodeBadRequest, "%v", err)
	}
	ok, err := s.g.kernel.Redact(ctx, key, src.MessageID)
	return ok, hostErr(err)
}

func (s sessions) Seed(ctx context.Context, c plugin.Caller, req abi.SeedRequest) (abi.SessionRef, error) {
	var msgs []session.Message
	if req.Text != "" {
		msgs = append(msgs, session.Message{Role: role(req.Role), Text: req.Text})
	}
	res, err := s.g.kernel.Observe(ctx, req.Source, session.ResolveOptions{Internal: true}, msgs...)
	return res.Ref(), hostErr(err)
}

func role(r string) string {
	if r == "" {
		return "user"
	}
	return r
}

// hostErr maps kernel errors to ABI codes.
func hostErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, session.ErrNestedBoundary):
		return abi.Errorf(abi.CodeConflict, "called from inside a session boundary (a send): %v", err)
	case errors.Is(err, session.ErrMalformedKey), errors.Is(err, session.ErrKeyMismatch):
		return abi.Errorf(abi.CodeBadRequest, "%v", err)
	case errors.Is(err, session.ErrNotFound), errors.Is(err, session.ErrNoRoute):
		return abi.Errorf(abi.CodeNotFound, "%v", err)
	}
	return abi.Errorf(abi.CodeIO, "%v", err)
}

// dispatcher hands plugin events to the turn engine.
type dispatcher struct{ g *Gateway }

func (d dispatcher) Dispatch(ctx context.Context, c plugin.Caller, ev abi.InboundEvent) (abi.DispatchReply, error) {
	return d.g.engine.Dispatch(ctx, c.Plugin, c.Profile, ev)
}

// sender implements a scheduler plugin's hermes_send: record in the ledger, deliver through the
// target platform's plugin with the boundary and (when pinned) the stale check, and wait briefly
// for the outcome.
type sender struct{ g *Gateway }

func (s sender) HostSend(ctx context.Context, c plugin.Caller, req abi.HostSendRequest) (abi.HostSendReply, error) {
	g := s.g
	target := req.Target
	target.Profile = c.Profile
	if target.ChatType == "" {
		target.ChatType = abi.ChatDM
	}
	if target.ChatID == "" {
		return abi.HostSendReply{}, abi.Errorf(abi.CodeBadRequest, "target.chat_id is required")
	}
	name, ok := router{g}.PluginFor(target.Platform, c.Profile)
	if !ok {
		return abi.HostSendReply{}, abi.Errorf(abi.CodeNotFound, "no plugin serves platform %q for profile %q", target.Platform, c.Profile)
	}
	key, err := g.kernel.Key(target)
	if err != nil {
		return abi.HostSendReply{}, abi.Errorf(abi.CodeBadRequest, "target: %v", err)
	}
	msg := delivery.Message{Plugin: name, Profile: c.Profile, Key: key, Target: abi.OutboundMessage{
		ChatType: target.ChatType, ChatID: target.ChatID, ThreadID: target.ThreadID, UserID: target.UserID, ScopeID: target.ScopeID},
		Text: req.Text, Kind: delivery.KindScheduled, Origin: c.Plugin}
	if req.PinSessionID != "" {
		msg.Guard = delivery.GuardOwned
		msg.Stamp = session.Stamp{Key: key, SessionID: req.PinSessionID, Profile: c.Profile, Route: target}
	}
	if req.Seed != "" {
		// The seed and its transcript entry land in one critical section of the key.
		if _, err := g.kernel.Observe(ctx, target, session.ResolveOptions{Internal: true},
			session.Message{Role: "user", Text: req.Seed}); err != nil {
			return abi.HostSendReply{}, hostErr(err)
		}
	}
	group, err := g.ledger.Enqueue(ctx, msg)
	if err != nil {
		return abi.HostSendReply{}, abi.Errorf(abi.CodeIO, "%v", err)
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	row, err := g.ledger.Wait(wait, group)
	if err != nil {
		return abi.HostSendReply{DeliveryID: group, State: string(delivery.Pending)}, nil
	}
	if row.State == delivery.Dropped {
		return abi.HostSendReply{}, &abi.Error{Code: abi.CodeStale, Message: row.Reason}
	}
	return abi.HostSendReply{DeliveryID: group, State: string(row.State), MessageIDs: row.MessageIDs}, nil
}
