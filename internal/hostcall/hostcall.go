// Package hostcall implements what plugins ask of the host through the session and send host
// functions, on the session kernel and the delivery ledger. The plugin runtime has already forced
// each request's platform and profile to the calling plugin's own; every method here runs the
// kernel's boundary lock for the key it touches.
package hostcall

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/auth"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/session"
)

// Sessions implements plugin.Sessions on the kernel.
type Sessions struct {
	Kernel *session.Kernel
	// Gate, if set, decides whether a platform plugin may create a session for a source or put
	// a message in its transcript: the same policy as the inbound door, applied to the session
	// host functions (a scheduler's calls are the operator's configured jobs and are not asked).
	Gate Gate
}

// Gate is the authorization policy (internal/auth's Gate).
type Gate interface {
	Admit(ctx context.Context, plugin, profile string, ev abi.InboundEvent) (auth.Decision, error)
}

// admit asks the gate about a session call of a platform plugin as an event of kind.
func (s Sessions) admit(ctx context.Context, c plugin.Caller, kind string, src abi.Source, text string) error {
	if s.Gate == nil || c.Kind != abi.KindPlatform {
		return nil
	}
	d, err := s.Gate.Admit(ctx, c.Plugin, c.Profile, abi.InboundEvent{Kind: kind, Source: src, Text: text})
	if err != nil {
		return abi.Errorf(abi.CodeUnavailable, "authorizing: %v", err)
	}
	if d.Verdict == auth.Refuse {
		return abi.Errorf(abi.CodeDenied, "the operator's access policy does not admit this sender here (%s)", d.Reason)
	}
	return nil
}

// Resolve returns the source's current session, creating it if needed.
func (s Sessions) Resolve(ctx context.Context, c plugin.Caller, src abi.Source) (abi.SessionRef, error) {
	if err := s.admit(ctx, c, abi.EventSeed, src, ""); err != nil {
		return abi.SessionRef{}, err
	}
	res, err := s.Kernel.Resolve(ctx, src, session.ResolveOptions{Internal: true})
	return res.Ref(), Err(err)
}

// Observe appends a message to the source's transcript without a turn.
func (s Sessions) Observe(ctx context.Context, c plugin.Caller, req abi.ObserveRequest) (abi.SessionRef, error) {
	if err := s.admit(ctx, c, abi.EventObserve, req.Source, req.Text); err != nil {
		return abi.SessionRef{}, err
	}
	r, err := role(req.Role)
	if err != nil {
		return abi.SessionRef{}, err
	}
	res, err := s.Kernel.Observe(ctx, req.Source, session.ResolveOptions{Internal: true},
		session.Message{Role: r, Text: req.Text, PlatformMessageID: req.Source.MessageID})
	return res.Ref(), Err(err)
}

// Redact blanks the transcript entry of a platform message (a recalled or deleted message).
func (s Sessions) Redact(ctx context.Context, c plugin.Caller, src abi.Source) (bool, error) {
	key, err := s.Kernel.Key(src)
	if err != nil {
		return false, abi.Errorf(abi.CodeBadRequest, "%v", err)
	}
	ok, err := s.Kernel.Redact(ctx, key, src.MessageID)
	return ok, Err(err)
}

// Seed appends context to the source's session (for example a scheduled job's output).
func (s Sessions) Seed(ctx context.Context, c plugin.Caller, req abi.SeedRequest) (abi.SessionRef, error) {
	if err := s.admit(ctx, c, abi.EventSeed, req.Source, req.Text); err != nil {
		return abi.SessionRef{}, err
	}
	r, err := role(req.Role)
	if err != nil {
		return abi.SessionRef{}, err
	}
	var msgs []session.Message
	if req.Text != "" {
		msgs = append(msgs, session.Message{Role: r, Text: req.Text})
	}
	res, err := s.Kernel.Observe(ctx, req.Source, session.ResolveOptions{Internal: true}, msgs...)
	return res.Ref(), Err(err)
}

// role checks the role a plugin gives a transcript message: "user" (the default) for what people
// wrote, "assistant" for what the bot itself said on the platform. A plugin speaks for chat users
// and the platform, never for the host, so it cannot write system or notification entries.
func role(r string) (string, error) {
	switch r {
	case "", abi.RoleUser:
		return abi.RoleUser, nil
	case abi.RoleAssistant:
		return r, nil
	}
	return "", abi.Errorf(abi.CodeBadRequest, "role %q: a plugin may write %q or %q", r, abi.RoleUser, abi.RoleAssistant)
}

// Err maps kernel errors to ABI codes.
func Err(err error) error {
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

// Router finds the plugin that serves a platform for a profile.
type Router func(platform, profile string) (plugin string, ok bool)

// Sender implements a scheduler plugin's hermes_send: record in the ledger, deliver through the
// target platform's plugin with the boundary and (when pinned) the stale check, and wait briefly
// for the outcome.
type Sender struct {
	Kernel *session.Kernel
	Ledger *delivery.Ledger
	Route  Router
	// Wait bounds how long HostSend waits for the outcome before answering "pending"
	// (default 5 s).
	Wait time.Duration
	// Loading, if set, lists the plugin files the host is still loading. While it lists any, a
	// target whose platform no plugin serves yet waits for them (within the call's deadline)
	// instead of failing: at start-up the scheduler may load, and tick a catch-up, before the
	// platform plugins do.
	Loading func() []string
}

// loadingPoll is how often a send waiting for the plugins to load looks again.
const loadingPoll = 50 * time.Millisecond

// route finds the plugin serving platform for profile, waiting while the host is loading
// plugins (see Loading).
func (s Sender) route(ctx context.Context, platform, profile string) (string, error) {
	for {
		if name, ok := s.Route(platform, profile); ok {
			return name, nil
		}
		if s.Loading == nil || len(s.Loading()) == 0 {
			return "", abi.Errorf(abi.CodeNotFound, "no plugin serves platform %q for profile %q", platform, profile)
		}
		select {
		case <-ctx.Done():
			return "", abi.Errorf(abi.CodeUnavailable, "no plugin serves platform %q for profile %q yet: the host was still loading its plugins (%v)", platform, profile, ctx.Err())
		case <-time.After(loadingPoll):
		}
	}
}

// complete fills in what a target written as platform:chat[:thread] (a job's explicit target or
// a home channel) leaves out, from the sessions the host already has for that chat (in that
// thread, if it has any there), the most recently active: the chat type, so a seed lands in the key the users'
// replies use, and the workspace (scope) of platforms that key by one, so a Slack target needs no
// team id. A chat the host has not seen is a "dm", the one type whose key needs nothing more; on
// a platform keyed by workspace that is an error, since the workspace cannot be guessed.
func (s Sender) complete(ctx context.Context, target abi.Source) (abi.Source, error) {
	scoped := s.Kernel.Scoped(target.Platform)
	if target.ChatType != "" && (target.ScopeID != "" || !scoped) {
		return target, nil
	}
	keys, err := s.Kernel.ChatKeys(ctx, target.Platform, target.Profile, target.ChatID)
	if err != nil {
		return target, abi.Errorf(abi.CodeBadRequest, "target: %v", err)
	}
	// The keys of that very thread first; else any of the chat's (a topic the host has not seen
	// yet is still in a forum).
	var best, inThread *session.ChatKey
	for i, k := range keys {
		if (target.ChatType != "" && k.Parsed.ChatType != target.ChatType) ||
			(target.ScopeID != "" && k.Parsed.Scope != target.ScopeID) {
			continue
		}
		if best == nil || k.Info.UpdatedAt.After(best.Info.UpdatedAt) {
			best = &keys[i]
		}
		// A key with one part after the chat id parses as a participant, but may be a shared
		// thread (session.ParseKey): it matches the target's thread either way.
		if target.ThreadID != "" && (k.Parsed.ThreadID == target.ThreadID || (k.Parsed.ThreadID == "" && k.Parsed.UserID == target.ThreadID)) &&
			(inThread == nil || k.Info.UpdatedAt.After(inThread.Info.UpdatedAt)) {
			inThread = &keys[i]
		}
	}
	if inThread != nil {
		best = inThread
	}
	switch {
	case best != nil:
		if target.ChatType == "" {
			target.ChatType = best.Parsed.ChatType
		}
		if target.ScopeID == "" {
			target.ScopeID = best.Parsed.Scope
		}
	case scoped && target.ScopeID == "":
		return target, abi.Errorf(abi.CodeNotFound, "%s chat %s: the host has had no conversation there, so it does not know the chat's workspace; create the job from that chat (its origin) or let the bot talk there first",
			target.Platform, target.ChatID)
	case target.ChatType == "":
		target.ChatType = abi.ChatDM
	}
	return target, nil
}

// HostSend records and delivers one message from a scheduler, or, with req.DeliveryID, answers
// the outcome of one it sent before.
func (s Sender) HostSend(ctx context.Context, c plugin.Caller, req abi.HostSendRequest) (abi.HostSendReply, error) {
	if req.DeliveryID != "" {
		return s.outcome(ctx, c, req)
	}
	target := req.Target
	target.Profile = c.Profile
	if target.ChatID == "" {
		return abi.HostSendReply{}, abi.Errorf(abi.CodeBadRequest, "target.chat_id is required")
	}
	target, err := s.complete(ctx, target)
	if err != nil {
		return abi.HostSendReply{}, err
	}
	name, err := s.route(ctx, target.Platform, c.Profile)
	if err != nil {
		return abi.HostSendReply{}, err
	}
	key, err := s.Kernel.Key(target)
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
		// The seed lands in the same critical section as the send, in the session the guard
		// delivered to: never in a conversation the message did not reach.
		msg.Seed = req.Seed
	}
	group, err := s.Ledger.Enqueue(ctx, msg)
	if err != nil {
		return abi.HostSendReply{}, abi.Errorf(abi.CodeIO, "%v", err)
	}
	d := s.Wait
	if d <= 0 {
		d = 5 * time.Second
	}
	wait, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	row, err := s.Ledger.Wait(wait, group)
	if err != nil {
		return abi.HostSendReply{DeliveryID: group, State: string(delivery.Pending)}, nil
	}
	return reply(row)
}

// reply is the answer to a send whose every part is final: the worst part's state, or stale for
// a message the guard dropped.
func reply(row delivery.Row) (abi.HostSendReply, error) {
	if row.State == delivery.Dropped {
		return abi.HostSendReply{}, &abi.Error{Code: abi.CodeStale, Message: row.Reason}
	}
	return abi.HostSendReply{DeliveryID: row.Group, State: string(row.State), MessageIDs: row.MessageIDs, Reason: row.Reason}, nil
}

// outcome answers what became of an earlier send of the caller's (req.DeliveryID), without
// waiting: still pending, or its final outcome as HostSend would have answered it. A delivery
// another plugin or profile made is not found, as is one the ledger does not hold.
func (s Sender) outcome(ctx context.Context, c plugin.Caller, req abi.HostSendRequest) (abi.HostSendReply, error) {
	if req.Text != "" || req.Target.ChatID != "" {
		return abi.HostSendReply{}, abi.Errorf(abi.CodeBadRequest, "delivery_id asks about an earlier send: give no text and no target chat (it sends nothing)")
	}
	row, done, err := s.Ledger.Outcome(ctx, req.DeliveryID)
	switch {
	case errors.Is(err, delivery.ErrNoMessage):
		return abi.HostSendReply{}, abi.Errorf(abi.CodeNotFound, "no delivery %s", req.DeliveryID)
	case err != nil:
		return abi.HostSendReply{}, abi.Errorf(abi.CodeIO, "%v", err)
	case row.Kind != delivery.KindScheduled || row.Origin != c.Plugin || row.Profile != c.Profile:
		return abi.HostSendReply{}, abi.Errorf(abi.CodeNotFound, "no delivery %s", req.DeliveryID)
	case !done:
		return abi.HostSendReply{DeliveryID: req.DeliveryID, State: string(delivery.Pending)}, nil
	}
	return reply(row)
}

// Agents implements a scheduler plugin's hermes_agent: one turn of the configured agent with the
// prompt as the message, no history and no tools (it cannot start processes).
type Agents struct {
	Agent agent.Agent
	Log   *slog.Logger
}

// AgentTurn runs the turn within ctx (the calling export's deadline).
func (a Agents) AgentTurn(ctx context.Context, c plugin.Caller, req abi.AgentRequest) (abi.AgentReply, error) {
	t := &agent.Turn{Text: req.Prompt}
	if req.Source != nil {
		t.Source = *req.Source
	}
	start := time.Now()
	rep, err := a.Agent.Turn(ctx, t)
	if err != nil {
		code := abi.CodeIO
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			code = abi.CodeTimeout
		}
		a.Log.Warn("scheduled agent turn failed", "plugin", c.Plugin, "profile", c.Profile, "job", req.Name, "error", err)
		return abi.AgentReply{}, abi.Errorf(code, "%s", agent.UserMessage(err))
	}
	a.Log.Info("scheduled agent turn", "plugin", c.Plugin, "profile", c.Profile, "job", req.Name, "took", time.Since(start).Round(time.Millisecond))
	if rep == nil {
		return abi.AgentReply{}, nil
	}
	return abi.AgentReply{Text: rep.Text}, nil
}
