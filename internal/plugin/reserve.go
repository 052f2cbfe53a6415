package plugin

import (
	"context"
	"fmt"

	"github.com/hermes-host/hermes-host/abi"
)

// Reserved is an instance of a plugin held for one send that is made later, under a lock.
//
// Lock order: a plugin instance is taken before a session boundary lock, never while holding
// one. A plugin's host functions (resolve, dispatch, …) take boundary locks while the calling
// instance is held, so a sender that took a boundary first and then waited for an instance of
// the same plugin could wait on a call that waits on it. The delivery ledger therefore reserves
// the instance, then takes the boundary, checks, and sends on the reserved instance.
type Reserved struct {
	v    *version
	inst *instance // nil once used or released
}

// Reserve takes an instance of the plugin's current version, waiting at most the plugin's call
// deadline for one. Call Send or Release (both, in that order, is fine).
func (p *Plugin) Reserve(ctx context.Context) (*Reserved, error) {
	v := p.acquire()
	if v == nil {
		return nil, fmt.Errorf("plugin %s: %w", p.name, ErrUnloaded)
	}
	if err := v.breaker.check(p.name); err != nil {
		v.inflight.Done()
		return nil, err
	}
	wait, cancel := context.WithTimeout(ctx, v.limits.CallTimeout)
	defer cancel()
	cls := classOf(abi.ExportSend)
	inst, err := v.liveInstance(wait, cls)
	if err != nil {
		v.inflight.Done()
		return nil, fmt.Errorf("plugin %s: no instance available: %w", p.name, err)
	}
	// A new instance starts here, not in Send: the caller reserves before it takes the chat's
	// boundary, which the send then holds.
	if !inst.started {
		if err := v.start(ctx, inst, Caller{Plugin: p.name, Export: abi.ExportSend}, cls); err != nil {
			v.inflight.Done()
			return nil, err
		}
	}
	return &Reserved{v: v, inst: inst}, nil
}

// Send transmits one message on the reserved instance (see Plugin.Send). A reservation sends at
// most once.
func (r *Reserved) Send(ctx context.Context, profile string, msg abi.OutboundMessage) (*abi.SendResult, error) {
	inst := r.inst
	if inst == nil {
		return nil, fmt.Errorf("plugin %s: reservation already used", r.v.manifest.Name)
	}
	r.inst = nil
	defer r.v.inflight.Done()
	return typedCallOn[abi.SendResult](ctx, r.v, inst, profile, abi.ExportSend, 0, func(c abi.Call) any {
		return abi.SendRequest{Call: c, Message: msg}
	})
}

// Release gives back an instance that was not used. After Send it does nothing.
func (r *Reserved) Release() {
	if r.inst == nil {
		return
	}
	r.v.pool.put(r.inst, classOf(abi.ExportSend))
	r.inst = nil
	r.v.inflight.Done()
}
