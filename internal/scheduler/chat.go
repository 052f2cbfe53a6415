package scheduler

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/turn"
)

// Authorizer says who may manage jobs from a chat (internal/auth's Gate). The inbound door
// decides who may talk to the agent at all; managing jobs is a further grant of the operator's
// (the "cron" tool of a profile's access), denied unless given.
type Authorizer interface {
	MayManageJobs(ctx context.Context, plugin, profile string, src abi.Source) bool
}

// ChatHelp is the answer to /cron without arguments.
const ChatHelp = `/cron manages this chat's scheduled jobs:
/cron ls - list them
/cron add [options] SCHEDULE | PROMPT - run an agent turn with PROMPT on SCHEDULE and post its answer here
/cron add --text [options] SCHEDULE | TEXT - post TEXT on SCHEDULE
/cron pause ID, /cron resume ID, /cron run ID (now), /cron rm ID
SCHEDULE: in 30m, 2026-12-01 09:00, every 2h, daily at 7am, weekdays at 9am, 0 9 * * MON-FRI
Options: --to TARGET[,TARGET] (origin, another thread of this chat: telegram:CHAT:THREAD; other chats and home only where the operator allows), --tz ZONE, --name NAME,
--seed (your reply continues from the message), --unpinned (keep posting here after /new), --skip-missed`

// Command returns the /cron chat command for the turn engine. Only users auth allows may use
// it, and only on the jobs of their chat (the scheduler's Scope).
func (s *Service) Command(auth Authorizer) turn.Command {
	return turn.CommandFunc(func(ctx context.Context, c turn.CommandCall) string {
		if auth == nil || !auth.MayManageJobs(ctx, c.Plugin, c.Profile, c.Source) {
			return "⛔ You may not manage scheduled jobs here: the operator grants /cron per profile (tools: [cron] in the access configuration)."
		}
		return s.chat(ctx, c)
	})
}

func (s *Service) chat(ctx context.Context, c turn.CommandCall) string {
	verb, rest, _ := strings.Cut(strings.TrimSpace(c.Arg), " ")
	rest = strings.TrimSpace(rest)
	scope := c.Source
	scope.Profile, scope.MessageID = "", ""
	req := abi.JobsRequest{Scope: &scope, ScopeSessionID: c.SessionID, By: c.Source.Platform + ":" + c.Source.UserID}
	switch strings.ToLower(verb) {
	case "", "help":
		return ChatHelp
	case "ls", "list":
		req.Op = abi.JobsList
	case "add":
		spec, err := parseAdd(rest)
		if err != nil {
			return "⚠️ " + err.Error() + "\n\n" + ChatHelp
		}
		origin := c.Source
		origin.Profile, origin.MessageID = "", ""
		spec.Origin, spec.OriginSessionID = &origin, c.SessionID
		req.Op, req.Job = abi.JobsAdd, spec
	case "rm", "remove", "delete":
		req.Op, req.ID = abi.JobsRemove, rest
	case "pause":
		req.Op, req.ID = abi.JobsPause, rest
	case "resume":
		req.Op, req.ID = abi.JobsResume, rest
	case "run", "run-now", "run_now":
		req.Op, req.ID = abi.JobsRunNow, rest
	default:
		return fmt.Sprintf("⚠️ Unknown /cron command %q.\n\n%s", verb, ChatHelp)
	}
	if req.Op != abi.JobsList && req.Op != abi.JobsAdd && req.ID == "" {
		return fmt.Sprintf("⚠️ /cron %s needs a job id (/cron ls lists them).", verb)
	}
	_, res, err := s.Jobs(ctx, "", c.Profile, req)
	if err != nil {
		return "⚠️ " + errorText(err)
	}
	switch req.Op {
	case abi.JobsList:
		if len(res.Jobs) == 0 {
			return "No scheduled jobs in this chat. /cron add creates one."
		}
		var b strings.Builder
		b.WriteString("⏰ Scheduled jobs of this chat:")
		for _, j := range res.Jobs {
			b.WriteString("\n" + describe(j))
		}
		return b.String()
	case abi.JobsAdd:
		return "⏰ Scheduled: " + describe(res.Jobs[0])
	case abi.JobsRemove:
		return "🗑 Removed job " + req.ID + "."
	case abi.JobsPause:
		return "⏸ Paused job " + req.ID + "."
	case abi.JobsResume:
		return "▶️ Resumed: " + describe(res.Jobs[0])
	}
	return "▶️ Job " + req.ID + " runs now."
}

// parseAdd reads "[options] SCHEDULE | MESSAGE".
func parseAdd(arg string) (*abi.JobSpec, error) {
	head, msg, ok := strings.Cut(arg, "|")
	msg = strings.TrimSpace(msg)
	if !ok || msg == "" {
		return nil, fmt.Errorf("write the schedule, then | and the message: /cron add every 2h | check the build")
	}
	words, err := splitWords(head)
	if err != nil {
		return nil, err
	}
	spec := &abi.JobSpec{}
	text := false
	i := 0
	value := func(flag string) (string, error) {
		if i+1 >= len(words) {
			return "", fmt.Errorf("%s needs a value", flag)
		}
		i++
		return words[i], nil
	}
	for ; i < len(words) && strings.HasPrefix(words[i], "--"); i++ {
		flag := words[i]
		var v string
		switch flag {
		case "--text":
			text = true
		case "--seed":
			spec.Seed = true
		case "--unpinned":
			no := false
			spec.Pin = &no
		case "--skip-missed":
			spec.CatchUp = "skip"
		case "--to", "--tz", "--name":
			if v, err = value(flag); err != nil {
				return nil, err
			}
			switch flag {
			case "--to":
				spec.Deliver = append(spec.Deliver, strings.Split(v, ",")...)
			case "--tz":
				spec.TimeZone = v
			default:
				spec.Name = v
			}
		default:
			return nil, fmt.Errorf("unknown option %s", flag)
		}
	}
	spec.Schedule = strings.Join(words[i:], " ")
	if spec.Schedule == "" {
		return nil, fmt.Errorf("the schedule is missing")
	}
	if text {
		spec.Text = msg
	} else {
		spec.Prompt = msg
	}
	return spec, nil
}

// splitWords splits on spaces, keeping "double-quoted words" together.
func splitWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	quoted, inWord := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case (r == ' ' || r == '\t' || r == '\n') && !quoted:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unbalanced quotes")
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

// describe is one job as a chat line.
func describe(j abi.Job) string {
	loc := time.UTC
	if l, err := time.LoadLocation(j.TimeZone); err == nil && j.TimeZone != "" {
		loc = l
	}
	var b strings.Builder
	fmt.Fprintf(&b, "• %s “%s” — %s", j.ID, j.Name, j.Display)
	switch {
	case j.State == "paused":
		fmt.Fprintf(&b, " — paused")
		if j.PausedReason != "" {
			fmt.Fprintf(&b, " (%s)", j.PausedReason)
		}
	case j.State == "completed":
		b.WriteString(" — completed")
	case j.NextRunMs > 0:
		fmt.Fprintf(&b, " — next %s", time.UnixMilli(j.NextRunMs).In(loc).Format("2006-01-02 15:04 MST"))
	}
	if j.LastStatus != "" {
		fmt.Fprintf(&b, " — last: %s", j.LastStatus)
		if j.FailureStreak > 1 {
			fmt.Fprintf(&b, " (%d failures in a row)", j.FailureStreak)
		}
		if j.LastError != "" {
			fmt.Fprintf(&b, ": %s", j.LastError)
		}
	}
	return b.String()
}
