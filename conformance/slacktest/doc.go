// Package slacktest is a fake Slack on loopback for tests and the conformance suite: the Web
// API methods an adapter calls, Events API delivery to a Request URL, and Socket Mode. It
// behaves like Slack where adapters tend to get things wrong: signed deliveries with Slack's
// retries, forged requests, error shapes and rate limits, the message + app_mention double
// delivery, threads, and faults that strike after the effect (the message is posted, then the
// answer is lost). Its own tests check it against slack-go, a client written against the real
// Slack.
//
// Typical use:
//
//	s := slacktest.New(t)                            // closed at t.Cleanup
//	team := s.Team()                                  // DefaultTeamID, bot token DefaultBotToken
//	ch := team.AddChannel("C0GENERAL", "general")
//	s.SetRequestURL(hostURL + "/hooks/slack/main")   // or s.SetSocketMode(true)
//	m := team.Mention(ch, "U0ANN", "hello")           // message + app_mention, same ts
//	posted, err := ... s.PostedTexts(team.ID, ch, m.TS) // the bot's replies in the thread
//
// # Model
//
// One app (DefaultAppID, signing secret, app-level token DefaultAppToken) is installed in one or
// more workspaces (AddTeam), each with its own bot token and bot user. Channels are added per
// team (AddChannel, AddPrivateChannel, AddForeignChannel where the bot is not a member, AddDM),
// so the same channel id may exist in two workspaces. Message timestamps ("1700000000.000042")
// come from the Clock's seconds and a server-wide sequence, unique and increasing.
//
// # Events API over HTTP
//
// Event builders (Say, Mention, Reply, MentionReply, DM, DMReply, AssistantThreadStarted, Edit,
// Delete, Inject) store the message and queue event_callback envelopes, each with a new
// event_id and an authorizations entry naming the team's bot user. A mention queues a "message"
// and an "app_mention" event for the same ts. A bot's own chat.postMessage is delivered back as
// a "message" event with bot_id (WithoutBotEcho turns that off).
//
// Queued events are POSTed to the Request URL (SetRequestURL), each in its own goroutine, with
// X-Slack-Request-Timestamp and X-Slack-Signature (v0, HMAC-SHA256 of "v0:ts:body" with the
// signing secret, see Signature). An attempt succeeds with a 2xx within the ack timeout (3 s);
// otherwise the event is sent again after the retry schedule's pauses (at once, 1 minute, 5
// minutes) with the same event_id, X-Slack-Retry-Num 1..3 and X-Slack-Retry-Reason
// (http_timeout, http_error, connection_failed), unless the answer carried X-Slack-No-Retry: 1.
// Retry re-sends a delivered event as Slack does when it missed the acknowledgement. Forge
// sends once, never retried, one of the Forgeries (bad or short signature, bad hex, wrong
// version or secret, stale, future or non-numeric timestamp, missing headers, body altered after
// signing). VerifyURL sends the url_verification challenge and checks the answer carries it.
// Every attempt is recorded: Deliveries, Acked, GaveUp, WaitAcked, WaitSettled.
//
// # Socket Mode
//
// apps.connections.open (app-level token, in the Authorization header only) answers a one-use
// ws:// URL on the fake's socket address (SocketURL: a port of its own, as Slack's
// wss-primary.slack.com is another host than slack.com). A connection is greeted with hello; with SetSocketMode(true) events go
// to open connections as events_api frames (envelope_id, payload, retry_attempt, retry_reason)
// instead of the Request URL, and wait while none is open. A frame not acknowledged with its
// envelope_id within the ack timeout, or sent on a connection that closed first, is sent again in
// a new envelope (a new envelope_id, the same event_id) with retry_attempt + 1 and retry_reason
// "http_timeout", up to the retry schedule's length.
// LoseAcks ignores the next acknowledgements, as if lost with their connection, so a handled
// event comes again. Disconnect sends a disconnect frame (reason "warning", "refresh_requested"...) and closes the
// connections after a grace period; DropSockets cuts them. See SocketConns, SocketFrames,
// SocketAcks.
//
// # Web API
//
// Requests are POST (or GET) /api/<method> with the token in "Authorization: Bearer" or, for
// form and query parameters only, a token parameter. Errors are HTTP 200
// {"ok":false,"error":"..."} (with response_metadata.messages for invalid_arguments and
// invalid_thread_ts); a JSON body without a charset gets the missing_charset warning. Methods:
//
//   - auth.test.
//   - chat.postMessage: channel_not_found, not_in_channel, no_text, invalid_thread_ts (not a
//     timestamp), thread_not_found (no such message), cannot_reply_to_message (a system message);
//     a reply's ts joins that reply's thread; text over MaxTextLength characters is truncated
//     (Message.Truncated). WithRateLimits adds a per-channel limiter answering 429 with an integer
//     Retry-After and {"ok":false,"error":"ratelimited"}.
//     blocks are recorded (Message.Blocks, Buttons, SectionTexts) and checked against Block Kit's
//     limits the fake models (invalid_blocks: 50 blocks, 3,000 characters of section text, 1 to 25
//     elements an actions block, plain_text button labels of at most 75 characters, unique
//     action_ids, style primary or danger).
//   - chat.update (the bot's own messages: cant_update_message otherwise; blocks as above,
//     and an update without blocks keeps the message's blocks, as Slack does).
//   - assistant.threads.setStatus, setTitle, setSuggestedPrompts: channel_id and thread_ts
//     required (invalid_arguments), statuses recorded (Statuses).
//   - apps.connections.open.
//   - files.getUploadURLExternal (filename, length: invalid_arguments without them) and
//     files.completeUploadExternal (files [{id, title}], channel_id, thread_ts,
//     initial_comment; file_not_found, channel_not_found, not_in_channel, thread_not_found),
//     both reading form or query parameters only, as Slack documents them (a JSON body's
//     parameters are not read). The upload_url answered is /upload/v1/<ticket> on the fake, which
//     takes the bytes raw or as a multipart "file" part (slack-go's way), answers "OK - <n>", and
//     is recorded as a request of method "upload" (so faults for "upload" apply to it). The
//     completion shares the file in a message of the bot (Message.Files) and answers its shares'
//     ts, unless WithAsyncShares (Slack sharing after it answered). Uploads, Files.
//
// # Files and interactivity
//
// ShareFile stores a user's file and queues its message event (subtype file_share, files with
// url_private and url_private_download on the fake: /files-pri/<team>-<file>/<name>). Reading
// them needs a bot token of the file's team in the Authorization header; without one the fake
// redirects, as Slack does, to the workspace's sign-in page (HTML, its redir parameter the file's
// path). Every download is recorded (Downloads). url_private and the upload URL live on the Web
// API's address, not another like Socket Mode's: slack-go sends the token only there.
//
// PressButton builds the block_actions payload of a person pressing a button of a posted
// message. Interact POSTs it to the Interactivity Request URL (SetInteractivityURL; by default
// the Events Request URL) as Slack does, application/x-www-form-urlencoded payload=<json>,
// signed as events are and never retried; ForgeInteraction sends it as one of the Forgeries.
// InteractSocket sends it in a Socket Mode "interactive" frame, resent until acknowledged.
//
// Token errors: not_authed (none), invalid_auth (unknown, or an app token as a parameter),
// not_allowed_token_type (an app token for bot methods and the reverse). Every request is
// recorded: Requests, WaitRequests. Posts are kept per channel and thread: Messages, Posted,
// PostedTexts, AllPosted.
//
// # Faults
//
// InjectFault queues per-method faults, taken FIFO by matching requests (ForChannel narrows
// one): RateLimited, Error, ServerError (HTML), ConnectionReset replace the method (WithStatus
// and WithRetryAfter shape a Web API error's answer: an HTTP 200 "ratelimited" with
// Retry-After, a 503 whose body says "service_unavailable"); AfterEffect
// makes one of them (or Truncated, Malformed) strike after the method took effect. Slow answers
// after a delay, Hold until Release, NoAnswer never: each after the message was posted.
//
// # Not modelled
//
// Legacy message attachments (stored as parameters only), block types other than section and
// actions, files.info and the other files.* methods, thumbnails (files-tmb), remote files,
// response_url and views, users.* and conversations.*
// methods, OAuth, Enterprise Grid org installs, shared channels, per-method rate-limit tiers
// other than chat.postMessage's per-channel limit, Slack disabling an app whose Request URL keeps
// failing, and the exact wording of errors the reference material does not quote
// (unknown_method, invalid_form_data and file_upload_incomplete are guesses; so is
// "http_timeout" as the retry_reason of a frame resent because its connection closed).
package slacktest
