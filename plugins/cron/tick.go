package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// maxTick bounds the time between ticks, so a job added by another path is seen within it.
const maxTick = time.Minute

// tick runs every due job once. For each run it first claims the slot durably (the job's next
// slot moves past it and the claim is recorded in one kv write), then produces the output, then
// delivers it, then records the outcome: a crash anywhere after the claim leaves the claim,
// which the next tick records as interrupted. A slot is therefore delivered at most once.
func tick(c *sdk.Context, req *abi.TickRequest) (*abi.TickResult, error) {
	cfg, err := decodeConfig(c)
	if err != nil {
		return nil, err
	}
	now := time.UnixMilli(req.UnixMs)
	jobs, dirty, err := loadAll(c, cfg, now)
	if err != nil {
		return nil, err
	}
	wake := now.Add(maxTick).UnixMilli()
	for _, r := range jobs {
		if r.Running != nil {
			interrupted(r, req.Interrupted)
			dirty[r.ID] = true
		}
		if len(r.Pending) > 0 && reconcile(c, r) {
			dirty[r.ID] = true
		}
		if dirty[r.ID] {
			if err := save(c, r); err != nil {
				return nil, err
			}
		}
		if err := runDue(c, cfg, r, now, req.DeadlineMs); err != nil {
			return nil, err
		}
		if r.State == stateScheduled && r.NextRunMs > 0 {
			wake = min(wake, r.NextRunMs)
		}
	}
	return &abi.TickResult{NextTickMs: max(wake-now.UnixMilli(), 1)}, nil
}

// interrupted records that r's claimed run did not finish. The slot is not run again. how is the
// host's word on the previous tick (abi.TickRequest.Interrupted): "deadline" when that tick ran
// past its call deadline and was stopped, "trap" or "exit" when its instance crashed, empty when
// it did not end in this host process at all (the host stopped, or another host held the loop).
func interrupted(r *record, how string) {
	slot := time.UnixMilli(r.Running.SlotMs).UTC().Format(time.RFC3339)
	var what string
	switch how {
	case "":
		what = "the host stopped during the run of the " + slot + " slot"
	case "deadline":
		limit := "its call deadline"
		if r.Running.DeadlineMs > 0 {
			limit = fmt.Sprintf("its call deadline of %v", (time.Duration(r.Running.DeadlineMs) * time.Millisecond).Round(time.Second))
		}
		what = fmt.Sprintf("the run of the %s slot took longer than %s and was stopped (raise plugins.cron.limits.call_timeout: a prompt job's agent turn and its sends must finish within it)", slot, limit)
	default:
		what = fmt.Sprintf("the plugin crashed (%s) during the run of the %s slot", how, slot)
	}
	r.LastStatus = statusInterrupted
	r.LastError = what + "; not repeated (at most once per slot): check the delivery ledger for what was sent"
	r.FailureStreak++
	r.Running = nil
}

// runDue runs r if it is due at now: a run_now request, or its next slot. Missed slots (the
// host was down) are caught up once or skipped, by the job's catch_up policy. deadlineMs is the
// tick's call deadline, recorded with the claim for the message of a run it stops.
func runDue(c *sdk.Context, cfg *profileConfig, r *record, now time.Time, deadlineMs int64) error {
	loc := r.loc(cfg)
	if r.RunNowMs > 0 {
		r.RunNowMs = 0
		return run(c, cfg, r, claim{SlotMs: now.UnixMilli(), Manual: true, StartedMs: now.UnixMilli(), DeadlineMs: deadlineMs}, now)
	}
	if r.State != stateScheduled || r.NextRunMs == 0 || r.NextRunMs > now.UnixMilli() {
		return nil
	}
	// Every slot from NextRunMs up to now is due; the latest is the one that may run.
	first := r.NextRunMs
	latest, missed, more := r.Sched.latestDue(first, now.UnixMilli(), loc)
	count := fmt.Sprint(missed + 1) // the slots from first to latest
	if more {
		count = fmt.Sprintf("more than %d", missed)
	}
	late := now.Sub(time.UnixMilli(latest))
	onTime := late <= r.Sched.grace(latest, loc)
	if r.catchUp(cfg) == catchUpSkip && !onTime {
		next, ok := r.Sched.next(now.UnixMilli(), loc)
		r.NextRunMs = next
		if !ok {
			r.NextRunMs, r.State = 0, stateCompleted
		}
		r.LastStatus = statusMissed
		r.LastError = fmt.Sprintf("skipped %s slot(s) from %s, missed while the host was down (catch_up: skip)", count, fmtTime(first, loc))
		c.Log(abi.LevelWarn, "cron: missed slots skipped", "job", r.ID, "count", count)
		return save(c, r)
	}
	if missed > 0 {
		c.Log(abi.LevelWarn, "cron: catching up once for missed slots", "job", r.ID, "slots", count, "slot", fmtTime(latest, loc))
	}
	return run(c, cfg, r, claim{SlotMs: latest, StartedMs: now.UnixMilli(), DeadlineMs: deadlineMs}, now)
}

// run claims slot for r durably, then produces and delivers the output and records the outcome.
func run(c *sdk.Context, cfg *profileConfig, r *record, slot claim, now time.Time) error {
	loc := r.loc(cfg)
	if !slot.Manual {
		next, ok := r.Sched.next(slot.SlotMs, loc)
		if !ok {
			next = 0
		}
		r.NextRunMs = next
	}
	if len(r.Pending) > 0 {
		// The last run's outcome is still open; this run's replaces it on the job, and the
		// ledger keeps the deliveries' own record.
		c.Log(abi.LevelWarn, "cron: a new run starts while the last run's deliveries are still pending; their outcome is in the ledger only",
			"job", r.ID, "pending", fmt.Sprint(len(r.Pending)))
		r.Pending = nil
	}
	r.Running = &slot
	r.Runs++
	if err := save(c, r); err != nil {
		return err // not claimed: the slot stays due and runs at the next tick
	}
	status, problem := execute(c, cfg, r)
	r.Running = nil
	r.LastRunMs = now.UnixMilli()
	r.LastStatus, r.LastError = status, problem
	switch status {
	case statusOK, statusSilent, statusPending:
		r.FailureStreak = 0
	case statusStale:
	default:
		r.FailureStreak++
		c.Log(abi.LevelWarn, "cron: job run failed", "job", r.ID, "name", r.Name, "status", status, "error", problem,
			"failure_streak", fmt.Sprint(r.FailureStreak))
	}
	if r.Sched.Kind == kindOnce && !slot.Manual && r.State == stateScheduled {
		r.State = stateCompleted
	}
	return save(c, r)
}

// pausedStale is the paused reason of a job whose pinned conversation ended.
const pausedStale = "the conversation it was created in has ended (/new); resume it to attach it to the current one"

// SilentMarker at the start of a run's output suppresses its message (the run still succeeds).
const SilentMarker = "[SILENT]"

// execute produces r's output and delivers it; it returns the run's status and problem.
func execute(c *sdk.Context, cfg *profileConfig, r *record) (status, problem string) {
	text := r.Text
	if r.Prompt != "" {
		out, err := c.Agent(&abi.AgentRequest{Prompt: r.Prompt, Source: r.Origin, Name: r.Name})
		if err != nil {
			return statusError, "the agent turn failed: " + err.Error()
		}
		text = strings.TrimSpace(out)
		if text == "" {
			return statusError, "the agent answered nothing"
		}
	}
	if trimmed := strings.TrimSpace(text); strings.HasPrefix(trimmed, SilentMarker) || trimmed == "SILENT" || trimmed == "NO_REPLY" {
		return statusSilent, ""
	}
	if r.Prompt != "" {
		text = "Cronjob Response: " + r.Name + "\n-------------\n\n" + text
	}
	dests, problems := resolve(r, cfg)
	if r.fromChat() {
		// Granted when the job was created, but the operator may have taken the grant back.
		dests = slices.DeleteFunc(dests, func(d destination) bool {
			if cfg.chatMay(*r.Origin, d.src) {
				return false
			}
			problems = append(problems, d.label+": a job created in a chat may post only into that chat (chat_targets does not grant it)")
			return true
		})
	}
	if len(dests) == 0 {
		return statusFailed, "no target: " + strings.Join(problems, "; ")
	}
	var delivered, pending, stale int
	for _, d := range dests {
		req := &abi.HostSendRequest{Target: d.src, Text: text, PinSessionID: d.pin}
		if r.Seed {
			req.Seed = "[Cron delivery: " + r.Name + "]\n" + text
		}
		reply, err := c.SendTo(req)
		switch {
		case abi.CodeOf(err) == abi.CodeStale:
			stale++
			problems = append(problems, d.label+": stale: the conversation the job is pinned to has ended ("+abi.AsError(err).Message+")")
		case err != nil:
			problems = append(problems, d.label+": "+err.Error())
		case reply.State == "delivered":
			delivered++
		case reply.State == "pending":
			pending++
			if reply.DeliveryID != "" {
				r.Pending = append(r.Pending, pendingSend{DeliveryID: reply.DeliveryID, Platform: d.src.Platform, Label: d.label})
			}
		default:
			problems = append(problems, fmt.Sprintf("%s: %s: %s", d.label, reply.State, reply.Reason))
		}
	}
	if len(r.Pending) > 0 {
		r.Pending[0].Delivered = delivered
	}
	failed := len(problems) - stale
	if stale > 0 && delivered+pending == 0 && failed == 0 {
		// Nothing reached any chat and the pinned conversation is gone: pause until the user
		// resumes it (from the chat, which re-pins it to the conversation they are in).
		r.State = statePaused
		r.PausedReason = pausedStale
	}
	switch {
	case failed > 0:
		return statusFailed, strings.Join(problems, "; ")
	case stale > 0:
		return statusStale, strings.Join(problems, "; ")
	case pending > 0:
		return statusPending, fmt.Sprintf("%d delivery(ies) still pending in the ledger", pending)
	}
	return statusOK, ""
}
