// Package session is the host's session boundary kernel: session keys, physical sessions and
// their transcripts, the transitions between them (/new, /reset, /resume, /branch, /stop,
// compression, auto-reset), the per-key boundary lock, and the stale classification every
// background notification passes before it may reach a chat. State lives in SQLite (tables
// sessions, session_routes, session_messages; migrations under component "session").
//
// # Keys
//
// BuildKey is the one constructor and ParseKey the one parser of keys such as
// agent:main:telegram:dm:123 or agent:work:slack:group:T01:C42:1700000000.1234. Kernel.Key
// applies chat aliases first (AliasChat: a Telegram supergroup continues the group it was).
//
// # The boundary
//
// Every transition, every lookup that may create or reset a session, every transcript append
// and every final send into a key's chat runs inside Kernel.WithBoundary for that key. The
// callback receives a *Boundary whose methods act under the held lock. A delivery does its
// check and its send in one callback:
//
//	err := k.WithBoundary(ctx, stamp.Key, func(b *session.Boundary) error {
//		v := b.Classify(stamp) // or b.ClassifyWork(stamp, genAtTurnStart) for a synthetic turn
//		if !v.Deliverable() {
//			return ledger.Drop(v) // Stale: drop with v.Reason; Unverifiable: retry later
//		}
//		if err := plugin.Send(b.Context(), route, text); err != nil {
//			return err
//		}
//		_, err := b.Append(v.SessionID, session.Message{Role: "notification", Text: text})
//		return err
//	})
//
// While the callback runs no transition of that key can happen, so the verdict still holds
// when the send goes out. Do not call Kernel methods that take a lock from inside the callback
// (they return ErrNestedBoundary when given b.Context()); use the Boundary's methods.
//
// # Verdicts
//
// Classification follows session lineage (ARCHITECTURE.md §3): deliver to the stamped session,
// to its compression continuation, or (after a non-user end, or for an unstamped event) to
// the key's current session; stale after a user boundary or when the key moved elsewhere;
// unverifiable on store errors, missing rows and compressions not yet visible. The key's
// generation is a separate check (Boundary.CheckGeneration, Boundary.ClassifyWork) for work a
// turn started, which /stop cancels even though the session is unchanged. See RATIONALE.md.
package session
