package sim

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// These tests plant one violation of each kind in a history written by hand and require the
// invariant that guards it (and no other) to report it: a checker that cannot fail is a defect.

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

const (
	dm       = "telegram:7001/"
	stranger = "telegram:7099/"
)

// clean is a history in which every promise held: a user says hello, starts a new
// conversation, says hello again and runs a process; a stranger is refused; a store fault is
// reported by /healthz; cron ran once per slot.
func clean() *History {
	exit0 := 0
	return &History{
		Secrets: []string{"sk-test-0123456789", "123:abc"},
		Inbound: []Inbound{
			{Chat: dm, EventID: "update:1", Nonce: "N0001x", Text: "hello N0001x", Admitted: true, Accepted: true, At: at(1)},
			{Chat: dm, EventID: "update:2", Nonce: "N0002x", Text: "/new N0002x", Admitted: true, Accepted: true, At: at(3)},
			{Chat: dm, EventID: "update:3", Nonce: "N0003x", Text: "please run:ok:1 N0003x", Admitted: true, Accepted: true, At: at(5)},
			{Chat: stranger, EventID: "update:4", Nonce: "N0004x", Text: "hello from a stranger N0004x", Accepted: true, At: at(6)},
		},
		Posts: []Post{
			{Chat: dm, ID: "10", Text: "A:N0001x alpha bravo", At: at(2)},
			{Chat: dm, ID: "11", Text: "✨ New conversation started.", At: at(3.1)},
			{Chat: dm, ID: "12", Text: "started:N0003x charlie", At: at(5.5)},
			{Chat: dm, ID: "13", Text: "Background job proc_a1 exited with code 0.\n$ sleep 1; printf 'OUT-%s\\n' N0003x\nOUT-N0003x", At: at(7)},
			{Chat: stranger, ID: "20", Text: "To talk to me, ask the operator to approve code ABC123.", At: at(6.1)},
		},
		Rows: []Row{
			{ID: "r1", Group: "g1", Part: 1, Plugin: "telegram", Chat: dm, Kind: "reply", State: "delivered", MessageIDs: []string{"10"},
				SessionID: "S1", StampedID: "S1", Origin: "turn:in1", Text: "A:N0001x alpha bravo", CreatedAt: at(1.9), UpdatedAt: at(2)},
			{ID: "r2", Group: "g2", Part: 1, Plugin: "telegram", Chat: dm, Kind: "notice", State: "delivered", MessageIDs: []string{"11"},
				SessionID: "S2", Text: "✨ New conversation started.", CreatedAt: at(3), UpdatedAt: at(3.1)},
			{ID: "r3", Group: "g3", Part: 1, Plugin: "telegram", Chat: dm, Kind: "reply", State: "delivered", MessageIDs: []string{"12"},
				SessionID: "S2", StampedID: "S2", Origin: "turn:in3", Text: "started:N0003x charlie", CreatedAt: at(5.4), UpdatedAt: at(5.5)},
			{ID: "r4", Group: "g4", Part: 1, Plugin: "telegram", Chat: dm, Kind: "notification", State: "delivered", MessageIDs: []string{"13"},
				SessionID: "S2", StampedID: "S2", Origin: "proc_a1", Text: "Background job proc_a1 exited with code 0.\nOUT-N0003x", CreatedAt: at(6.9), UpdatedAt: at(7)},
			{ID: "r5", Group: "g5", Part: 1, Plugin: "telegram", Chat: stranger, Kind: "notice", State: "delivered", MessageIDs: []string{"20"},
				Text: "To talk to me, ask the operator to approve code ABC123.", CreatedAt: at(6), UpdatedAt: at(6.1)},
		},
		Inbox: []InboxRow{
			{ID: "in1", EventID: "update:1", Kind: "message", Chat: dm, Text: "hello N0001x", State: "done", Outcome: "answered (streamed)"},
			{ID: "in2", EventID: "update:2", Kind: "message", Chat: dm, Text: "/new N0002x", State: "done", Outcome: "command /new"},
			{ID: "in3", EventID: "update:3", Kind: "message", Chat: dm, Text: "please run:ok:1 N0003x", State: "done", Outcome: "answered g3"},
		},
		Processes: []Proc{{ID: "proc_a1", Chat: dm, SessionID: "S2", State: "exited", ExitCode: &exit0, Owner: "111:42",
			Printed: "OUT-N0003x", Completion: "done", Outcome: "delivered", Output: "OUT-N0003x\n"}},
		Sessions: []Session{
			{ID: "S1", Key: "k", CreatedBy: "new", Started: at(0), Ended: at(3), EndReason: "session_reset"},
			{ID: "S2", Key: "k", Parent: "S1", CreatedBy: "new", Started: at(3)},
		},
		Refusals:    []Refusal{{EventID: "update:4", Chat: "7099", Reason: "unknown_user"}},
		ModelInputs: []string{"hello N0001x", "please run:ok:1 N0003x"},
		Polls:       []Poll{{Token: "123:abc", At: at(0), Status: 200}, {Token: "123:abc", At: at(1), Status: 200}},
		CronRuns:    []CronRun{{Job: "simtick", Created: at(4)}},
		Clock: []ClockMove{
			{At: at(0), From: t0, To: t0},
			{At: at(4), From: t0.Add(4 * time.Second), To: t0.Add(64 * time.Second)},
			{At: at(10), From: t0.Add(70 * time.Second), To: t0.Add(70 * time.Second)},
		},
		StoreFaults: []Span{{From: at(20), To: at(25)}},
		Health: []HealthSample{
			{At: at(19.8), Status: "ok"}, {At: at(20.4), Status: "ok"}, {At: at(21), Status: "unhealthy"},
			{At: at(24.8), Status: "unhealthy"}, {At: at(27), Status: "unhealthy"}, {At: at(45), Status: "ok"},
		},
		Hosts: []HostLife{{Host: 0, Identity: "111", From: at(0)}},
		End:   at(60),
	}
}

// broken returns the invariants h breaks, and the details.
func broken(h *History) ([]string, string) {
	var names []string
	var details []string
	for _, v := range Check(h) {
		if !slices.Contains(names, v.Invariant) {
			names = append(names, v.Invariant)
		}
		details = append(details, v.String())
	}
	return names, strings.Join(details, "\n")
}

func TestCleanHistoryHolds(t *testing.T) {
	if names, details := broken(clean()); len(names) > 0 {
		t.Fatalf("a clean history breaks %v:\n%s", names, details)
	}
}

// TestPlantedViolations: each case breaks one promise; exactly its invariant must report it.
func TestPlantedViolations(t *testing.T) {
	exit0 := 0
	cases := []struct {
		name, want string
		plant      func(h *History)
	}{
		{"a duplicate post", "no-duplicate-post", func(h *History) {
			h.Posts = append(h.Posts, Post{Chat: dm, ID: "14", Text: "A:N0001x alpha bravo", At: at(2.5)})
		}},
		{"a post the ledger does not account for", "no-duplicate-post", func(h *History) {
			h.Posts = append(h.Posts, Post{Chat: dm, ID: "14", Text: "Something else", At: at(2.5)})
		}},
		{"a streamed answer shown twice", "no-duplicate-post", func(h *History) {
			h.Posts = append(h.Posts, Post{Chat: dm, ID: "14", Text: "A:N0003x delta …", At: at(8)},
				Post{Chat: dm, ID: "15", Text: "A:N0003x delta echo foxtrot", At: at(9)})
			h.Rows = append(h.Rows,
				Row{ID: "r6", Group: "g6", Part: 1, Plugin: "telegram", Chat: dm, Kind: "reply", State: "failed", Reason: "outcome unknown (not resent)", Text: "A:N0003x delta …", UpdatedAt: at(8)},
				Row{ID: "r7", Group: "g7", Part: 1, Plugin: "telegram", Chat: dm, Kind: "reply", State: "delivered", MessageIDs: []string{"15"}, Text: "A:N0003x delta echo foxtrot", UpdatedAt: at(9)})
		}},
		{"an interrupted turn's draft posted again by a turn that ran on beside it", "no-duplicate-post", func(h *History) {
			renewedDraft(h, 9.5) // recorded interrupted only after the second post: two turns at once
		}},
		{"a delivery into a left session (the chat)", "no-delivery-into-left-session", func(h *History) {
			h.Posts = append(h.Posts, Post{Chat: dm, ID: "14", Text: "A:N0001x late answer", At: at(4)})
			h.Rows = append(h.Rows, Row{ID: "r6", Group: "g6", Part: 1, Plugin: "telegram", Chat: dm, Kind: "reply", State: "delivered",
				MessageIDs: []string{"14"}, SessionID: "S2", StampedID: "S1", Text: "A:N0001x late answer", UpdatedAt: at(4)})
		}},
		{"a delivery into a left session (the ledger)", "no-delivery-into-left-session", func(h *History) {
			h.Rows[0].UpdatedAt = at(3.5) // S1 ended at 3 s
		}},
		{"a completion delivered into another conversation", "no-delivery-into-left-session", func(h *History) {
			h.Rows[3].StampedID = "S1"
		}},
		{"the stopped turn's answer after /stop", "no-delivery-into-left-session", func(h *History) {
			stopAfter(h, "in8")
		}},
		{"a silent drop", "nothing-silent", func(h *History) {
			h.Processes = append(h.Processes, Proc{ID: "proc_b2", Chat: dm, SessionID: "S2", State: "exited", ExitCode: &exit0,
				Completion: "done", Outcome: "delivered"})
		}},
		{"a message that never settled", "nothing-silent", func(h *History) {
			h.Rows = append(h.Rows, Row{ID: "r6", Group: "g6", Part: 1, Plugin: "telegram", Chat: dm, Kind: "reply", State: "pending", Text: "stuck"})
		}},
		{"a delivery the platform does not have", "nothing-silent", func(h *History) {
			h.Rows[2].MessageIDs = []string{"99"}
			h.Posts[2].ID = "12"
			h.Rows = append(h.Rows, Row{ID: "r6", Group: "g6", Part: 1, Plugin: "telegram", Chat: dm, Kind: "notice", State: "failed",
				Reason: "outcome unknown", Text: "x", UpdatedAt: at(5.6)}) // accounts for post 12
		}},
		{"a completion recorded delivered but never sent", "nothing-silent", func(h *History) {
			h.Rows[3].MessageIDs = nil
			h.Posts = slices.Delete(h.Posts, 3, 4)
		}},
		{"a completion recorded twice", "nothing-silent", func(h *History) {
			r := h.Rows[3]
			r.ID, r.State, r.Reason, r.MessageIDs = "r9", "dropped", "stale: user_boundary", nil
			h.Rows = append(h.Rows, r)
		}},
		{"an uncertain reply nobody was told about", "uncertain-reply-noticed", func(h *History) {
			h.Rows = append(h.Rows, Row{ID: "r6", Group: "g6", Part: 1, Plugin: "telegram", Chat: dm, Kind: "reply", State: "failed",
				Reason: "outcome unknown (not resent to avoid a duplicate)", Text: "A:N0009x", UpdatedAt: at(6.5)})
			h.Posts = append(h.Posts, Post{Chat: dm, ID: "14", Text: "A:N0009x", At: at(6.5)}) // it did arrive
		}},
		{"an inbound event with no outcome", "inbound-one-outcome", func(h *History) {
			h.Inbound = append(h.Inbound, Inbound{Chat: dm, EventID: "update:5", Nonce: "N0005x", Text: "anyone?", Admitted: true, Accepted: true})
		}},
		{"an inbound event that never ended", "inbound-one-outcome", func(h *History) {
			h.Inbox[0].State = "queued"
		}},
		{"two pollers", "one-poller-per-token", func(h *History) {
			h.Polls = append(h.Polls, Poll{Token: "123:abc", At: at(2), Status: 409, Desc: "terminated by other getUpdates request"})
		}},
		{"two runs of one cron slot", "cron-once-per-slot", func(h *History) {
			h.CronRuns = append(h.CronRuns, CronRun{Job: "simtick", Created: at(5)})
		}},
		{"a refused sender's message reaching a turn", "access-door", func(h *History) {
			h.ModelInputs = append(h.ModelInputs, "hello from a stranger N0004x")
		}},
		{"a refused sender answered", "access-door", func(h *History) {
			h.Posts = append(h.Posts, Post{Chat: stranger, ID: "21", Text: "A:N0004x hi", At: at(7)})
			h.Rows = append(h.Rows, Row{ID: "r6", Group: "g6", Part: 1, Plugin: "telegram", Chat: stranger, Kind: "reply", State: "delivered",
				MessageIDs: []string{"21"}, Text: "A:N0004x hi", UpdatedAt: at(7)})
		}},
		{"/healthz ok while the store refuses writes", "health-reports-store-fault", func(h *History) {
			h.Health[2].Status, h.Health[3].Status, h.Health[4].Status = "ok", "ok", "ok"
		}},
		{"/healthz unhealthy long after the store came back", "health-reports-store-fault", func(h *History) {
			h.Health[5].Status = "unhealthy"
		}},
		{"a notice without the process's output", "completion-output", func(h *History) {
			h.Processes[0].Output = ""
		}},
		{"a dead host's process still running", "no-process-left-running", func(h *History) {
			h.Hosts[0].To = at(30)
			h.Hosts = append(h.Hosts, HostLife{Host: 0, Identity: "222", From: at(31)})
			h.Processes = append(h.Processes, Proc{ID: "proc_c3", Chat: dm, State: "running", Owner: "111:42"})
		}},
		{"the API key in a chat", "no-secret-in-chat", func(h *History) {
			h.Posts[0].Text += " (502: upstream refused key sk-test-0123456789)"
			h.Rows[0].Text = h.Posts[0].Text
		}},
		{"a correction told twice", "nothing-silent", func(h *History) {
			corrected(h)
			r := h.Rows[len(h.Rows)-1]
			r.ID, r.Group, r.MessageIDs = "r8", "g8", []string{"15"}
			h.Rows = append(h.Rows, r)
			h.Posts = append(h.Posts, Post{Chat: dm, ID: "15", Text: r.Text + " ", At: at(9)})
		}},
		{"a reply given up in a short outage", "no-give-up-in-short-outage", func(h *History) {
			h.Rows = append(h.Rows, Row{ID: "r6", Group: "g6", Part: 1, Plugin: "yuanbao", Chat: "yuanbao:u_ann/", Kind: "reply", State: "failed",
				Reason: "gave up after 8 attempts: not connected (not sent)", Text: "A:N0009x"})
			h.Outages = []Outage{{Platform: "yuanbao", Span: Span{From: at(10), To: at(70)}}}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := clean()
			c.plant(h)
			names, details := broken(h)
			if !slices.Contains(names, c.want) {
				t.Fatalf("%s went unnoticed: got %v\n%s", c.want, names, details)
			}
			if len(names) > 1 {
				t.Errorf("one planted violation, but %v report:\n%s", names, details)
			}
			t.Log(details)
		})
	}
}

// renewedDraft adds a streamed draft of a turn (inX) recorded interrupted (a host restart) at
// interrupted seconds, and a draft of the chat's next turn (inY) with the same words at 9 s: the
// next turn answers the interrupted turn's messages again.
func renewedDraft(h *History, interrupted float64) {
	const text = "A:N0003x delta …"
	h.Inbox = append(h.Inbox,
		InboxRow{ID: "inX", Kind: "message", Chat: dm, Text: "please run:ok:1 N0003x", State: "interrupted",
			Outcome: "interrupted: the host restarted during this turn", Updated: at(interrupted)},
		InboxRow{ID: "inY", Kind: "message", Chat: dm, Text: "more N0099x", State: "done", Outcome: "answered (streamed)", Updated: at(9.5)})
	h.Posts = append(h.Posts, Post{Chat: dm, ID: "14", Text: text, At: at(8)}, Post{Chat: dm, ID: "15", Text: text, At: at(9)})
	h.Rows = append(h.Rows,
		Row{ID: "rX", Group: "gX", Part: 1, Plugin: "telegram", Chat: dm, Kind: "draft", State: "delivered", MessageIDs: []string{"14"},
			Origin: "turn:inX", Text: text, CreatedAt: at(8), UpdatedAt: at(8)},
		Row{ID: "rY", Group: "gY", Part: 1, Plugin: "telegram", Chat: dm, Kind: "draft", State: "delivered", MessageIDs: []string{"15"},
			Origin: "turn:inY", Text: text, CreatedAt: at(9), UpdatedAt: at(9)})
}

// TestAllowedLookalikes: what looks like a violation but is not is not reported.
func TestAllowedLookalikes(t *testing.T) {
	cases := []struct {
		name  string
		plant func(h *History)
	}{
		{"a later turn's answer speaks of the stopped turn's message", func(h *History) {
			stopAfter(h, "in9")
		}},
		{"/healthz ok again after the store fault, then a moment unhealthy (a slow probe)", func(h *History) {
			h.Health = append(h.Health[:5], HealthSample{At: at(30), Status: "ok"}, HealthSample{At: at(45), Status: "unhealthy"},
				HealthSample{At: at(47), Status: "ok"})
		}},
		{"a correction dropped as stale, rendered without its mark", func(h *History) {
			corrected(h)
			for _, i := range []int{3, len(h.Rows) - 1} {
				h.Rows[i].State, h.Rows[i].Reason, h.Rows[i].MessageIDs = "dropped", "stale: user_boundary", nil
			}
			h.Rows[len(h.Rows)-1].Text = "Correction: background process proc_a1, reported earlier as lost, completed normally"
			h.Posts = slices.DeleteFunc(h.Posts, func(p Post) bool { return p.ID == "13" || p.ID == "14" })
			h.Processes[0].Outcome, h.Processes[0].CorrectionOutcome = "dropped: user_boundary", "dropped: user_boundary"
		}},
		{"a /new the platform saw refused (the host paused) that the host recorded and applied", func(h *History) {
			h.Inbound[1].Accepted = false // update:2, the /new; its inbox row says it was applied
		}},
		{"the next turn repeats an interrupted turn's draft", func(h *History) {
			renewedDraft(h, 8.5)
		}},
		{"two /resume listings alike", func(h *History) {
			list := sessionsListing + " (resume one with /resume <id or title>):\n• S1 hello N0001x\n• S2 please run:ok:1 N0003x"
			for i, id := range []string{"40", "41"} {
				h.Inbound = append(h.Inbound, Inbound{Chat: dm, EventID: "update:r" + id, Text: "/resume", Admitted: true, Accepted: true, At: at(7.9 + float64(i))})
				h.Inbox = append(h.Inbox, InboxRow{ID: "inr" + id, EventID: "update:r" + id, Kind: "message", Chat: dm, Text: "/resume", State: "done", Outcome: "command /resume"})
				h.Posts = append(h.Posts, Post{Chat: dm, ID: id, Text: list, At: at(8 + float64(i))})
				h.Rows = append(h.Rows, Row{ID: "rl" + id, Group: "gl" + id, Part: 1, Plugin: "telegram", Chat: dm, Kind: "notice", State: "delivered",
					MessageIDs: []string{id}, SessionID: "S2", Text: list, CreatedAt: at(8 + float64(i)), UpdatedAt: at(8 + float64(i))})
			}
		}},
		{"a process's completion after a /stop (the process outlives it)", func(h *History) {
			h.Inbound = append(h.Inbound, Inbound{Chat: dm, EventID: "update:5", Nonce: "N0005x", Text: "/stop N0005x", Admitted: true, Accepted: true, At: at(6.4)})
			h.Inbox = append(h.Inbox, InboxRow{ID: "in5", EventID: "update:5", Kind: "message", Chat: dm, Text: "/stop N0005x", State: "done", Outcome: "command /stop"})
			h.Posts = slices.Insert(h.Posts, 3, Post{Chat: dm, ID: "30", Text: stoppedNotice, At: at(6.5)})
			h.Rows = append(h.Rows, Row{ID: "r6", Group: "g6", Part: 1, Plugin: "telegram", Chat: dm, Kind: "notice", State: "delivered",
				MessageIDs: []string{"30"}, SessionID: "S2", Text: stoppedNotice, CreatedAt: at(6.4), UpdatedAt: at(6.5)})
		}},
		{"a completion said lost, then corrected once", func(h *History) {
			corrected(h)
		}},
		{"a completion said lost, then corrected once through a notification turn", func(h *History) {
			corrected(h)
			r := &h.Rows[len(h.Rows)-1]
			r.Origin, r.Text = "turn:in9", "noted: proc_a1 OUT-N0003x"
			h.Posts[len(h.Posts)-1].Text = r.Text
			h.Processes[0].CorrectionOutcome = "queued notification turn in9"
			h.Inbox = append(h.Inbox, InboxRow{ID: "in9", EventID: "proc_a1#4", Kind: "notification", Chat: dm, State: "done", Outcome: "answered " + r.Group})
		}},
		{"an interrupted draft followed by the marked complete answer", func(h *History) {
			h.Posts = append(h.Posts, Post{Chat: dm, ID: "14", Text: "A:N0003x delta …", At: at(8)},
				Post{Chat: dm, ID: "15", Text: CompleteMarker + "\nA:N0003x delta echo foxtrot", At: at(9)})
			h.Rows = append(h.Rows,
				Row{ID: "r6", Group: "g6", Part: 1, Plugin: "telegram", Chat: dm, Kind: "reply", State: "failed", Reason: "outcome unknown (not resent)", Text: "A:N0003x delta …", UpdatedAt: at(8)},
				Row{ID: "r7", Group: "g7", Part: 1, Plugin: "telegram", Chat: dm, Kind: "reply", State: "delivered", MessageIDs: []string{"15"}, Text: CompleteMarker + "\nA:N0003x delta echo foxtrot", UpdatedAt: at(9)})
		}},
		{"an uncertain reply followed by one /last notice", func(h *History) {
			h.Rows = append(h.Rows,
				Row{ID: "r6", Group: "g6", Part: 1, Plugin: "telegram", Chat: dm, Kind: "reply", State: "failed", Reason: "outcome unknown", Text: "A:N0009x", UpdatedAt: at(6.5)},
				Row{ID: "r7", Group: "g7", Part: 1, Plugin: "telegram", Chat: dm, Kind: "notice", State: "delivered", MessageIDs: []string{"15"},
					Text: "⚠️ My previous answer may not have arrived; send /last to see it.", UpdatedAt: at(6.8)})
			h.Posts = append(h.Posts, Post{Chat: dm, ID: "15", Text: "⚠️ My previous answer may not have arrived; send /last to see it.", At: at(6.8)})
		}},
		{"an uncertain reply in a chat the platform never answered again", func(h *History) {
			h.Rows = append(h.Rows, Row{ID: "r6", Group: "g6", Part: 1, Plugin: "telegram", Chat: "telegram:7002/", Kind: "reply", State: "failed",
				Reason: "outcome unknown", Text: "A:N0009x", UpdatedAt: at(6.5)})
		}},
		{"two pollers while a host was killed", func(h *History) {
			h.Polls = append(h.Polls, Poll{Token: "123:abc", At: at(2), Status: 409, Desc: "terminated by other getUpdates request"})
			h.Interruptions = 1
		}},
		{"a duplicated confirmation does not make later answers late", func(h *History) {
			// (the duplicate itself is no-duplicate-post's; here only its copy is planted, as a
			// post no row names, with the uncertain row that accounts for it)
			h.Posts = append(h.Posts, Post{Chat: dm, ID: "30", Text: "✨ New conversation started.", At: at(3.2)})
			h.Rows = append(h.Rows, Row{ID: "r6", Group: "g6", Part: 1, Plugin: "telegram", Chat: dm, Kind: "notice", State: "failed",
				Reason: "outcome unknown", Text: "✨ New conversation started.", UpdatedAt: at(3.2)})
			h.Inbound = append(h.Inbound, Inbound{Chat: dm, EventID: "update:9", Nonce: "N0009x", Text: "hello N0009x", Admitted: true, Accepted: true, At: at(3.15)})
			h.Inbox = append(h.Inbox, InboxRow{ID: "in9", EventID: "update:9", Kind: "message", Chat: dm, State: "done", Outcome: "no answer"})
			h.Posts = append(h.Posts, Post{Chat: dm, ID: "31", Text: "A:N0009x", At: at(4)})
			h.Rows = append(h.Rows, Row{ID: "r7", Group: "g7", Part: 1, Plugin: "telegram", Chat: dm, Kind: "reply", State: "delivered",
				MessageIDs: []string{"31"}, SessionID: "S2", StampedID: "S2", Text: "A:N0009x", UpdatedAt: at(4)})
		}},
		{"a dead host's process within the takeover time", func(h *History) {
			h.Hosts[0].To = h.End.Add(-2 * time.Second)
			h.Processes = append(h.Processes, Proc{ID: "proc_c3", Chat: dm, State: "running", Owner: "111:42"})
		}},
		{"a completion dropped after the user left", func(h *History) {
			h.Rows[3].State, h.Rows[3].Reason, h.Rows[3].MessageIDs = "dropped", "stale: user_boundary", nil
			h.Posts = slices.Delete(h.Posts, 3, 4)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := clean()
			c.plant(h)
			if names, details := broken(h); len(names) > 0 {
				t.Fatalf("reported %v:\n%s", names, details)
			}
		})
	}
}

// TestGenerateIsDeterministic: a seed names one schedule.
func TestGenerateIsDeterministic(t *testing.T) {
	a, b := Generate(42, shortSQLite), Generate(42, shortSQLite)
	if a.JSON() != b.JSON() {
		t.Fatal("the same seed gave two schedules")
	}
	if c := Generate(43, shortSQLite); c.JSON() == a.JSON() {
		t.Fatal("two seeds gave one schedule")
	}
	if n := len(a.Steps); n < shortSQLite.Steps {
		t.Fatalf("%d steps", n)
	}
}

// TestOutliveLeavesWhileTheProcessRuns: an aimed "outlive" step is a background process and,
// in the same chat before it ends, /new or /reset; unaimed schedules have none (the seeds
// recorded in FINDINGS.md keep their schedules).
func TestOutliveLeavesWhileTheProcessRuns(t *testing.T) {
	saved := map[bool][]struct {
		kind string
		n    int
	}{}
	for k, ws := range weights {
		saved[k] = slices.Clone(ws)
	}
	t.Cleanup(func() { weights = saved })
	pairs := func(s *Schedule) int {
		n := 0
		for i := 0; i+1 < len(s.Steps); i++ {
			run, leave := s.Steps[i], s.Steps[i+1]
			m := regexp.MustCompile(`run:ok:([0-9]+) `).FindStringSubmatch(run.Text)
			if m == nil || leave.Chat != run.Chat || !slices.Contains(leaveCommands, command(leave.Text)) {
				continue
			}
			secs, _ := strconv.Atoi(m[1])
			if gap := leave.At - run.At; gap <= 0 || gap >= secs*1000 {
				t.Fatalf("%q then %q %d ms later: not while the process runs", run.Text, leave.Text, gap)
			}
			n++
		}
		return n
	}
	plain := Generate(42, shape(1, 40))
	if err := Aim("outlive=1000"); err != nil {
		t.Fatal(err)
	}
	aimed := Generate(42, shape(1, 40))
	if n := pairs(aimed); n < 10 {
		t.Fatalf("%d processes outlive their conversation in an aimed schedule:\n%s", n, aimed.JSON())
	}
	weights = saved
	if again := Generate(42, shape(1, 40)); again.JSON() != plain.JSON() {
		t.Fatal("restoring the weights did not restore the schedule")
	}
}

// TestShrinkHelpers: the ddmin parts split and join a schedule without losing a step.
func TestShrinkHelpers(t *testing.T) {
	steps := Generate(7, shortSQLite).Steps
	for n := 1; n <= len(steps); n++ {
		chunks := split(steps, n)
		var all []Step
		for _, c := range chunks {
			all = append(all, c...)
		}
		if len(all) != len(steps) {
			t.Fatalf("split into %d: %d steps of %d", n, len(all), len(steps))
		}
		if len(chunks) > 1 && len(complement(chunks, 0))+len(chunks[0]) != len(steps) {
			t.Fatal("complement lost steps")
		}
	}
}

// corrected makes proc_a1's completion a "lost" notice (a survivor took its host over) followed
// by one correction notice with the real end, as internal/turn renders them.
func corrected(h *History) {
	p := &h.Processes[0]
	p.Output, p.Correction, p.CorrectionOutcome, p.CorrectionOutput = "", "done", "delivered", "OUT-N0003x\n"
	h.Rows[3].Text = "⚠️ I lost track of background job proc_a1 (its host stopped); its outcome is unknown."
	h.Posts[3].Text = h.Rows[3].Text
	text := "↩️ Correction: the background job I reported as lost (proc_a1) completed normally (exit code 0).\nOUT-N0003x"
	h.Rows = append(h.Rows, Row{ID: "r7", Group: "g7", Part: 1, Plugin: "telegram", Chat: dm, Kind: "notification", State: "delivered",
		MessageIDs: []string{"14"}, SessionID: "S2", StampedID: "S2", Origin: "proc_a1", Text: text, CreatedAt: at(8), UpdatedAt: at(8.1)})
	h.Posts = append(h.Posts, Post{Chat: dm, ID: "14", Text: text, At: at(8.1)})
}

// stopAfter adds a message N0008x whose turn is stopped by /stop, then an answer mentioning
// N0008x posted after the stop, by the turn of inbox row origin: in8 is N0008x's own turn,
// in9 the turn of the next message N0009x (the stopped message merged into its text).
func stopAfter(h *History, origin string) {
	h.Inbound = append(h.Inbound,
		Inbound{Chat: dm, EventID: "update:8", Nonce: "N0008x", Text: "hello N0008x", Admitted: true, Accepted: true, At: at(10)},
		Inbound{Chat: dm, EventID: "update:s", Nonce: "N0010x", Text: "/stop N0010x", Admitted: true, Accepted: true, At: at(11)},
		Inbound{Chat: dm, EventID: "update:9", Nonce: "N0009x", Text: "hello N0009x", Admitted: true, Accepted: true, At: at(12)})
	h.Inbox = append(h.Inbox,
		InboxRow{ID: "in8", EventID: "update:8", Kind: "message", Chat: dm, Text: "hello N0008x", State: "done", Outcome: "interrupted by /stop"},
		InboxRow{ID: "ins", EventID: "update:s", Kind: "message", Chat: dm, Text: "/stop N0010x", State: "done", Outcome: "command /stop"},
		InboxRow{ID: "in9", EventID: "update:9", Kind: "message", Chat: dm, Text: "hello N0009x", State: "done", Outcome: "answered g9"})
	answer := "A:N0008x A:N0009x kilo"
	h.Posts = append(h.Posts, Post{Chat: dm, ID: "50", Text: stoppedNotice, At: at(11.1)}, Post{Chat: dm, ID: "51", Text: answer, At: at(12.5)})
	h.Rows = append(h.Rows,
		Row{ID: "rs", Group: "gs", Part: 1, Plugin: "telegram", Chat: dm, Kind: "notice", State: "delivered", MessageIDs: []string{"50"},
			SessionID: "S2", Text: stoppedNotice, CreatedAt: at(11), UpdatedAt: at(11.1)},
		Row{ID: "r9", Group: "g9", Part: 1, Plugin: "telegram", Chat: dm, Kind: "reply", State: "delivered", MessageIDs: []string{"51"},
			SessionID: "S2", StampedID: "S2", Origin: "turn:" + origin, Text: answer, CreatedAt: at(12.4), UpdatedAt: at(12.5)})
}
