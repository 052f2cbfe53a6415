package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/host"
	"github.com/hermes-host/hermes-host/internal/auth"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/humanize"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
)

// This file renders what the domain packages return as the plain text of the inspection
// commands, or as JSON with --json (writeJSON). The same data is served as JSON by the admin
// API.

// writeSessions renders `sessions ls`.
func writeSessions(w io.Writer, keys []session.KeyInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSESSION\tGEN\tSTARTED\tLAST ACTIVE\tSTATE\tTITLE")
	for _, ki := range keys {
		state := "live"
		switch {
		case ki.Suspended:
			state = "suspended"
		case ki.Ended:
			state = "ended:" + ki.EndReason
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", ki.Key, ki.SessionID, ki.Generation,
			clock(ki.StartedAt), clock(ki.UpdatedAt), state, ki.Title)
	}
	return tw.Flush()
}

// writeSession renders `sessions show`.
func writeSession(w io.Writer, view sessionShow) error {
	v := view.SessionView
	var b strings.Builder
	fmt.Fprintf(&b, "key:         %s\n", v.Key)
	if v.Current != nil {
		fmt.Fprintf(&b, "current:     %s\n", v.Current.ID)
		fmt.Fprintf(&b, "generation:  %d", v.Generation)
		if v.Suspended {
			b.WriteString(" (suspended: the next message starts a new session)")
		}
		b.WriteByte('\n')
	} else {
		b.WriteString("current:     (no route)\n")
	}
	b.WriteString("session:     ")
	writeSessionLine(&b, v.Focus)
	if v.Focus.Model != "" {
		fmt.Fprintf(&b, "model:       %s (chosen with /model)\n", v.Focus.Model)
	}
	if v.Focus.ModelCalls > 0 {
		fmt.Fprintf(&b, "usage:       %d prompt + %d completion tokens in %d model calls\n",
			v.Focus.PromptTokens, v.Focus.CompletionTokens, v.Focus.ModelCalls)
	}
	if len(v.Ancestors) > 0 {
		b.WriteString("ancestors:\n")
		for _, s := range v.Ancestors {
			b.WriteString("  ")
			writeSessionLine(&b, s)
		}
	}
	if len(v.Continuations) > 0 {
		b.WriteString("continuations (compression):\n")
		for _, s := range v.Continuations {
			b.WriteString("  ")
			writeSessionLine(&b, s)
		}
	}
	fmt.Fprintf(&b, "transcript (last %d of %d):\n", len(v.Tail), v.Focus.Messages)
	for _, m := range v.Tail {
		text := m.Text
		if m.Redacted {
			text = "[redacted]"
		}
		text = strings.ReplaceAll(text, "\n", "\n      ")
		fmt.Fprintf(&b, "  %s %-9s %s\n", m.At.UTC().Format("2006-01-02 15:04:05"), m.Role, text)
	}
	if len(view.Approvals) > 0 {
		b.WriteString("approvals:\n")
		for _, a := range view.Approvals {
			fmt.Fprintf(&b, "  %s  %s  %-8s %s  (%s; asked by %s", a.ID, clock(a.CreatedAt), a.State, a.Command, a.Rule, a.Requester())
			if a.DecidedBy != "" {
				fmt.Fprintf(&b, ", %s by %s", a.State, a.DecidedBy)
			}
			if a.Reason != "" {
				fmt.Fprintf(&b, ": %s", a.Reason)
			}
			b.WriteString(")\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeSessionLine(b *strings.Builder, s session.SessionInfo) {
	fmt.Fprintf(b, "%s  %s  started %s", s.ID, s.CreatedBy, clock(s.StartedAt))
	if s.EndedAt != nil {
		reason := s.EndReason
		if reason == "" {
			reason = `""`
		}
		fmt.Fprintf(b, "  ended %s (%s)", clock(*s.EndedAt), reason)
	} else {
		b.WriteString("  live")
	}
	if s.BranchedFrom != "" {
		fmt.Fprintf(b, "  branched from %s", s.BranchedFrom)
	}
	if s.Title != "" {
		fmt.Fprintf(b, "  %q", s.Title)
	}
	fmt.Fprintf(b, "  %d messages\n", s.Messages)
}

// writeProcesses renders `ps`: when each process started and ended, how long it ran, and what
// became of its completion notice in the console's words (humanize.NoticeOutcome).
func writeProcesses(w io.Writer, list []psRow, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tEXIT\tSTARTED\tENDED\tRAN\tMAX AGE\tSESSION KEY\tSPAWNED IN\tCOMMAND\tNOTICE")
	for _, row := range list {
		in := row.Info
		exit := in.ExitStatus()
		state := string(in.State)
		if in.Reason != "" && in.Reason != process.ReasonExit {
			state += ": " + in.Reason
		}
		if in.Adopted {
			state += " [adopted]"
		}
		maxAge := "-"
		if in.MaxAge > 0 {
			maxAge = duration(in.MaxAge)
			if !in.State.Final() {
				maxAge += " (" + duration(in.MaxAge-in.Age(now)) + " left)"
			}
		}
		ran := duration(in.Age(now))
		if !in.State.Final() {
			ran += " so far"
		}
		notice := row.Outcome.State
		if row.Outcome.Detail != "" {
			notice += ": " + row.Outcome.Detail
		}
		if in.Correction != "" { // the real end of a process an earlier notice called lost
			notice += "; correction " + in.Correction
			if in.CorrectionOutcome != "" {
				notice += ": " + in.CorrectionOutcome
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", in.ID, state, exit, clock(in.StartedAt), clock(in.EndedAt), ran,
			maxAge, orDash(in.Stamp.Key), orDash(in.Stamp.SessionID), clip(in.Command, 60), notice)
	}
	return tw.Flush()
}

// copyLog writes a process's whole retained output (`ps log ID`).
func copyLog(ctx context.Context, w io.Writer, db *sql.DB, dataDir, id string) error {
	for off := int64(0); ; {
		ch, err := process.ReadLog(ctx, db, dataDir, id, off, 0)
		if err != nil {
			return err
		}
		if _, err := w.Write(ch.Data); err != nil {
			return err
		}
		if len(ch.Data) == 0 || ch.Next >= ch.Total {
			return nil
		}
		off = ch.Next
	}
}

// writeDeliveries renders `deliveries ls`; the reason is last and whole (`deliveries show ID`
// has the rest of a row).
func writeDeliveries(w io.Writer, rows []delivery.Row, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tKIND\tAGE\tATTEMPTS\tKEY\tCHAT\tTEXT\tREASON")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.ID, r.State, r.Kind, duration(now.Sub(r.CreatedAt)), r.Attempts, r.Key, chatOf(r),
			clip(r.Target.Text, 40), orDash(r.Reason))
	}
	return tw.Flush()
}

// writeDelivery renders `deliveries show`: the row's every field, then its related rows as
// tables.
func writeDelivery(w io.Writer, v *deliveryView, now time.Time) error {
	r := v.Row
	var b strings.Builder
	line := func(name, value string) {
		if name != "" {
			name += ":"
		}
		if value != "" { // a line without a name continues the one above
			fmt.Fprintf(&b, "%-13s%s\n", name, value)
		}
	}
	line("id", r.ID)
	if r.Parts > 1 {
		line("message", fmt.Sprintf("%s (part %d of %d)", r.Group, r.Part, r.Parts))
	}
	line("state", string(r.State))
	line("reason", r.Reason)
	if r.Uncertain() {
		line("", "the platform may have taken it: it is never resent (/last sends it again on request)")
	}
	line("kind", r.Kind)
	line("plugin", r.Plugin+"/"+r.Profile)
	line("chat", chatOf(r))
	line("session key", r.Key)
	if r.Guard != "" {
		stamp := string(r.Guard)
		if r.Stamp.SessionID != "" {
			stamp += fmt.Sprintf(" (owner session %s, generation %d)", r.Stamp.SessionID, r.Generation)
		}
		line("guard", stamp)
	}
	line("origin", r.Origin)
	if strings.HasPrefix(r.Origin, "proc_") {
		proc, _, _ := strings.Cut(r.Origin, "#")
		line("", "`hermes-host ps log "+proc+"` prints the process's output")
	}
	line("about", r.About)
	line("delivered to", r.SessionID)
	line("platform ids", strings.Join(r.MessageIDs, ", "))
	attempts := fmt.Sprintf("%d", r.Attempts)
	if !r.NextAttempt.IsZero() && !r.State.Final() {
		attempts += fmt.Sprintf(", next at %s (in %s)", clock(r.NextAttempt), duration(r.NextAttempt.Sub(now)))
	}
	line("attempts", attempts)
	line("created", fmt.Sprintf("%s (%s ago)", clock(r.CreatedAt), duration(now.Sub(r.CreatedAt))))
	line("updated", clock(r.UpdatedAt))
	line("links to", r.Link)
	b.WriteString("text:\n  " + strings.ReplaceAll(r.Target.Text, "\n", "\n  ") + "\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	for _, rel := range []struct {
		title string
		rows  []delivery.Row
	}{{"other parts of the message", v.Parts}, {"the message it links to", v.LinksTo}, {"messages linked to it", v.LinkedFrom},
		{"other rows of origin " + r.Origin, v.SameOrigin}, {"latest rows of session key " + r.Key, v.SameKey}} {
		if len(rel.rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", rel.title)
		if err := writeDeliveries(w, rel.rows, now); err != nil {
			return err
		}
	}
	return nil
}

// jsonFlag gives an inspection command (and its subcommands) --json.
func jsonFlag(cmd *cobra.Command, p *bool) {
	cmd.PersistentFlags().BoolVar(p, "json", false, "print as JSON instead of a table")
}

// writeJSON is what --json prints: v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// clip, duration and clock are the humanize forms the console uses too.
func clip(s string, n int) string     { return humanize.Clip(s, n) }
func duration(d time.Duration) string { return humanize.Duration(d) }
func clock(t time.Time) string        { return humanize.Clock(t) }

// writePairing renders `pairing ls`.
func writePairing(w io.Writer, pending []auth.Request, approved []auth.Approval, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OPEN CODE\tPLUGIN\tPROFILE\tUSER\tNAME\tASKED\tEXPIRES IN")
	for _, r := range pending {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Code, r.Plugin, r.Profile, r.UserID, orDash(r.UserName),
			clock(r.CreatedAt), duration(r.ExpiresAt.Sub(now)))
	}
	if len(pending) == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	fmt.Fprintln(tw, "\nAPPROVED\tPLUGIN\tPROFILE\tUSER\tNAME\tAPPROVED AT\tCODE")
	for _, a := range approved {
		fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Plugin, a.Profile, a.UserID, orDash(a.UserName), clock(a.ApprovedAt), orDash(a.Code))
	}
	if len(approved) == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	return tw.Flush()
}

// writeApproved renders `pairing approve`.
func writeApproved(w io.Writer, a auth.Approval, told bool) error {
	name := a.UserID
	if a.UserName != "" {
		name += " (" + a.UserName + ")"
	}
	_, err := fmt.Fprintf(w, "approved %s on %s/%s\n%s\n", name, a.Plugin, a.Profile, humanize.Tools(a.Tools))
	if err == nil && !told {
		_, err = fmt.Fprintln(w, "no host is serving: the user was not told; they are admitted from their next message")
	}
	return err
}

// writeRevoked renders `pairing revoke`.
func writeRevoked(w io.Writer, revoked []auth.Approval) error {
	for _, a := range revoked {
		if _, err := fmt.Fprintf(w, "revoked %s on %s/%s\n", a.UserID, a.Plugin, a.Profile); err != nil {
			return err
		}
	}
	return nil
}

// writeAuthLog renders `auth log`.
func writeAuthLog(w io.Writer, entries []auth.Entry, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGE\tPLUGIN\tPROFILE\tVERDICT\tREASON\tCHAT\tUSER\tTEXT\tDETAIL")
	for _, e := range entries {
		chat := orDash(e.ChatID)
		if e.ChatType != "" {
			chat = e.ChatType + ":" + chat
		}
		user := orDash(e.UserID)
		if e.UserName != "" {
			user += " (" + e.UserName + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", duration(now.Sub(e.At)), e.Plugin, e.Profile, e.Verdict, e.Reason,
			chat, user, orDash(clip(e.Text, 40)), orDash(clip(e.Detail, 50)))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writePlugins renders the plugins table and the rejected files. A profile is marked disabled
// when its configuration was refused, else with what its plugin last reported when that is
// not ok (degraded, stopped), with the plugin's message below the table.
func writePlugins(out io.Writer, infos []host.PluginInfo, rejected []host.Rejection, dir string) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tVERSION\tKIND\tPLATFORM\tSTATE\tPROFILES\tFILE")
	var reports []string
	for _, info := range infos {
		var profiles []string
		for name, problems := range info.Profiles {
			if st, ok := info.Status[name]; ok && len(problems) == 0 && st.State != abi.StatusOK {
				reports = append(reports, fmt.Sprintf("%s %s/%s: %s", strings.ToUpper(st.State), info.Name, name, st.Message))
				name += "(" + st.State + ")"
			}
			if len(problems) > 0 {
				name += "(disabled)"
			}
			profiles = append(profiles, name)
		}
		sort.Strings(profiles)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", info.Name, info.Manifest.Version, info.Manifest.Kind,
			info.Manifest.Platform, info.State, strings.Join(profiles, ","), info.File)
	}
	w.Flush()
	sort.Strings(reports)
	for _, r := range reports {
		fmt.Fprintln(out, r)
	}
	for _, info := range infos {
		if info.LastError != "" {
			fmt.Fprintf(out, "%s %s: %s\n", strings.ToUpper(info.State), info.Name, info.LastError)
		}
		for _, w := range info.Warnings {
			fmt.Fprintf(out, "WARNING %s: %s\n", info.Name, w)
		}
		if info.EgressDenied > 0 {
			fmt.Fprintf(out, "DENIED %s: %d egress calls refused (last: %s)\n", info.Name, info.EgressDenied, info.LastDenied)
		}
		if info.Crashes > 0 && info.State == "active" { // a failed plugin's LastError is its last crash
			fmt.Fprintf(out, "CRASHED %s: %d crashes, the breaker has not tripped (last at %s: %s)\n", info.Name, info.Crashes,
				info.LastCrashAt.UTC().Format(time.DateTime), info.LastCrash)
		}
	}
	for _, r := range rejected {
		fmt.Fprintf(out, "REJECTED %s: %s\n", r.Path, r.Error)
	}
	if len(infos) == 0 && len(rejected) == 0 {
		fmt.Fprintf(out, "no plugins in %s\n", dir)
	}
	return nil
}

// writeJobs renders jobs as a table, failures included, for the operator.
func writeJobs(w io.Writer, jobs []abi.Job) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSCHEDULE\tSTATE\tNEXT RUN\tRUNS\tLAST\tSTREAK\tTARGETS\tBY\tERROR")
	for _, j := range jobs {
		next := "-"
		if j.State == "scheduled" {
			next = clock(time.UnixMilli(j.NextRunMs))
		}
		targets := strings.Join(j.Deliver, ",")
		if targets == "" && j.Origin != nil {
			targets = "origin"
		}
		if j.Origin != nil {
			targets += " (from " + j.Origin.Platform + ":" + j.Origin.ChatID
			if j.Origin.ThreadID != "" {
				targets += ":" + j.Origin.ThreadID
			}
			targets += ")"
		}
		state := j.State
		if j.PausedReason != "" {
			state += ": " + clip(j.PausedReason, 40)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", j.ID, clip(j.Name, 24), j.Display, state, next,
			j.Runs, orDash(j.LastStatus), j.FailureStreak, targets, j.CreatedBy, clip(j.LastError, 80))
	}
	return tw.Flush()
}
