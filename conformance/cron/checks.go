package cron

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	hermes "github.com/hermes-host/hermes-host/host"
)

// to delivers to one explicit chat.
var to = []string{"telegram:5"}

// checkIn: a one-shot "in 30m" is due 30 minutes after it was added, runs once, and completes.
func (s *suite) checkIn() (string, error) {
	const p = "once"
	s.clock.Set(t0)
	j, err := s.add(p, abi.JobSpec{Schedule: "in 30m", Text: "tea", Deliver: to}, nil, "")
	if err != nil {
		return "", err
	}
	if err := wantNext(j, t0.Add(30*time.Minute)); err != nil {
		return "", err
	}
	if err := s.ticks(p, t0.Add(29*time.Minute), t0.Add(33*time.Minute), time.Minute); err != nil {
		return "", err
	}
	if err := wantSends(p, s.delivered(p), t0.Add(30*time.Minute)); err != nil {
		return "", err
	}
	if j, err = s.job(p, j.ID); err != nil || j.State != "completed" {
		return "", fmt.Errorf("after its run the one-shot is %q (%v), want completed", j.State, err)
	}
	return "due at +30m, sent once, completed", nil
}

// checkISO: an ISO time without an offset is read in the job's time zone; one in the past is
// refused.
func (s *suite) checkISO() (string, error) {
	const p = "iso"
	s.clock.Set(t0)
	j, err := s.add(p, abi.JobSpec{Schedule: "2026-06-11 09:00", TimeZone: "Europe/Berlin", Text: "x", Deliver: to}, nil, "")
	if err != nil {
		return "", err
	}
	if err := wantNext(j, time.Date(2026, 6, 11, 7, 0, 0, 0, time.UTC)); err != nil {
		return "", fmt.Errorf("09:00 in Europe/Berlin (CEST): %w", err)
	}
	_, err = s.add(p, abi.JobSpec{Schedule: "2026-06-10 10:00", TimeZone: "UTC", Text: "x", Deliver: to}, nil, "")
	if abi.CodeOf(err) != abi.CodeBadRequest {
		return "", fmt.Errorf("a one-shot two hours in the past was not refused with bad_request: %v", err)
	}
	return "09:00 Europe/Berlin is 07:00Z; a past time is refused", nil
}

// checkInterval: "every 2h" runs every two hours from when it was added, exactly.
func (s *suite) checkInterval() (string, error) {
	const p = "interval"
	s.clock.Set(t0)
	j, err := s.add(p, abi.JobSpec{Schedule: "every 2h", Text: "x", Deliver: to}, nil, "")
	if err != nil {
		return "", err
	}
	if err := wantNext(j, t0.Add(2*time.Hour)); err != nil {
		return "", err
	}
	if err := s.ticks(p, t0.Add(20*time.Minute), t0.Add(7*time.Hour), 20*time.Minute); err != nil {
		return "", err
	}
	return "every 2h: +2h, +4h, +6h (ticked every 20m)", wantSends(p, s.delivered(p), t0.Add(2*time.Hour), t0.Add(4*time.Hour), t0.Add(6*time.Hour))
}

// checkCron: a 5-field expression runs at each matching minute, in the job's zone.
func (s *suite) checkCron() (string, error) {
	const p = "cron"
	s.clock.Set(t0.Add(7 * time.Minute))
	j, err := s.add(p, abi.JobSpec{Schedule: "*/15 * * * *", Text: "x", Deliver: to}, nil, "")
	if err != nil {
		return "", err
	}
	if err := wantNext(j, t0.Add(15*time.Minute)); err != nil {
		return "", err
	}
	j2, err := s.add(p, abi.JobSpec{Schedule: "0 9 * * MON-FRI", TimeZone: "Europe/Berlin", Text: "y", Deliver: []string{"telegram:6"}}, nil, "")
	if err != nil {
		return "", err
	}
	if err := wantNext(j2, time.Date(2026, 6, 11, 7, 0, 0, 0, time.UTC)); err != nil {
		return "", fmt.Errorf("0 9 * * MON-FRI in Europe/Berlin: %w", err)
	}
	if err := s.ticks(p, t0.Add(10*time.Minute), t0.Add(50*time.Minute), 5*time.Minute); err != nil {
		return "", err
	}
	return "*/15 at :15 :30 :45; 0 9 * * MON-FRI (Europe/Berlin) at 07:00Z",
		wantSends(p, s.delivered(p), t0.Add(15*time.Minute), t0.Add(30*time.Minute), t0.Add(45*time.Minute))
}

// checkNatural: "daily at 7am" and "weekdays at 9am" in the job's zone.
func (s *suite) checkNatural() (string, error) {
	const p = "natural"
	friday := time.Date(2026, 6, 12, 12, 0, 0, 0, time.UTC)
	s.clock.Set(friday)
	daily, err := s.add(p, abi.JobSpec{Schedule: "daily at 7am", TimeZone: "Europe/Berlin", Text: "x", Deliver: to}, nil, "")
	if err != nil {
		return "", err
	}
	weekdays, err := s.add(p, abi.JobSpec{Schedule: "weekdays at 9am", TimeZone: "Europe/Berlin", Text: "x", Deliver: to}, nil, "")
	if err != nil {
		return "", err
	}
	if err := wantNext(daily, time.Date(2026, 6, 13, 5, 0, 0, 0, time.UTC)); err != nil {
		return "", fmt.Errorf("daily at 7am from Friday noon: %w", err)
	}
	if err := wantNext(weekdays, time.Date(2026, 6, 15, 7, 0, 0, 0, time.UTC)); err != nil {
		return "", fmt.Errorf("weekdays at 9am from Friday noon: %w", err)
	}
	return "daily at 7am → Sat 05:00Z; weekdays at 9am → Mon 07:00Z", nil
}

// checkDST: "30 2 * * *" in Europe/Berlin runs once a day across the autumn change, when 02:30
// happens twice (at its first occurrence, 00:30Z), then at 01:30Z on CET days.
func (s *suite) checkDST() (string, error) {
	const p = "dst"
	start := time.Date(2026, 10, 23, 23, 0, 0, 0, time.UTC)
	s.clock.Set(start)
	if _, err := s.add(p, abi.JobSpec{Schedule: "30 2 * * *", TimeZone: "Europe/Berlin", Text: "x", Deliver: to}, nil, ""); err != nil {
		return "", err
	}
	if err := s.ticks(p, start.Add(30*time.Minute), time.Date(2026, 10, 26, 6, 0, 0, 0, time.UTC), 30*time.Minute); err != nil {
		return "", err
	}
	return "10-24 00:30Z, 10-25 00:30Z (first 02:30), 10-26 01:30Z", wantSends(p, s.delivered(p),
		time.Date(2026, 10, 24, 0, 30, 0, 0, time.UTC), time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), time.Date(2026, 10, 26, 1, 30, 0, 0, time.UTC))
}

// checkCatchUpOnce: after downtime, a job with catch_up "once" runs once for the missed slots.
func (s *suite) checkCatchUpOnce() (string, error) {
	const p = "catchup"
	s.clock.Set(t0)
	j, err := s.add(p, abi.JobSpec{Schedule: "*/10 * * * *", CatchUp: "once", Text: "x", Deliver: to}, nil, "")
	if err != nil {
		return "", err
	}
	if err := s.tick(p, t0.Add(10*time.Minute)); err != nil {
		return "", err
	}
	// Down from 12:10 to 12:58: slots 12:20 … 12:50 missed.
	if err := s.tick(p, t0.Add(58*time.Minute)); err != nil {
		return "", err
	}
	if err := s.tick(p, t0.Add(59*time.Minute)); err != nil {
		return "", err
	}
	if err := wantSends(p, s.delivered(p), t0.Add(10*time.Minute), t0.Add(58*time.Minute)); err != nil {
		return "", err
	}
	if j, err = s.job(p, j.ID); err != nil {
		return "", err
	}
	return "four missed slots ran once", wantNext(j, t0.Add(time.Hour))
}

// checkCatchUpSkip: after downtime, a job with catch_up "skip" waits for its next slot and says
// so on the job.
func (s *suite) checkCatchUpSkip() (string, error) {
	const p = "skip"
	s.clock.Set(t0)
	j, err := s.add(p, abi.JobSpec{Schedule: "*/10 * * * *", CatchUp: "skip", Text: "x", Deliver: to}, nil, "")
	if err != nil {
		return "", err
	}
	for _, d := range []time.Duration{10 * time.Minute, 58 * time.Minute, 60 * time.Minute} {
		if err := s.tick(p, t0.Add(d)); err != nil {
			return "", err
		}
	}
	if err := wantSends(p, s.delivered(p), t0.Add(10*time.Minute), t0.Add(60*time.Minute)); err != nil {
		return "", err
	}
	if j, err = s.job(p, j.ID); err != nil {
		return "", err
	}
	if j.LastStatus != "ok" || j.FailureStreak != 0 {
		return "", fmt.Errorf("after the next slot ran: last_status %q, failure_streak %d", j.LastStatus, j.FailureStreak)
	}
	return "missed slots skipped; the next slot ran", nil
}

// checkLongDowntime: after seven months of downtime, jobs every minute, every five minutes and
// daily (in Europe/Berlin, so both DST changes are crossed) each run once, for their latest slot,
// and then wait for their next one; the tick after the downtime does not do work in proportion to
// it (it must return within 3 s; a scheduler that steps through the missed slots, or runs them,
// does not).
func (s *suite) checkLongDowntime() (string, error) {
	const p = "downtime"
	s.clock.Set(t0)
	var ids []string
	for i, sch := range []string{"* * * * *", "*/5 * * * *", "0 7 * * *"} {
		j, err := s.add(p, abi.JobSpec{Schedule: sch, TimeZone: "Europe/Berlin", Text: "x", Deliver: []string{fmt.Sprintf("telegram:%d", 10+i)}}, nil, "")
		if err != nil {
			return "", err
		}
		ids = append(ids, j.ID)
	}
	back := time.Date(2027, 1, 9, 12, 17, 30, 0, time.UTC) // 13:17:30 CET
	s.clock.Set(back)
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Second)
	start := time.Now()
	_, err := s.p.Tick(ctx, p, back)
	took := time.Since(start)
	cancel()
	if err != nil {
		return "", fmt.Errorf("the tick after seven months of downtime (%v): %w", took.Round(time.Millisecond), err)
	}
	for _, d := range []time.Duration{20 * time.Second, 25 * time.Second} {
		if err := s.tick(p, back.Add(d)); err != nil {
			return "", err
		}
	}
	per := map[string]int{}
	for _, sd := range s.delivered(p) {
		per[sd.Target.ChatID]++
	}
	if per["10"] != 1 || per["11"] != 1 || per["12"] != 1 {
		return "", fmt.Errorf("runs per job after the downtime: every minute %d, every five minutes %d, daily %d; want one each", per["10"], per["11"], per["12"])
	}
	for i, want := range []time.Time{back.Truncate(time.Minute).Add(time.Minute), back.Truncate(5 * time.Minute).Add(5 * time.Minute),
		time.Date(2027, 1, 10, 6, 0, 0, 0, time.UTC)} {
		j, err := s.job(p, ids[i])
		if err != nil {
			return "", err
		}
		if err := wantNext(j, want); err != nil {
			return "", fmt.Errorf("job %d after the catch-up: %w", i, err)
		}
	}
	return fmt.Sprintf("one catch-up per job, the tick took %v", took.Round(time.Millisecond)), nil
}

// checkRestart: the host dies while the plugin is sending a slot (the tick is aborted mid
// hermes_send) and restarts over the same kv store. The slot must not be sent again, and the
// next slot must be sent once.
func (s *suite) checkRestart() (string, error) {
	const p = "restart"
	s.clock.Set(t0)
	j, err := s.add(p, abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: to}, nil, "")
	if err != nil {
		return "", err
	}
	s.host.mu.Lock()
	s.host.block[p] = true
	s.host.mu.Unlock()
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan error, 1)
	s.clock.Set(t0.Add(5 * time.Minute))
	go func() {
		_, err := s.p.Tick(ctx, p, t0.Add(5*time.Minute))
		done <- err
	}()
	select {
	case <-s.host.blocked:
	case err := <-done:
		cancel()
		return "", fmt.Errorf("the due slot was not sent (tick: %v)", err)
	case <-time.After(30 * time.Second):
		cancel()
		return "", errors.New("the due slot was not sent within 30 s")
	}
	cancel() // the host dies mid-send
	if err := <-done; err == nil {
		return "", errors.New("the aborted tick reported success")
	}
	if _, err := s.load(); err != nil {
		return "", fmt.Errorf("restart: %w", err)
	}
	for _, d := range []time.Duration{5 * time.Minute, 6 * time.Minute, 10 * time.Minute, 11 * time.Minute} {
		if err := s.tick(p, t0.Add(d)); err != nil {
			return "", err
		}
	}
	if err := wantSends(p, s.delivered(p), t0.Add(5*time.Minute), t0.Add(10*time.Minute)); err != nil {
		return "", fmt.Errorf("slot sent again after the restart? %w", err)
	}
	if j, err = s.job(p, j.ID); err != nil {
		return "", err
	}
	s.interruptedByStop = j.LastError
	return "the interrupted slot was not repeated; the next one ran once", nil
}

// checkDeadline: a prompt job's agent turn outlasts the tick's call deadline, which stops the
// plugin mid-run. The run is recorded as interrupted (not repeated) and the job says the deadline
// stopped it, which the host tells the next tick (TickRequest.interrupted): not what it says
// after a host stop (checkRestart).
func (s *suite) checkDeadline() (string, error) {
	const p = "deadline"
	s.clock.Set(t0)
	j, err := s.add(p, abi.JobSpec{Schedule: "every 5m", Prompt: "think hard", Deliver: to}, nil, "")
	if err != nil {
		return "", err
	}
	s.host.mu.Lock()
	s.host.slow[p] = true
	s.host.mu.Unlock()
	s.clock.Set(t0.Add(5 * time.Minute))
	ctx, cancel := context.WithTimeout(s.ctx, time.Second) // the call's deadline
	_, err = s.p.Tick(ctx, p, t0.Add(5*time.Minute))
	cancel()
	s.host.mu.Lock()
	s.host.slow[p] = false
	s.host.mu.Unlock()
	if !errors.Is(err, hermes.ErrDeadline) {
		return "", fmt.Errorf("a tick whose agent turn outlasts the call's deadline: %v, want a deadline crash", err)
	}
	if err := s.tick(p, t0.Add(6*time.Minute)); err != nil {
		return "", err
	}
	if j, err = s.job(p, j.ID); err != nil {
		return "", err
	}
	if j.LastStatus != "interrupted" || !strings.Contains(j.LastError, "deadline") {
		return "", fmt.Errorf("after the deadline stopped the run: last_status %q, last_error %q; want interrupted, naming the deadline", j.LastStatus, j.LastError)
	}
	if s.interruptedByStop != "" && strings.Contains(s.interruptedByStop, "deadline") {
		return "", fmt.Errorf("after a host stop the job also names a deadline: %q", s.interruptedByStop)
	}
	if d := s.delivered(p); len(d) != 0 {
		return "", fmt.Errorf("the stopped run was sent (%d) or repeated", len(d))
	}
	return j.LastError, nil
}

// checkPinned: a job created in a conversation delivers pinned to it; after /new (the host
// answers "stale") nothing is delivered into the new conversation and the job says why.
func (s *suite) checkPinned() (string, error) {
	const p = "pinned"
	s.clock.Set(t0)
	j, err := s.add(p, abi.JobSpec{Schedule: "every 5m", Text: "reminder"}, &topic, "sess-before")
	if err != nil {
		return "", err
	}
	if err := s.tick(p, t0.Add(5*time.Minute)); err != nil {
		return "", err
	}
	d := s.delivered(p)
	if len(d) != 1 || d[0].PinSessionID != "sess-before" || d[0].Target.ChatID != topic.ChatID || d[0].Target.ThreadID != topic.ThreadID {
		return "", fmt.Errorf("first run: want one delivery into the topic pinned to sess-before, got %+v", d)
	}
	s.host.mu.Lock()
	s.host.stale["sess-before"] = true // the user sent /new
	s.host.mu.Unlock()
	for _, dt := range []time.Duration{10 * time.Minute, 15 * time.Minute} {
		if err := s.tick(p, t0.Add(dt)); err != nil {
			return "", err
		}
	}
	if d := s.delivered(p); len(d) != 1 {
		return "", fmt.Errorf("after /new, %d more message(s) went into the new conversation", len(d)-1)
	}
	if j, err = s.job(p, j.ID); err != nil {
		return "", err
	}
	if j.LastStatus != "stale" {
		return "", fmt.Errorf("after /new the job's last_status is %q, want stale", j.LastStatus)
	}
	return "pinned to the topic's session; stale after /new, nothing delivered", nil
}

// checkSilent: an agent answer starting with [SILENT] sends nothing and is not a failure.
func (s *suite) checkSilent() (string, error) {
	const p = "silent"
	s.clock.Set(t0)
	s.host.mu.Lock()
	s.host.agent[p] = "[SILENT] nothing new"
	s.host.mu.Unlock()
	j, err := s.add(p, abi.JobSpec{Schedule: "every 5m", Prompt: "anything new?", Deliver: to}, nil, "")
	if err != nil {
		return "", err
	}
	if err := s.tick(p, t0.Add(5*time.Minute)); err != nil {
		return "", err
	}
	if d := s.delivered(p); len(d) != 0 {
		return "", fmt.Errorf("sent %q", d[0].Text)
	}
	if j, err = s.job(p, j.ID); err != nil {
		return "", err
	}
	if j.FailureStreak != 0 || j.LastStatus == "" || j.LastStatus == "error" || j.LastStatus == "delivery_failed" {
		return "", fmt.Errorf("a silent run is recorded as %q (streak %d)", j.LastStatus, j.FailureStreak)
	}
	return "status " + j.LastStatus, nil
}

// checkFailures: a failed delivery is recorded on the job with its reason and a streak, reset by
// the next success.
func (s *suite) checkFailures() (string, error) {
	const p = "failures"
	s.clock.Set(t0)
	s.host.mu.Lock()
	s.host.fail[p] = "permanent: chat not found"
	s.host.mu.Unlock()
	j, err := s.add(p, abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: to}, nil, "")
	if err != nil {
		return "", err
	}
	for _, d := range []time.Duration{5 * time.Minute, 10 * time.Minute} {
		if err := s.tick(p, t0.Add(d)); err != nil {
			return "", err
		}
	}
	if j, err = s.job(p, j.ID); err != nil {
		return "", err
	}
	if j.LastStatus != "delivery_failed" || j.FailureStreak != 2 || !strings.Contains(j.LastError, "chat not found") {
		return "", fmt.Errorf("after two failed deliveries: last_status %q, failure_streak %d, last_error %q", j.LastStatus, j.FailureStreak, j.LastError)
	}
	s.host.mu.Lock()
	delete(s.host.fail, p)
	s.host.mu.Unlock()
	if err := s.tick(p, t0.Add(15*time.Minute)); err != nil {
		return "", err
	}
	if j, err = s.job(p, j.ID); err != nil {
		return "", err
	}
	if j.LastStatus != "ok" || j.FailureStreak != 0 {
		return "", fmt.Errorf("after a success: last_status %q, failure_streak %d", j.LastStatus, j.FailureStreak)
	}
	return "delivery_failed ×2 with the reason, then ok", nil
}

// checkPending: a run whose delivery the host answered "pending" is recorded pending; once the
// ledger has the final outcome (asked with hermes_send's delivery_id), the job records it: a
// failure with its reason and a streak, then, for the next run, ok.
func (s *suite) checkPending() (string, error) {
	const p = "pending"
	s.clock.Set(t0)
	s.host.mu.Lock()
	s.host.pending[p] = true
	s.host.mu.Unlock()
	j, err := s.add(p, abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: to}, nil, "")
	if err != nil {
		return "", err
	}
	if err := s.tick(p, t0.Add(5*time.Minute)); err != nil {
		return "", err
	}
	if j, err = s.job(p, j.ID); err != nil {
		return "", err
	}
	if j.LastStatus != "pending" {
		return "", fmt.Errorf("a run the host answered pending is recorded %q", j.LastStatus)
	}
	settle := func(outcome string, at time.Duration) (abi.Job, error) {
		s.host.mu.Lock()
		s.host.outcomes[fmt.Sprintf("dlv_p%d", s.host.ids)] = outcome
		s.host.mu.Unlock()
		if err := s.tick(p, t0.Add(at)); err != nil {
			return abi.Job{}, err
		}
		return s.job(p, j.ID)
	}
	if j, err = settle("permanent: chat not found", 6*time.Minute); err != nil {
		return "", err
	}
	if j.LastStatus != "delivery_failed" || j.FailureStreak != 1 || !strings.Contains(j.LastError, "chat not found") {
		return "", fmt.Errorf("after the ledger failed it: last_status %q, failure_streak %d, last_error %q; want delivery_failed, 1, the reason", j.LastStatus, j.FailureStreak, j.LastError)
	}
	if err := s.tick(p, t0.Add(10*time.Minute)); err != nil {
		return "", err
	}
	if j, err = settle("delivered", 11*time.Minute); err != nil {
		return "", err
	}
	if j.LastStatus != "ok" || j.FailureStreak != 0 {
		return "", fmt.Errorf("after the ledger delivered the next run: last_status %q, failure_streak %d; want ok, 0", j.LastStatus, j.FailureStreak)
	}
	return "pending, then delivery_failed from the ledger; the next run pending, then ok", nil
}

// checkTargets: the same chat named several ways is sent to once; the origin keeps its pin.
func (s *suite) checkTargets() (string, error) {
	const p = "targets"
	s.clock.Set(t0)
	_, err := s.add(p, abi.JobSpec{Schedule: "every 5m", Text: "x",
		Deliver: []string{"origin", "telegram:-100123:42", "telegram:5", "telegram:5", "home", "telegram:-100900:3"}}, &topic, "sess-t")
	if err != nil {
		return "", err
	}
	if err := s.tick(p, t0.Add(5*time.Minute)); err != nil {
		return "", err
	}
	var got []string
	for _, d := range s.delivered(p) {
		got = append(got, fmt.Sprintf("%s:%s:%s pin=%s", d.Target.Platform, d.Target.ChatID, d.Target.ThreadID, d.PinSessionID))
	}
	want := []string{"telegram:-100123:42 pin=sess-t", "telegram:5: pin=", "telegram:-100900:3 pin="}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		return "", fmt.Errorf("sent to [%s], want [%s]", strings.Join(got, ", "), strings.Join(want, ", "))
	}
	return "three chats, once each", nil
}

// checkScope: a chat sees and changes only the jobs created in it; the operator sees all.
func (s *suite) checkScope() (string, error) {
	const p = "scope"
	s.clock.Set(t0)
	j, err := s.add(p, abi.JobSpec{Schedule: "every 5m", Text: "x"}, &topic, "sess-s")
	if err != nil {
		return "", err
	}
	other := abi.Source{Platform: "telegram", ChatType: abi.ChatDM, ChatID: "777", UserID: "777"}
	res, err := s.p.Jobs(s.ctx, p, abi.JobsRequest{Op: abi.JobsList, Scope: &other})
	if err != nil {
		return "", err
	}
	if len(res.Jobs) != 0 {
		return "", fmt.Errorf("another chat lists %d job(s)", len(res.Jobs))
	}
	if _, err := s.p.Jobs(s.ctx, p, abi.JobsRequest{Op: abi.JobsRemove, ID: j.ID, Scope: &other}); abi.CodeOf(err) != abi.CodeNotFound {
		return "", fmt.Errorf("another chat removing the job: %v, want not_found", err)
	}
	if _, err := s.job(p, j.ID); err != nil {
		return "", err
	}
	if _, err := s.p.Jobs(s.ctx, p, abi.JobsRequest{Op: abi.JobsRemove, ID: j.ID, Scope: &topic}); err != nil {
		return "", fmt.Errorf("its own chat removing the job: %w", err)
	}
	return "other chats see nothing and cannot remove it", nil
}

// checkChatTargets: a job created from a chat (a scoped add) may deliver into that chat, in any
// of its threads; another chat, or a home channel, is refused with denied unless the profile's
// chat_targets grants it (the targets profile grants everything, this one nothing). The
// operator's jobs are not limited.
func (s *suite) checkChatTargets() (string, error) {
	const p = "chattargets"
	s.clock.Set(t0)
	for _, to := range [][]string{{"telegram:777"}, {"home"}, {"origin", "telegram:-100900:3"}} {
		_, err := s.add(p, abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: to}, &topic, "sess-c")
		if abi.CodeOf(err) != abi.CodeDenied {
			return "", fmt.Errorf("a chat's job to %v: %v, want denied", to, err)
		}
	}
	if _, err := s.add(p, abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: []string{"origin", "telegram:-100123:7"}}, &topic, "sess-c"); err != nil {
		return "", fmt.Errorf("a chat's job to its own chat, another thread: %w", err)
	}
	if _, err := s.add(p, abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: []string{"telegram:777", "home"}}, nil, ""); err != nil {
		return "", fmt.Errorf("the operator's job to another chat: %w", err)
	}
	if err := s.tick(p, t0.Add(5*time.Minute)); err != nil {
		return "", err
	}
	var got []string
	for _, d := range s.delivered(p) {
		got = append(got, d.Target.ChatID+":"+d.Target.ThreadID)
	}
	sort.Strings(got)
	if want := "-100123:42,-100123:7,-100900:3,777:"; strings.Join(got, ",") != want {
		return "", fmt.Errorf("sent to [%s], want [%s]", strings.Join(got, ","), want)
	}
	return "another chat and home refused from a chat; its own threads and the operator's targets sent", nil
}

// checkPlatforms: a target on a platform no plugin serves for the profile (the host lists the
// served ones in the request) is refused when the job is created, with bad_request.
func (s *suite) checkPlatforms() (string, error) {
	const p = "platforms"
	s.clock.Set(t0)
	served := []string{"telegram"}
	add := func(to ...string) error {
		_, err := s.p.Jobs(s.ctx, p, abi.JobsRequest{Op: abi.JobsAdd, Job: &abi.JobSpec{Schedule: "every 5m", Text: "x", Deliver: to}, Platforms: &served})
		return err
	}
	if err := add("telegram:5", "slack:C1"); abi.CodeOf(err) != abi.CodeBadRequest {
		return "", fmt.Errorf("a target on slack, which no plugin serves: %v, want bad_request", err)
	}
	if err := add("telegram:5"); err != nil {
		return "", fmt.Errorf("a target on telegram, which is served: %w", err)
	}
	return "slack:C1 refused, telegram:5 accepted", nil
}
