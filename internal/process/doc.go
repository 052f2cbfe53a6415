// Package process is the host's registry of background processes: the commands the agent runs
// with `terminal(background=true)` and manages with the `process` tool.
//
// A process is a real OS process in its own process group, started through a small shell
// wrapper that records its exit status in the data directory. It is stamped at spawn with the
// spawning conversation (session.Stamp) and exported to the child as HERMES_SESSION_*. Its
// merged stdout and stderr go to DataDir/proc/<id>.log, which the host reads into a bounded
// ring buffer. Every change is checkpointed to SQLite with a generation (compare-and-set), and
// everything the delivery layer must hear about (completions, watch matches, watch-limit
// notices) goes onto a durable queue in the same transaction as the state change it reports.
//
// Life cycle of a host:
//
//	r, _ := process.New(ctx, db, process.Options{DataDir: dir})
//	rep, _ := r.Recover(ctx)    // re-adopt live processes, report the ones that ended meanwhile
//	res, _ := r.Spawn(ctx, req) // the terminal tool
//	r.Poll / r.Log / r.Wait / r.Kill / r.List
//	q := r.Queue()              // the delivery layer: Wake, Claim, Confirm, Ack, Release
//	r.Close()                   // processes keep running; the next Recover re-adopts them
//
// The CLI (`hermes-host ps`, `ps log ID`) uses ListProcesses and ReadLog,
// which need only the database and the data directory, so they work while `serve` runs.
//
// RATIONALE.md beside this file explains the decisions.
package process
