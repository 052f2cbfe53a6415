package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/host"
	"github.com/hermes-host/hermes-host/internal/approval"
	"github.com/hermes-host/hermes-host/internal/auth"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/humanize"
	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/session"
)

func contains(t *testing.T, what, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, out)
		}
	}
}

func TestWriteSessions(t *testing.T) {
	start := time.Date(2026, 11, 29, 8, 5, 12, 0, time.UTC)
	var b bytes.Buffer
	writeSessions(&b, []session.KeyInfo{
		{Key: "agent:main:telegram:dm:1", SessionID: "20261129_080512_ab12cd34", Generation: 3, StartedAt: start, UpdatedAt: start, Title: "fresh"},
		{Key: "agent:main:echo:dm:2", SessionID: "S2", Generation: 1, Suspended: true},
		{Key: "agent:work:echo:dm:3", SessionID: "S3", Ended: true, EndReason: "session_reset"},
	})
	contains(t, "sessions ls", b.String(), "KEY", "agent:main:telegram:dm:1", "20261129_080512_ab12cd34", "2026-11-29 08:05:12",
		"fresh", "suspended", "ended:session_reset")
}

func TestWriteSession(t *testing.T) {
	at := time.Date(2026, 11, 29, 8, 5, 12, 0, time.UTC)
	ended := at.Add(time.Minute)
	v := &session.SessionView{
		Key: "agent:main:echo:dm:1", Generation: 4,
		Current:       &session.SessionInfo{ID: "S3"},
		Focus:         session.SessionInfo{ID: "S1", CreatedBy: "message", StartedAt: at, EndedAt: &ended, EndReason: session.EndCompression, Messages: 2},
		Continuations: []session.SessionInfo{{ID: "S3", CreatedBy: "compression", StartedAt: ended}},
		Tail:          []session.Message{{Role: "user", Text: "first\nsecond line", At: at}, {Role: "user", Text: "gone", Redacted: true, At: at}},
	}
	var b bytes.Buffer
	writeSession(&b, sessionShow{SessionView: v, Approvals: []approval.Record{
		{ID: "apQ2", Command: "rm -rf /tmp/x", Rule: "recursive rm", Platform: "echo", User: "1", State: approval.StateDenied,
			DecidedBy: "echo:1", CreatedAt: at},
		{ID: "apQ3", Command: "sudo ls", Rule: "sudo", Platform: "echo", User: "1", State: approval.StateVoided,
			Reason: "voided by /new", CreatedAt: at}}})
	contains(t, "sessions show", b.String(), "key:         agent:main:echo:dm:1", "current:     S3", "generation:  4",
		"continuations (compression):", "ended 2026-11-29 08:06:12 (compression)", "\n      second line", "[redacted]", "transcript (last 2 of 2)",
		"approvals:\n  apQ2  2026-11-29 08:05:12  denied   rm -rf /tmp/x  (recursive rm; asked by echo:1, denied by echo:1)",
		"apQ3  2026-11-29 08:05:12  voided   sudo ls  (sudo; asked by echo:1: voided by /new)")
	b.Reset()
	writeSession(&b, sessionShow{SessionView: &session.SessionView{Key: "k", Focus: session.SessionInfo{ID: "S9"}}})
	contains(t, "sessions show without a route", b.String(), "(no route)", "S9", "live")
}

func TestWriteProcesses(t *testing.T) {
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	one := 1
	list := []process.Info{
		{ID: "proc_000000000001", Command: "sleep 300", State: process.StateRunning, StartedAt: now.Add(-time.Minute), MaxAge: time.Hour,
			Stamp: session.Stamp{Key: "agent:main:telegram:dm:42", SessionID: "S1"}, Adopted: true},
		{ID: "proc_000000000002", Command: "echo bye;\n exit 1", State: process.StateExited, ExitCode: &one, StartedAt: now.Add(-90 * time.Second),
			EndedAt: now.Add(-30 * time.Second), Notice: "done", NoticeOutcome: "queued notification turn in_7"},
		{ID: "proc_000000000003", Command: "x", State: process.StateLost, Reason: "lost", StartedAt: now.Add(-50 * time.Hour)},
		{ID: "proc_000000000004", Command: "y", State: process.StateLost, Reason: process.ReasonHostLost, StartedAt: now,
			Notice: "pending"},
		{ID: "proc_000000000005", Command: "z", State: process.StateExited, ExitCode: &one, StartedAt: now,
			Notice: "done", NoticeOutcome: "queued", Correction: "done", CorrectionOutcome: "queued"},
	}
	notices := humanize.NoticeRows([]delivery.Row{{ID: "dlv_1", Origin: "notify:in_7", State: delivery.Delivered, SessionID: "S2",
		MessageIDs: []string{"77"}, Plugin: "telegram", Profile: "main", Target: abi.OutboundMessage{ChatID: "42"}}})
	var rows []psRow
	for _, p := range list {
		rows = append(rows, psRow{Info: p, Outcome: humanize.NoticeOutcome(p, notices)})
	}
	var b bytes.Buffer
	writeProcesses(&b, rows, now)
	contains(t, "ps", b.String(), "SESSION KEY", "STARTED", "ENDED", "RAN", "proc_000000000001", "running [adopted]", "1h00m (59m00s left)",
		"agent:main:telegram:dm:42", "S1", "2026-11-29 08:58:30", "2026-11-29 08:59:30", "1m00s ", "1m00s so far", "echo bye; exit 1",
		// The console's words (humanize.NoticeOutcome), not the notice queue's.
		"delivered: into session S2 as platform message 77 (telegram/main, chat 42)",
		"lost", "2d02h", "lost: host_lost", "pending: waiting to be delivered", "done: queued; correction done: queued")
	if strings.Contains(b.String(), "queued notification turn") {
		t.Errorf("ps shows the queue's state where the ledger says what became of the notice:\n%s", b.String())
	}
}

func TestWriteDeliveries(t *testing.T) {
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	writeDeliveries(&b, []delivery.Row{{ID: "dl_1", State: delivery.Dropped, Kind: delivery.KindNotice, CreatedAt: now.Add(-5 * time.Second),
		Key: "agent:main:echo:dm:1", Target: abi.OutboundMessage{ChatID: "1", ThreadID: "7", Text: strings.Repeat("x", 100)},
		Reason: "stale: user_boundary"}}, now)
	contains(t, "deliveries ls", b.String(), "REASON", "dl_1", "dropped", "5s", "1/7", strings.Repeat("x", 39)+"…", "stale: user_boundary")
	// The reason is whole.
	b.Reset()
	long := "failed: " + strings.Repeat("the platform said no; ", 10)
	writeDeliveries(&b, []delivery.Row{{ID: "dl_2", State: delivery.Failed, Reason: long}}, now)
	contains(t, "deliveries ls", b.String(), long)
}

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{45 * time.Second: "45s", 185 * time.Second: "3m05s", 130 * time.Minute: "2h10m",
		76 * time.Hour: "3d04h", -90 * time.Second: "-1m30s"} {
		if got := duration(d); got != want {
			t.Errorf("duration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestWriteAccess(t *testing.T) {
	now := time.Date(2026, 11, 29, 8, 5, 12, 0, time.UTC)
	var b bytes.Buffer
	writePairing(&b, []auth.Request{{Code: "ABCD2345", Plugin: "telegram", Profile: "main", UserID: "111", UserName: "ann",
		CreatedAt: now.Add(-time.Minute), ExpiresAt: now.Add(59 * time.Minute)}},
		[]auth.Approval{{Plugin: "telegram", Profile: "main", UserID: "222", ApprovedAt: now, Code: "QRST6789"}}, now)
	contains(t, "pairing ls", b.String(), "ABCD2345", "telegram", "111", "ann", "59m00s", "APPROVED", "222", "QRST6789")
	b.Reset()
	writeApproved(&b, auth.Approval{Plugin: "telegram", Profile: "main", UserID: "111", UserName: "ann"}, false)
	contains(t, "pairing approve", b.String(), "approved 111 (ann) on telegram/main", "no tools: they can chat", "was not told")
	b.Reset()
	writeApproved(&b, auth.Approval{Plugin: "telegram", Profile: "main", UserID: "111", Tools: []string{"shell"}}, true)
	contains(t, "pairing approve with a shell", b.String(), "tools: shell (the agent runs commands on this machine")
	b.Reset()
	writeAuthLog(&b, []auth.Entry{{At: now.Add(-5 * time.Second), Plugin: "telegram", Profile: "main", Verdict: auth.Refuse,
		Reason: auth.ReasonPairingSent, ChatType: abi.ChatDM, ChatID: "111", UserID: "111", Text: "sh id", Detail: "code ABCD2345 sent as dlv_1"}}, now)
	contains(t, "auth log", b.String(), "5s", "refuse", "pairing_code_sent", "dm:111", "sh id", "code ABCD2345")
}

// A profile a plugin reports stopped or degraded is marked in the table and its message shown;
// an ok one is not.
func TestWritePluginsStatus(t *testing.T) {
	var b bytes.Buffer
	writePlugins(&b, []host.PluginInfo{{Name: "yuanbao", State: "active", File: "yuanbao.wasm",
		Profiles: map[string][]string{"main": nil, "work": nil, "bad": {"no app_id"}},
		Status: map[string]abi.ProfileStatus{"main": {State: abi.StatusStopped, Message: "closed with 4013: bot disabled"},
			"work": {State: abi.StatusOK, Message: "connected"}}}}, nil, "plugins")
	out := b.String()
	contains(t, "plugins ls", out, "bad(disabled),main(stopped),work ", "STOPPED yuanbao/main: closed with 4013: bot disabled")
	if strings.Contains(out, "connected") {
		t.Errorf("an ok status is shown:\n%s", out)
	}
}

// Crashes before the breaker trips are shown with the last one; a failed plugin's last crash is
// its LastError already.
func TestWritePluginsCrashes(t *testing.T) {
	at := time.Date(2026, 12, 2, 7, 30, 0, 0, time.UTC)
	var b bytes.Buffer
	writePlugins(&b, []host.PluginInfo{
		{Name: "flaky", State: "active", File: "flaky.wasm", Crashes: 2, LastCrash: "plugin flaky crashed in send (trap): unreachable", LastCrashAt: &at},
		{Name: "dead", State: "failed", File: "dead.wasm", Crashes: 5, LastError: "breaker tripped", LastCrash: "x", LastCrashAt: &at},
	}, nil, "plugins")
	out := b.String()
	contains(t, "plugins ls", out, "CRASHED flaky: 2 crashes, the breaker has not tripped (last at 2026-12-02 07:30:00: plugin flaky crashed in send (trap): unreachable)",
		"FAILED dead: breaker tripped")
	if strings.Contains(out, "CRASHED dead") {
		t.Errorf("a failed plugin's crashes shown twice:\n%s", out)
	}
}
