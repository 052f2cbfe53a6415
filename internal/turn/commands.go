package turn

import (
	"context"
	"fmt"
	"strings"

	"github.com/hermes-host/hermes-host/internal/session"
)

// command runs a queued slash command (/resume, /branch, /compress, /sessions) in its turn, so it
// never overtakes the turn before it.
func (e *Engine) command(ctx context.Context, key string, it *item) (string, string) {
	var text string
	err := e.k.WithBoundary(ctx, key, func(b *session.Boundary) error {
		var err error
		switch it.cmd {
		case "resume":
			if it.arg == "" {
				text, err = e.sessionList(ctx, key, "Sessions of this chat (resume one with /resume <id or title>):")
				return err
			}
			var r session.Route
			if r, err = b.Resume(it.arg); err == nil {
				text = fmt.Sprintf("↩️ Resumed session %s.", r.SessionID)
			}
		case "branch":
			var r session.Route
			if r, err = b.Branch(it.arg); err == nil {
				text = fmt.Sprintf("🌿 Branched into session %s; the previous one is kept.", r.SessionID)
			}
		case "compress":
			cur, ok, cerr := b.Current()
			if cerr != nil || !ok {
				return cerr
			}
			msgs, _ := e.k.Transcript(b.Context(), cur.SessionID, 0)
			summary := summarize(msgs)
			var r session.Route
			if r, err = b.Compress(cur.SessionID, summary); err == nil {
				text = fmt.Sprintf("🗜 Compressed %d messages; the conversation continues in session %s.", len(msgs), r.SessionID)
			}
		case "sessions":
			text, err = e.sessionList(ctx, key, "Sessions of this chat:")
		}
		return err
	})
	if err != nil {
		text = fmt.Sprintf("⚠️ /%s failed: %v", it.cmd, err)
	}
	if text != "" {
		e.notice(ctx, it.plugin, it.profile, key, it.src, text)
	}
	return stDone, "command /" + it.cmd
}

// summarize is the compression summary of the built-in path: who said what, shortened. An agent
// with a model would write a real summary; the session mechanics are the same.
func summarize(msgs []session.Message) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Summary of %d earlier messages:\n", len(msgs))
	start := max(0, len(msgs)-10)
	for _, m := range msgs[start:] {
		t := m.Text
		if len(t) > 120 {
			t = t[:120] + "…"
		}
		fmt.Fprintf(&b, "- %s: %s\n", m.Role, strings.ReplaceAll(t, "\n", " "))
	}
	return b.String()
}

func (e *Engine) sessionList(ctx context.Context, key, title string) (string, error) {
	v, err := e.k.Show(ctx, key, 0)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(title)
	for _, s := range append([]session.SessionInfo{v.Focus}, v.Ancestors...) {
		fmt.Fprintf(&b, "\n• %s", s.ID)
		if s.Title != "" {
			fmt.Fprintf(&b, " “%s”", s.Title)
		}
		if s.EndedAt == nil {
			b.WriteString(" (current)")
		} else {
			fmt.Fprintf(&b, " (ended: %s)", s.EndReason)
		}
	}
	return b.String(), nil
}

// status describes the chat's state; it runs at once, inside the Dispatch boundary.
func (e *Engine) status(b *session.Boundary, key string) string {
	route, ok, err := b.Current()
	if err != nil {
		return "⚠️ status unavailable: " + err.Error()
	}
	var s strings.Builder
	fmt.Fprintf(&s, "Session key: %s", key)
	if ok {
		fmt.Fprintf(&s, "\nSession: %s (generation %d)", route.SessionID, route.Generation)
	}
	e.mu.Lock()
	if kq := e.keys[key]; kq != nil {
		busy := "idle"
		if kq.running != nil {
			busy = "answering"
			if kq.running.kind == kindNotification {
				busy = "answering a background-job notification"
			}
		}
		fmt.Fprintf(&s, "\nTurn: %s, %d queued", busy, len(kq.items))
	}
	e.mu.Unlock()
	if e.procs != nil {
		if list, err := e.procs.List(b.Context()); err == nil {
			running := 0
			for _, p := range list {
				if p.Stamp.Key == key && !p.State.Final() {
					running++
				}
			}
			fmt.Fprintf(&s, "\nBackground jobs running: %d", running)
		}
	}
	return s.String()
}
