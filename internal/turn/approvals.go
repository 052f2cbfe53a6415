package turn

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/approval"
)

// Approvals: a command the operator's policy (Options.Approval) marks waits, in the turn's tool
// call and outside the key's boundary, for its requester's answer: a button press (callback
// event) or /approve and /deny, which intake applies at once, even while the turn is busy. The
// answer is a compare-and-set on the request's row (internal/approval), so a press, a /new and
// a timeout settle it once. An approved command then starts as any other, inside the boundary
// and only at the turn's generation: after a /new it never starts, whatever was pressed.

// ask asks the requester whether command (matched by rule) may run and waits for the answer:
// nil when approved, a *approval.Refusal when not, ctx's error when the turn ended first. A
// notification turn never asks: its request is recorded denied and ErrReadOnly returned.
func (t *tools) ask(ctx context.Context, command, rule string) error {
	e, store := t.e, t.e.opt.Approvals
	req := approval.Request{Key: t.key, SessionID: t.stamp.SessionID, Generation: t.stamp.Generation,
		Plugin: t.plugin, Profile: t.profile, Platform: t.src.Platform, User: t.src.UserID, UserName: t.src.UserName,
		Command: command, Rule: rule}
	if len(t.rows) > 0 {
		req.Turn = t.rows[0]
	}
	if t.synthetic {
		if _, err := store.Refuse(context.WithoutCancel(ctx), req, "a notification turn cannot ask: denied without a prompt"); err != nil {
			e.log.Error("turn: recording a notification turn's refused command failed", "key", t.key, "error", err)
		}
		return ErrReadOnly
	}
	rec, err := store.Ask(ctx, req)
	if err != nil {
		return err
	}
	msg := e.noticeMsg(t.plugin, t.profile, t.key, t.src, approval.Prompt(rec))
	if e.opt.CanButtons != nil && e.opt.CanButtons(t.plugin) {
		msg.Target.Buttons = approval.Buttons(rec.ID)
	}
	msg.Origin = "approval:" + rec.ID
	if _, err := e.ledger.Enqueue(context.WithoutCancel(ctx), msg); err != nil {
		if _, verr := store.Void(context.WithoutCancel(ctx), rec.ID, "the request could not be sent: "+err.Error()); verr != nil {
			e.log.Error("turn: voiding an approval request that was not sent failed", "id", rec.ID, "error", verr)
		}
		return fmt.Errorf("the command needs approval, and the request could not be sent: %w", err)
	}
	e.log.Info("command waits for approval", "key", t.key, "id", rec.ID, "rule", rule, "user", rec.Requester())
	rec, err = store.Wait(ctx, rec.ID)
	if err != nil {
		return err
	}
	e.opt.Metrics.approval(rec.State)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if rec.State != approval.StateApproved {
		return &approval.Refusal{Record: rec}
	}
	if testHookApproved != nil {
		testHookApproved(rec)
	}
	return nil
}

// testHookApproved, when set by a test, runs after a request was approved and before its
// command is started (inside the key's boundary, by the caller).
var testHookApproved func(approval.Record)

// answerApproval applies /approve and /deny (approve) from src in key's chat: arg is the
// request's id, or "" for the only pending request of the sender in this chat. It returns the
// line the sender is told.
func (e *Engine) answerApproval(ctx context.Context, key string, src abi.Source, arg string, approve bool) string {
	store := e.opt.Approvals
	if store == nil {
		return "Commands do not wait for approval on this host."
	}
	id := strings.TrimSpace(arg)
	if id == "" {
		pending, err := store.Pending(ctx, key)
		if err != nil {
			return approval.Answer(approval.Record{}, err)
		}
		var mine []approval.Record
		for _, r := range pending {
			if e.opt.Approval.MayAnswer(r, src.Platform, src.UserID) {
				mine = append(mine, r)
			}
		}
		switch len(mine) {
		case 0:
			return "There is no approval request waiting for you here."
		case 1:
			id = mine[0].ID
		default:
			ids := make([]string, len(mine))
			for i, r := range mine {
				ids[i] = r.ID
			}
			return fmt.Sprintf("%d requests wait; name one: /approve ID or /deny ID (%s).", len(mine), strings.Join(ids, ", "))
		}
	}
	rec, err := store.Decide(ctx, id, approval.Decider{Platform: src.Platform, User: src.UserID, UserName: src.UserName}, approve)
	switch {
	case errors.Is(err, approval.ErrNotYours):
		e.log.Warn("approval answer refused: not the requester", "id", id, "by", src.Platform+":"+src.UserID, "requester", rec.Requester())
	case err == nil:
		e.log.Info("approval answered", "id", id, "state", rec.State, "by", src.Platform+":"+src.UserID)
	}
	return approval.Answer(rec, err)
}
