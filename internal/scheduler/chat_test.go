package scheduler

import (
	"context"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/plugin"
	"github.com/hermes-host/hermes-host/internal/turn"
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

func TestDescribe(t *testing.T) {
	j := abi.Job{ID: "abc", JobSpec: abi.JobSpec{Name: "standup", TimeZone: "Europe/Berlin"}, Display: "cron 0 9 * * 1-5 (Europe/Berlin)",
		State: "scheduled", NextRunMs: 1781074800000, LastStatus: "delivery_failed", LastError: "chat not found", FailureStreak: 3}
	got := describe(j)
	want := "• abc “standup” — cron 0 9 * * 1-5 (Europe/Berlin) — next 2026-06-10 09:00 CEST — last: delivery_failed (3 failures in a row): chat not found"
	if got != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
}

// authFunc adapts a function to Authorizer.
type authFunc func(plugin, profile string, src abi.Source) bool

func (f authFunc) MayManageJobs(_ context.Context, plugin, profile string, src abi.Source) bool {
	return f(plugin, profile, src)
}

type noPlugins struct{}

func (noPlugins) Plugins() []*plugin.Plugin { return nil }

// TestCommandAsksTheGrant: /cron asks the authorizer about the caller's plugin, profile and
// source; refused, it answers so and reaches no scheduler; granted, the request goes on.
func TestCommandAsksTheGrant(t *testing.T) {
	src := abi.Source{Platform: "telegram", ChatType: abi.ChatDM, ChatID: "111", UserID: "111"}
	call := turn.CommandCall{Plugin: "telegram", Profile: "main", Source: src, Arg: "ls"}
	var asked []string
	grant := func(ok bool) Authorizer {
		return authFunc(func(plugin, profile string, s abi.Source) bool {
			asked = append(asked, plugin+"/"+profile+"/"+s.UserID)
			return ok
		})
	}
	s := New(noPlugins{}, nil)
	if got := s.Command(grant(false)).Run(context.Background(), call); !strings.Contains(got, "may not manage scheduled jobs") {
		t.Fatalf("refused: %q", got)
	}
	if got := s.Command(nil).Run(context.Background(), call); !strings.Contains(got, "may not manage scheduled jobs") {
		t.Fatalf("no authorizer: %q", got)
	}
	if got := s.Command(grant(true)).Run(context.Background(), call); !strings.Contains(got, "no scheduler plugin") {
		t.Fatalf("granted: %q", got)
	}
	if strings.Join(asked, ",") != "telegram/main/111,telegram/main/111" {
		t.Fatalf("asked %q", asked)
	}
}
