// Package testdeadline scales the wall-clock deadlines of tests by one factor that the harness
// sets. A deadline in a test only bounds a broken run (the test waits for an event, not for the
// clock), but how long a healthy run takes depends on how many packages run beside it: `make
// test` runs every package at once on two cores under -race. Rather than each test guessing a
// margin, the harness that knows the load says how much slower than a quiet machine it may be.
package testdeadline

import (
	"os"
	"strconv"
	"sync"
	"time"
)

// Env names the factor (a positive number; unset, empty or invalid is 1). `make test` sets it.
const Env = "HERMES_TEST_DEADLINE_SCALE"

var factor = sync.OnceValue(func() float64 { return parse(os.Getenv(Env)) })

func parse(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 1 || f > 100 {
		return 1 // a deadline is never shortened below the test's own
	}
	return f
}

// Factor is the harness's factor, at least 1.
func Factor() float64 { return factor() }

// Scale is d stretched by the harness's factor: the deadline a test written for a quiet machine
// gets under the harness's load.
func Scale(d time.Duration) time.Duration { return time.Duration(float64(d) * factor()) }
