package sim

import (
	"testing"
	"time"
)

// TestWallTime: a time on the plugins' clock maps back to the wall clock across its jumps.
func TestWallTime(t *testing.T) {
	moves := []ClockMove{
		{At: at(0), From: at(0), To: at(0)},
		{At: at(10), From: at(10), To: at(70)},  // +60 s
		{At: at(20), From: at(80), To: at(200)}, // +120 s more: the lead is 180 s
	}
	for _, c := range []struct{ plugin, wall time.Time }{
		{at(5), at(5)},    // before the first jump
		{at(75), at(15)},  // after it: 60 s ahead
		{at(205), at(25)}, // after the second: 180 s ahead
	} {
		if got := wallTime(moves, c.plugin); !got.Equal(c.wall) {
			t.Errorf("wallTime(%v) = %v, want %v", c.plugin.Sub(t0), got.Sub(t0), c.wall.Sub(t0))
		}
	}
}
