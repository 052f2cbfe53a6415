package main

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var berlin = mustLoc("Europe/Berlin")

func mustLoc(name string) *time.Location {
	l, err := location(name)
	if err != nil {
		panic(err)
	}
	return l
}

func at(loc *time.Location, s string) time.Time {
	t, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		panic(err)
	}
	return t
}

// slots lists the first n slots after from.
func slots(t *testing.T, s schedule, from time.Time, n int, loc *time.Location) []string {
	t.Helper()
	var out []string
	ms := from.UnixMilli()
	for range n {
		next, ok := s.next(ms, loc)
		if !ok {
			break
		}
		if next <= ms {
			t.Fatalf("next(%d) = %d: not after", ms, next)
		}
		out = append(out, time.UnixMilli(next).In(loc).Format("01-02 15:04 MST"))
		ms = next
	}
	return out
}

func TestParseScheduleForms(t *testing.T) {
	now := at(berlin, "2026-06-10 12:00") // a Wednesday
	cases := []struct{ in, kind, expr, first string }{
		{"in 30m", kindOnce, "", "06-10 12:30 CEST"},
		{"in 2h", kindOnce, "", "06-10 14:00 CEST"},
		{"in 1d", kindOnce, "", "06-11 12:00 CEST"},
		{"2026-06-11 08:15", kindOnce, "", "06-11 08:15 CEST"},          // naive: the job's zone
		{"2026-06-11T08:15:00Z", kindOnce, "", "06-11 10:15 CEST"},      // explicit offset wins
		{"2026-06-11T08:15:00+02:00", kindOnce, "", "06-11 08:15 CEST"}, //
		{"every 2h", kindInterval, "", "06-10 14:00 CEST"},
		{"every 30m", kindInterval, "", "06-10 12:30 CEST"},
		{"every day", kindInterval, "", "06-11 12:00 CEST"},
		{"daily at 7am", kindCron, "0 7 * * *", "06-11 07:00 CEST"},
		{"every day at 19:30", kindCron, "30 19 * * *", "06-10 19:30 CEST"},
		{"weekdays at 9am", kindCron, "0 9 * * 1-5", "06-11 09:00 CEST"},
		{"weekends at 10:00", kindCron, "0 10 * * 0,6", "06-13 10:00 CEST"},
		{"every monday at 9am", kindCron, "0 9 * * 1", "06-15 09:00 CEST"},
		{"every monday 9am", kindCron, "0 9 * * 1", "06-15 09:00 CEST"},
		{"Monday, Wednesday at 6:45 pm", kindCron, "45 18 * * 1,3", "06-10 18:45 CEST"},
		{"daily at noon", kindCron, "0 12 * * *", "06-11 12:00 CEST"},
		{"0 9 * * MON-FRI", kindCron, "0 9 * * MON-FRI", "06-11 09:00 CEST"},
		{"*/5 * * * *", kindCron, "*/5 * * * *", "06-10 12:05 CEST"},
		{"@hourly", kindCron, "@hourly", "06-10 13:00 CEST"},
	}
	for _, c := range cases {
		s, err := parseSchedule(c.in, now, berlin)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		got := slots(t, s, now, 1, berlin)
		if s.Kind != c.kind || s.Expr != c.expr || len(got) != 1 || got[0] != c.first {
			t.Errorf("%q: %+v first %v, want %s %q %s", c.in, s, got, c.kind, c.expr, c.first)
		}
	}
	for in, want := range map[string]string{
		"":                      "empty",
		"30m":                   `say "in 30m" to run once, or "every 30m"`,
		"every 10s":             "shortest interval is one minute",
		"in 3 fortnights":       "want a duration",
		"daily at 25:00":        "out of range",
		"daily at 13pm":         "hour out of range",
		"61 * * * *":            "not a schedule I understand",
		"whenever you like":     "not a schedule I understand",
		"CRON_TZ=UTC 0 9 * * *": "time zone",
		"@every 5m":             `write "every …"`,
	} {
		if _, err := parseSchedule(in, now, berlin); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to say %q", in, err, want)
		}
	}
}

func TestIntervalsCountFromTheAnchor(t *testing.T) {
	now := at(time.UTC, "2026-06-10 12:00")
	s, _ := parseSchedule("every 2h", now, time.UTC)
	// Asked from any point, the next slot is on the anchor's grid (no drift from late runs).
	if got := slots(t, s, now.Add(3*time.Hour+17*time.Minute), 2, time.UTC); strings.Join(got, ",") != "06-10 16:00 UTC,06-10 18:00 UTC" {
		t.Fatalf("slots %v", got)
	}
	latest, missed, _ := s.latestDue(now.Add(2*time.Hour).UnixMilli(), now.Add(9*time.Hour).UnixMilli(), time.UTC)
	if time.UnixMilli(latest).UTC().Format("15:04") != "20:00" || missed != 3 {
		t.Fatalf("latestDue %v %d", time.UnixMilli(latest).UTC(), missed)
	}
}

// Daylight saving time in Europe/Berlin: clocks go forward on 2026-03-29 at 02:00 (to 03:00) and
// back on 2026-10-25 at 03:00 (to 02:00).
func TestDaylightSavingTime(t *testing.T) {
	from := func(s string) time.Time { return at(berlin, s) }
	cron := func(expr string) schedule { return schedule{Kind: kindCron, Expr: expr} }
	cases := []struct {
		name  string
		s     schedule
		from  time.Time
		n     int
		want  string
		count *int // slots within the 24 h after from, if checked
	}{
		// A fixed time that does not exist runs when the gap ends, once.
		{"daily 02:30, spring", cron("30 2 * * *"), from("2026-03-28 12:00"), 3, "03-29 03:00 CEST,03-30 02:30 CEST,03-31 02:30 CEST", nil},
		// A fixed time that happens twice runs at its first occurrence only.
		{"daily 02:30, autumn", cron("30 2 * * *"), from("2026-10-24 12:00"), 3, "10-25 02:30 CEST,10-26 02:30 CET,10-27 02:30 CET", nil},
		{"fixed hours 1-3, autumn", cron("*/30 1-3 * * *"), from("2026-10-25 00:50"), 6,
			"10-25 01:00 CEST,10-25 01:30 CEST,10-25 02:00 CEST,10-25 02:30 CEST,10-25 03:00 CET,10-25 03:30 CET", nil},
		// Wildcard hours run by elapsed time: both copies of the repeated hour, none of the gap.
		{"hourly, spring", cron("0 * * * *"), from("2026-03-29 00:30"), 3, "03-29 01:00 CET,03-29 03:00 CEST,03-29 04:00 CEST", nil},
		{"hourly, autumn", cron("0 * * * *"), from("2026-10-25 01:30"), 3, "10-25 02:00 CEST,10-25 02:00 CET,10-25 03:00 CET", nil},
		// An interval is elapsed time, whatever the clocks say.
		{"every 1h, autumn", schedule{Kind: kindInterval, EveryMs: time.Hour.Milliseconds(), AnchorMs: from("2026-10-25 01:00").UnixMilli()},
			from("2026-10-25 01:30"), 3, "10-25 02:00 CEST,10-25 02:00 CET,10-25 03:00 CET", nil},
	}
	for _, c := range cases {
		if got := strings.Join(slots(t, c.s, c.from, c.n, berlin), ","); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
	// Every five minutes over a whole DST day is every five minutes of real time: the spring
	// day has 23 hours (276 slots), the autumn day 25 (300).
	for day, want := range map[string]int{"2026-03-29": 276, "2026-10-25": 300, "2026-06-10": 288} {
		start := from(day + " 00:00")
		end := start.AddDate(0, 0, 1)
		s := cron("*/5 * * * *")
		n, ms := 0, start.UnixMilli()
		for {
			next, _ := s.next(ms, berlin)
			if next > end.UnixMilli() {
				break
			}
			if next-ms != 5*time.Minute.Milliseconds() {
				t.Fatalf("%s: a gap of %v at %v", day, time.Duration(next-ms)*time.Millisecond, time.UnixMilli(ms).In(berlin))
			}
			n, ms = n+1, next
		}
		if n != want {
			t.Errorf("%s: %d slots, want %d", day, n, want)
		}
	}
}

// Other zones: New York (DST on other dates, 2026-03-08 and 2026-11-01) and a zone without DST.
func TestTimeZones(t *testing.T) {
	ny, kolkata := mustLoc("America/New_York"), mustLoc("Asia/Kolkata")
	s := schedule{Kind: kindCron, Expr: "0 9 * * *"}
	if got := strings.Join(slots(t, s, at(ny, "2026-03-07 12:00"), 2, ny), ","); got != "03-08 09:00 EDT,03-09 09:00 EDT" {
		t.Errorf("New York: %s", got)
	}
	got := slots(t, s, at(kolkata, "2026-03-07 12:00"), 1, kolkata)
	if len(got) != 1 || got[0] != "03-08 09:00 IST" {
		t.Errorf("Kolkata: %v", got)
	}
	// 09:00 in Kolkata is 03:30 UTC.
	n, _ := s.next(at(kolkata, "2026-03-07 12:00").UnixMilli(), kolkata)
	if time.UnixMilli(n).UTC().Format("15:04") != "03:30" {
		t.Errorf("Kolkata in UTC: %v", time.UnixMilli(n).UTC())
	}
	if _, err := location("Mars/Olympus_Mons"); err == nil {
		t.Error("an unknown zone loaded")
	}
}

func TestGrace(t *testing.T) {
	now := at(time.UTC, "2026-06-10 12:00").UnixMilli()
	for expr, want := range map[string]time.Duration{
		"*/5 * * * *": 150 * time.Second, // half of five minutes
		"* * * * *":   2 * time.Minute,   // at least two minutes
		"0 * * * *":   30 * time.Minute,
		"0 9 * * *":   2 * time.Hour, // at most two hours
	} {
		if got := (schedule{Kind: kindCron, Expr: expr}).grace(now, time.UTC); got != want {
			t.Errorf("%s: grace %v, want %v", expr, got, want)
		}
	}
}

// TestLatestDueAfterLongDowntime: after months of downtime the latest due slot is the last slot
// before now (not a slot some thousand steps after the first missed one), for every kind of
// schedule and across both DST changes; the count of missed slots stops at maxCounted.
func TestLatestDueAfterLongDowntime(t *testing.T) {
	first := at(berlin, "2026-03-01 00:00")
	for _, c := range []struct {
		name string
		s    schedule
	}{
		{"every minute", schedule{Kind: kindCron, Expr: "* * * * *"}},
		{"every 5 minutes", schedule{Kind: kindCron, Expr: "*/5 * * * *"}},
		{"hourly", schedule{Kind: kindCron, Expr: "0 * * * *"}},
		{"daily 02:30 (DST gap and repeat)", schedule{Kind: kindCron, Expr: "30 2 * * *"}},
		{"weekdays 9:00", schedule{Kind: kindCron, Expr: "0 9 * * 1-5"}},
		{"every 7m", schedule{Kind: kindInterval, EveryMs: (7 * time.Minute).Milliseconds(), AnchorMs: first.UnixMilli()}},
	} {
		firstSlot, _ := c.s.next(first.UnixMilli()-1, berlin)
		for _, now := range []time.Time{
			at(berlin, "2026-03-29 03:01"), // just after the spring gap
			at(berlin, "2026-10-25 02:40"), // in the repeated hour (first copy)
			at(berlin, "2026-10-25 02:40").Add(time.Hour),
			at(berlin, "2026-10-01 12:34"), // seven months on
			at(berlin, "2031-01-01 00:00"), // years on
		} {
			latest, missed, more := c.s.latestDue(firstSlot, now.UnixMilli(), berlin)
			after, ok := c.s.next(latest, berlin)
			if latest > now.UnixMilli() || (ok && after <= now.UnixMilli()) {
				t.Errorf("%s, down until %v: latest %v is not the last slot before now (the next is %v)", c.name, now,
					time.UnixMilli(latest).In(berlin), time.UnixMilli(after).In(berlin))
			}
			if latest != firstSlot {
				if prev, _ := c.s.next(latest-1, berlin); prev != latest {
					t.Errorf("%s, down until %v: latest %v is not a slot", c.name, now, time.UnixMilli(latest).In(berlin))
				}
			}
			if c.s.Kind == kindCron && (missed > maxCounted || (more && missed != maxCounted)) {
				t.Errorf("%s: counted %d missed slots (more %v), want at most %d", c.name, missed, more, maxCounted)
			}
		}
	}
	// Counted exactly below the bound: six hours of */5 from 00:00 are 71 more slots after the
	// first; a day's 287 are "more than 100".
	s := schedule{Kind: kindCron, Expr: "*/5 * * * *"}
	day := at(time.UTC, "2026-06-10 00:00")
	if latest, missed, more := s.latestDue(day.UnixMilli(), day.Add(6*time.Hour-time.Second).UnixMilli(), time.UTC); missed != 71 || more ||
		time.UnixMilli(latest).UTC().Format("15:04") != "05:55" {
		t.Errorf("six hours of */5: latest %v, missed %d (more %v)", time.UnixMilli(latest).UTC(), missed, more)
	}
	if latest, missed, more := s.latestDue(day.UnixMilli(), day.Add(24*time.Hour-time.Second).UnixMilli(), time.UTC); missed != maxCounted || !more ||
		time.UnixMilli(latest).UTC().Format("15:04") != "23:55" {
		t.Errorf("a day of */5: latest %v, missed %d (more %v)", time.UnixMilli(latest).UTC(), missed, more)
	}
}

// TestLastSlotAgreesAndIsBounded: lastSlot finds what stepping through every slot finds, for
// random schedules and downtimes, and calls next at most 65 times whatever the range (the bound
// its comment proves), here up to 2^62 ms.
func TestLastSlotAgreesAndIsBounded(t *testing.T) {
	rnd := rand.New(rand.NewPCG(29, 8))
	for range 2000 {
		// Slots at a random set of instants: a random grid with random gaps.
		step := 1 + rnd.Int64N(1000)
		gap := 1 + rnd.Int64N(5)
		calls := 0
		next := func(t int64) (int64, bool) {
			calls++
			k := t/step + 1
			for k%gap != 0 {
				k++
			}
			return k * step, true
		}
		first, _ := next(rnd.Int64N(10000))
		now := first + rnd.Int64N(100000)
		want := first
		for n, _ := next(first); n <= now; n, _ = next(n) {
			want = n
		}
		calls = 0
		if got := lastSlot(next, first, now); got != want {
			t.Fatalf("step %d gap %d, %d..%d: lastSlot %d, stepping %d", step, gap, first, now, got, want)
		}
		if calls > 65 {
			t.Fatalf("%d calls of next", calls)
		}
	}
	calls := 0
	minute := func(t int64) (int64, bool) { calls++; return (t/60000 + 1) * 60000, true }
	now := int64(1) << 62
	if got := lastSlot(minute, 0, now); got != now/60000*60000 || calls > 65 {
		t.Fatalf("2^62 ms of minutes: lastSlot %d (want %d) in %d calls", got, now/60000*60000, calls)
	}
	// A schedule with no slot after first: first is the latest.
	if got := lastSlot(func(int64) (int64, bool) { return 0, false }, 5, 1000); got != 5 {
		t.Fatalf("no next slot: %d", got)
	}
}

// TestNextElapsedIsRobfigs: the fixed-offset shortcut answers what robfig's Next answers in the
// location, for random times around offset changes (Berlin's two, Lord Howe's half-hour one,
// New York's), and in a zone without changes.
func TestNextElapsedIsRobfigs(t *testing.T) {
	rnd := rand.New(rand.NewPCG(29, 11))
	zones := map[string][]string{
		"Europe/Berlin":       {"2026-03-29 02:00", "2026-10-25 02:30"},
		"Australia/Lord_Howe": {"2026-04-05 01:45", "2026-10-04 02:00"},
		"America/New_York":    {"2026-03-08 02:00", "2026-11-01 01:30"},
		"Asia/Kolkata":        {"2026-06-10 12:00"},
	}
	for _, expr := range []string{"* * * * *", "*/5 * * * *", "0 * * * *", "30 * * * *", "*/7 * 1 * *", "15,45 * * * 0", "@hourly"} {
		spec, err := parsedCron(expr)
		if err != nil {
			t.Fatal(err)
		}
		for zone, around := range zones {
			loc := mustLoc(zone)
			for _, a := range around {
				center := at(loc, a)
				for range 300 {
					after := center.Add(time.Duration(rnd.Int64N(int64(6*time.Hour))) - 3*time.Hour).Add(time.Duration(rnd.IntN(60000)) * time.Millisecond).In(loc)
					if got, want := nextElapsed(spec, after), spec.Next(after); !got.Equal(want) {
						t.Fatalf("%s in %s after %v: %v, robfig says %v", expr, zone, after, got, want)
					}
				}
			}
		}
	}
}
