package cron

import (
	"context"
	"testing"

	"github.com/hermes-host/hermes-host/conformance"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

func TestFirstPartyPluginConforms(t *testing.T) {
	conformance.RequirePass(t, Run(context.Background(), wasmbuild.MustBuild(t, "../../plugins/cron"), Options{}))
}

// A naive scheduler (testdata/naive) makes the classic mistakes; each must fail its check.
func TestNaiveSchedulerFails(t *testing.T) {
	rep := Run(context.Background(), wasmbuild.MustBuild(t, "testdata/naive"), Options{})
	conformance.RequireFail(t, rep, []string{"load (scheduler, capability jobs)"},
		"next run: ISO time in the zone",             // read as UTC
		"next run: daily at, weekdays at",            // no natural forms
		"time zone: DST, once per day",               // UTC
		"catch-up: once after downtime",              // every missed slot runs
		"catch-up: skip after downtime",              // likewise
		"catch-up: once after months of downtime",    // runs them all, until the deadline
		"at most once: restart mid-send",             // sends, then records
		"interrupted: a deadline is not a host stop", // records nothing before it sends
		"pinned: stale after /new",                   // never pins
		"output: [SILENT] sends nothing",             // sends it
		"failures: recorded on the job",              // always "ok"
		"pending: reconciled from the ledger",        // likewise
		"targets: deduplicated",                      // sends to each entry
		"jobs: scoped to their chat",                 // lists and removes anything
		"jobs: a chat's targets stay in it",          // sends anywhere
		"targets: unserved platforms refused",        // accepts anything
	)
}
