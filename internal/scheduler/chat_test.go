package scheduler

import (
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
)

func TestParseAdd(t *testing.T) {
	spec, err := parseAdd(`--text --to origin,telegram:-1001:42 --tz Europe/Berlin --name "daily standup" --seed --unpinned --skip-missed weekdays at 9am | Stand-up | in 5`)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Text != "Stand-up | in 5" || spec.Prompt != "" || spec.Schedule != "weekdays at 9am" || spec.Name != "daily standup" ||
		spec.TimeZone != "Europe/Berlin" || !spec.Seed || spec.Pin == nil || *spec.Pin || spec.CatchUp != "skip" ||
		strings.Join(spec.Deliver, ",") != "origin,telegram:-1001:42" {
		t.Fatalf("spec %+v", spec)
	}
	spec, err = parseAdd("every 2h | check the build")
	if err != nil || spec.Prompt != "check the build" || spec.Schedule != "every 2h" || spec.Pin != nil {
		t.Fatalf("prompt job %+v %v", spec, err)
	}
	for in, want := range map[string]string{
		"every 2h":             "then | and the message",
		"every 2h |":           "then | and the message",
		"| hi":                 "schedule is missing",
		"--frobnicate x | hi":  "unknown option --frobnicate",
		"--to | hi":            "--to needs a value",
		`--name "open x | hi"`: "unbalanced quotes",
	} {
		if _, err := parseAdd(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

func TestAllowList(t *testing.T) {
	a := AllowList{"telegram:111", "echo:*"}
	for src, want := range map[abi.Source]bool{
		{Platform: "telegram", UserID: "111"}: true,
		{Platform: "telegram", UserID: "222"}: false,
		{Platform: "telegram"}:                false,
		{Platform: "echo", UserID: "anyone"}:  true,
		{Platform: "slack", UserID: "111"}:    false,
	} {
		if got := a.MayManageJobs(src); got != want {
			t.Errorf("%+v: %v", src, got)
		}
	}
	if (AllowList{}).MayManageJobs(abi.Source{Platform: "echo", UserID: "x"}) {
		t.Error("an empty list allowed someone")
	}
}

func TestDescribe(t *testing.T) {
	j := abi.Job{ID: "abc", JobSpec: abi.JobSpec{Name: "standup", TimeZone: "Europe/Berlin"}, Display: "cron 0 9 * * 1-5 (Europe/Berlin)",
		State: "scheduled", NextRunMs: 1781074800000, LastStatus: "delivery_failed", LastError: "chat not found", FailureStreak: 3}
	got := describe(j)
	want := "• abc “standup” — cron 0 9 * * 1-5 (Europe/Berlin) — next 2026-06-10 09:00 CEST — last: delivery_failed (3 failures in a row): chat not found"
	if got != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
}
