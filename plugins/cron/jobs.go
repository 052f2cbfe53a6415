package main

import (
	"slices"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// maxJobs bounds the jobs created through the jobs export per profile (the kv store holds at
// most 10 000 keys).
const maxJobs = 1000

// jobs is the jobs export: list and change jobs for the operator (no scope) or a chat (scope).
func jobs(c *sdk.Context, req *abi.JobsRequest) (*abi.JobsResult, error) {
	cfg, err := decodeConfig(c)
	if err != nil {
		return nil, err
	}
	now, err := c.Now()
	if err != nil {
		return nil, err
	}
	if req.Op == abi.JobsAdd {
		return add(c, cfg, req, now)
	}
	all, _, err := loadAll(c, cfg, now)
	if err != nil {
		return nil, err
	}
	if req.Op == abi.JobsList {
		res := &abi.JobsResult{Jobs: []abi.Job{}}
		for _, r := range all {
			if inScope(r, req.Scope) {
				j := r.Job
				if r.Running != nil {
					j.State = "running" // a run in progress (or interrupted, until the next tick says so)
				}
				res.Jobs = append(res.Jobs, j)
			}
		}
		return res, nil
	}
	var r *record
	for _, x := range all {
		if x.ID == req.ID && inScope(x, req.Scope) {
			r = x
		}
	}
	if r == nil {
		return nil, abi.Errorf(abi.CodeNotFound, "no job %q here (/cron ls lists them)", req.ID)
	}
	loc := r.loc(cfg)
	switch req.Op {
	case abi.JobsRemove:
		if r.CreatedBy == "config" {
			return nil, abi.Errorf(abi.CodeBadRequest, "job %s is defined in the config file: remove it there (pause stops it meanwhile)", r.ID)
		}
		ids, err := loadIndex(c)
		if err != nil {
			return nil, err
		}
		if err := saveIndex(c, slices.DeleteFunc(ids, func(id string) bool { return id == r.ID })); err != nil {
			return nil, err
		}
		if err := c.KVDelete(jobKey(r.ID)); err != nil {
			return nil, err
		}
		r.State = "removed"
		return &abi.JobsResult{Jobs: []abi.Job{r.Job}}, nil
	case abi.JobsPause:
		if r.State == stateCompleted {
			return nil, abi.Errorf(abi.CodeBadRequest, "job %s has completed", r.ID)
		}
		r.State, r.PausedReason = statePaused, "paused by "+who(req.By)
	case abi.JobsResume:
		if r.State == stateCompleted {
			return nil, abi.Errorf(abi.CodeBadRequest, "job %s has completed; add it again", r.ID)
		}
		next, ok := r.Sched.next(now.UnixMilli(), loc)
		if !ok {
			return nil, abi.Errorf(abi.CodeBadRequest, "job %s has no slot left (its time has passed)", r.ID)
		}
		r.State, r.PausedReason, r.NextRunMs = stateScheduled, "", next
		// Resumed from the chat it belongs to: attach it to the conversation the user is in now.
		if r.pinned() && req.Scope != nil && req.ScopeSessionID != "" && r.Origin != nil && sameChat(*r.Origin, *req.Scope) {
			r.OriginSessionID = req.ScopeSessionID
		}
	case abi.JobsRunNow:
		r.RunNowMs = now.UnixMilli()
	default:
		return nil, abi.Errorf(abi.CodeBadRequest, "unknown op %q (want list, add, remove, pause, resume or run_now)", req.Op)
	}
	if err := save(c, r); err != nil {
		return nil, err
	}
	return &abi.JobsResult{Jobs: []abi.Job{r.Job}}, nil
}

func add(c *sdk.Context, cfg *profileConfig, req *abi.JobsRequest, now time.Time) (*abi.JobsResult, error) {
	if req.Job == nil {
		return nil, abi.Errorf(abi.CodeBadRequest, "add: job is required")
	}
	spec := *req.Job
	if req.Scope != nil {
		// A chat user's job belongs to their chat, whatever the request claims.
		if spec.Origin == nil || spec.Origin.Platform != req.Scope.Platform || spec.Origin.ChatID != req.Scope.ChatID {
			o := *req.Scope
			spec.Origin = &o
			spec.OriginSessionID = req.ScopeSessionID
		}
	}
	if spec.Pin == nil {
		pin := spec.Origin != nil && spec.OriginSessionID != ""
		spec.Pin = &pin
	}
	sch, loc, err := cfg.validate(&spec, now, true)
	if err != nil {
		return nil, abi.Errorf(abi.CodeBadRequest, "%v", err)
	}
	if err := cfg.checkReach(spec, req); err != nil {
		return nil, err
	}
	ids, err := loadIndex(c)
	if err != nil {
		return nil, err
	}
	if len(ids) >= maxJobs {
		return nil, abi.Errorf(abi.CodeTooLarge, "this profile has %d jobs, the most it may have", len(ids))
	}
	if spec.Name == "" {
		spec.Name = defaultName(spec)
	}
	r := &record{Job: abi.Job{ID: newJobID(), JobSpec: spec, CreatedBy: who(req.By), CreatedMs: now.UnixMilli(),
		State: stateScheduled, Display: sch.display(loc)}, Sched: sch, ChatScoped: req.Scope != nil}
	r.NextRunMs, _ = sch.next(now.UnixMilli(), loc)
	if sch.Kind == kindOnce && r.NextRunMs <= now.UnixMilli() {
		r.NextRunMs = sch.AtMs // within the grace: due at the next tick
	}
	if err := save(c, r); err != nil {
		return nil, err
	}
	if err := saveIndex(c, append(ids, r.ID)); err != nil {
		c.KVDelete(jobKey(r.ID))
		return nil, err
	}
	c.Log(abi.LevelInfo, "cron: job added", "job", r.ID, "name", r.Name, "schedule", r.Display, "by", r.CreatedBy)
	return &abi.JobsResult{Jobs: []abi.Job{r.Job}}, nil
}

// checkReach refuses a new job whose targets it cannot reach or may not: a chat on a platform
// no plugin serves for the profile (when the host says which are served), or, for a job created
// from a chat, a chat other than that one which chat_targets does not grant.
func (cfg *profileConfig) checkReach(spec abi.JobSpec, req *abi.JobsRequest) error {
	dests, _ := resolve(&record{Job: abi.Job{JobSpec: spec}}, cfg) // validate reported the unresolvable
	for _, d := range dests {
		if req.Platforms != nil && !slices.Contains(*req.Platforms, d.src.Platform) {
			served := "none"
			if len(*req.Platforms) > 0 {
				served = strings.Join(*req.Platforms, ", ")
			}
			return abi.Errorf(abi.CodeBadRequest, "target %s: no platform plugin serves %s for this profile (served: %s)", d.label, d.src.Platform, served)
		}
		if req.Scope != nil && !cfg.chatMay(*req.Scope, d.src) {
			return errNotGranted(d.label)
		}
	}
	return nil
}

// inScope reports whether a chat scope may see r: jobs created in the same chat only.
func inScope(r *record, scope *abi.Source) bool {
	if scope == nil {
		return true
	}
	return r.Origin != nil && r.Origin.Platform == scope.Platform && r.Origin.ChatID == scope.ChatID
}

func who(by string) string {
	if by == "" {
		return "operator"
	}
	return by
}

func defaultName(spec abi.JobSpec) string {
	s := spec.Text
	if s == "" {
		s = spec.Prompt
	}
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 40 {
		s = string(r[:40]) + "…"
	}
	return s
}
