package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/internal/approval"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/humanize"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
)

// The inspection commands read the database directly, so they work beside a serving host. They
// open it read-only (store.OpenReader): they never create or migrate a database, and say so
// when there is none.

func init() {
	extraCommands = append(extraCommands, sessionsCmd, psCmd, deliveriesCmd)
}

// openDB opens the configuration's database for reading.
func (g *globals) openDB(ctx context.Context) (*sql.DB, string, error) {
	cfg, _, err := g.load()
	if err != nil {
		return nil, "", err
	}
	db, err := store.OpenReader(ctx, cfg.Store, cfg.DataDir)
	if errors.Is(err, store.ErrNoDatabase) {
		if cfg.Store == "" {
			return nil, "", fmt.Errorf("no database at %s: the host has not run with this data directory (--data-dir, data_dir)",
				filepath.Join(cfg.DataDir, "hermes.db"))
		}
		return nil, "", fmt.Errorf("%v: the host has not run with this store (store)", err)
	}
	return db, cfg.DataDir, err
}

func sessionsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "sessions", Short: "Inspect session keys and physical sessions"}
	var prefix string
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List session keys with their current session and generation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			k, _, closeFn, err := g.kernel(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			keys, err := k.List(cmd.Context(), prefix)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), orEmpty(keys))
			}
			return writeSessions(cmd.OutOrStdout(), keys)
		},
	}
	ls.Flags().StringVar(&prefix, "key", "", "only keys starting with this prefix")
	var tail int
	show := &cobra.Command{
		Use:   "show KEY|ID",
		Short: "Show a key's current session, its ancestors and compression continuations, and the transcript tail",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, db, closeFn, err := g.kernel(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			v, err := k.Show(cmd.Context(), args[0], tail)
			if err != nil {
				return err
			}
			view := sessionShow{SessionView: v}
			if view.Approvals, err = approval.ForKey(cmd.Context(), db, v.Key); err != nil {
				return err
			}
			if view.Approvals == nil {
				view.Approvals = []approval.Record{} // "approvals": [] in --json
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), view)
			}
			return writeSession(cmd.OutOrStdout(), view)
		},
	}
	show.Flags().IntVar(&tail, "tail", 10, "transcript messages to show")
	jsonFlag(cmd, &asJSON)
	cmd.AddCommand(ls, show)
	return cmd
}

func (g *globals) kernel(ctx context.Context) (*session.Kernel, *sql.DB, func(), error) {
	db, _, err := g.openDB(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	k, err := session.Open(ctx, db, session.Options{CacheSize: -1, ReadOnly: true})
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	return k, db, func() { k.Close(); db.Close() }, nil
}

// sessionShow is `sessions show`: the session view and the key's approval requests.
type sessionShow struct {
	*session.SessionView
	Approvals []approval.Record `json:"approvals"`
}

// psRow is one background process as `ps --json` prints it: the process and what became of its
// completion notice.
type psRow struct {
	process.Info
	Outcome humanize.Outcome `json:"outcome"`
}

func psCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List background processes: session key, spawning session, state, start and end, what became of the completion notice",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			db, dataDir, err := g.openDB(ctx)
			if err != nil {
				return err
			}
			defer db.Close()
			list, err := process.ListProcesses(ctx, db, dataDir)
			if err != nil {
				return err
			}
			notices, err := delivery.List(ctx, db, delivery.Filter{Kind: delivery.KindNotification, Limit: 1000})
			if err != nil {
				return err
			}
			rows := humanize.NoticeRows(notices)
			out := make([]psRow, 0, len(list))
			for _, p := range list {
				out = append(out, psRow{Info: p, Outcome: humanize.NoticeOutcome(p, rows)})
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return writeProcesses(cmd.OutOrStdout(), out, time.Now())
		},
	}
	jsonFlag(cmd, &asJSON)
	cmd.AddCommand(&cobra.Command{
		Use:   "log ID",
		Short: "Print a background process's output (also after its notification was dropped)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			db, dataDir, err := g.openDB(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			return copyLog(cmd.Context(), cmd.OutOrStdout(), db, dataDir, args[0])
		},
	}, killCmd(g))
	return cmd
}

func deliveriesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "deliveries", Short: "Inspect the delivery ledger"}
	var asJSON, dropped bool
	var key, state string
	var limit int
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List outbound messages, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			db, _, err := g.openDB(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			if dropped {
				state = string(delivery.Dropped)
			}
			rows, err := delivery.List(cmd.Context(), db, delivery.Filter{State: delivery.State(state), KeyPrefix: key, Limit: limit})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), orEmpty(rows))
			}
			return writeDeliveries(cmd.OutOrStdout(), rows, time.Now())
		},
	}
	ls.Flags().BoolVar(&dropped, "dropped", false, "only dropped messages (stale notifications and the like)")
	ls.Flags().StringVar(&state, "state", "", "only this state: pending, sending, delivered, failed, dropped")
	ls.Flags().StringVar(&key, "key", "", "only session keys starting with this prefix")
	ls.Flags().IntVar(&limit, "limit", 50, "at most this many")
	var related int
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one outbound message whole: every field, its attempts, its other parts, what it links to and what links to it, and the rows of the same origin and session key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			db, _, err := g.openDB(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			v, err := showDelivery(cmd.Context(), db, args[0], related)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			return writeDelivery(cmd.OutOrStdout(), v, time.Now())
		},
	}
	show.Flags().IntVar(&related, "related", 10, "at most this many rows of the same origin, and of the same session key")
	jsonFlag(cmd, &asJSON)
	cmd.AddCommand(ls, show, retryCmd(g))
	return cmd
}

// deliveryView is `deliveries show`: one ledger row and the rows related to it.
type deliveryView struct {
	Row delivery.Row `json:"row"`
	// Parts are the other parts of the same message (a long answer split for the platform).
	Parts []delivery.Row `json:"parts"`
	// LinksTo is the message this one relates to (Row.Link: the draft it completes, the message
	// /last sent again); LinkedFrom are the messages that relate to this one.
	LinksTo    []delivery.Row `json:"links_to"`
	LinkedFrom []delivery.Row `json:"linked_from"`
	// SameOrigin are other rows produced by what produced this one (a turn, a process, a job);
	// SameKey the latest rows of its session key. Newest first, at most --related each.
	SameOrigin []delivery.Row `json:"same_origin"`
	SameKey    []delivery.Row `json:"same_key"`
}

// showDelivery reads the row id (a row id, or a message's group id: its first part) and the
// rows related to it.
func showDelivery(ctx context.Context, db *sql.DB, id string, related int) (*deliveryView, error) {
	rows, err := delivery.List(ctx, db, delivery.Filter{Group: id, Limit: 1000})
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no delivery %q in the ledger (`hermes-host deliveries ls` lists them)", id)
	}
	v := &deliveryView{}
	pick := rows[len(rows)-1] // newest first: the last is the first part
	for _, r := range rows {
		if r.ID == id {
			pick = r
		}
	}
	v.Row = pick
	others := func(f delivery.Filter) ([]delivery.Row, error) {
		rs, err := delivery.List(ctx, db, f)
		var out []delivery.Row
		for _, r := range rs {
			if r.ID != pick.ID {
				out = append(out, r)
			}
		}
		return orEmpty(out), err
	}
	if v.Parts, err = others(delivery.Filter{Group: pick.Group, Limit: 1000}); err != nil {
		return nil, err
	}
	v.LinksTo = []delivery.Row{}
	if pick.Link != "" {
		if v.LinksTo, err = others(delivery.Filter{Group: pick.Link, Limit: 1000}); err != nil {
			return nil, err
		}
	}
	if v.LinkedFrom, err = others(delivery.Filter{Link: pick.Group, Limit: 1000}); err != nil {
		return nil, err
	}
	v.SameOrigin = []delivery.Row{}
	if pick.Origin != "" {
		if v.SameOrigin, err = others(delivery.Filter{Origin: pick.Origin, Limit: related + 1}); err != nil {
			return nil, err
		}
	}
	if v.SameKey, err = others(delivery.Filter{Key: pick.Key, Limit: related + 1}); err != nil {
		return nil, err
	}
	v.SameOrigin, v.SameKey = v.SameOrigin[:min(len(v.SameOrigin), related)], v.SameKey[:min(len(v.SameKey), related)]
	return v, nil
}

// orEmpty is s, or an empty slice for none, so JSON shows [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// chatOf is a row's chat, with its thread.
func chatOf(r delivery.Row) string {
	chat := r.Target.ChatID
	if r.Target.ThreadID != "" {
		chat += "/" + r.Target.ThreadID
	}
	return chat
}
