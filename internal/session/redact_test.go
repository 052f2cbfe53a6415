package session

import (
	"strings"
	"testing"
)

// A recall redacts the message and what would show the agent its text next turn (issue 29,
// item 6: the bot's answer quoting a recalled message stayed in the transcript): its turn's
// answer, tool calls and results, and every later entry quoting the whole text; not the turn's
// other questions, not what came before it (nor its /branch copy), not another key's sessions, and for a text too short
// to tell a quote from a coincidence only its own turn.
func TestRedactTakesWhatQuotesIt(t *testing.T) {
	e := newEnv(t, Options{})
	e.t = t
	r := e.resolve(dm("recall"))
	other := e.resolve(dm("recall-other"))
	const secret = "my secret plan is blue-falcon-42"
	quote := "I understood: “" + secret + "”. Send help to see the commands I know."
	type entry struct {
		m    Message
		gone bool // blanked by the recall of m2
	}
	entries := []entry{
		{Message{Text: "I said it before: " + secret, PlatformMessageID: "m1", Turn: "t0"}, false},
		{Message{Text: secret, PlatformMessageID: "m2", Turn: "t1"}, true},
		{Message{Text: "and this, in the same turn", PlatformMessageID: "m2b", Turn: "t1"}, false},
		{Message{Role: "assistant", Text: "", Turn: "t1", Meta: `{"tool_calls":[{"id":"c1"}]}`}, true},
		{Message{Role: "tool", Text: "tool output about the plan", Turn: "t1"}, true},
		{Message{Role: "assistant", Text: quote, Turn: "t1"}, true},
		{Message{Text: "next question", PlatformMessageID: "m3", Turn: "t2"}, false},
		{Message{Role: "assistant", Text: "As you said: " + secret + ".", Turn: "t2"}, true},
		{Message{Role: "assistant", Text: "an answer of its own", Turn: "t2"}, false},
		{Message{Role: "notification", Text: "a notice quoting " + secret}, true},
	}
	var seqs []int64
	e.k.WithBoundary(e.ctx, r.Key, func(b *Boundary) error {
		for _, en := range entries {
			seq, err := b.Append(r.SessionID, en.m)
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
		return nil
	})
	e.k.WithBoundary(e.ctx, other.Key, func(b *Boundary) error {
		_, err := b.Append(other.SessionID, Message{Role: "assistant", Text: quote, Turn: "t1"})
		return err
	})
	// A /branch copies them all, after the message: a copy is judged by its original, so the
	// copy of what was said before the message stays (as the original does). The branch goes
	// on with an answer quoting the text, which goes.
	br := e.r(e.k.Branch(e.ctx, r.Key, "b"))
	var inBranch int64
	e.k.WithBoundary(e.ctx, r.Key, func(b *Boundary) error {
		var err error
		inBranch, err = b.Append(br.SessionID, Message{Role: "assistant", Text: "In the branch: " + secret, Turn: "t3"})
		return err
	})
	if ok, err := e.k.Redact(e.ctx, r.Key, "m2"); err != nil || !ok {
		t.Fatalf("redact: %v %v", ok, err)
	}
	got := map[int64]Message{}
	for _, m := range e.transcript(r.SessionID) {
		got[m.Seq] = m
	}
	copies := map[int64]Message{}
	for _, m := range e.transcript(br.SessionID) {
		if m.CopiedFrom != 0 {
			copies[m.CopiedFrom] = m
		} else if m.Seq == inBranch && (!m.Redacted || m.Text != "") {
			t.Errorf("the branch's later answer quoting the text kept: %+v", m)
		}
	}
	for i, en := range entries {
		for where, m := range map[string]Message{"original": got[seqs[i]], "branch copy": copies[seqs[i]]} {
			if en.gone && (!m.Redacted || m.Text != "") {
				t.Errorf("%s of entry %d (%s %q) kept after the recall", where, i, en.m.Role, en.m.Text)
			}
			if !en.gone && (m.Redacted || m.Text != en.m.Text) {
				t.Errorf("%s of entry %d (%s %q) redacted: %+v", where, i, en.m.Role, en.m.Text, m)
			}
		}
	}
	if m := e.transcript(other.SessionID); m[0].Redacted || m[0].Text != quote {
		t.Fatalf("another key's entry redacted: %+v", m[0])
	}
	if ok, _ := e.k.Redact(e.ctx, r.Key, "m2"); ok {
		t.Fatal("a second recall of the message found it again")
	}

	// A short text: its own turn's answer goes, later entries that happen to contain it stay.
	var short, answer, later int64
	e.k.WithBoundary(e.ctx, r.Key, func(b *Boundary) error {
		short, _ = b.Append(br.SessionID, Message{Text: "ps", PlatformMessageID: "m4", Turn: "t4"})
		answer, _ = b.Append(br.SessionID, Message{Role: "assistant", Text: "No processes.", Turn: "t4"})
		later, _ = b.Append(br.SessionID, Message{Role: "assistant", Text: "ps lists the processes", Turn: "t5"})
		return nil
	})
	if ok, err := e.k.Redact(e.ctx, r.Key, "m4"); err != nil || !ok {
		t.Fatalf("redact m4: %v %v", ok, err)
	}
	for _, m := range e.transcript(br.SessionID) {
		switch m.Seq {
		case short, answer:
			if !m.Redacted {
				t.Errorf("%q kept", m.Text)
			}
		case later:
			if m.Redacted {
				t.Errorf("%q redacted: a two-letter text is no quote", "ps lists the processes")
			}
		}
	}

	// A long text over several lines: a later entry quoting it reflowed and clipped (the
	// built-in agent's echo, a /compress summary) goes; one with only its first words stays.
	long := "the launch codes are\n\tin the second drawer, behind the tax returns from 2019, under the blue folder with the stamps,\nnext to the spare keys for the garage and the old radio"
	var summary, firstWords int64
	e.k.WithBoundary(e.ctx, r.Key, func(b *Boundary) error {
		if _, err := b.Append(br.SessionID, Message{Text: long, PlatformMessageID: "m6", Turn: "t6"}); err != nil {
			return err
		}
		clipped := []rune(strings.Join(strings.Fields(long), " "))
		if len(clipped) <= 120 {
			t.Fatalf("the long text has %d characters: too few to be clipped", len(clipped))
		}
		clipped = clipped[:119]
		summary, _ = b.Append(br.SessionID, Message{Role: "assistant", Text: "Summary of 2 earlier messages:\n- user: " + string(clipped) + "…", Turn: "t7"})
		firstWords, _ = b.Append(br.SessionID, Message{Role: "assistant", Text: "the launch codes are classified", Turn: "t8"})
		return nil
	})
	if ok, err := e.k.Redact(e.ctx, r.Key, "m6"); err != nil || !ok {
		t.Fatalf("redact m6: %v %v", ok, err)
	}
	for _, m := range e.transcript(br.SessionID) {
		switch {
		case m.Seq == summary && !m.Redacted:
			t.Errorf("the summary quoting the text reflowed and clipped kept: %q", m.Text)
		case m.Seq == firstWords && m.Redacted:
			t.Error("an entry sharing only the text's first words redacted")
		}
	}
}
