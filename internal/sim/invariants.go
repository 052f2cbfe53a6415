package sim

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Invariant is one promise of ARCHITECTURE.md, checked over a recorded history.
type Invariant struct {
	Name    string
	Promise string
	Check   func(h *History) []string // what is wrong, one line each; none when the promise held
}

// Takeover is how long a dead host's work may wait before another host takes it over: its
// lease lapses after 5 s and the others look every 2 s (README, "Several hosts").
const Takeover = 7 * time.Second

// HealthWithin is how soon /healthz must say "unhealthy" once the store refuses writes, and
// HealthClears how soon it must say "ok" again once the store takes them.
const (
	HealthWithin = 2 * time.Second
	HealthClears = 15 * time.Second
)

// UndeliveredAfter is how long a reply that was certainly not sent waits for its platform before
// it is given up (the plugins' undelivered_after, default 10 minutes).
const UndeliveredAfter = 10 * time.Minute

// Invariants are the promises the checker holds the host to.
var Invariants = []Invariant{
	{"no-duplicate-post", "a message that may have reached the platform is never sent again; no answer is shown twice", checkDuplicates},
	{"no-delivery-into-left-session", "nothing is delivered into a conversation the user has left (or, for a turn's answer, after /stop)", checkLeftSession},
	{"nothing-silent", "every completion, notice and reply is delivered once or has one recorded drop or failure reason", checkSilent},
	{"uncertain-reply-noticed", "a reply whose outcome is unknown is followed, once the platform answers again, by one line mentioning /last", checkUncertainNoticed},
	{"inbound-one-outcome", "every accepted inbound event has one recorded outcome (an ended inbox row, or the auth log's refusal)", checkInbound},
	{"one-poller-per-token", "one getUpdates poller per bot token at a time", checkPollers},
	{"cron-once-per-slot", "a scheduled job runs at most once per slot", checkCron},
	{"access-door", "nothing refused by access reaches a turn", checkAccess},
	{"health-reports-store-fault", "/healthz says unhealthy while the store refuses writes, and ok again after", checkHealth},
	{"completion-output", "a completion notice's output tail holds what the process printed", checkOutput},
	{"no-process-left-running", "a dead host's processes do not stay running; their chats hear of them", checkLeftRunning},
	{"no-give-up-in-short-outage", "a reply certainly not sent waits for its platform (undelivered_after) instead of being given up", checkGiveUp},
	{"no-secret-in-chat", "no credential of the configuration (the model's API key, a bot's token or secret) reaches a chat", checkSecrets},
}

// Check runs every invariant over h.
func Check(h *History) []Violation {
	var out []Violation
	for _, inv := range Invariants {
		for _, d := range inv.Check(h) {
			out = append(out, Violation{Invariant: inv.Name, Detail: d})
		}
	}
	return out
}

// chatBase is a ChatKey without its thread: the chat (and the ledger's lane) a message went to.
func chatBase(chat string) string {
	base, _, _ := strings.Cut(chat, "/")
	return base
}

// postsByChat returns the posts of each chat in the order they were posted.
func postsByChat(h *History) map[string][]Post {
	out := map[string][]Post{}
	for _, p := range h.Posts {
		out[p.Chat] = append(out[p.Chat], p)
	}
	for _, ps := range out {
		slices.SortStableFunc(ps, func(a, b Post) int { return a.At.Compare(b.At) })
	}
	return out
}

// identified reports whether a text names something unique to one event (a nonce, a process).
func identified(text string) bool {
	if strings.HasPrefix(text, sessionsListing) {
		return false // /resume lists the chat's sessions, titled by their first messages: two in a row say the same
	}
	return nonceRe.MatchString(text) || strings.Contains(text, "proc_")
}

// sessionsListing begins internal/turn's answer to /resume without an argument.
const sessionsListing = "Sessions of this chat"

func clip(s string) string {
	if r := []rune(s); len(r) > 80 {
		return string(r[:80]) + "…"
	}
	return s
}

func checkDuplicates(h *History) []string {
	var out []string
	// One ledger row, one platform message.
	seen := map[string]int{}
	for _, p := range h.Posts {
		if p.DeliveryID != "" {
			seen[p.DeliveryID]++
		}
	}
	for id, n := range seen {
		if n > 1 {
			out = append(out, fmt.Sprintf("delivery %s reached the platform %d times", id, n))
		}
	}
	// A later turn may repeat what an interrupted turn's draft said: the messages it answered stay
	// unanswered in the transcript and the next turn answers them with its own (the model fake
	// answers the same messages with the same words). renewed says whether b is such a repeat of
	// draft a: a is a draft of a turn recorded interrupted before b was posted, and b is no
	// message of that turn (a turn that went on after it was recorded interrupted is the
	// takeover defect, and stays a duplicate).
	inbox := map[string]InboxRow{}
	for _, in := range h.Inbox {
		inbox[in.ID] = in
	}
	renewed := func(a, b Post) bool {
		// A post's rows: those naming its message id; for a post no row names (an uncertain
		// send), the rows of the same text without a message id, matched in order.
		origins := func(p Post) []string {
			var o []string
			for _, r := range h.Rows {
				if chatBase(r.Chat) == chatBase(p.Chat) && (slices.Contains(r.MessageIDs, p.ID) || r.Edit == p.ID && r.Edit != "") {
					o = append(o, r.Origin)
				}
			}
			if len(o) > 0 {
				return o
			}
			var rows []Row
			for _, r := range h.Rows {
				if chatBase(r.Chat) == chatBase(p.Chat) && r.Text == p.Text && len(r.MessageIDs) == 0 && r.Edit == "" {
					rows = append(rows, r)
				}
			}
			sort.SliceStable(rows, func(i, j int) bool { return rows[i].CreatedAt.Before(rows[j].CreatedAt) })
			n := 0
			for _, q := range h.Posts {
				if q.ID == p.ID && q.Chat == p.Chat {
					break
				}
				if chatBase(q.Chat) == chatBase(p.Chat) && q.Text == p.Text && !slices.ContainsFunc(h.Rows, func(r Row) bool { return slices.Contains(r.MessageIDs, q.ID) }) {
					n++
				}
			}
			if n < len(rows) {
				o = append(o, rows[n].Origin)
			}
			return o
		}
		bo := origins(b)
		for _, o := range origins(a) {
			id, ok := strings.CutPrefix(o, "turn:")
			in, found := inbox[id]
			if !ok || !found || in.State != "interrupted" || in.Updated.IsZero() || !in.Updated.Before(b.At) || slices.Contains(bo, o) {
				return false
			}
		}
		return len(bo) > 0 && len(origins(a)) > 0
	}
	// No two messages carry the same full text (where the text is unique to one event).
	texts := map[string][]Post{}
	for _, p := range h.Posts {
		if identified(p.Text) {
			texts[p.Text] = append(texts[p.Text], p)
		}
	}
	for text, ps := range texts {
		dup := 0
		for i := 1; i < len(ps); i++ {
			if !renewed(ps[i-1], ps[i]) {
				dup++
			}
		}
		if dup > 0 {
			out = append(out, fmt.Sprintf("%d messages in %s carry the same text %q", len(ps), ps[0].Chat, clip(text)))
		}
	}
	// A streamed answer shown twice: an earlier message of the same turn (minus " …") is a
	// prefix of a later one that does not say it is the complete answer.
	for chat, ps := range postsByChat(h) {
		for i, a := range ps {
			draft := strings.TrimSuffix(a.Text, StreamSuffix)
			ids := answerNonces(a.Text)
			if draft == "" || len(ids) == 0 {
				continue
			}
			for _, b := range ps[i+1:] {
				if b.Text == a.Text || !strings.HasPrefix(b.Text, draft) || strings.HasPrefix(b.Text, CompleteMarker) || renewed(a, b) {
					continue // identical texts are reported above
				}
				if slices.ContainsFunc(answerNonces(b.Text), func(n string) bool { return slices.Contains(ids, n) }) {
					out = append(out, fmt.Sprintf("%s: answer shown twice: %q (message %s), then %q (message %s)", chat, a.Text, a.ID, b.Text, b.ID))
				}
			}
		}
	}
	// Per chat, no more messages than the ledger delivered or may have delivered.
	claimed := map[string]bool{}
	allowance := map[string]int{}
	for _, r := range h.Rows {
		base := chatBase(r.Chat)
		switch {
		case r.State == "delivered" || r.Uncertain():
			for _, id := range r.MessageIDs {
				claimed[base+"#"+id] = true
			}
			if len(r.MessageIDs) == 0 && r.Edit == "" {
				allowance[base]++
			}
		}
	}
	unclaimed := map[string]int{}
	for _, p := range h.Posts {
		if p.ID == "" || !claimed[chatBase(p.Chat)+"#"+p.ID] {
			unclaimed[chatBase(p.Chat)]++
		}
	}
	for base, n := range unclaimed {
		if n > allowance[base] {
			out = append(out, fmt.Sprintf("%s shows %d messages no delivered row names, and the ledger has only %d sends whose outcome is unknown",
				base, n, allowance[base]))
		}
	}
	sort.Strings(out)
	return out
}

// leaveCommands start a new conversation; stopCommand supersedes the running turn.
var leaveCommands = []string{"/new", "/reset"}

const (
	stopCommand   = "/stop"
	newConfirm    = "New conversation started"
	stoppedNotice = "⏹ Stopped."
)

func command(text string) string {
	f := strings.Fields(text)
	if len(f) == 0 || !strings.HasPrefix(f[0], "/") && !strings.HasPrefix(f[0], "!") {
		return ""
	}
	word, _, _ := strings.Cut(f[0][1:], "@")
	return "/" + strings.ToLower(word)
}

func checkLeftSession(h *History) []string {
	var out []string
	sessions := map[string]Session{}
	children := map[string][]Session{}
	for _, s := range h.Sessions {
		sessions[s.ID] = s
		if s.CreatedBy == "compression" {
			children[s.Parent] = append(children[s.Parent], s)
		}
	}
	lineage := func(stamped, into string) bool {
		for s, hops := stamped, 0; hops < 100; hops++ {
			if s == into {
				return true
			}
			next := ""
			for _, c := range children[s] {
				next = c.ID
			}
			if next == "" {
				return false
			}
			s = next
		}
		return false
	}
	// What the database says: where each guarded message went, and when.
	for _, r := range h.Rows {
		if r.State != "delivered" || r.SessionID == "" || (r.Kind != "notification" && r.Kind != "reply") {
			continue
		}
		if r.Kind == "notification" && r.StampedID != "" && !lineage(r.StampedID, r.SessionID) {
			out = append(out, fmt.Sprintf("row %s (%s) went into session %s, which is neither %s nor its compression continuation",
				r.ID, r.Origin, r.SessionID, r.StampedID))
		}
		s, ok := sessions[r.SessionID]
		if ok && !s.Ended.IsZero() && s.EndReason != "compression" && r.UpdatedAt.After(s.Ended) {
			out = append(out, fmt.Sprintf("row %s (%s %q) was delivered at %s into session %s, which the user left (%s) at %s",
				r.ID, r.Kind, clip(r.Text), r.UpdatedAt.Format("15:04:05.000"), s.ID, s.EndReason, s.Ended.Format("15:04:05.000")))
		}
	}
	// What the chat shows: nothing of a conversation after the confirmation that it was left.
	epoch := map[string]int{}  // nonce → /new and /reset before it in its chat
	sepoch := map[string]int{} // nonce → the same, counting /stop
	ambiguous := map[string]bool{}
	count, scount := map[string]int{}, map[string]int{}
	// An event counts if the host took it: the platform saw it taken, or the host recorded it
	// although the platform did not hear so (a host paused while it read the webhook answers
	// after the platform gave up on it; the platform retries, the host dedupes).
	recorded := map[string]bool{}
	for _, r := range h.Inbox {
		recorded[r.EventID] = r.EventID != ""
	}
	for _, in := range h.Inbound {
		if !in.Admitted || (!in.Accepted && !recorded[in.EventID]) {
			continue
		}
		switch cmd := command(in.Text); {
		case cmd == "/resume" || cmd == "/branch":
			ambiguous[in.Chat] = true
		case slices.Contains(leaveCommands, cmd):
			count[in.Chat]++
			scount[in.Chat]++
			continue
		case cmd == stopCommand:
			scount[in.Chat]++
			continue
		}
		if in.Nonce != "" {
			epoch[in.Nonce], sepoch[in.Nonce] = count[in.Chat], scount[in.Chat]
		}
	}
	// A confirmation counts once per ledger row: a duplicated one (no-duplicate-post reports it)
	// must not make the answers after its copy look late.
	claimed := map[string]bool{}
	for _, r := range h.Rows {
		if r.State == "delivered" {
			for _, id := range r.MessageIDs {
				claimed[chatBase(r.Chat)+"#"+id] = true
			}
		}
	}
	seenRow := map[string]bool{}
	counts := func(p Post) bool {
		if p.DeliveryID != "" {
			first := !seenRow[p.DeliveryID]
			seenRow[p.DeliveryID] = true
			return first
		}
		return claimed[chatBase(p.Chat)+"#"+p.ID]
	}
	// Which turn each post answers: its ledger row's origin, the turn of an inbox row, and that
	// row's message. A /stop stops one turn; a later turn's answer may speak of the stopped
	// turn's message (it stays in the conversation: the model sees it merged with the next one).
	inboxText := map[string]string{}
	for _, in := range h.Inbox {
		inboxText[in.ID] = in.Text
	}
	turnOf := map[string]string{} // chat base#message id → the text of the message its turn answered
	for _, r := range h.Rows {
		in, ok := strings.CutPrefix(r.Origin, "turn:")
		if !ok || r.State != "delivered" {
			continue
		}
		for _, id := range r.MessageIDs {
			turnOf[chatBase(r.Chat)+"#"+id] = inboxText[in]
		}
	}
	for chat, ps := range postsByChat(h) {
		if ambiguous[chat] {
			continue
		}
		left, stopped := 0, 0
		for _, p := range ps {
			isNew, isStop := strings.Contains(p.Text, newConfirm), strings.HasPrefix(p.Text, stoppedNotice)
			if (isNew || isStop) && !counts(p) {
				continue
			}
			switch {
			case isNew:
				left++
				stopped++
				continue
			case isStop:
				stopped++
				continue
			}
			for _, n := range nonces(p.Text) {
				e, ok := epoch[n]
				if !ok {
					continue
				}
				// A process's notice names its message's nonce (in its command) but is no answer
				// of a turn: the process outlives a /stop.
				answer := !procRe.MatchString(p.Text) && slices.Contains(answerNonces(p.Text), n)
				if asked, ok := turnOf[chatBase(p.Chat)+"#"+p.ID]; ok && answer && e >= left {
					answer = slices.Contains(nonces(asked), n) // the stopped turn's own answer, not a later one's
				}
				if e < left || (answer && sepoch[n] < stopped) {
					out = append(out, fmt.Sprintf("%s: %q (about %s) was posted after the user left its conversation", chat, clip(p.Text), n))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// completionRows returns, for each process, the ledger rows that record what became of its
// completion: its text notice or the notice's drop record (rows whose origin is the process,
// without its watch-match notices), and the answers of the notification turns it started.
func completionRows(h *History) map[string][]Row {
	groups := map[string][]Row{}
	for _, r := range h.Rows {
		groups[r.Group] = append(groups[r.Group], r)
	}
	out := map[string][]Row{}
	for _, r := range h.Rows {
		if strings.HasPrefix(r.Origin, "proc_") && !watchNotice(r.Text) && !correctionNotice(r.Text) {
			out[r.Origin] = append(out[r.Origin], r)
		}
	}
	fixTurns := correctionTurns(h)
	for _, in := range h.Inbox {
		grp, ok := answered(in.Outcome)
		if !ok || in.Kind != "notification" || fixTurns[in.ID] != "" {
			continue
		}
		proc, _, _ := strings.Cut(in.EventID, "#")
		for _, r := range groups[grp] {
			if r.Part == 1 {
				out[proc] = append(out[proc], r)
			}
		}
	}
	return out
}

// correctionNotice reports whether a process notice corrects an earlier "lost" one (internal/turn's
// rendering of a correction event): correctionRows accounts for it.
func correctionNotice(text string) bool {
	return strings.HasPrefix(strings.TrimPrefix(text, "↩️ "), "Correction")
}

// queuedTurn begins a process event's outcome when it went to the agent as a notification turn
// (internal/turn: the inbox row's id follows).
const queuedTurn = "queued notification turn "

// correctionTurns maps the inbox rows of notification turns that carry a process's correction
// (not its completion) to the process.
func correctionTurns(h *History) map[string]string {
	out := map[string]string{}
	for _, p := range h.Processes {
		if id, ok := strings.CutPrefix(p.CorrectionOutcome, queuedTurn); ok {
			out[id] = p.ID
		}
	}
	return out
}

// correctionRows returns, for each process, the ledger rows of its correction: its text notice,
// or the answer of the notification turn that carried it.
func correctionRows(h *History) map[string][]Row {
	out := map[string][]Row{}
	for _, r := range h.Rows {
		if strings.HasPrefix(r.Origin, "proc_") && correctionNotice(r.Text) {
			out[r.Origin] = append(out[r.Origin], r)
		}
	}
	groups := map[string][]Row{}
	for _, r := range h.Rows {
		groups[r.Group] = append(groups[r.Group], r)
	}
	fixTurns := correctionTurns(h)
	for _, in := range h.Inbox {
		proc := fixTurns[in.ID]
		grp, ok := answered(in.Outcome)
		if proc == "" || !ok {
			continue
		}
		for _, r := range groups[grp] {
			if r.Part == 1 {
				out[proc] = append(out[proc], r)
			}
		}
	}
	return out
}

// watchNotice reports whether a process notice is about something else than its end (a watch
// match, watching turned off): internal/turn's renderings of those events.
func watchNotice(text string) bool {
	return strings.HasPrefix(text, "👀") || strings.HasPrefix(text, "ℹ️") || strings.Contains(text, "matched watch pattern") ||
		strings.HasPrefix(text, "Watch patterns disabled")
}

// answered returns the ledger group an inbox outcome says the turn was answered with.
func answered(outcome string) (string, bool) {
	_, rest, ok := strings.Cut(outcome, "answered ")
	if !ok {
		return "", false
	}
	grp := strings.Fields(rest)
	if len(grp) == 0 || strings.HasPrefix(grp[0], "(") { // "answered (streamed)": the stream's rows
		return "", false
	}
	return grp[0], true
}

func checkSilent(h *History) []string {
	var out []string
	groups := map[string][]Row{}
	for _, r := range h.Rows {
		groups[r.Group] = append(groups[r.Group], r)
		switch {
		case r.State == "pending" && strings.HasPrefix(r.Reason, "unverifiable:"):
			// retried with backoff for minutes, recorded with its reason meanwhile
		case r.State == "pending" || r.State == "sending":
			out = append(out, fmt.Sprintf("row %s (%s %q) never settled: %s %s", r.ID, r.Kind, clip(r.Text), r.State, r.Reason))
		case (r.State == "failed" || r.State == "dropped") && strings.TrimSpace(r.Reason) == "":
			out = append(out, fmt.Sprintf("row %s (%s) is %s without a reason", r.ID, r.Kind, r.State))
		}
	}
	// What the ledger delivered is at the platform.
	posted := map[string]bool{}
	for _, p := range h.Posts {
		posted[chatBase(p.Chat)+"#"+p.ID] = true
		if p.DeliveryID != "" {
			posted["row#"+p.DeliveryID] = true
		}
	}
	for _, r := range h.Rows {
		if r.State != "delivered" || r.Edit != "" {
			continue
		}
		if posted["row#"+r.ID] {
			continue
		}
		if len(r.MessageIDs) == 0 {
			// Every platform answers a send with the message's id: a row delivered without
			// one was never sent.
			out = append(out, fmt.Sprintf("row %s (%s %q) is delivered with no message at %s", r.ID, r.Kind, clip(r.Text), chatBase(r.Chat)))
			continue
		}
		for _, id := range r.MessageIDs {
			if !posted[chatBase(r.Chat)+"#"+id] {
				out = append(out, fmt.Sprintf("row %s (%s %q) is delivered as message %s, which %s does not have", r.ID, r.Kind, clip(r.Text), id, chatBase(r.Chat)))
			}
		}
	}
	// Every turn's answer is in the ledger; every process completion has exactly one record of
	// what became of it.
	for _, in := range h.Inbox {
		if grp, ok := answered(in.Outcome); ok && len(groups[grp]) == 0 {
			out = append(out, fmt.Sprintf("inbox row %s says it answered %s, which the ledger does not have", in.ID, grp))
		}
	}
	fates, corrected := completionRows(h), correctionRows(h)
	for _, p := range h.Processes {
		if p.State == "running" || p.State == "starting" {
			continue // no-process-left-running
		}
		switch {
		case p.Completion == "":
			out = append(out, fmt.Sprintf("process %s ended (%s) without a completion event", p.ID, p.State))
			continue
		case p.Completion == "suppressed", p.Completion == "done" && strings.HasPrefix(p.Outcome, "not shown"):
			continue // the agent already had the result, or the operator turned notices off
		case p.Completion == "done" && strings.HasPrefix(p.Outcome, "dropped: no route"):
			continue
		}
		switch f := fates[p.ID]; len(f) {
		case 0:
			out = append(out, fmt.Sprintf("silent drop: the completion of %s (%s) has no record (event %s: %s)", p.ID, p.Chat, p.Completion, p.Outcome))
		case 1:
		default:
			var states []string
			for _, r := range f {
				states = append(states, r.ID+" "+r.State)
			}
			out = append(out, fmt.Sprintf("the completion of %s has %d records: %s", p.ID, len(f), strings.Join(states, ", ")))
		}
		// A correction (the real end of a process reported lost) is told once, or recorded.
		fixes := corrected[p.ID]
		switch {
		case p.Correction == "" && len(fixes) > 0:
			out = append(out, fmt.Sprintf("process %s: a correction notice with no correction event", p.ID))
		case p.Correction == "", p.Correction == "suppressed", p.Correction == "done" && strings.HasPrefix(p.CorrectionOutcome, "not shown"):
		case len(fixes) == 0 && p.Correction == "done":
			out = append(out, fmt.Sprintf("silent drop: the correction of %s (%s) has no record (%s)", p.ID, p.Chat, p.CorrectionOutcome))
		case len(fixes) > 1:
			out = append(out, fmt.Sprintf("the correction of %s has %d records", p.ID, len(fixes)))
		}
	}
	sort.Strings(out)
	return out
}

// lastMention is what the notice after an uncertain reply mentions.
const lastMention = "/last"

func checkUncertainNoticed(h *History) []string {
	var out []string
	notices := map[string][]Post{}
	for _, p := range h.Posts {
		if strings.Contains(p.Text, lastMention) && !nonceRe.MatchString(p.Text) {
			notices[chatBase(p.Chat)] = append(notices[chatBase(p.Chat)], p)
		}
	}
	uncertain := map[string]int{}
	for _, u := range h.Rows {
		if !u.Uncertain() || u.Draft() {
			continue
		}
		base := chatBase(u.Chat)
		uncertain[base]++ // a host may tell of any uncertain message, but of one only once
		if u.Kind != "reply" {
			continue // the promise is about the answers to the user's messages
		}
		answered := slices.ContainsFunc(h.Rows, func(r Row) bool {
			return chatBase(r.Chat) == base && r.State == "delivered" && r.UpdatedAt.After(u.UpdatedAt)
		})
		if !answered {
			continue // the platform has not answered this chat since
		}
		if !slices.ContainsFunc(notices[base], func(p Post) bool { return !p.At.Before(u.UpdatedAt) }) {
			out = append(out, fmt.Sprintf("%s: %q was recorded %q and the chat was never told it may not have arrived",
				base, clip(u.Text), u.Reason))
		}
	}
	for base, ps := range notices {
		if len(ps) > uncertain[base] {
			out = append(out, fmt.Sprintf("%s got %d notices mentioning %s for %d uncertain replies", base, len(ps), lastMention, uncertain[base]))
		}
	}
	sort.Strings(out)
	return out
}

var finalInbox = map[string]bool{"done": true, "failed": true, "interrupted": true, "dropped": true}

func checkInbound(h *History) []string {
	var out []string
	rows := map[string][]InboxRow{}
	for _, r := range h.Inbox {
		if r.EventID != "" {
			rows[r.EventID] = append(rows[r.EventID], r)
		}
	}
	refused := map[string]int{}
	for _, r := range h.Refusals {
		refused[r.EventID]++
	}
	for _, in := range h.Inbound {
		if !in.Accepted {
			continue
		}
		rs := rows[in.EventID]
		if !in.Admitted {
			if len(rs) > 0 || refused[in.EventID] != 1 {
				out = append(out, fmt.Sprintf("refused %s (%q): %d inbox rows, %d auth log refusals", in.EventID, clip(in.Text), len(rs), refused[in.EventID]))
			}
			continue
		}
		switch {
		case len(rs) == 0:
			out = append(out, fmt.Sprintf("lost: %s (%q in %s) has no inbox row", in.EventID, clip(in.Text), in.Chat))
		case len(rs) > 1:
			out = append(out, fmt.Sprintf("%s has %d inbox rows", in.EventID, len(rs)))
		case !finalInbox[rs[0].State]:
			out = append(out, fmt.Sprintf("%s (%q) never ended: %s", in.EventID, clip(in.Text), rs[0].State))
		case rs[0].State != "done" && strings.TrimSpace(rs[0].Outcome) == "":
			out = append(out, fmt.Sprintf("%s is %s without an outcome", in.EventID, rs[0].State))
		}
	}
	sort.Strings(out)
	return out
}

func checkPollers(h *History) []string {
	conflicts := map[string]int{}
	for _, p := range h.Polls {
		if p.Status == 409 && strings.Contains(p.Desc, "terminated by other getUpdates") {
			conflicts[p.Token]++
		}
	}
	var out []string
	for token, n := range conflicts {
		if n > h.Interruptions {
			out = append(out, fmt.Sprintf("bot %s…: %d getUpdates ended by a concurrent poller (%d host kills and pauses could explain)",
				token[:min(6, len(token))], n, h.Interruptions))
		}
	}
	return out
}

// CronJob is a scheduled job the world configures: it runs every Period of test time.
type CronJob struct {
	Name   string
	Period time.Duration
}

// CronJobs are the jobs of the world's cron profile (world.go).
var CronJobs = []CronJob{{Name: "simtick", Period: time.Minute}}

func checkCron(h *History) []string {
	if len(h.Clock) < 2 {
		return nil
	}
	var out []string
	start, end := h.Clock[0].To, h.Clock[len(h.Clock)-1].To
	for _, job := range CronJobs {
		slots := func(t time.Time) int { return int(t.Sub(start) / job.Period) }
		var runs []time.Time
		for _, r := range h.CronRuns {
			if r.Job == job.Name {
				runs = append(runs, r.Created)
			}
		}
		if total := slots(end); len(runs) > total {
			out = append(out, fmt.Sprintf("job %s ran %d times in %d slots", job.Name, len(runs), total))
		}
		// From each jump of the clock on, no more runs than the slots passed since (and one late
		// run of the slot before).
		for _, m := range h.Clock[1 : len(h.Clock)-1] {
			n := 0
			for _, at := range runs {
				if !at.Before(m.At) {
					n++
				}
			}
			if crossed := slots(end) - slots(m.From); n > crossed+1 {
				out = append(out, fmt.Sprintf("job %s ran %d times after the clock jumped from %s, %d slots ago",
					job.Name, n, m.From.Format(time.TimeOnly), crossed))
			}
		}
	}
	return out
}

func checkAccess(h *History) []string {
	var out []string
	for _, in := range h.Inbound {
		if in.Admitted || in.Nonce == "" {
			continue
		}
		for _, t := range h.ModelInputs {
			if strings.Contains(t, in.Nonce) {
				out = append(out, fmt.Sprintf("the model saw %s's message %q, which access refuses", in.Chat, clip(in.Text)))
				break
			}
		}
		for _, r := range h.Inbox {
			if r.Kind != "record" && strings.Contains(r.Text, in.Nonce) {
				out = append(out, fmt.Sprintf("%s's refused message %q became a %s (inbox %s)", in.Chat, clip(in.Text), r.Kind, r.ID))
			}
		}
		for _, p := range h.Posts {
			if slices.Contains(answerNonces(p.Text), in.Nonce) {
				out = append(out, fmt.Sprintf("%s's refused message %q was answered: %q", in.Chat, clip(in.Text), clip(p.Text)))
			}
		}
	}
	return out
}

func checkHealth(h *History) []string {
	var out []string
	for i, f := range h.StoreFaults {
		next := h.End
		if i+1 < len(h.StoreFaults) {
			next = h.StoreFaults[i+1].From
		}
		unhealthy, late, stuck, answered := false, "", "", false
		var back time.Time // the first answer after the fault that was not unhealthy
		for _, s := range h.Health {
			if back.IsZero() && !s.At.Before(f.To) && s.At.Before(next) && s.Status != "" && s.Status != "loading" && s.Status != "unhealthy" {
				back = s.At
			}
		}
		for _, s := range h.Health {
			switch {
			case s.Status == "" || s.Status == "loading": // no answer, or the host is still starting
			case !s.At.Before(f.From) && s.At.Before(f.To):
				if !s.At.Before(f.From.Add(HealthWithin)) {
					answered = true
				}
				if s.Status == "unhealthy" {
					unhealthy = true
				} else if s.At.Sub(f.From) > HealthWithin && late == "" {
					late = fmt.Sprintf("/healthz said %s %v after the store began refusing writes (for %v)", s.Status,
						s.At.Sub(f.From).Round(time.Millisecond), f.To.Sub(f.From).Round(time.Millisecond))
				}
			case !s.At.Before(f.To.Add(HealthClears)) && s.At.Before(next) && s.Status == "unhealthy" && stuck == "" &&
				(back.IsZero() || back.After(s.At)):
				// Unhealthy past HealthClears and not once ok since the store came back. (A later
				// episode after it was ok again, a probe write slower than its deadline on a
				// loaded machine, is not this fault's.)
				stuck = fmt.Sprintf("/healthz still said unhealthy %v after the store took writes again", s.At.Sub(f.To).Round(time.Millisecond))
			}
		}
		switch {
		case late != "":
			out = append(out, late)
		case !unhealthy && f.To.Sub(f.From) > HealthWithin && answered:
			// (A host that did not answer past HealthWithin, killed or restarting meanwhile,
			// says nothing either way.)
			out = append(out, fmt.Sprintf("/healthz never said unhealthy while the store refused writes for %v", f.To.Sub(f.From).Round(time.Millisecond)))
		}
		if stuck != "" {
			out = append(out, stuck)
		}
	}
	return out
}

func checkOutput(h *History) []string {
	var out []string
	fates := completionRows(h)
	for _, p := range h.Processes {
		if p.Printed == "" || p.State != "exited" || p.ExitCode == nil || p.Completion == "" {
			continue
		}
		if p.Correction != "" {
			// The completion said "lost" (no output); the correction carries the real end.
			if !strings.Contains(p.CorrectionOutput, p.Printed) {
				out = append(out, fmt.Sprintf("the correction of %s carries output %q, without %s that it printed", p.ID, clip(p.CorrectionOutput), p.Printed))
			}
			for _, r := range correctionRows(h)[p.ID] {
				if r.State == "delivered" && !strings.Contains(r.Text, p.Printed) {
					out = append(out, fmt.Sprintf("the correction notice of %s says %q, without %s that it printed", p.ID, clip(r.Text), p.Printed))
				}
			}
			continue
		}
		if !strings.Contains(p.Output, p.Printed) {
			out = append(out, fmt.Sprintf("the completion of %s carries output %q, without %s that it printed", p.ID, clip(p.Output), p.Printed))
			continue
		}
		for _, r := range fates[p.ID] {
			if r.State == "delivered" && !strings.Contains(r.Text, p.Printed) {
				out = append(out, fmt.Sprintf("the notice of %s says %q, without %s that it printed", p.ID, clip(r.Text), p.Printed))
			}
		}
	}
	return out
}

func checkLeftRunning(h *History) []string {
	var out []string
	for _, p := range h.Processes {
		if p.State != "running" && p.State != "starting" {
			continue
		}
		pid, _, _ := strings.Cut(p.Owner, ":") // a writer identity is "pid:starttime"
		for _, l := range h.Hosts {
			if l.Identity == "" || l.Identity != pid || l.To.IsZero() {
				continue
			}
			if gone := h.End.Sub(l.To); gone > Takeover {
				out = append(out, fmt.Sprintf("process %s (%s) is still %s, %v after its host %d died", p.ID, p.Chat, p.State, gone.Round(time.Second), l.Host))
			}
		}
	}
	return out
}

func checkGiveUp(h *History) []string {
	longest := map[string]time.Duration{}
	for _, o := range h.Outages {
		longest[o.Platform] = max(longest[o.Platform], o.To.Sub(o.From))
	}
	var out []string
	for _, r := range h.Rows {
		if r.State == "failed" && strings.HasPrefix(r.Reason, "gave up after") && longest[r.Plugin] < UndeliveredAfter {
			out = append(out, fmt.Sprintf("row %s (%s %q to %s) %s; the longest outage was %v", r.ID, r.Kind, clip(r.Text), r.Chat,
				clip(r.Reason), longest[r.Plugin].Round(time.Second)))
		}
	}
	return out
}

func checkSecrets(h *History) []string {
	var out []string
	for _, p := range h.Posts {
		for _, sec := range h.Secrets {
			if sec != "" && strings.Contains(p.Text, sec) {
				out = append(out, fmt.Sprintf("%s: message %s shows a credential (%s…): %q", p.Chat, p.ID, sec[:min(len(sec), 6)], clip(p.Text)))
			}
		}
	}
	return out
}

// procRe finds a background process's id: the host's notices about a process name it.
var procRe = regexp.MustCompile(`proc_[0-9a-f]+`)
