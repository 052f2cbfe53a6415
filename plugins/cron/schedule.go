package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
)

// Kinds of schedule.
const (
	kindOnce     = "once"     // one slot, at AtMs
	kindInterval = "interval" // every EveryMs, counted from AnchorMs
	kindCron     = "cron"     // a 5-field cron expression, in the job's time zone
)

// schedule is a parsed schedule. It is stored with the job, so a job keeps the schedule it was
// created with even if the parser's rules change.
type schedule struct {
	Kind     string `json:"kind"`
	AtMs     int64  `json:"at_ms,omitempty"`
	EveryMs  int64  `json:"every_ms,omitempty"`
	AnchorMs int64  `json:"anchor_ms,omitempty"`
	Expr     string `json:"expr,omitempty"`
}

// oneShotGrace is how far in the past a one-shot may be when it is created (a clock skew, a
// message that took a while), and how late a missed slot may run under catch_up "skip".
const oneShotGrace = 2 * time.Minute

// cronParser reads standard 5-field expressions and the @daily-style descriptors.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

var cronCache sync.Map // expression → cron.Schedule

func parsedCron(expr string) (cron.Schedule, error) {
	if v, ok := cronCache.Load(expr); ok {
		return v.(cron.Schedule), nil
	}
	spec, err := cronParser.Parse(expr)
	if err == nil {
		cronCache.Store(expr, spec)
	}
	return spec, err
}

var (
	dayNames = map[string]string{
		"sunday": "0", "sun": "0", "monday": "1", "mon": "1", "tuesday": "2", "tue": "2", "tues": "2",
		"wednesday": "3", "wed": "3", "thursday": "4", "thu": "4", "thur": "4", "thurs": "4",
		"friday": "5", "fri": "5", "saturday": "6", "sat": "6",
	}
)

// parseSchedule reads what a user wrote. now is the host clock; loc the job's time zone, in
// which ISO times without an offset and the natural forms are read.
//
//	in 30m | in 2h | in 1d                   once, relative to now
//	2026-12-01 09:00 | 2026-12-01T09:00:00Z  once, at that time (no offset: in loc)
//	every 30m | every 2h | every day         interval, counted from now
//	daily at 7am | every day at 19:30        cron "0 7 * * *", "30 19 * * *"
//	weekdays at 9am | weekends at 10:00      cron "0 9 * * 1-5", "0 10 * * 0,6"
//	every monday at 9am | mon,wed at 9am     cron "0 9 * * 1", "0 9 * * 1,3"
//	0 9 * * MON-FRI | @hourly                cron, as written
func parseSchedule(text string, now time.Time, loc *time.Location) (schedule, error) {
	s := strings.ToLower(strings.Join(strings.Fields(text), " "))
	if s == "" {
		return schedule{}, fmt.Errorf("the schedule is empty")
	}
	if rest, ok := strings.CutPrefix(s, "in "); ok {
		d, err := parseDuration(rest)
		if err != nil {
			return schedule{}, fmt.Errorf("%q: %v", text, err)
		}
		return schedule{Kind: kindOnce, AtMs: now.Add(d).UnixMilli()}, nil
	}
	if t, ok := parseISO(strings.TrimSpace(text), loc); ok {
		return schedule{Kind: kindOnce, AtMs: t.UnixMilli()}, nil
	}
	if rest, ok := strings.CutPrefix(s, "every "); ok && !strings.Contains(rest, " at ") {
		switch rest {
		case "minute":
			rest = "1m"
		case "hour":
			rest = "1h"
		case "day":
			rest = "1d"
		case "week":
			rest = "1w"
		}
		if d, err := parseDuration(rest); err == nil {
			if d < time.Minute {
				return schedule{}, fmt.Errorf("%q: the shortest interval is one minute", text)
			}
			return schedule{Kind: kindInterval, EveryMs: d.Milliseconds(), AnchorMs: now.UnixMilli()}, nil
		}
	}
	if _, _, ok := splitDuration(s); ok {
		return schedule{}, fmt.Errorf("%q: say \"in %s\" to run once, or \"every %s\" to repeat", text, s, s)
	}
	if expr, ok, err := naturalCron(s); ok {
		if err != nil {
			return schedule{}, fmt.Errorf("%q: %v", text, err)
		}
		return schedule{Kind: kindCron, Expr: expr}, nil
	}
	if _, err := cronParser.Parse(strings.TrimSpace(text)); err != nil {
		return schedule{}, fmt.Errorf("%q is not a schedule I understand (%v); try \"in 30m\", \"every 2h\", \"daily at 7am\", \"weekdays at 9am\", \"0 9 * * MON-FRI\" or an ISO time", text, err)
	}
	if strings.Contains(strings.ToUpper(text), "TZ=") {
		return schedule{}, fmt.Errorf("%q: give the time zone as the job's timezone, not in the expression", text)
	}
	if strings.HasPrefix(s, "@every") {
		return schedule{}, fmt.Errorf("%q: write \"every …\" for an interval", text)
	}
	return schedule{Kind: kindCron, Expr: strings.TrimSpace(text)}, nil
}

func parseDuration(s string) (time.Duration, error) {
	num, word, ok := splitDuration(strings.TrimSpace(s))
	if !ok {
		return 0, fmt.Errorf("want a duration like 30m, 2h or 1d")
	}
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 || n > 100000 {
		return 0, fmt.Errorf("%q is out of range", num)
	}
	unit := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour}[word[0]]
	return time.Duration(n) * unit, nil
}

// parseISO reads an ISO 8601 time; one without an offset is in loc.
func parseISO(s string, loc *time.Location) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04Z07:00"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02 15:04"} {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// naturalCron turns "daily at 7am", "weekdays at 9am", "every monday at 9am" and
// "monday, wednesday at 9am" into a cron expression. ok is false when s is not of that shape.
func naturalCron(s string) (expr string, ok bool, err error) {
	days, at, found := strings.Cut(s, " at ")
	if !found {
		// "every monday 9am"
		f := strings.Fields(s)
		if len(f) == 3 && f[0] == "every" {
			if _, isDay := dayNames[f[1]]; isDay {
				days, at, found = "every "+f[1], f[2], true
			}
		}
		if !found {
			return "", false, nil
		}
	}
	days = strings.TrimPrefix(strings.TrimSpace(days), "every ")
	var dow string
	switch days {
	case "daily", "day", "every day", "":
		dow = "*"
	case "weekday", "weekdays":
		dow = "1-5"
	case "weekend", "weekends":
		dow = "0,6"
	default:
		var list []string
		for _, d := range strings.FieldsFunc(days, func(r rune) bool { return r == ',' || r == ' ' || r == '&' }) {
			if d == "and" {
				continue
			}
			n, isDay := dayNames[strings.TrimSuffix(d, "s")]
			if !isDay {
				n, isDay = dayNames[d]
			}
			if !isDay {
				return "", false, nil
			}
			list = append(list, n)
		}
		if len(list) == 0 {
			return "", false, nil
		}
		dow = strings.Join(list, ",")
	}
	h, m, err := parseClock(at)
	if err != nil {
		return "", true, err
	}
	return fmt.Sprintf("%d %d * * %s", m, h, dow), true, nil
}

// parseClock reads 7am, 7:30 pm, 19:30, noon, midnight.
func parseClock(s string) (hour, minute int, err error) {
	s = strings.TrimSpace(s)
	switch s {
	case "noon":
		return 12, 0, nil
	case "midnight":
		return 0, 0, nil
	}
	h, mm, ampm, ok := splitClock(s)
	if !ok {
		return 0, 0, fmt.Errorf("%q is not a time of day (like 7am, 7:30pm or 19:30)", s)
	}
	hour, _ = strconv.Atoi(h)
	if mm != "" {
		minute, _ = strconv.Atoi(mm)
	}
	switch ampm {
	case "am", "pm":
		if hour < 1 || hour > 12 {
			return 0, 0, fmt.Errorf("%q: hour out of range", s)
		}
		hour %= 12
		if ampm == "pm" {
			hour += 12
		}
	}
	if hour > 23 || minute > 59 {
		return 0, 0, fmt.Errorf("%q: out of range", s)
	}
	return hour, minute, nil
}

// next returns the first slot strictly after afterMs, and false when there is none (a one-shot
// that has passed).
//
// Cron expressions follow the wall clock of loc, with the Vixie cron rule for daylight saving
// time: an expression whose hour field is a wildcard ("*/5 * * * *", "0 * * * *") runs by
// elapsed time, so it runs in both copies of a repeated hour and skips the labels of a hour that
// does not exist; an expression with fixed hours ("30 2 * * *") runs once per wall-clock time:
// a time repeated when clocks go back runs at its first occurrence only, and a time that does not
// exist when clocks go forward runs when the gap ends (03:00 for 02:30 in Europe/Berlin).
func (s schedule) next(afterMs int64, loc *time.Location) (int64, bool) {
	switch s.Kind {
	case kindOnce:
		return s.AtMs, s.AtMs > afterMs
	case kindInterval:
		if s.EveryMs <= 0 {
			return 0, false
		}
		k := int64(1)
		if afterMs >= s.AnchorMs {
			k = (afterMs-s.AnchorMs)/s.EveryMs + 1
		}
		return s.AnchorMs + k*s.EveryMs, true
	case kindCron:
		spec, err := parsedCron(s.Expr)
		if err != nil {
			return 0, false
		}
		after := time.UnixMilli(afterMs).In(loc)
		var t time.Time
		if wildcardHour(s.Expr) {
			t = nextElapsed(spec, after)
		} else {
			t = nextWall(spec, after, loc)
		}
		if t.IsZero() {
			return 0, false
		}
		return t.UnixMilli(), true
	}
	return 0, false
}

// nextElapsed is spec.Next(after) with elapsed-time semantics: robfig computes in after's
// location, stepping its wall clock. It computes in the fixed offset the location has at after
// instead, and keeps that answer when it comes before the location's next offset change: up to
// there the two have the same wall clock, so the first matching time is the same. Only an
// answer past a change is computed again in the location. Why: the location's wall clock costs a
// zone lookup at every step, which in the Wasm sandbox makes one call about 50 times slower
// (some 0.35 ms for */5 in Europe/Berlin).
func nextElapsed(spec cron.Schedule, after time.Time) time.Time {
	name, off := after.Zone()
	_, change := after.ZoneBounds()
	if t := spec.Next(after.In(time.FixedZone(name, off))); !t.IsZero() && (change.IsZero() || t.Before(change)) {
		return t.In(after.Location())
	}
	return spec.Next(after)
}

// wildcardHour reports whether a cron expression's hour field starts with "*" (or it is a
// descriptor like @hourly that runs every hour).
func wildcardHour(expr string) bool {
	f := strings.Fields(expr)
	if len(f) == 1 {
		return f[0] == "@hourly"
	}
	return len(f) >= 2 && strings.HasPrefix(f[1], "*")
}

// nextWall finds the next wall-clock time of loc matching spec after after, and maps it to an
// instant: the first occurrence of a repeated time, the end of the gap for a missing one.
func nextWall(spec cron.Schedule, after time.Time, loc *time.Location) time.Time {
	w := wall(after)
	for range 1000 {
		w = spec.Next(w) // spec's location is UTC (the parser's default): w is a naive wall time
		if w.IsZero() {
			return time.Time{}
		}
		if t := instant(w, loc); t.After(after) {
			return t
		}
	}
	return time.Time{}
}

// wall is t's wall clock in its location, relabelled as UTC.
func wall(t time.Time) time.Time {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return time.Date(y, mo, d, h, mi, s, 0, time.UTC)
}

// instant maps a naive wall time w (UTC-labelled) to an instant of loc: the earliest instant
// whose wall clock is w, or, when w falls in a gap, the instant the gap ends.
func instant(w time.Time, loc *time.Location) time.Time {
	offsets := map[int]bool{}
	for _, probe := range []time.Time{w.Add(-26 * time.Hour), w, w.Add(26 * time.Hour)} {
		_, off := probe.In(loc).Zone()
		offsets[off] = true
	}
	var best time.Time
	for off := range offsets {
		t := w.Add(-time.Duration(off) * time.Second)
		if wall(t.In(loc)).Equal(w) && (best.IsZero() || t.Before(best)) {
			best = t
		}
	}
	if !best.IsZero() {
		return best
	}
	// A gap: w-maxOffset is before the transition, w-minOffset after it. Find the transition.
	lo, hi := w, w
	for off := range offsets {
		t := w.Add(-time.Duration(off) * time.Second)
		if lo.Equal(w) || t.Before(lo) {
			lo = t
		}
		if hi.Equal(w) || t.After(hi) {
			hi = t
		}
	}
	_, offHi := hi.In(loc).Zone()
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Second)
		if _, off := mid.In(loc).Zone(); off == offHi {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// maxCounted bounds how many missed slots a catch-up counts for its message and log. Counting is
// the one thing here that steps through slots; finding the latest does not (lastSlot).
const maxCounted = 100

// latestDue returns the latest slot at or before nowMs, counting from the due slot firstMs
// (firstMs <= nowMs), and how many slots after firstMs up to it were also due (missed). A backlog
// of more than maxCounted slots is counted as maxCounted, with more set. The work is bounded
// whatever the downtime: at most 65 calls of next to find the slot (lastSlot) and maxCounted to
// count; intervals are computed outright.
func (s schedule) latestDue(firstMs, nowMs int64, loc *time.Location) (latest int64, missed int, more bool) {
	if s.Kind == kindInterval && s.EveryMs > 0 {
		n := (nowMs - firstMs) / s.EveryMs
		return firstMs + n*s.EveryMs, int(n), false
	}
	next := func(t int64) (int64, bool) { return s.next(t, loc) }
	latest = lastSlot(next, firstMs, nowMs)
	missed, more = countSlots(next, firstMs, latest, maxCounted)
	return latest, missed, more
}

// lastSlot returns the last slot at or before now, given first <= now, the due slot the search
// starts from, and next, the schedule's successor function: next(t) is the first slot strictly
// after t (ok false: none). It bisects over time instead of stepping through the slots.
//
// Why it is right: next is non-decreasing in t (the first slot after a later time is not
// earlier), so P(t) = "next(t) exists and next(t) <= now" is true up to some time and false
// after it. P(first) is checked first (false: first itself is the latest slot, nothing after it
// is due); P(now) is false since next(now) > now. The loop keeps P(lo) and not P(hi) while it
// halves hi-lo, so it ends with hi = lo+1, and then next(lo) is the last slot <= now: it is <= now
// by P(lo), and a slot s with next(lo) < s <= now would make P(s-1) true (next(s-1) <= s) for an
// s-1 >= next(lo) >= lo+1 = hi, where P is false.
//
// Why it is bounded: hi-lo starts at most now-first < 2^63 and halves at every step, so the loop
// runs at most 63 times; with the first check and the last call, next is called at most 65 times,
// whether the host was down for a minute or for years. Each call of next is bounded in turn
// (robfig's Next searches at most five years ahead; nextWall steps at most 1000 times).
func lastSlot(next func(int64) (int64, bool), first, now int64) int64 {
	if n, ok := next(first); !ok || n > now {
		return first
	}
	lo, hi := first, now
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if n, ok := next(mid); ok && n <= now {
			lo = mid
		} else {
			hi = mid
		}
	}
	n, _ := next(lo)
	return n
}

// countSlots counts the slots after first up to latest, stopping at limit (more: there are more).
func countSlots(next func(int64) (int64, bool), first, latest int64, limit int) (n int, more bool) {
	for t := first; t < latest; {
		if n == limit {
			return n, true
		}
		nt, ok := next(t)
		if !ok || nt > latest {
			break
		}
		t, n = nt, n+1
	}
	return n, false
}

// period is the time between a slot and the one after it (for the catch-up grace).
func (s schedule) period(slotMs int64, loc *time.Location) time.Duration {
	if s.Kind == kindOnce {
		return 0
	}
	n, ok := s.next(slotMs, loc)
	if !ok {
		return 0
	}
	return time.Duration(n-slotMs) * time.Millisecond
}

// grace is how late a slot may run and still count as on time: half the period, at least two
// minutes and at most two hours (one-shots: two minutes).
func (s schedule) grace(slotMs int64, loc *time.Location) time.Duration {
	return min(max(s.period(slotMs, loc)/2, oneShotGrace), 2*time.Hour)
}

// display describes the schedule for listings.
func (s schedule) display(loc *time.Location) string {
	switch s.Kind {
	case kindOnce:
		return "once at " + time.UnixMilli(s.AtMs).In(loc).Format("2006-01-02 15:04 MST")
	case kindInterval:
		return "every " + shortDuration(time.Duration(s.EveryMs)*time.Millisecond)
	case kindCron:
		return "cron " + s.Expr + " (" + loc.String() + ")"
	}
	return s.Kind
}

func shortDuration(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	case d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	case d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	}
	return d.String()
}
