package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// The plugin's kv store (per profile) holds:
//
//	index        the ids of the jobs created through the jobs export, as a JSON list
//	job/<id>     one job: its spec, parsed schedule and state (record)
//
// Jobs of the config file are not in the index: their spec comes from the config on every call
// and only their state is stored (job/cfg-<name>). The host never runs a tick and a changing jobs
// call of one profile at once, so each key has one writer at a time.
const indexKey = "index"

func jobKey(id string) string { return "job/" + id }

// record is a stored job.
type record struct {
	abi.Job
	Sched schedule `json:"sched"`
	// Running is the slot claimed by a run that has not finished. Found at a tick, it means
	// the host stopped mid-run: the slot is recorded as interrupted, never run again.
	Running *claim `json:"running,omitempty"`
	// RunNowMs is a pending run_now request (0: none).
	RunNowMs int64 `json:"run_now_ms,omitempty"`
	// ChatScoped marks a job created from a chat (an add with a scope): it delivers into that
	// chat, and elsewhere only where chat_targets grants, checked again at every run.
	ChatScoped bool `json:"chat_scoped,omitempty"`
	// Pending are the last run's deliveries whose outcome the host did not know yet (see
	// reconcile).
	Pending []pendingSend `json:"pending,omitempty"`
}

type claim struct {
	SlotMs    int64 `json:"slot_ms"`
	Manual    bool  `json:"manual,omitempty"`
	StartedMs int64 `json:"started_ms"`
	// DeadlineMs is the call deadline of the tick that claimed it (abi.Call.DeadlineMs), for the
	// message if that deadline stops the run.
	DeadlineMs int64 `json:"deadline_ms,omitempty"`
}

func (r *record) pinned() bool { return r.Pin != nil && *r.Pin }

// fromChat reports whether r was created from a chat: ChatScoped, or, for a job stored before
// that mark, created by a chat user ("<platform>:<user_id>", abi.JobsRequest.By) with an origin.
func (r *record) fromChat() bool {
	return r.ChatScoped || (r.Origin != nil && strings.Contains(r.CreatedBy, ":"))
}

// Job states.
const (
	stateScheduled = "scheduled"
	statePaused    = "paused"
	stateCompleted = "completed"
)

// Run outcomes (abi.Job.LastStatus).
const (
	statusOK          = "ok"
	statusSilent      = "silent"
	statusPending     = "pending"
	statusError       = "error"
	statusFailed      = "delivery_failed"
	statusStale       = "stale"
	statusInterrupted = "interrupted"
	statusMissed      = "missed"
)

func newJobID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func loadIndex(c *sdk.Context) ([]string, error) {
	b, found, err := c.KVGet(indexKey)
	if err != nil || !found {
		return nil, err
	}
	var ids []string
	if err := json.Unmarshal(b, &ids); err != nil {
		return nil, abi.Errorf(abi.CodeInternal, "the job index is corrupt: %v", err)
	}
	return ids, nil
}

func saveIndex(c *sdk.Context, ids []string) error {
	b, _ := json.Marshal(ids)
	return c.KVSet(indexKey, b)
}

func loadRecord(c *sdk.Context, id string) (*record, bool, error) {
	b, found, err := c.KVGet(jobKey(id))
	if err != nil || !found {
		return nil, false, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, false, abi.Errorf(abi.CodeInternal, "job %s is corrupt: %v", id, err)
	}
	return &r, true, nil
}

// save writes r durably: when it returns nil, the state survives a crash.
func save(c *sdk.Context, r *record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return c.KVSet(jobKey(r.ID), b)
}

// loadAll returns every job of the profile: the stored ones and the config file's. A config
// job seen for the first time, or whose spec changed, gets a fresh schedule from now; write
// reports whether such a record must be saved (list does not write; tick does).
func loadAll(c *sdk.Context, cfg *profileConfig, now time.Time) (jobs []*record, dirty map[string]bool, err error) {
	ids, err := loadIndex(c)
	if err != nil {
		return nil, nil, err
	}
	for _, id := range ids {
		r, found, err := loadRecord(c, id)
		if err != nil {
			return nil, nil, err
		}
		if found {
			jobs = append(jobs, r)
		}
	}
	dirty = map[string]bool{}
	for _, cj := range cfg.Jobs {
		spec := cj.spec()
		sch, loc, err := cfg.validate(&spec, now, false)
		if err != nil {
			continue // configure reported it; the profile is not served with a bad config
		}
		id := configID(cj.Name)
		r, found, err := loadRecord(c, id)
		if err != nil {
			return nil, nil, err
		}
		if !found || !reflect.DeepEqual(r.JobSpec, spec) {
			fresh := &record{Job: abi.Job{ID: id, JobSpec: spec, CreatedBy: "config", CreatedMs: now.UnixMilli(), State: stateScheduled}, Sched: sch}
			if found { // keep the history of a job whose definition changed
				fresh.CreatedMs, fresh.LastRunMs, fresh.LastStatus, fresh.LastError = r.CreatedMs, r.LastRunMs, r.LastStatus, r.LastError
				fresh.FailureStreak, fresh.Runs, fresh.Running, fresh.State, fresh.PausedReason = r.FailureStreak, r.Runs, r.Running, r.State, r.PausedReason
				fresh.Pending = r.Pending
			}
			fresh.Display = sch.display(loc)
			fresh.NextRunMs, _ = sch.next(now.UnixMilli(), loc)
			if sch.Kind == kindOnce && fresh.NextRunMs == 0 && fresh.State == stateScheduled {
				fresh.State = stateCompleted
			}
			r = fresh
			dirty[id] = true
		}
		jobs = append(jobs, r)
	}
	sort.Slice(jobs, func(a, b int) bool {
		if jobs[a].CreatedMs != jobs[b].CreatedMs {
			return jobs[a].CreatedMs < jobs[b].CreatedMs
		}
		return jobs[a].ID < jobs[b].ID
	})
	return jobs, dirty, nil
}

// loc is the job's time zone (validated when the job was created).
func (r *record) loc(cfg *profileConfig) *time.Location {
	tz := r.TimeZone
	if tz == "" {
		tz = cfg.TimeZone
	}
	l, err := location(tz)
	if err != nil {
		return time.UTC
	}
	return l
}

func (r *record) catchUp(cfg *profileConfig) string {
	switch {
	case r.CatchUp != "":
		return r.CatchUp
	case cfg.CatchUp != "":
		return cfg.CatchUp
	}
	return catchUpOnce
}

func decodeConfig(c *sdk.Context) (*profileConfig, error) {
	var cfg profileConfig
	if err := c.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	return &cfg, nil
}

func fmtTime(ms int64, loc *time.Location) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).In(loc).Format("2006-01-02 15:04 MST")
}
