// Package telegramtest is a fake Telegram Bot API server on loopback for tests and the
// conformance suite. It behaves like api.telegram.org where adapters tend to get things wrong:
// real error bodies and status codes, long polling with offset confirmation and 409 conflicts,
// webhook pushes with the secret header and retries, forum topics, migrated groups, UTF-16
// length limits, markup parsing errors and flood control.
//
// Typical use:
//
//	tg := telegramtest.New(t)                       // closed at t.Cleanup
//	bot := tg.Bot()                                  // token telegramtest.DefaultToken
//	chat, topics := tg.AddForum(-1001234567890, "Team", telegramtest.Topic{Name: "ops"})
//	bot.TopicText(chat.ID, topics[0], telegramtest.Person(111, "Ada"), "@hermes_test_bot hi")
//	// ... point the adapter at tg.URL() and bot.Token(), let it poll and answer ...
//	sent, err := tg.WaitSent(chat.ID, topics[0], 1, 5*time.Second)
//
// # Protocol
//
// Requests are POST or GET /bot<TOKEN>/<method>, method names case-insensitive, with
// parameters in the query string and/or a form-urlencoded, JSON or multipart body. Every answer
// is the Bot API envelope {"ok":true,"result":...} or {"ok":false,"error_code":N,
// "description":"...","parameters":{...}} with HTTP status N. An unknown token is 401
// "Unauthorized"; an unknown method or a malformed path is 404 "Not Found".
//
// Methods: getMe, getUpdates, setWebhook, deleteWebhook, getWebhookInfo, sendMessage,
// editMessageText, sendChatAction, getFile, sendPhoto, sendDocument, sendVoice, sendAudio,
// sendVideo, answerCallbackQuery; and GET /file/bot<TOKEN>/<file_path> downloads.
//
// # Files, uploads and buttons
//
// AddFile and PutFile register files (bytes, and optionally a larger claimed size) that getFile
// describes (400 "invalid file_id" for unknown ids, "file is too big" above 20 MB) and
// /file/bot<TOKEN>/<file_path> serves, recorded as requests of method "file" (see Downloads;
// faults queued for "file" apply to downloads). Bot.Media queues a photo (two sizes, smallest
// first), document, voice, audio, video, video note or sticker message with a caption.
// Uploads are multipart parts named after the method's field (or attach://), or a known
// file_id; the parts are recorded with their bytes in Request.Uploads and SentMessage.File, and
// uploaded files become downloadable. Captions are parsed like texts and limited to 1024
// UTF-16 units ("message caption is too long"); uploads above 50 MB are 413, empty files 400,
// photos must decode (PNG, JPEG, GIF: else "IMAGE_PROCESS_FAILED") within 10 MB and
// Telegram's dimension rules ("PHOTO_INVALID_DIMENSIONS"). reply_markup inline keyboards are
// checked (callback_data 1-64 bytes, else "BUTTON_DATA_INVALID") and echoed. Bot.Press queues
// the callback_query of a press on a button a message really has; InjectCallback queues any.
// answerCallbackQuery accepts each received query once (see Answers).
//
// # Updates
//
// Each bot (token) has its own queue; update_ids increase by one from 10000 (SetNextUpdateID
// moves them). getUpdates returns unconfirmed updates from offset; an update is confirmed once
// getUpdates is called with a higher offset; a negative offset keeps only the last -offset
// updates; limit is clamped to 1..100 (0 or absent means 100). With timeout > 0 the request
// parks until an update is injected or the timeout (in WithSecond units) ends. A second
// getUpdates while one is parked terminates the parked (earlier) one with 409 "Conflict:
// terminated by other getUpdates request; ...", as Telegram does; the newer one carries on.
// While a webhook is set, getUpdates is 409 "Conflict: can't use getUpdates method while
// webhook is active; ...", and setWebhook ends a parked poll with that error.
//
// In webhook mode the fake POSTs each update as JSON to the URL, one at a time in order, with
// the X-Telegram-Bot-Api-Secret-Token header when a secret_token was set (SetWebhookSecretMode
// sends a wrong one or none). A non-2xx answer or a transport error is retried
// (WithWebhookRetry: 3 attempts, 20ms apart, by default); after the last attempt the update is
// dropped and getWebhookInfo reports last_error_date and last_error_message. Plain http://
// webhook URLs are accepted.
//
// # Chats and sends
//
// Sends go to chats the fake knows (AddPrivate, AddGroup, AddSupergroup, AddForum, AddTopic,
// AddChannel, MigrateGroup, or any chat an injected update created); others are 400 "chat not
// found". message_thread_id must name a topic of a forum (or of a private chat with topics);
// anything else, including the General topic's id 1 on sendMessage, is 400 "message thread not
// found" (sendChatAction accepts 1). A reply without message_thread_id to a topic message lands
// in that topic. Text is parsed per parse_mode (a practical subset of MarkdownV2, Markdown and
// HTML, reporting "can't parse entities: ..." errors), trimmed, then limited to 1..4096 UTF-16
// code units. Message ids increase per chat, shared by inbound and sent messages.
//
// Transcripts are kept per (chat, thread), thread being the message_thread_id a message went to
// (0 for none, which includes a forum's General topic): see Sent, SentTexts, AllSent, Actions.
// Every request is recorded with its parameters, headers, body, arrival time on the server's
// Clock and answered status: see Requests, FirstRequest, WaitRequests.
//
// # Inbound updates
//
// Bot methods build realistic updates and queue them: PrivateText, GroupText, MentionText,
// Command ("/cmd@botname" in groups), TopicText (message_thread_id, is_topic_message and the
// topic's creation message as reply_to_message), GeneralTopicReply and DMReply (a bogus
// message_thread_id without is_topic_message), ChannelPost (no from), BotText (from a bot),
// EditText (edited_message), Migration (the two migrate service messages), or the general
// InjectMessage and Inject. Mention and command entities are filled in with UTF-16 offsets.
// reply_to_message is always the whole replied message (one level deep, as Telegram nests it).
//
// # Faults and flood control
//
// InjectFault queues per-method faults, taken FIFO by matching requests: FloodWait (429 with
// retry_after), APIError, Migrated, ServerError (HTML body), MalformedJSON (a 200 whose JSON is
// cut), TruncatedBody (a 200 whose body ends before its Content-Length), ConnectionReset (TCP
// RST), Slow (the answer held back) and NoAnswer (none at all). A fault answers before the
// method runs unless made with AfterEffect: then the method takes effect first (the message is
// posted) and the client gets the fault instead of the answer, the case where a retry
// duplicates. Slow and NoAnswer always apply after the effect.
// WithFloodControl adds a real limiter on sendMessage and editMessageText (per chat: a burst,
// then one per second; per group: 20 a minute) driven by the Clock, e.g. a ManualClock.
//
// # Cross-checked
//
// The package's tests run go-telegram-bot-api v5.5.1 against the fake: its parsing of getMe,
// of every update builder, of sent messages and replies, of errors (Code, RetryAfter,
// MigrateToChatID) and its failures under each fault agree with what the fake means; so do its
// photo and document uploads (NewPhoto, NewDocument, by bytes and by file_id), GetFile and
// the path of GetFileDirectURL, media updates, inline keyboards, callback queries and
// answerCallbackQuery.
//
// # Waiting
//
// Nothing needs sleeps: Wait re-evaluates a condition after every state change, and
// WaitSent, WaitRequests, Bot.WaitPolling, Bot.WaitConfirmed and Bot.WaitDeliveries wrap it.
//
// # Not modelled
//
// Sending media groups, animations, stickers and video notes, thumbnails of uploads, file
// URLs in sends (only uploads and file_ids), inline mode, reply keyboards (only inline
// keyboards are checked), editing media or markup alone, the
// delivery side of privacy mode (getMe reports it, on by default as for a new bot, but every
// injected update is delivered), chat membership and permissions, "bot was
// blocked" (inject it with APIError), the global ~30 messages/s limit, edits of inline
// messages, parallel webhook connections
// (max_connections is stored), entity detection beyond mentions and commands, and the exact
// wording of errors the reference material does not quote.
package telegramtest
