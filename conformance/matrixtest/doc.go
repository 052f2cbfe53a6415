// Package matrixtest is a fake Matrix homeserver on loopback for tests and the conformance suite:
// the client-server API endpoints a bot calls (whoami, profile, /sync long polling, sending and
// editing room messages, typing, joining, /messages back-pagination), with access-token
// authentication. It behaves like a homeserver where adapters tend to get things wrong, and it
// can lie: sync gaps (timelines cut to a limit and marked limited, the events in between only
// reachable through /messages), expired tokens (401 M_UNKNOWN_TOKEN), rate limits (429
// M_LIMIT_EXCEEDED with retry_after_ms), transaction ids (the same txn id on the same path with
// the same token answers the first event id and posts nothing more), and faults that strike
// after the effect (the message is posted, then the answer is a 5xx, a reset or nothing). Its
// own tests check it against mautrix-go, a client written against real homeservers.
//
// Typical use:
//
//	s := matrixtest.New(t)                       // closed at t.Cleanup; the bot is DefaultBotUserID
//	ann := s.AddUser("@ann:hermes.test", "Ann")
//	room := s.CreateRoom("Ops", ann)             // the bot and ann joined
//	ev := room.Say(ann, matrixtest.Message{Body: "Hermes: help", Mentions: []string{s.BotID()}})
//	s.Wait(time.Minute, func() bool { return len(room.BotMessages()) > 0 })
//
// # Model
//
// One server name (DefaultServerName); users with an access token each (the bot's is
// DefaultBotToken). Every event of every room is on one stream; a sync token is "s<position>",
// and so are pagination tokens, so a sync's next_batch may be given to /messages as "to", as
// Synapse allows. A sync without since answers each joined room's current state and its latest
// events; with since, the events after it. A room with more new events than the timeline limit
// (the filter's room.timeline.limit, at most the server's, SetTimelineLimit) answers the latest
// ones with limited: true and prev_batch, and the state events of the gap in state. A room the
// user joined after since is answered as on an initial sync (its state and latest events, from
// before the join too), as Synapse does. Syncs
// long-poll up to their timeout (capped at 30 s) for a new event. Room summaries
// (m.joined_member_count) come with the initial sync and whenever membership changed.
//
// # Faults
//
// InjectFault queues faults per endpoint (EndpointSend, EndpointSync, ...), taken FIFO by
// matching requests (ForRoom narrows one): LimitExceeded, Error, ServerError (HTML),
// ConnectionReset replace the request (nothing happens); AfterEffect makes one strike after the
// request took effect; Slow, Hold and NoAnswer always do. ExpireToken makes a token unknown.
//
// # Not modelled
//
// Federation, end-to-end encryption (m.room.encrypted events are stored as opaque content),
// presence, receipts, to-device messages, account data, filters stored with POST /filter (only
// inline JSON filters), lazy-loading members, redactions, and the exact wording of Synapse's
// errors beyond errcode.
package matrixtest
