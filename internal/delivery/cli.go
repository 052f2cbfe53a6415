package delivery

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteList renders ledger rows as a table for `hermes-host deliveries ls`.
func WriteList(w io.Writer, rows []Row, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tKIND\tAGE\tKEY\tCHAT\tTEXT\tREASON")
	for _, r := range rows {
		chat := r.Target.ChatID
		if r.Target.ThreadID != "" {
			chat += "/" + r.Target.ThreadID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, r.Kind, age(now.Sub(r.CreatedAt)), r.Key, chat,
			clip(r.Target.Text, 40), clip(r.Reason, 60))
	}
	return tw.Flush()
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
