package turn

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
)

// ErrReadOnly is returned by the tools of a notification turn for anything with side effects.
var ErrReadOnly = errors.New("notification turns cannot run or kill commands (approval denied automatically)")

// ErrTurnGone is returned by the tools of a turn that is no longer this host's running turn
// for anything with side effects: another host adopted its rows (this host was paused past
// its lease and the user was told the turn was interrupted), or a user's command cancelled it.
var ErrTurnGone = errors.New("this turn was interrupted or taken over by another host; the command was not started")

// ErrNotGranted is returned by a tool the operator did not grant this chat's profile (the
// agent counts the refusal).
var ErrNotGranted = agent.ErrNotGranted

// tools adapts the process registry to agent.Tools for one turn, bound to the turn's session:
// every process it starts is stamped with that session, inside the key's boundary, and only if
// the key is still at the generation the turn started at. Process ids resolve only within the
// turn's session key: another key's process is "not found", as an unknown id is.
type tools struct {
	e                *Engine
	key              string
	stamp            session.Stamp
	synthetic        bool
	plugin, profile  string       // the chat's platform plugin and profile
	src              abi.Source   // who asked: the requester of an approval
	shell, processes bool         // what the operator granted
	rows             []string     // the turn's inbox rows: the fence of what its tools start
	acted            *atomic.Bool // the turn's item.acted: set before anything is started or killed
}

var _ agent.Tools = (*tools)(nil)

// tools returns the tools of a turn for it, or nil when the operator granted none.
func (e *Engine) tools(ctx context.Context, it *item, key string, st session.Stamp, synthetic bool) agent.Tools {
	shell, processes := true, true
	src := it.src
	if synthetic && len(it.entries) > 0 {
		src = it.entries[0].stamp.Route
	}
	if e.opt.Grants != nil {
		shell, processes = e.opt.Grants(ctx, it.plugin, it.profile, src)
	}
	if !shell && !processes {
		return nil
	}
	return &tools{e: e, key: key, stamp: st, synthetic: synthetic, plugin: it.plugin, profile: it.profile, src: src,
		shell: shell, processes: processes, rows: it.ids(), acted: &it.acted}
}

// own checks that id is a process of the turn's key.
func (t *tools) own(ctx context.Context, id string) error {
	if !t.processes {
		return ErrNotGranted
	}
	in, err := t.e.procs.Info(ctx, id)
	if err != nil {
		return err
	}
	if in.Stamp.Key != t.key {
		return process.ErrNotFound
	}
	return nil
}

func (t *tools) Spawn(ctx context.Context, req agent.SpawnRequest) (agent.SpawnResult, error) {
	rule, asks := t.e.opt.Approval.Needs(req.Command)
	asks = asks && t.e.opt.Approvals != nil
	switch {
	case t.synthetic && asks:
		return agent.SpawnResult{}, t.ask(ctx, req.Command, rule) // recorded, denied without asking
	case t.synthetic:
		return agent.SpawnResult{}, ErrReadOnly
	case !t.shell:
		return agent.SpawnResult{}, ErrNotGranted
	case asks:
		// Outside the boundary: the chat's other events (the answer among them) go on meanwhile.
		if err := t.ask(ctx, req.Command, rule); err != nil {
			return agent.SpawnResult{}, err
		}
	}
	dir, err := t.e.workDir(t.key)
	if err != nil {
		return agent.SpawnResult{}, err
	}
	var res process.SpawnResult
	err = t.e.k.WithBoundary(ctx, t.key, func(b *session.Boundary) error {
		// Stamp at spawn time, inside the boundary: a /new that already happened makes this
		// turn stale, and one that comes later finds the process stamped with the old session.
		if err := b.CheckGeneration(t.stamp.Generation); err != nil {
			return err
		}
		// And only while the turn is still this host's and running (the fence of its drafts,
		// stream.go): a turn adopted by another host, whose user was told it was
		// interrupted, starts nothing when its paused host resumes.
		if ok, err := t.e.holds(b.Context(), t.e.db, t.rows, stRunning); err != nil || !ok {
			if err == nil {
				err = ErrTurnGone
			}
			return err
		}
		t.acted.Store(true)
		var err error
		res, err = t.e.procs.Spawn(b.Context(), process.SpawnRequest{
			Command:          req.Command,
			Dir:              dir, // the conversation's working directory ("" without Options.WorkRoot)
			Stamp:            t.stamp,
			NotifyOnComplete: req.Background && req.NotifyOnComplete,
			WatchPatterns:    req.WatchPatterns,
		})
		return err
	})
	if err != nil {
		return agent.SpawnResult{}, err
	}
	out := agent.SpawnResult{ID: res.ID, State: string(res.State), Note: res.Note}
	if req.Background {
		return out, nil
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = t.e.opt.CommandTimeout
	}
	info, err := t.e.procs.Wait(ctx, res.ID, timeout)
	if ctx.Err() != nil {
		// The turn was stopped (/stop, /new) or ran out of time: its foreground command goes
		// with it. The kill consumes the result, so no notice follows.
		if _, kerr := t.e.procs.Kill(context.WithoutCancel(ctx), res.ID, process.KillOptions{Reason: "turn stopped"}); kerr != nil {
			t.e.log.Warn("turn: killing a stopped turn's foreground command failed", "proc", res.ID, "error", kerr)
		}
		return out, ctx.Err()
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return out, err
	}
	if !info.State.Final() {
		// Still running after the timeout: stop it, the agent asked for a foreground command.
		info, _ = t.e.procs.Kill(context.WithoutCancel(ctx), res.ID, process.KillOptions{Reason: "foreground timeout"})
	}
	log, err := t.e.procs.Log(ctx, res.ID, -8000, 8000)
	if err != nil {
		return out, err
	}
	out.State, out.ExitCode, out.Output = string(info.State), info.ExitCode, string(log.Data)
	return out, nil
}

func (t *tools) List(ctx context.Context) ([]agent.ProcessInfo, error) {
	if !t.processes {
		return nil, ErrNotGranted
	}
	list, err := t.e.procs.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []agent.ProcessInfo
	for _, p := range list {
		if p.Stamp.Key == t.key {
			out = append(out, info(p))
		}
	}
	return out, nil
}

func (t *tools) Poll(ctx context.Context, id string) (agent.ProcessInfo, error) {
	if err := t.own(ctx, id); err != nil {
		return agent.ProcessInfo{}, err
	}
	st, err := t.e.procs.Poll(ctx, id)
	if err != nil {
		return agent.ProcessInfo{}, err
	}
	pi := info(st.Info)
	pi.Output = st.Output
	return pi, nil
}

func (t *tools) Log(ctx context.Context, id string, offset int64, limit int) (agent.LogChunk, error) {
	if err := t.own(ctx, id); err != nil {
		return agent.LogChunk{}, err
	}
	c, err := t.e.procs.Log(ctx, id, offset, limit)
	if err != nil {
		return agent.LogChunk{}, err
	}
	return agent.LogChunk{Text: string(c.Data), Offset: c.Offset, Next: c.Next, Total: c.Total, Ended: c.Ended}, nil
}

func (t *tools) Wait(ctx context.Context, id string, timeout time.Duration) (agent.ProcessInfo, error) {
	if err := t.own(ctx, id); err != nil {
		return agent.ProcessInfo{}, err
	}
	if t.synthetic {
		timeout = min(timeout, time.Second) // a notification turn does not block the chat
	}
	in, err := t.e.procs.Wait(ctx, id, timeout)
	if errors.Is(err, context.DeadlineExceeded) {
		err = nil
	}
	return info(in), err
}

func (t *tools) Kill(ctx context.Context, id string) (agent.ProcessInfo, error) {
	if t.synthetic {
		return agent.ProcessInfo{}, ErrReadOnly
	}
	if err := t.own(ctx, id); err != nil {
		return agent.ProcessInfo{}, err
	}
	t.acted.Store(true)
	in, err := t.e.procs.Kill(ctx, id, process.KillOptions{Reason: "process.kill"})
	return info(in), err
}

func info(p process.Info) agent.ProcessInfo {
	return agent.ProcessInfo{ID: p.ID, Command: p.Command, State: string(p.State), ExitCode: p.ExitCode, Signal: p.Signal,
		StartedAt: p.StartedAt, EndedAt: p.EndedAt, NotifyOnComplete: p.NotifyOnComplete, WatchPatterns: p.WatchPatterns}
}
