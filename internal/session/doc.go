// Package session is the host's session boundary kernel: session keys, physical sessions and
// their transcripts, the transitions between them (/new, /reset, /resume, /branch, /stop,
// compression, auto-reset), the per-key boundary lock, and the stale classification every
// background notification passes before it may reach a chat. State lives in the host's database,
// SQLite or PostgreSQL (tables sessions, session_routes, session_messages, session_chat_aliases;
// migrations under component "session"; the SQL is written once, in the subset both speak).
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
// when the send goes out.
//
// # Several hosts
//
// On PostgreSQL, several hosts may share the database, and Open sets the kernel up for that
// without being asked: the boundary lock is PostgresLocker, a transaction-scoped advisory lock
// per key held on a connection of its own for the whole callback (including the plugin's
// send), behind an in-process lock so a host's waiters queue locally; and the route cache is
// off, so every check inside the boundary reads the database. If the lock's connection fails,
// PostgreSQL releases the lock and another host may enter: Boundary.Verify, just before a
// send, proves the lock still holds, and the unlock logs any loss (PostgresLocker.Lost). Do not call Kernel methods that take a lock from inside the callback
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
//
// # Compression keeps work
//
// A completion reaches the session that was current when its work was stamped, or that
// session's compression continuation, and never a session the user has left. Only the
// transitions a user makes supersede work in flight: /new and /reset, /resume elsewhere,
// /branch, and /stop for the turn it stops (and, because they end the conversation a turn ran
// in, replacements and ends of the routed session). Compression is not one of them: it bumps
// the generation, but ClassifyWork and CheckGeneration follow the explicit compression markers
// (sessions.created_by = 'compression' with created_gen, the generation at which the child
// became current) back to the generation the work started at, so a reply or notice pending
// when the session is compressed is delivered once, into the continuation.
//
//	situation since the work started           Classify (lineage)      ClassifyWork (+generation)
//	nothing                                    deliver                 deliver
//	compression (any number of times)          deliver-continuation    deliver-continuation
//	/stop (possibly with compressions)         deliver                 stale: superseded
//	/new, /reset, /branch, /resume elsewhere   stale: user_boundary    stale: user_boundary
//	/new, then /resume back into the lineage   deliver                 stale: superseded
//	replacement or end of the routed session   deliver(-current)       stale: superseded
//
// TestClassificationTable and TestClassifyWorkTable pin these rows; the stress test checks them
// under random interleavings against its own log of generation bumps.
package session
