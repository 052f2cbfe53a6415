package humanize

import (
	"strings"
	"testing"
	"time"
)

func TestForms(t *testing.T) {
	for d, want := range map[time.Duration]string{45 * time.Second: "45s", 185 * time.Second: "3m05s", 130 * time.Minute: "2h10m",
		76 * time.Hour: "3d04h", -90 * time.Second: "-1m30s"} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
	if got := Clock(time.Date(2026, 11, 29, 9, 0, 1, 0, time.FixedZone("x", 3600))); got != "2026-11-29 08:00:01" {
		t.Errorf("Clock = %q", got)
	}
	if Clock(time.Time{}) != "-" || Clock(time.UnixMilli(0)) != "-" {
		t.Error("Clock of no time is not -")
	}
	if got := Clip("a\n  b\tc "+strings.Repeat("é", 10), 8); got != "a b c é…" {
		t.Errorf("Clip = %q", got)
	}
}
