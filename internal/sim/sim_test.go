package sim

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	seedFlag     = flag.Uint64("seed", 0, "run the schedule of this seed (with -hosts) instead of the short run's")
	hostsFlag    = flag.Int("hosts", 1, "with -seed: 1 host on SQLite, or 2-3 on PostgreSQL; with -soak, above 1: every schedule on that many hosts")
	stepsFlag    = flag.Int("steps", 0, "with -seed or -soak: operations and faults per schedule (default: 24 for -seed, 40 for -soak)")
	scheduleFlag = flag.String("schedule", "", "run the schedule in this JSON file")
	shrinkFlag   = flag.Duration("shrink", 0, "on a violation, shrink the schedule for at most this long")
	saveFlag     = flag.String("save", "", "with -shrink: save the shortest failing schedule as testdata/regress/NAME.json")
	soakFlag     = flag.Duration("soak", 0, "run schedules one after another for this long (make soak)")
	dryFlag      = flag.Bool("dry", false, "print the schedules instead of running them")
	aimFlag      = flag.String("aim", "", "with -seed or -soak: weights of kinds of step, e.g. storm=30,kill=10, over Generate's own (schedule.go: weights)")
)

// KnownEnv names the invariants known to be broken on this branch (comma-separated): their
// violations are reported but do not fail TestPromise and TestRegressions.
const KnownEnv = "HERMES_SIM_KNOWN"

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// shape is the world and length of a schedule: steps operations and faults, about 650 ms apart.
func shape(hosts, steps int) Shape { return Shape{Hosts: hosts, Steps: steps, Span: steps * 650} }

// The short run's shapes: one schedule on one SQLite host and one on two PostgreSQL hosts (with
// TestRegressions' replays, inside the 3 minutes make test gives the package); soakSteps is the
// length of a soak's schedules.
var (
	shortSQLite   = shape(1, 24)
	shortPostgres = shape(2, 20)
)

const soakSteps = 40

// TestPromise runs schedules against the real host with its real plugins and fakes of the
// platforms, and checks every invariant (invariants.go) on what they recorded. Without flags it
// is the short run of make test: one schedule on one SQLite host and one on two hosts sharing
// PostgreSQL, from random seeds it prints. -seed N (with -hosts), -schedule FILE or -soak D
// choose other runs; see the README's Testing section. It runs beside TestRegressions: both
// mostly wait for their schedules' steps, which are spread in time.
func TestPromise(t *testing.T) {
	if testing.Short() {
		t.Skip("the promise checker runs real hosts: skipped in -short mode")
	}
	t.Parallel()
	if *aimFlag != "" {
		if err := Aim(*aimFlag); err != nil {
			t.Fatal(err)
		}
	}
	switch {
	case *soakFlag > 0:
		soak(t, *soakFlag)
		return
	case *scheduleFlag != "":
		s, err := Load(*scheduleFlag)
		if err != nil {
			t.Fatal(err)
		}
		checkOne(t, s)
		return
	case *seedFlag != 0:
		steps := shortSQLite.Steps
		if *stepsFlag > 0 {
			steps = *stepsFlag
		}
		checkOne(t, Generate(*seedFlag, shape(*hostsFlag, steps)))
		return
	}
	checkOne(t, Generate(rand.Uint64(), shortSQLite))
	checkOne(t, Generate(rand.Uint64(), shortPostgres))
}

// known returns the invariants HERMES_SIM_KNOWN names.
func known() []string {
	var out []string
	for _, n := range strings.Split(os.Getenv(KnownEnv), ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// checkOne runs s, prints it and what it found, shrinks it when asked, and fails the test for
// each violation of an invariant not known to be broken.
func checkOne(t *testing.T, s *Schedule) Result {
	t.Helper()
	if *dryFlag {
		t.Logf("schedule: %s", s.Summary())
		return Result{Schedule: s}
	}
	// The schedule's JSON is printed only with its violations, after them: a failing run's log
	// starts with what broke (CI shows the start and the end of a long log).
	t.Logf("schedule: %s", s.Summary())
	res := RunOne(t, fmt.Sprintf("seed-%d-hosts-%d", s.Seed, s.Hosts), s)
	if res.Failed {
		t.Logf("seed %d: the schedule did not run to its end (see its subtest): no verdict", s.Seed)
		return res
	}
	t.Logf("seed %d: %d violations in %v; faults %v", s.Seed, len(res.Violations), res.Took.Round(time.Second), res.Faults)
	if res.History != nil {
		t.Logf("seed %d: %s", s.Seed, res.History.Stats())
	}
	if len(res.Violations) == 0 {
		return res
	}
	ok := known()
	for _, v := range res.Violations {
		if slices.Contains(ok, v.Invariant) {
			t.Logf("known (%s): %s", KnownEnv, v)
			continue
		}
		t.Errorf("seed %d hosts %d: %s", s.Seed, s.Hosts, v)
	}
	aim := ""
	if *aimFlag != "" {
		aim = " -aim " + *aimFlag
	}
	t.Logf("violations (replay: go test ./internal/sim -run 'TestPromise$' -seed %d -hosts %d -steps %d%s, or -schedule with the JSON below):\n%s\nschedule:\n%s",
		s.Seed, s.Hosts, stepsOf(s), aim, res.Report(), s.JSON())
	failing := res.Broken()
	if *shrinkFlag > 0 {
		small, sres := Shrink(t, s, failing, *shrinkFlag)
		t.Logf("shortest failing schedule (%d of %d steps): %v\n%s\n%s", len(small.Steps), len(s.Steps), sres.Broken(), small.JSON(), sres.Report())
		if *saveFlag != "" {
			path, err := Save(*saveFlag, small, failing)
			if err != nil {
				t.Error(err)
			} else {
				t.Logf("saved as %s", path)
			}
		}
	}
	return res
}

// stepsOf is the -steps a generated schedule was made with (its steps before the closing
// messages Generate adds).
func stepsOf(s *Schedule) int {
	n := len(s.Steps)
	for n > 0 && strings.HasPrefix(s.Steps[n-1].Text, "last words ") {
		n--
	}
	return n
}

// TestRegressions replays every saved failing schedule (testdata/regress/*.json): each must now
// hold every invariant not known to be broken.
func TestRegressions(t *testing.T) {
	if testing.Short() {
		t.Skip("the promise checker runs real hosts: skipped in -short mode")
	}
	t.Parallel() // beside TestPromise's short run (see there)
	files, _ := filepath.Glob(filepath.Join(RegressDir, "*.json"))
	if len(files) == 0 {
		t.Skip("no saved cases")
	}
	for _, f := range files {
		s, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s", filepath.Base(f), s.Note)
		checkOne(t, s)
	}
}

// soak runs schedules until d is over, alternating one SQLite host with two or three hosts on
// PostgreSQL (when a server is configured), and prints every minute how many schedules,
// operations and faults ran and how many violations they found.
func soak(t *testing.T, d time.Duration) {
	var (
		mu         sync.Mutex
		schedules  int
		failed     int // schedules that did not run to their end
		inARow     int // of them, the last ones in a row
		operations int
		byHosts    = map[int]int{}
		faults     = map[string]int{}
		violations []string
	)
	report := func(final bool) {
		mu.Lock()
		defer mu.Unlock()
		var fk []string
		for k, n := range faults {
			fk = append(fk, fmt.Sprintf("%s=%d", k, n))
		}
		sort.Strings(fk)
		what := "soak"
		if final {
			what = "soak total"
		}
		fmt.Printf("%s: %d schedules (by hosts %v), %d operations, faults {%s}, %d violations, %d schedules failed to run\n",
			what, schedules, byHosts, operations, strings.Join(fk, " "), len(violations), failed)
	}
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(time.Minute)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				report(false)
			}
		}
	}()
	pg := os.Getenv("HERMES_TEST_POSTGRES") != ""
	rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
	for end := time.Now().Add(d); time.Now().Before(end); {
		hosts := 1
		switch {
		case *hostsFlag > 1: // -hosts N: every schedule on N hosts
			hosts = *hostsFlag
		case pg && schedules%3 == 2:
			hosts = 2 + rng.IntN(2)
		}
		steps := soakSteps
		if *stepsFlag > 0 {
			steps = *stepsFlag
		}
		s := Generate(rng.Uint64(), shape(hosts, steps))
		res := checkOne(t, s)
		mu.Lock()
		if res.Failed {
			failed++
			inARow++
			mu.Unlock()
			if inARow == 3 {
				t.Fatalf("3 schedules in a row could not run (see their subtests); stopping the soak")
			}
			continue
		}
		inARow = 0
		schedules++
		byHosts[s.Hosts]++
		for _, st := range s.Steps {
			if st.Op == OpSay {
				operations++
			}
		}
		for k, n := range res.Faults {
			faults[k] += n
		}
		for _, v := range res.Violations {
			violations = append(violations, fmt.Sprintf("seed %d hosts %d: %s", s.Seed, s.Hosts, v))
		}
		mu.Unlock()
	}
	close(done)
	report(true)
	for _, v := range violations {
		fmt.Println("  " + v)
	}
}

var recheckFlag = flag.String("recheck", "", "check every history.json kept under this directory (HERMES_SIM_KEEP) again with the invariants as they are now")

// TestRecheck runs the invariants over histories a run kept (HERMES_SIM_KEEP): after a
// checker's fix, the worlds of a long run are judged again without running them again.
func TestRecheck(t *testing.T) {
	if *recheckFlag == "" {
		t.Skip("no -recheck directory")
	}
	files, _ := filepath.Glob(filepath.Join(*recheckFlag, "*", "history.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var h History
		if err := json.Unmarshal(b, &h); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		vs := Check(&h)
		t.Logf("%s: %d violations", f, len(vs))
		for _, v := range vs {
			t.Errorf("%s: %s", filepath.Base(filepath.Dir(f)), v)
		}
	}
}
