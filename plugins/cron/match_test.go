package main

import (
	"regexp"
	"testing"
)

// The regular expressions the hand-written matchers in match.go stand for.
var (
	jobNameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	platformRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	durationRE = regexp.MustCompile(`^(\d+)\s*(s|sec|secs|second|seconds|m|min|mins|minute|minutes|h|hr|hrs|hour|hours|d|day|days|w|week|weeks)$`)
	clockRE    = regexp.MustCompile(`^(\d{1,2})(?::(\d{2}))?\s*(am|pm)?$`)
)

// checkMatchers fails when a matcher disagrees with its regular expression on s.
func checkMatchers(t *testing.T, s string) {
	t.Helper()
	if got, want := isJobName(s), jobNameRE.MatchString(s); got != want {
		t.Errorf("isJobName(%q) = %v, the expression says %v", s, got, want)
	}
	if got, want := isPlatformName(s), platformRE.MatchString(s); got != want {
		t.Errorf("isPlatformName(%q) = %v, the expression says %v", s, got, want)
	}
	num, unit, ok := splitDuration(s)
	if m := durationRE.FindStringSubmatch(s); (m != nil) != ok || m != nil && (m[1] != num || m[2] != unit) {
		t.Errorf("splitDuration(%q) = %q, %q, %v; the expression says %q", s, num, unit, ok, m)
	}
	h, mm, ampm, ok := splitClock(s)
	if m := clockRE.FindStringSubmatch(s); (m != nil) != ok || m != nil && (m[1] != h || m[2] != mm || m[3] != ampm) {
		t.Errorf("splitClock(%q) = %q, %q, %q, %v; the expression says %q", s, h, mm, ampm, ok, m)
	}
}

var matcherSamples = []string{
	"", "a", "A", "0", "_a", "daily-report.v2", "x" + string(make([]byte, 70)), "telegram", "Telegram",
	"slack_2", "a-", "-a", "30m", "30 m", "30\tminutes", "30mins ", " 30m", "m", "0s", "12weeks", "5 weekss",
	"7am", "7 am", "7:30pm", "19:30", "7:3pm", "123", "7:30", "07:00 am", "7:30 :", "7pm ", "7:301",
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "é", "a\n", "30\x0bm",
}

func TestMatchersAgreeWithTheirExpressions(t *testing.T) {
	long := make([]byte, 64)
	for i := range long {
		long[i] = 'a'
	}
	for _, s := range append(matcherSamples, string(long), string(long)+"a") {
		checkMatchers(t, s)
	}
}

func FuzzMatchers(f *testing.F) {
	for _, s := range matcherSamples {
		f.Add(s)
	}
	f.Fuzz(checkMatchers)
}
