// Command naive is a scheduler that makes the classic mistakes, so the conformance profile can
// show each of them failing its check: it reads every time as UTC (no time zones, no natural
// forms), sends a slot before recording it (a crash mid-send repeats it), runs every missed slot
// after downtime, never pins a delivery to its conversation, sends [SILENT] output, records every
// run as ok, does not deduplicate targets, ignores chat scopes (what a chat sees, and where its
// jobs may post) and accepts targets on any platform.
package main

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

type job struct {
	abi.Job
	Once   int64  `json:"once,omitempty"`
	EveryM int64  `json:"every_ms,omitempty"`
	Expr   string `json:"expr,omitempty"`
}

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{Name: "naivecron", Version: "0", Kind: abi.KindScheduler, Capabilities: []string{abi.CapJobs}},
		Tick:     tick,
		Jobs:     jobs,
	})
}

func main() {}

func load(c *sdk.Context) []*job {
	b, _, _ := c.KVGet("jobs")
	var js []*job
	json.Unmarshal(b, &js)
	return js
}

func store(c *sdk.Context, js []*job) error {
	b, _ := json.Marshal(js)
	return c.KVSet("jobs", b)
}

func (j *job) next(after int64) int64 {
	switch {
	case j.Once > 0:
		if j.Once > after {
			return j.Once
		}
		return 0
	case j.EveryM > 0:
		return after + j.EveryM
	}
	s, err := cron.ParseStandard(j.Expr)
	if err != nil {
		return 0
	}
	return s.Next(time.UnixMilli(after).UTC()).UnixMilli()
}

func jobs(c *sdk.Context, req *abi.JobsRequest) (*abi.JobsResult, error) {
	now, _ := c.Now()
	js := load(c)
	switch req.Op {
	case abi.JobsAdd:
		j := &job{Job: abi.Job{ID: now.Format("150405.000000000"), JobSpec: *req.Job, State: "scheduled"}}
		if req.Scope != nil {
			o := *req.Scope
			j.Origin = &o
		}
		sch := strings.TrimSpace(req.Job.Schedule)
		if d, err := time.ParseDuration(strings.TrimPrefix(sch, "in ")); err == nil && strings.HasPrefix(sch, "in ") {
			j.Once = now.Add(d).UnixMilli()
		} else if d, err := time.ParseDuration(strings.TrimPrefix(sch, "every ")); err == nil {
			j.EveryM = d.Milliseconds()
		} else if t, err := time.Parse("2006-01-02 15:04", sch); err == nil {
			j.Once = t.UnixMilli() // UTC, whatever the job's zone
		} else if _, err := cron.ParseStandard(sch); err == nil {
			j.Expr = sch
		} else {
			return nil, abi.Errorf(abi.CodeBadRequest, "cannot parse %q", sch)
		}
		j.NextRunMs = j.next(now.UnixMilli())
		js = append(js, j)
		return &abi.JobsResult{Jobs: []abi.Job{j.Job}}, store(c, js)
	case abi.JobsRemove:
		for i, j := range js {
			if j.ID == req.ID {
				js = append(js[:i], js[i+1:]...)
				return &abi.JobsResult{Jobs: []abi.Job{j.Job}}, store(c, js)
			}
		}
		return nil, abi.Errorf(abi.CodeNotFound, "no job %s", req.ID)
	}
	res := &abi.JobsResult{Jobs: []abi.Job{}}
	for _, j := range js {
		res.Jobs = append(res.Jobs, j.Job)
	}
	return res, nil
}

func tick(c *sdk.Context, req *abi.TickRequest) (*abi.TickResult, error) {
	var cfg struct{ Home map[string]string }
	c.DecodeConfig(&cfg)
	js := load(c)
	for _, j := range js {
		for j.NextRunMs > 0 && j.NextRunMs <= req.UnixMs {
			text := j.Text
			if j.Prompt != "" {
				text, _ = c.Agent(&abi.AgentRequest{Prompt: j.Prompt})
			}
			for _, t := range j.Deliver {
				var target abi.Source
				switch {
				case t == "origin" && j.Origin != nil:
					target = *j.Origin
				case t == "home":
					chat, thread, _ := strings.Cut(cfg.Home["telegram"], ":")
					target = abi.Source{Platform: "telegram", ChatID: chat, ThreadID: thread}
				default:
					parts := strings.SplitN(t, ":", 3)
					target = abi.Source{Platform: parts[0], ChatID: parts[1]}
					if len(parts) == 3 {
						target.ThreadID = parts[2]
					}
				}
				c.SendTo(&abi.HostSendRequest{Target: target, Text: text})
			}
			if len(j.Deliver) == 0 && j.Origin != nil {
				c.SendTo(&abi.HostSendRequest{Target: *j.Origin, Text: text})
			}
			j.LastStatus, j.Runs = "ok", j.Runs+1
			j.NextRunMs = j.next(j.NextRunMs)
			if err := store(c, js); err != nil {
				return nil, err
			}
		}
	}
	return &abi.TickResult{NextTickMs: 60000}, nil
}
