package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/auth"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/testdeadline"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// runCmd runs hermes-host with args in this process (newRoot), as main would, and returns what
// it printed and its error.
func runCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

// cleanEnv keeps the caller's environment out of a command test.
func cleanEnv(t *testing.T) {
	t.Setenv("HERMES_CONFIG", "")
	t.Setenv("HERMES_DATA_DIR", "")
	t.Setenv("HERMES_COMPILATION_CACHE", "")
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// In a directory where no host ran, every inspection command says there is no database, exits
// non-zero, and leaves the directory as it was: no .hermes, no hermes.db.
func TestInspectionWithoutDatabaseCreatesNothing(t *testing.T) {
	cleanEnv(t)
	dir := t.TempDir()
	t.Chdir(dir)
	admin := closedPort(t)
	for _, args := range [][]string{
		{"sessions", "ls"}, {"sessions", "ls", "--json"}, {"sessions", "show", "agent:main:echo:dm:1"},
		{"ps"}, {"ps", "--json"}, {"ps", "log", "proc_000000000001"},
		{"deliveries", "ls"}, {"deliveries", "ls", "--json"}, {"deliveries", "show", "dlv_1"},
		{"pairing", "ls"}, {"pairing", "ls", "--json"}, {"auth", "log"},
		{"pairing", "approve", "ABCD2345"}, {"pairing", "revoke", "111"},
	} {
		_, _, err := runCmd(t, append(args, "--admin-listen", admin)...)
		want := "no database at " + filepath.Join(".hermes", "hermes.db") + ": the host has not run with this data directory (--data-dir, data_dir)"
		if err == nil || err.Error() != want {
			t.Errorf("%v: error %v, want %q", args, err, want)
		}
	}
	_, _, err := runCmd(t, "plugins", "ls", "--admin-listen", admin)
	if err == nil || !strings.Contains(err.Error(), "no plugins directory at "+filepath.Join(".hermes", "plugins")) {
		t.Errorf("plugins ls: %v", err)
	}
	// A data directory named on the command line is not created either.
	_, _, err = runCmd(t, "ps", "--data-dir", filepath.Join(dir, "data"))
	if err == nil || !strings.Contains(err.Error(), "no database at "+filepath.Join(dir, "data", "hermes.db")) {
		t.Errorf("ps --data-dir: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("the inspection commands created %v in %s", entries, dir)
	}
}

// hostData is a data directory as a host leaves it: every table migrated, one conversation,
// one background process that ended, and some ledger rows. Its fields are what the tests look
// for.
type hostData struct {
	dir, key, session, proc string
	first, link, other      string // ledger groups: a message of two parts, one linked to it, one of another origin
}

func newHostData(t *testing.T) *hostData {
	t.Helper()
	ctx := context.Background()
	h := &hostData{dir: t.TempDir()}
	db, err := store.OpenSource(ctx, "", h.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	k, err := session.Open(ctx, db, session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	log := slog.New(slog.DiscardHandler)
	l, err := delivery.Open(ctx, db, k, nil, delivery.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	reg, err := process.New(ctx, db, process.Options{DataDir: h.dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()

	src := abi.Source{Platform: "echo", Profile: "main", ChatType: abi.ChatDM, ChatID: "42", UserID: "u1"}
	h.key, _ = k.Key(src)
	var st session.Stamp
	if err := k.WithBoundary(ctx, h.key, func(b *session.Boundary) error {
		if _, err := b.Resolve(src, session.ResolveOptions{}); err != nil {
			return err
		}
		st, err = b.Stamp(src)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	h.session = st.SessionID

	res, err := reg.Spawn(ctx, process.SpawnRequest{Command: "echo hello", Stamp: st, NotifyOnComplete: true})
	if err != nil {
		t.Fatal(err)
	}
	h.proc = res.ID
	if in, err := reg.Wait(ctx, res.ID, testdeadline.Scale(30*time.Second)); err != nil || !in.State.Final() {
		t.Fatalf("process: %+v %v", in, err)
	}

	msg := func(text, origin string) delivery.Message {
		return delivery.Message{Plugin: "echo", Profile: "main", Key: h.key, Target: abi.OutboundMessage{ChatID: "42"},
			Text: text, Kind: delivery.KindReply, Origin: origin}
	}
	// Two parts waiting for a host to send them (the ledger is not started here).
	first := msg("part one part two", "turn:in_1")
	first.Parts = []string{"part one", "part two"}
	if h.first, err = l.Enqueue(ctx, first); err != nil {
		t.Fatal(err)
	}
	again := msg("part one part two", "turn:in_1")
	again.Link = h.first
	if h.link, err = l.Record(ctx, again, delivery.Failed, "failed: "+delivery.UncertainMark+": the plugin crashed mid-send"); err != nil {
		t.Fatal(err)
	}
	if h.other, err = l.Record(ctx, msg("hello", "turn:in_2"), delivery.Dropped, "stale: session_reset"); err != nil {
		t.Fatal(err)
	}
	notice := msg("[proc] done", h.proc)
	notice.Kind = delivery.KindNotification
	if _, err = l.Record(ctx, notice, delivery.Dropped, "stale: user_boundary"); err != nil {
		t.Fatal(err)
	}
	return h
}

// decode runs a command with --json and decodes what it printed into v.
func decode(t *testing.T, v any, args ...string) {
	t.Helper()
	out, _, err := runCmd(t, append(args, "--json")...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%v --json: %v\n%s", args, err, out)
	}
}

func ids(rows []delivery.Row) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.ID)
	}
	slices.Sort(out)
	return out
}

// deliveries show prints a row whole with its related rows: the message's other part, the one
// linked to it, the rest of its origin and of its session key; --json has the same.
func TestDeliveriesShow(t *testing.T) {
	cleanEnv(t)
	h := newHostData(t)
	var v deliveryView
	decode(t, &v, "deliveries", "show", h.first, "--data-dir", h.dir) // a message's id: its first part
	if v.Row.ID != h.first+".1" || v.Row.State != delivery.Pending || v.Row.Parts != 2 || v.Row.Target.Text != "part one" {
		t.Fatalf("row %+v", v.Row)
	}
	if got := ids(v.Parts); !slices.Equal(got, []string{h.first + ".2"}) {
		t.Errorf("parts %v", got)
	}
	if got := ids(v.LinkedFrom); !slices.Equal(got, []string{h.link}) {
		t.Errorf("linked from %v", got)
	}
	if len(v.LinksTo) != 0 {
		t.Errorf("links to %v", ids(v.LinksTo))
	}
	if got := ids(v.SameOrigin); !slices.Equal(got, slices.Sorted(slices.Values([]string{h.first + ".2", h.link}))) {
		t.Errorf("same origin %v", got)
	}
	if got := ids(v.SameKey); !slices.Contains(got, h.other) || slices.Contains(got, h.first+".1") {
		t.Errorf("same key %v", got)
	}
	// The linked row points back; its lineage is the first message's parts.
	decode(t, &v, "deliveries", "show", h.link, "--data-dir", h.dir)
	if got := ids(v.LinksTo); !slices.Equal(got, []string{h.first + ".1", h.first + ".2"}) || !v.Row.Uncertain() {
		t.Errorf("links to %v (%+v)", got, v.Row)
	}
	out, _, err := runCmd(t, "deliveries", "show", h.first+".2", "--data-dir", h.dir)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "deliveries show", out, "id:          "+h.first+".2", "message:     "+h.first+" (part 2 of 2)", "state:       pending",
		"session key: "+h.key, "origin:      turn:in_1", "attempts:    0", "text:\n  part two", "other parts of the message:", h.first+".1",
		"messages linked to it:", h.link, "latest rows of session key", h.other)
	out, _, err = runCmd(t, "deliveries", "show", h.link, "--data-dir", h.dir)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "deliveries show", out, "reason:      failed: outcome unknown: the plugin crashed mid-send", "never resent",
		"links to:    "+h.first, "the message it links to:", h.first+".2")
	if _, _, err := runCmd(t, "deliveries", "show", "dlv_nosuch", "--data-dir", h.dir); err == nil || !strings.Contains(err.Error(), `no delivery "dlv_nosuch"`) {
		t.Errorf("an unknown id: %v", err)
	}
}

// Every inspection command's --json is JSON of the data it shows (decoded here strictly: no
// field the Go types do not have).
func TestInspectionJSON(t *testing.T) {
	cleanEnv(t)
	h := newHostData(t)
	dd := []string{"--data-dir", h.dir, "--admin-listen", closedPort(t)}

	var keys []session.KeyInfo
	decode(t, &keys, append([]string{"sessions", "ls"}, dd...)...)
	if len(keys) != 1 || keys[0].Key != h.key || keys[0].SessionID != h.session {
		t.Errorf("sessions ls: %+v", keys)
	}
	var view sessionShow
	decode(t, &view, append([]string{"sessions", "show", h.key}, dd...)...)
	if view.SessionView == nil || view.Key != h.key || view.Current == nil || view.Current.ID != h.session || view.Approvals == nil {
		t.Errorf("sessions show: %+v", view)
	}
	var procs []psRow
	decode(t, &procs, append([]string{"ps"}, dd...)...)
	if len(procs) != 1 || procs[0].ID != h.proc || procs[0].Command != "echo hello" || procs[0].EndedAt.IsZero() ||
		procs[0].Outcome.State != "dropped" || procs[0].Outcome.Detail != "stale: user_boundary" || procs[0].Outcome.Row == nil {
		t.Errorf("ps: %+v", procs)
	}
	var rows []delivery.Row
	decode(t, &rows, append([]string{"deliveries", "ls"}, dd...)...)
	if len(rows) != 5 || rows[0].Origin != h.proc || rows[0].State != delivery.Dropped {
		t.Errorf("deliveries ls: %d rows, %+v", len(rows), rows)
	}
	var pairing struct {
		Pending  []auth.Request  `json:"pending"`
		Approved []auth.Approval `json:"approved"`
	}
	decode(t, &pairing, append([]string{"pairing", "ls"}, dd...)...)
	if pairing.Pending == nil || pairing.Approved == nil {
		t.Errorf("pairing ls: %+v", pairing)
	}
	var entries []auth.Entry
	decode(t, &entries, append([]string{"auth", "log"}, dd...)...)
	if entries == nil {
		t.Error("auth log: null, want []")
	}
	// Reading migrated nothing and wrote nothing the tables would show: the same rows again.
	var again []delivery.Row
	decode(t, &again, append([]string{"deliveries", "ls"}, dd...)...)
	if !slices.Equal(ids(rows), ids(again)) {
		t.Errorf("deliveries changed by reading: %v, then %v", ids(rows), ids(again))
	}
	// The text forms read the same database.
	out, _, err := runCmd(t, append([]string{"ps"}, dd...)...)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "ps", out, h.proc, "echo hello", "dropped: stale: user_boundary", h.key)
}

// plugins ls without a server validates the plugins directory here, as JSON too, and leaves the
// data directory as it was: no database, no cache, no token.
func TestPluginsLsHereCreatesNothing(t *testing.T) {
	cleanEnv(t)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	var view pluginsView
	decode(t, &view, "plugins", "ls", "--data-dir", dir, "--admin-listen", closedPort(t))
	if view.From != "here" || view.Plugins == nil || len(view.Plugins) != 0 || view.Rejected == nil {
		t.Errorf("plugins ls: %+v", view)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "plugins" {
		t.Fatalf("plugins ls created %v in the data directory", entries)
	}
	if _, err := os.Stat(filepath.Join(dir, "hermes.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("hermes.db: %v", err)
	}
}

// plugins compile fills the compilation cache under the data directory, keyed as serve keys it:
// a later load of the same directory (plugins ls here, which uses an existing cache) finds every
// module compiled and adds nothing.
func TestPluginsCompileFillsTheCache(t *testing.T) {
	cleanEnv(t)
	dir := t.TempDir()
	wasmbuild.CopyTo(t, "../../plugins/echo", filepath.Join(dir, "plugins", "echo.wasm"))
	out, _, err := runCmd(t, "plugins", "compile", "--data-dir", dir, "--log-level", "error")
	if err != nil || !strings.Contains(out, "compiled echo (echo.wasm)") || !strings.Contains(out, "1 plugins in") {
		t.Fatalf("plugins compile: %v\n%s", err, out)
	}
	cache := filepath.Join(dir, "cache", "wazero")
	count := func() int {
		n := 0
		filepath.WalkDir(cache, func(_ string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				n++
			}
			return nil
		})
		return n
	}
	before := count()
	if before == 0 {
		t.Fatal("the cache is empty after plugins compile")
	}
	var view pluginsView
	decode(t, &view, "plugins", "ls", "--data-dir", dir, "--admin-listen", closedPort(t), "--log-level", "error")
	if len(view.Plugins) != 1 || count() != before {
		t.Fatalf("plugins ls after compile: %d plugins, cache %d files, was %d", len(view.Plugins), count(), before)
	}
}
