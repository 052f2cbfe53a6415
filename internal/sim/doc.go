// Package sim is the promise checker: it runs the whole host with its features together, under
// faults, and checks the promises of ARCHITECTURE.md on what happened. The features are each
// tested on their own elsewhere; the defects that survive sit where two of them meet (a stream
// and an ambiguous send, a lost lease and a retry, a reconnect and the retry budget), and only
// a run that mixes them finds those. It is test code: TestPromise and TestRegressions run it.
//
// # The world
//
// A run builds a world of its own (world.go): the real hermes-host binary, started one or more
// times with the real first-party plugins built from source (internal/e2e/e2etest), against the
// loopback fakes of Telegram (polled, DMs and forum topics), Slack (Events API threads and a
// DM, delivered through a small proxy to whichever host is up), Yuanbao (the WebSocket
// gateway), the echo platform (webhooks) and the OpenAI-compatible model (agenttest, streaming,
// with tool calls; model.go says how it answers), and a cron job every minute of the plugins'
// clock, which is the wall clock plus the jumps the schedule makes (serve --test-clock). One host
// runs on SQLite; two or three share a PostgreSQL database (internal/store/storetest). The real
// binary is used throughout, so a host can be killed (-9) and restarted, or paused (SIGSTOP)
// past its leases, and the checker reads the database the way the CLI does, beside the hosts.
// Each host's compiled plugins come from one compilation cache shared by the test process.
//
// # Schedules
//
// A schedule (schedule.go) is data: the world's shape and a list of steps, each an operation
// or a fault with its own parameters and a time relative to the start. Generate makes one from a
// seed; the same seed and shape give the same schedule. Operations: messages from admitted
// users and from strangers into DMs, groups, topics and threads; /new, /reset, /resume,
// /branch, /stop, /compress; messages that make the model start background processes that
// finish, fail, print lines a watch pattern matches, or outlive the conversation they started
// in; messages the model fails mid-answer with an error quoting the API key (a proxy echoing the
// request's headers); plugin hot replace (another build, or a broken file put right later); jumps of the cron
// clock. Faults: a platform call answered with a 5xx, a reset, a truncated body, no answer,
// an answer slower than the plugin's deadline, or a 429 with retry_after, before or after the
// platform took the message; Yuanbao reconnect storms; the store refusing writes (another writer
// holding SQLite's lock); a host killed and restarted (or left dead, with several hosts); a host
// paused past its leases. Host faults can be aimed: a kill at the host running the newest
// background process (left dead: its processes must not vanish with it), a pause at the host
// whose send into a chat waits for a slow answer while every other Telegram chat's send does
// too (the world gives telegram.wasm a pool of two instances, so the sends also wait for one).
// Every message carries a nonce (N0042x), and the model's answers, the
// processes' output and so the platforms' messages carry it back, so the checker can tell which
// message each chat message answers.
//
// Each run prints its schedule as JSON. -seed N regenerates it, -schedule FILE loads one, and a
// saved case in testdata/regress is replayed by TestRegressions (testdata/open holds schedules of
// defects still open, replayed by hand with -schedule). -aim kind=weight,… changes the mix of
// steps Generate picks (the schedules stay random) so that a rare interaction is tried often. Replay reproduces the schedule,
// not the interleaving: the host's goroutines, its background processes and the platforms'
// retries run for real, so a failing schedule may need a few runs to fail again. That is the
// honest limit of a checker of real code; what it buys is that a failure is a defect of the
// host, never of a model of it.
//
// # The history and the invariants
//
// The driver (drive.go) applies the steps; messages to one chat go out in order, each once the
// platform saw the host take the one before, while chats, faults and host operations run side
// by side. Then the world settles: the checker waits, for at most 90 s, until every
// update is confirmed and every event acknowledged, no inbox row, process event, delivery or
// process of a live host is open, three times in a row, and a dead host has been gone long
// enough for the others to take over. collect.go then reads the history (history.go): what each
// fake holds, what the driver sent and saw, the /healthz answers sampled during the run, and the
// database's ledger, inbox, processes, completions, sessions and auth log.
//
// The invariants (invariants.go) are functions of a history alone: no platform message posted
// twice (nor an answer shown twice by a stream); nothing delivered into a conversation the
// user left; every completion, notice and reply delivered once or with exactly one recorded
// drop or failure (none silent); an uncertain reply followed by one notice mentioning /last;
// every accepted inbound event with one outcome; one poller per bot token; at most one run per
// cron slot; nothing refused by access reaching a turn; /healthz unhealthy while the store
// refuses writes; a completion's output holding what the process printed; no process of a dead
// host left running; no reply certainly not sent given up within a short outage; no credential
// of the configuration (the model's API key, a bot's token) shown in a chat. Each is unit
// tested on histories written by hand with one planted violation (invariants_test.go), so the
// checker demonstrably can fail.
//
// # Shrinking
//
// On a violation, -shrink D runs ddmin over the schedule's steps (run.go) for at most D,
// re-running each candidate in a fresh world, and prints the shortest schedule that still broke
// one of the same invariants; -save NAME writes it to testdata/regress/NAME.json.
//
// # Budgets
//
// The short run (TestPromise without flags, in make test) is one schedule on one SQLite host
// and one on two hosts sharing PostgreSQL, besides TestRegressions' saved schedules; make soak SOAK=30m loops schedules and prints, every
// minute, the schedules, operations and faults per kind run so far and the violations found.
// HERMES_SIM_KNOWN lists invariants known to be broken on the branch (comma-separated): their
// violations are logged, not failed. HERMES_SIM_KEEP=DIR keeps each world's files (host logs,
// data directories, the SQLite database, and the history as JSON) for a post-mortem, and
// -recheck DIR judges the kept histories again with the invariants as they are now.
// FINDINGS.md records what the checker found.
package sim
