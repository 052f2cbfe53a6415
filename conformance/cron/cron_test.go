package cron

import (
	"bytes"
	"context"
	"testing"

	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

func TestFirstPartyPluginConforms(t *testing.T) {
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "../../plugins/cron"), Options{})
	var out bytes.Buffer
	rep.Write(&out)
	if !rep.Passed() {
		t.Fatalf("cron conformance failed:\n%s", out.String())
	}
	t.Log(out.String())
}

// A naive scheduler (testdata/naive) makes the classic mistakes; each must fail its check.
func TestNaiveSchedulerFails(t *testing.T) {
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "testdata/naive"), Options{})
	var out bytes.Buffer
	rep.Write(&out)
	failed := map[string]bool{}
	for _, r := range rep.Results {
		failed[r.Name] = !r.Passed
	}
	for _, name := range []string{
		"next run: ISO time in the zone",  // read as UTC
		"next run: daily at, weekdays at", // no natural forms
		"time zone: DST, once per day",    // UTC
		"catch-up: once after downtime",   // every missed slot runs
		"catch-up: skip after downtime",   // likewise
		"at most once: restart mid-send",  // sends, then records
		"pinned: stale after /new",        // never pins
		"output: [SILENT] sends nothing",  // sends it
		"failures: recorded on the job",   // always "ok"
		"targets: deduplicated",           // sends to each entry
		"jobs: scoped to their chat",      // lists and removes anything
	} {
		if !failed[name] {
			t.Errorf("check %q did not fail", name)
		}
	}
	if failed["load (scheduler, capability jobs)"] {
		t.Error("the naive scheduler should load")
	}
	t.Log(out.String())
}
