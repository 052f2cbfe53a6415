package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// Result is one run of a schedule.
type Result struct {
	Schedule   *Schedule
	History    *History
	Violations []Violation
	Faults     map[string]int // injected, by kind
	Took       time.Duration
	// Failed says the schedule did not run to its end (the world could not be built, a host
	// did not start, its records could not be read): its history, if any, proves nothing.
	Failed bool
}

// Broken returns the names of the invariants r violated, sorted.
func (r Result) Broken() []string {
	var out []string
	for _, v := range r.Violations {
		if !slices.Contains(out, v.Invariant) {
			out = append(out, v.Invariant)
		}
	}
	sort.Strings(out)
	return out
}

// RunOne runs sched in a world of its own, in a subtest called name (so that the world's
// servers and processes are gone when it returns), and checks the history. It does not fail
// the test for a violation: the caller decides. A schedule that could not run fails its subtest
// (and so the test) and comes back Failed.
func RunOne(t *testing.T, name string, sched *Schedule) Result {
	t.Helper()
	res := Result{Schedule: sched}
	start := time.Now()
	res.Failed = !t.Run(name, func(t *testing.T) {
		w := NewWorld(t, sched)
		h := w.Run()
		res.History = h
		res.Violations = Check(h)
		w.mu.Lock()
		res.Faults = map[string]int{}
		for k, n := range w.faults {
			res.Faults[k] = n
		}
		w.mu.Unlock()
	})
	res.Took = time.Since(start)
	return res
}

// Shrink looks for a shorter schedule that still breaks one of the invariants in broken:
// ddmin over its steps, re-running each candidate, until budget is spent. Because the host's
// goroutines and processes run for real, a candidate may pass by chance (the schedule is
// replayed, not the interleaving); Shrink then keeps the longer one, so the result always did
// fail once. It returns the shortest failing schedule found and its result.
func Shrink(t *testing.T, sched *Schedule, broken []string, budget time.Duration) (*Schedule, Result) {
	t.Helper()
	deadline := time.Now().Add(budget)
	best := sched
	var bestRes Result
	fails := func(steps []Step, label string) bool {
		if time.Now().After(deadline) {
			return false
		}
		cand := &Schedule{Seed: sched.Seed, Hosts: sched.Hosts, Steps: steps, Note: sched.Note}
		res := RunOne(t, label, cand)
		hit := slices.ContainsFunc(res.Broken(), func(n string) bool { return slices.Contains(broken, n) })
		t.Logf("shrink: %d steps: %v (%v)", len(steps), res.Broken(), res.Took.Round(time.Second))
		if hit {
			best, bestRes = cand, res
		}
		return hit
	}
	steps := sched.Steps
	n := 2
	for round := 0; len(steps) >= 2 && time.Now().Before(deadline); round++ {
		chunks := split(steps, n)
		reduced := false
		for i, c := range chunks {
			if fails(c, fmt.Sprintf("shrink-%d-chunk-%d", round, i)) {
				steps, n, reduced = c, 2, true
				break
			}
		}
		if !reduced && n > 2 {
			for i := range chunks {
				comp := complement(chunks, i)
				if fails(comp, fmt.Sprintf("shrink-%d-without-%d", round, i)) {
					steps, n, reduced = comp, max(n-1, 2), true
					break
				}
			}
		}
		if !reduced {
			if n >= len(steps) {
				break
			}
			n = min(2*n, len(steps))
		}
	}
	return best, bestRes
}

// split cuts steps into n parts of about equal length.
func split(steps []Step, n int) [][]Step {
	var out [][]Step
	for i := range n {
		lo, hi := i*len(steps)/n, (i+1)*len(steps)/n
		if hi > lo {
			out = append(out, slices.Clone(steps[lo:hi]))
		}
	}
	return out
}

// complement is every chunk but chunks[skip], joined.
func complement(chunks [][]Step, skip int) []Step {
	var out []Step
	for i, c := range chunks {
		if i != skip {
			out = append(out, c...)
		}
	}
	return out
}

// RegressDir is where saved failing schedules live (relative to the package).
const RegressDir = "testdata/regress"

// Save writes sched to testdata/regress/name.json, noting which invariants it broke.
func Save(name string, sched *Schedule, broken []string) (string, error) {
	s := *sched
	// The case starts with its first step: the idle time before it, left by the steps shrinking
	// took out, is dropped (the gaps between the steps are kept).
	if len(s.Steps) > 0 {
		shift := s.Steps[0].At - 500
		s.Steps = slices.Clone(s.Steps)
		for i := range s.Steps {
			s.Steps[i].At = max(s.Steps[i].At-shift, 0)
		}
	}
	if s.Note == "" {
		s.Note = "broke " + strings.Join(broken, ", ")
	}
	if err := os.MkdirAll(RegressDir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(RegressDir, name+".json")
	b, err := json.MarshalIndent(&s, "", " ")
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}

// Report is the violations of r, one per line, grouped by invariant.
func (r Result) Report() string {
	var b strings.Builder
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	return b.String()
}
