// Package discordtest is a fake Discord on loopback for tests and the conformance suite: the
// Gateway (a WebSocket, on a listener of its own as gateway.discord.gg is another host than
// discord.com) and the REST API methods a bot adapter calls. It behaves like Discord where
// adapters tend to get things wrong, and it can lie like the real servers do: it asks clients to
// reconnect (op 7), refuses a RESUME (op 9 invalid session), stops acknowledging heartbeats (a
// zombied connection), drops connections, rate limits per route bucket and globally, and fails
// after the effect (the message is posted, then the answer is lost). Its own tests check it
// against discordgo, a client written against the real Discord.
//
// Typical use:
//
//	d := discordtest.New(t)                         // closed at t.Cleanup
//	g := d.Guild()                                  // DefaultGuildID
//	d.AddChannel(g, "C1", "general")
//	th := d.AddThread("C1", "T1", "ideas")          // a public thread, THREAD_CREATE dispatched
//	m := d.Mention("T1", discordtest.Ann, "hello")  // MESSAGE_CREATE with the bot in mentions
//	posts := d.Posted("T1")                          // the bot's messages in the thread
//
// # Gateway
//
// A connection is greeted with HELLO (op 10, heartbeat_interval, WithHeartbeatInterval). IDENTIFY
// (op 2) with the bot token starts a new session: READY (session_id, resume_gateway_url: the same
// listener, user: the bot), GUILD_CREATE (the guild's channels and active threads), then every
// event dispatched while no session was valid. Events are numbered per session
// (s) and kept, so RESUME (op 6) with a session id and a sequence replays what came after it, then
// RESUMED. Heartbeats (op 1) are answered with op 11 and recorded (Heartbeats). A client that
// closes with 1000 or 1001 ends its session, as Discord does: a later RESUME is refused.
//
// Lies: RequestReconnect sends op 7 on the open connection; InvalidSession sends op 9 with d
// resumable or not; ExpireSession makes the next RESUME be answered with op 9 d=false; Zombie
// stops acknowledging heartbeats and dispatching on the open connection (it stays open);
// DropConnections cuts every connection without a close frame (events keep queueing in the
// session); DropAfterNext cuts the connection right after the next dispatch was written. A bad
// token is closed with 4004, a RESUME with a sequence the session never had with 4007.
//
// # REST
//
// Requests are /api/v<N>/... with "Authorization: Bot <token>" (401 otherwise): GET gateway and
// gateway/bot (the gateway's URL), GET users/@me, GET channels/{id}, POST channels/{id}/messages
// (content up to MaxContent characters, message_reference, nonce with enforce_nonce,
// allowed_mentions), PATCH channels/{id}/messages/{mid} (the bot's own messages) and POST
// channels/{id}/typing. A posted message is dispatched back to the gateway as MESSAGE_CREATE
// authored by the bot, as Discord does. Pings are computed from content and allowed_mentions as
// Discord documents them (without allowed_mentions everything in the content pings):
// Message.Pinged.
//
// Message creation is limited per route bucket (per channel; SetRouteLimit, default 5 per 5 s):
// every answer carries X-RateLimit-Limit, -Remaining, -Reset, -Reset-After and -Bucket, and a
// request into an exhausted bucket is answered 429 with retry_after (seconds, a float),
// Retry-After and X-RateLimit-Scope: user (RateLimitHits counts them).
//
// # Faults
//
// InjectFault queues faults per operation (OpCreate, OpEdit, OpTyping), taken FIFO: RateLimited
// and GlobalRateLimited (429 for the route or with X-RateLimit-Global), APIError (a JSON error
// with Discord's code), ServerError (an HTML 5xx from the front end) replace the operation;
// AfterEffect makes ServerError, ConnectionReset or Truncated strike after the message was
// posted; NoAnswer posts and never answers. Every request is recorded (Requests).
//
// # Not modelled
//
// Sharding, zlib compression (the fake always sends text frames), presence and voice, guild
// members and roles beyond mentions, embeds, attachments and components (accepted, not stored),
// interactions and application commands, the identify rate limit (max_concurrency), and exact
// error texts the reference material does not quote.
package discordtest
