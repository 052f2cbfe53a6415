package main

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/abi"
)

// The cron commands hand jobs to the scheduler plugin through the running host (its admin API):
// the plugin owns its jobs, and the host serializes every change with the plugin's ticks.

func init() { extraCommands = append(extraCommands, cronCmd) }

type cronFlags struct {
	profile, plugin string
	asJSON          bool
}

func cronCmd(g *globals) *cobra.Command {
	f := &cronFlags{}
	cmd := &cobra.Command{
		Use:   "cron",
		Short: "List and change scheduled jobs (through the running host's scheduler plugin)",
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.profile, "profile", "main", "the profile whose jobs to manage")
	pf.StringVar(&f.plugin, "plugin", "", "the scheduler plugin (default: the only one)")
	jsonFlag(cmd, &f.asJSON)

	ls := &cobra.Command{
		Use:   "ls",
		Short: "List jobs: schedule, state, next run, last outcome and failure streak",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.cron(cmd, f, abi.JobsRequest{Op: abi.JobsList})
		},
	}
	var spec abi.JobSpec
	var skipMissed bool
	add := &cobra.Command{
		Use:   "add --schedule SCHEDULE (--text TEXT | --prompt PROMPT) --to TARGET[,TARGET]",
		Short: "Add a job (schedules: in 30m, 2026-12-01 09:00, every 2h, daily at 7am, weekdays at 9am, 0 9 * * MON-FRI)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if skipMissed {
				spec.CatchUp = "skip"
			}
			return g.cron(cmd, f, abi.JobsRequest{Op: abi.JobsAdd, Job: &spec})
		},
	}
	af := add.Flags()
	af.StringVar(&spec.Schedule, "schedule", "", "when to run (required)")
	af.StringVar(&spec.Text, "text", "", "send this text")
	af.StringVar(&spec.Prompt, "prompt", "", "run an agent turn with this prompt and send its answer")
	af.StringSliceVar(&spec.Deliver, "to", nil, "targets: home, telegram (its home channel), telegram:CHAT_ID[:THREAD_ID]")
	af.StringVar(&spec.Name, "name", "", "a name for listings and the message header")
	af.StringVar(&spec.TimeZone, "tz", "", "time zone (IANA name; default: the profile's)")
	af.BoolVar(&spec.Seed, "seed", false, "seed the target chat's session with the message, so a reply continues from it")
	af.BoolVar(&skipMissed, "skip-missed", false, "skip slots missed while the host was down (default: run once for them)")
	add.MarkFlagRequired("schedule")

	byID := func(use, short, op string) *cobra.Command {
		return &cobra.Command{
			Use: use + " ID", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return g.cron(cmd, f, abi.JobsRequest{Op: op, ID: args[0]})
			},
		}
	}
	cmd.AddCommand(ls, add,
		byID("rm", "Remove a job", abi.JobsRemove),
		byID("pause", "Pause a job until resumed", abi.JobsPause),
		byID("resume", "Resume a paused job from its next slot", abi.JobsResume),
		byID("run-now", "Run a job once now, outside its schedule", abi.JobsRunNow))
	return cmd
}

// cron sends req to the running host's admin API (admin_listen, with the token from the data
// directory) and prints the jobs it answers.
func (g *globals) cron(cmd *cobra.Command, f *cronFlags, req abi.JobsRequest) error {
	cfg, _, err := g.load()
	if err != nil {
		return err
	}
	body := map[string]any{"plugin": f.plugin, "profile": f.profile, "op": req.Op, "id": req.ID, "job": req.Job}
	var res struct {
		Jobs []abi.Job `json:"jobs"`
	}
	// A jobs call waits for the scheduler's tick in progress, which may be running an agent turn.
	err = adminCall(cmd.Context(), cfg, "/api/cron", body, &res, 3*time.Minute)
	if errors.Is(err, errNoToken) {
		return fmt.Errorf("%v: the cron commands go through the running host; start `hermes-host serve`", err)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("no hermes-host answers at %s: the cron commands go through the running host; start `hermes-host serve` (or give its --admin-listen)", cfg.AdminListen)
	}
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if f.asJSON {
		return writeJSON(w, orEmpty(res.Jobs))
	}
	switch req.Op {
	case abi.JobsRemove:
		fmt.Fprintf(w, "removed %s\n", req.ID)
		return nil
	case abi.JobsRunNow:
		fmt.Fprintf(w, "%s runs at the next tick (now)\n", req.ID)
		return nil
	}
	return writeJobs(w, res.Jobs)
}
