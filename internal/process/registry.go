package process

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hermes-host/hermes-host/internal/session"
)

// Options configure a Registry. Only DataDir is required.
type Options struct {
	// DataDir is the host's data directory; process output goes to DataDir/proc/<id>.log and
	// exit statuses to DataDir/proc/<id>.exit.
	DataDir string
	// Shell runs the command as Shell -c COMMAND. Default: bash if found in PATH, else /bin/sh.
	Shell string
	// Env is the base environment of every process. Default: the host's environment without
	// HERMES_SESSION_* and HERMES_PROCESS_ID (those are set per process).
	Env []string
	// BufferBytes is the in-memory output ring per process. Default 200,000.
	BufferBytes int
	// LogBytes bounds the disk space of a log file: once more than twice this much has been
	// written, the host punches out the oldest part (offsets stay valid; the start reads as
	// gone). Default 32 MiB; negative keeps everything.
	LogBytes int64
	// TailChars is the default size of a completion's output tail. Default 2000.
	TailChars int
	// MaxRunning caps processes running at once. Default 1024.
	MaxRunning int
	// MaxAge kills a running process older than this (reason max_age). Default 24h; negative
	// disables. A spawn may set its own.
	MaxAge time.Duration
	// KillGrace is the wait between SIGTERM and SIGKILL. Default 5s.
	KillGrace time.Duration
	// PollInterval is how often output is read for watch patterns, re-adopted processes are
	// checked and ages enforced. Default 250ms.
	PollInterval time.Duration
	// FinishedTTL is how long an ended process stays in memory (it stays readable from the
	// checkpoint and log file after that). Default 30m.
	FinishedTTL time.Duration
	// Retention is how long ended processes, their log files and their events are kept. Default 7 days.
	Retention time.Duration
	// Now is the clock of watch limits, ages and event times. Default time.Now.
	Now func() time.Time
	// Logger receives operational errors. Default slog.Default().
	Logger *slog.Logger
	// StoreRetry is the first delay before a checkpoint that must land (a process's end and its
	// completion) is written again after the store failed; it doubles up to StoreRetryMax.
	// Defaults 100ms and 5s.
	StoreRetry, StoreRetryMax time.Duration
	// Host is this host's identity when several hosts share the database (the lease instance id,
	// lease.InstanceID): every process row names the host that runs it, and another host that
	// takes a stopped host's work over records that host's processes as lost (TakeOver). Empty
	// on a single host.
	Host string
}

func (o *Options) defaults() error {
	if o.DataDir == "" {
		return errors.New("process: Options.DataDir is required")
	}
	if o.Shell == "" {
		o.Shell = "/bin/sh"
		if p, err := exec.LookPath("bash"); err == nil {
			o.Shell = p
		}
	}
	if o.Env == nil {
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "HERMES_SESSION_") && !strings.HasPrefix(kv, "HERMES_PROCESS_ID=") {
				o.Env = append(o.Env, kv)
			}
		}
	}
	setDefault(&o.BufferBytes, 200_000)
	setDefault(&o.TailChars, 2000)
	setDefault(&o.LogBytes, 32<<20)
	setDefault(&o.MaxRunning, 1024)
	setDefault(&o.MaxAge, 24*time.Hour)
	setDefault(&o.KillGrace, 5*time.Second)
	setDefault(&o.PollInterval, 250*time.Millisecond)
	setDefault(&o.FinishedTTL, 30*time.Minute)
	setDefault(&o.Retention, 7*24*time.Hour)
	setDefault(&o.StoreRetry, 100*time.Millisecond)
	setDefault(&o.StoreRetryMax, 5*time.Second)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

func setDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v == 0 {
		*v = d
	}
}

// Registry owns the background processes of one host: it spawns them, keeps their output,
// checkpoints every change to SQLite, emits events to its Queue and recovers after a restart.
//
// Lock discipline (one level per object, always taken in this order, never the reverse):
//
//	Registry.mu  guards procs, running and closed; never held while taking another lock
//	proc.mu      guards every mutable field of that proc (its Info, ring, log reader, watch
//	             limiter, waiters, kill reason); the process's ops are submitted to the writer
//	             while it is held, which fixes their order
//	breaker.mu   guards the global watch breaker; taken with a proc.mu held
//	writer.mu    guards the write queue; taken last, held only to append
//
// No lock is held across a database round trip or a wait for a process.
type Registry struct {
	db     *sql.DB
	opt    Options
	host   string // Options.Host
	logDir string
	now    func() time.Time
	log    *slog.Logger
	w      *writer
	q      *Queue
	brk    breaker

	mu      sync.Mutex
	procs   map[string]*proc
	running int // procs not yet ended (starting or running)
	closed  bool

	stop     chan struct{}
	loopDone chan struct{}
}

// proc is one process known to this host.
type proc struct {
	// Set at creation, then read-only.
	id       string
	logPath  string
	exitPath string
	cmd      *exec.Cmd     // nil for a re-adopted process; set before the reaper starts
	done     chan struct{} // closed once the end is checkpointed

	mu      sync.Mutex
	info    Info
	ring    ring
	logf    *os.File // the host's handle on the log file (read, punch); nil once ended
	readOff int64    // next byte of the log file to read
	punched int64    // bytes at the start of the log file given back to the disk; -1: cannot
	partial []byte   // an incomplete last line, for watch matching
	readErr error    // the last read of the log file failed: the ring may lack output (restoreLocked)
	watch   watchLimiter
	waiters int    // Wait calls blocked on done
	killWhy string // set once a kill was requested: the reason

	finished time.Time // guarded by Registry.mu: when the end was recorded (zero while running)
}

// New opens the registry on db (running this package's migrations). Call Recover once before
// spawning, then Close at shutdown (processes keep running; the next host re-adopts them).
func New(ctx context.Context, db *sql.DB, opt Options) (*Registry, error) {
	if err := opt.defaults(); err != nil {
		return nil, err
	}
	if err := Migrate(ctx, db); err != nil {
		return nil, err
	}
	logDir := filepath.Join(opt.DataDir, "proc")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return nil, fmt.Errorf("process: %w", err)
	}
	r := &Registry{
		db: db, opt: opt, host: opt.Host, logDir: logDir, now: opt.Now, log: opt.Logger,
		procs: map[string]*proc{}, stop: make(chan struct{}), loopDone: make(chan struct{}),
	}
	r.q = newQueue(db, opt.Now)
	r.w = newWriter(db, opt.Now, opt.Logger, r.q.signal, opt.StoreRetry, opt.StoreRetryMax)
	go r.loop()
	return r, nil
}

// Queue is the durable event queue the delivery layer consumes.
func (r *Registry) Queue() *Queue { return r.q }

// Health returns nil while checkpoints are written, and otherwise an error saying since when
// the store has refused them, how many writes wait and why. The registry keeps retrying the
// writes that must land (a process's end and its completion) meanwhile; nothing is lost and
// nothing needs a restart once the store takes writes again.
func (r *Registry) Health() error {
	err, since, waiting := r.w.health()
	if err == nil {
		return nil
	}
	return fmt.Errorf("process checkpoints failing since %s (%d waiting, retried): %w",
		since.UTC().Format(time.RFC3339), waiting, err)
}

// Close stops the registry's goroutines and flushes pending checkpoints. Running processes are
// left running and are re-adopted by the next Recover. Close does not close the database.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	close(r.stop)
	<-r.loopDone
	r.w.close()
	return nil
}

// SpawnRequest describes a background process.
type SpawnRequest struct {
	Command string        // run as Shell -c Command
	Dir     string        // working directory; empty: the host's
	Env     []string      // added to the base environment
	Stamp   session.Stamp // the spawning conversation
	// NotifyOnComplete asks for a completion notification to the agent.
	NotifyOnComplete bool
	// WatchPatterns are substrings; a line containing one produces a watch_match event (rate
	// limited). Ignored when NotifyOnComplete is set ("notify wins").
	WatchPatterns []string
	// OutputChars is the size of the completion's output tail; 0: Options.TailChars.
	OutputChars int
	// MaxAge overrides Options.MaxAge: 0 keeps the default, negative means no limit.
	MaxAge time.Duration
}

// NoteNotifyWins is the note Spawn returns when watch patterns were dropped because
// notify_on_complete was also set.
const NoteNotifyWins = "watch_patterns ignored: notify_on_complete is set and already reports the result; use one or the other"

// SpawnResult is what Spawn returns.
type SpawnResult struct {
	Info
	Note string // a remark for the caller (the agent), e.g. NoteNotifyWins
}

// Spawn starts req.Command in its own process group, stamped with req.Stamp. The checkpoint
// (stamp, notify settings, watch patterns) is committed before the process starts, and again
// with its pid and kernel start time before Spawn returns. A process that cannot be started is
// recorded as failed_start and reported as an error.
func (r *Registry) Spawn(ctx context.Context, req SpawnRequest) (SpawnResult, error) {
	if strings.TrimSpace(req.Command) == "" {
		return SpawnResult{}, errors.New("process: empty command")
	}
	var res SpawnResult
	if req.NotifyOnComplete && len(req.WatchPatterns) > 0 {
		req.WatchPatterns = nil
		res.Note = NoteNotifyWins
	}
	r.mu.Lock()
	switch {
	case r.closed:
		r.mu.Unlock()
		return res, ErrClosed
	case r.running >= r.opt.MaxRunning:
		r.mu.Unlock()
		return res, ErrTooMany
	}
	r.running++ // reserved; released by finish or below
	r.mu.Unlock()

	p, wf, err := r.newProc(req)
	if err != nil {
		r.release()
		return res, err
	}
	// Checkpoint 1: everything but the pid, before the process exists.
	p.mu.Lock()
	o := r.checkpointLocked(p, nil)
	p.mu.Unlock()
	if err := o.wait(); err != nil {
		wf.Close()
		p.logf.Close()
		os.Remove(p.logPath)
		r.release()
		return res, err
	}
	r.mu.Lock()
	r.procs[p.id] = p
	r.mu.Unlock()
	if testHookBeforeStart != nil {
		testHookBeforeStart(p.id)
	}

	cmd := exec.Command("/bin/sh", "-c", wrapperScript, r.opt.Shell, req.Command, p.exitPath)
	cmd.Dir = req.Dir
	cmd.Env = r.env(p.id, req)
	cmd.Stdout, cmd.Stderr = wf, wf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	wf.Close()
	if err != nil {
		r.finish(p, endStatus{state: StateFailedStart, reason: err.Error(), consumed: true})
		return res, fmt.Errorf("process: start %s: %w", p.id, err)
	}
	// The child is not reaped until waitChild, so its /proc entry (and pid) are stable here.
	st, serr := readProcStat(cmd.Process.Pid)
	if serr != nil {
		r.log.Warn("process: cannot read start time", "id", p.id, "err", serr)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.info.PID, p.info.StartTicks, p.info.State = cmd.Process.Pid, st.startTicks, StateRunning
	o = r.checkpointLocked(p, nil)
	res.Info = p.info
	p.mu.Unlock()
	go r.reap(p)
	if err := o.wait(); err != nil {
		return res, fmt.Errorf("process: %s started (pid %d) but its checkpoint failed: %w", p.id, res.PID, err)
	}
	return res, nil
}

// testHookBeforeStart, when set by a test, runs after the first checkpoint and before the
// process is started.
var testHookBeforeStart func(id string)

// wrapperScript runs the command under Shell ($0) and records its exit status in $2, so a
// status is known even when the process ends while the host is down. The wrapper is the process
// group leader and its pid is the process's pid.
//
// The wrapper traps TERM, INT and HUP with a no-op, so a group-wide SIGTERM ends the command
// (whose signal handling is the default, traps are not inherited) while the wrapper waits for
// it and records its status; SIGKILL still ends the wrapper at once.
const wrapperScript = `trap : TERM INT HUP; "$0" -c "$1"; rc=$?; echo "$rc" > "$2"; exit "$rc"`

func (r *Registry) release() {
	r.mu.Lock()
	r.running--
	r.mu.Unlock()
}

// newProc builds the proc for req and creates its log file; wf is the write side for the child.
func (r *Registry) newProc(req SpawnRequest) (p *proc, wf *os.File, err error) {
	id := newID()
	now := r.now()
	maxAge := req.MaxAge
	if maxAge == 0 {
		maxAge = r.opt.MaxAge
	}
	if maxAge < 0 {
		maxAge = 0
	}
	chars := req.OutputChars
	if chars <= 0 {
		chars = r.opt.TailChars
	}
	p = &proc{
		id: id, logPath: r.logPath(id), exitPath: r.exitPath(id),
		done: make(chan struct{}), ring: newRing(r.opt.BufferBytes),
		info: Info{
			ID: id, Command: req.Command, Dir: req.Dir, State: StateStarting, Stamp: req.Stamp,
			StartedAt: now, MaxAge: maxAge, NotifyOnComplete: req.NotifyOnComplete,
			WatchPatterns: append([]string(nil), req.WatchPatterns...), OutputChars: chars, Host: r.host,
		},
	}
	wf, err = os.OpenFile(p.logPath, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("process: log file: %w", err)
	}
	if p.logf, err = os.OpenFile(p.logPath, os.O_RDWR, 0); err != nil {
		wf.Close()
		return nil, nil, fmt.Errorf("process: log file: %w", err)
	}
	return p, wf, nil
}

func (r *Registry) env(id string, req SpawnRequest) []string {
	env := make([]string, 0, len(r.opt.Env)+len(req.Env)+7)
	env = append(env, r.opt.Env...)
	env = append(env, req.Env...)
	rt := req.Stamp.Route
	return append(env,
		"HERMES_PROCESS_ID="+id,
		"HERMES_SESSION_ID="+req.Stamp.SessionID,
		"HERMES_SESSION_KEY="+req.Stamp.Key,
		"HERMES_SESSION_PLATFORM="+rt.Platform,
		"HERMES_SESSION_CHAT_ID="+rt.ChatID,
		"HERMES_SESSION_THREAD_ID="+rt.ThreadID,
		"HERMES_SESSION_USER_ID="+rt.UserID,
	)
}

// logPath and exitPath are the files of process id in this host's data directory.
func (r *Registry) logPath(id string) string  { return filepath.Join(r.logDir, id+".log") }
func (r *Registry) exitPath(id string) string { return filepath.Join(r.logDir, id+".exit") }

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "proc_" + hex.EncodeToString(b[:])
}

// checkpointLocked bumps p's generation and submits a checkpoint of its current state with
// events. p.mu must be held: that is what orders one process's writes.
func (r *Registry) checkpointLocked(p *proc, events []queuedEvent) *op {
	return r.w.submit(r.snapshotLocked(p, events))
}

// snapshotLocked bumps p's generation and returns the op of a checkpoint of its current state:
// this host runs p, so the row must name this host (from), and if another host recorded it as
// lost meanwhile this host's truth is written over that record (truth). p.mu must be held.
func (r *Registry) snapshotLocked(p *proc, events []queuedEvent) *op {
	p.info.Gen++
	p.info.OutputBytes = p.ring.total
	p.info.Owner = selfIdentity()
	row := p.info
	return &op{row: &row, events: events, from: r.host, truth: true}
}

// reap waits for a child to end and records the end.
func (r *Registry) reap(p *proc) {
	err := waitChild(p.cmd)
	st := endStatus{state: StateExited, reason: ReasonExit}
	ps := p.cmd.ProcessState
	switch {
	case ps == nil:
		st.reason = ReasonExitUnknown
		r.log.Warn("process: wait failed", "id", p.id, "err", err)
	default:
		ws, _ := ps.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			code := 128 + int(ws.Signal())
			st.code, st.signal, st.reason = &code, signalName(ws.Signal()), ReasonSignal
		} else {
			code := ps.ExitCode()
			st.code = &code
		}
	}
	r.finish(p, st)
}

// endStatus is how a process ended, as far as the host knows.
type endStatus struct {
	state    State
	code     *int
	signal   string
	reason   string
	consumed bool // the caller already has the result (failed start)
}

// finish records p's end exactly once: the final output is drained, the state, the completion
// event and the checkpoint are committed in one transaction, and only then is done closed.
func (r *Registry) finish(p *proc, st endStatus) {
	p.mu.Lock()
	if p.info.State.Final() {
		p.mu.Unlock()
		return
	}
	for r.drainLocked(p, false) { // all of it: the completion's tail is the real end
	}
	r.restoreLocked(p) // a read that failed is tried once more, from a fresh handle
	if p.killWhy != "" && st.state == StateExited {
		st.state, st.reason = StateKilled, p.killWhy
		if st.signal == "" && st.code != nil && *st.code > 128 && *st.code < 128+65 {
			// The wrapper reports a command that died of our signal as 128+n, as shells do.
			st.signal = signalName(syscall.Signal(*st.code - 128))
		}
	}
	now := r.now()
	p.info.State, p.info.ExitCode, p.info.Signal, p.info.Reason = st.state, st.code, st.signal, st.reason
	p.info.EndedAt = now
	if st.consumed || p.waiters > 0 { // a blocked Wait receives this result: the agent has it
		p.info.Consumed = true
	}
	ev := r.completionLocked(p, now)
	o := r.checkpointLocked(p, []queuedEvent{ev})
	if p.logf != nil {
		p.logf.Close()
		p.logf = nil
	}
	p.partial = nil
	p.mu.Unlock()
	// The end carries the completion, so the writer retries it until the store takes it: this
	// returns when it landed, or at Close (the next Recover then records the end).
	if err := o.wait(); errors.Is(err, ErrClosed) {
		r.log.Warn("process: ended after Close or while the store failed at Close; the next Recover records it", "id", p.id, "err", err)
	} else if err != nil {
		r.log.Error("process: checkpoint of end failed", "id", p.id, "err", err)
	}
	r.mu.Lock()
	r.running--
	p.finished = now
	r.mu.Unlock()
	close(p.done)
}

// completionLocked builds p's completion event. p.mu must be held.
//
// If the log file could not be read to its end (an I/O error), the tail says so, and the writer
// reads the tail from the log file again right before each attempt to commit the event (see
// queuedEvent.tailFrom): an end that waits for a failing store is reported with the output the
// file holds once it can be read, not with what the ring happened to get.
func (r *Registry) completionLocked(p *proc, now time.Time) queuedEvent {
	tail, cut := p.ring.tail(p.ring.total, p.info.OutputChars, 0)
	qe := queuedEvent{state: qPending}
	if p.readErr != nil {
		tail = withUnread(tail, p.readErr)
		qe.tailFrom, qe.tailChars = p.logPath, p.info.OutputChars
	}
	qe.ev = Event{
		Kind: EventCompletion, ProcID: p.id, Command: p.info.Command, Stamp: p.info.Stamp,
		StartedAt: p.info.StartedAt, At: now, State: p.info.State, ExitCode: p.info.ExitCode,
		Signal: p.info.Signal, Reason: p.info.Reason, Notify: p.info.NotifyOnComplete,
		Output: tail, OutputCut: cut,
	}
	if p.info.Consumed {
		qe.state = qSuppressed
	}
	return qe
}

// withUnread marks a tail that lacks output because the log file could not be read.
func withUnread(tail string, err error) string {
	note := "[… the rest of the output could not be read (" + err.Error() + "); `hermes-host ps log` reads the log file …]"
	if tail == "" {
		return note
	}
	return tail + "\n" + note
}

// lookup returns the in-memory proc of id, or nil.
func (r *Registry) lookup(id string) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs[id]
}

// Info returns a process's current record, without reading its output or consuming its result.
func (r *Registry) Info(ctx context.Context, id string) (Info, error) {
	if p := r.lookup(id); p != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.info, nil
	}
	return loadRow(ctx, r.db, id)
}

// Status is what Poll returns.
type Status struct {
	Info
	Output    string // the recent output tail (line-safe, Info.OutputChars characters)
	OutputCut bool
}

// Poll reports a process's state and recent output. It does not consume the result: a pending
// completion notification is still delivered.
func (r *Registry) Poll(ctx context.Context, id string) (Status, error) {
	if p := r.lookup(id); p != nil {
		p.mu.Lock()
		r.drainLocked(p, true)
		r.restoreLocked(p) // the ring lacks what a failed read missed: the file has it
		st := Status{Info: p.info}
		st.OutputBytes = p.ring.total
		st.Output, st.OutputCut = p.ring.tail(p.ring.total, p.info.OutputChars, 0)
		if p.readErr != nil {
			st.Output = withUnread(st.Output, p.readErr)
		}
		p.mu.Unlock()
		return st, nil
	}
	in, err := loadRow(ctx, r.db, id)
	if err != nil {
		return Status{}, err
	}
	if in.OutputChars <= 0 {
		in.OutputChars = r.opt.TailChars
	}
	st := Status{Info: in}
	var rerr error
	st.Output, st.OutputCut, st.OutputBytes, rerr = fileTail(r.logPath(id), in.OutputChars)
	if rerr != nil {
		st.Output = withUnread(st.Output, rerr)
	}
	return st, nil
}

// LogChunk is a range of a process's output.
type LogChunk struct {
	Data   []byte
	Offset int64 // where Data starts (may be later than asked: older output is gone)
	Next   int64 // offset to ask for next
	Total  int64 // bytes produced so far
	Ended  bool  // the process has ended: Total is final
}

// Log reads up to limit bytes of output from offset (negative: the last limit bytes). Reading
// the log of an ended process consumes its result: its completion notification is suppressed.
func (r *Registry) Log(ctx context.Context, id string, offset int64, limit int) (LogChunk, error) {
	if limit <= 0 || limit > maxLogRead {
		limit = maxLogRead
	}
	if p := r.lookup(id); p != nil {
		p.mu.Lock()
		r.drainLocked(p, true)
		r.restoreLocked(p)
		total := p.ring.total
		ended := p.info.State.Final()
		var (
			ch  LogChunk
			got bool
		)
		if off := resolveOffset(offset, limit, total); off >= p.ring.start() {
			data, at := p.ring.read(off, limit)
			ch, got = LogChunk{Data: data, Offset: at, Next: at + int64(len(data)), Total: total, Ended: ended}, true
		}
		var o *op
		if ended {
			o = r.consumeLocked(p)
		}
		p.mu.Unlock()
		if !got { // older than the ring holds: the log file has it
			var err error
			if ch, err = readLogFile(p.logPath, offset, limit); err != nil {
				return ch, err
			}
			ch.Ended = ended
		}
		return ch, waitOp(o)
	}
	in, err := loadRow(ctx, r.db, id)
	if err != nil {
		return LogChunk{}, err
	}
	ch, err := readLogFile(r.logPath(id), offset, limit)
	if err != nil {
		return ch, err
	}
	ch.Ended = in.State.Final()
	if ch.Ended {
		err = r.consumeStored(ctx, in)
	}
	return ch, err
}

const maxLogRead = 1 << 20

func resolveOffset(offset int64, limit int, total int64) int64 {
	if offset < 0 {
		offset = total - int64(limit)
	}
	if offset < 0 {
		offset = 0
	}
	return offset
}

func waitOp(o *op) error {
	if o == nil {
		return nil
	}
	return o.wait()
}

// consumeLocked marks p's result as seen by the agent and suppresses its undelivered completion.
// p.mu must be held. It returns the op to wait for, or nil if already consumed.
func (r *Registry) consumeLocked(p *proc) *op {
	if p.info.Consumed {
		return nil
	}
	p.info.Consumed = true
	o := r.snapshotLocked(p, nil)
	o.suppress = p.id
	return r.w.submit(o)
}

// consumeStored consumes a process that is only in the checkpoint (ended before this host
// started, or dropped from memory).
func (r *Registry) consumeStored(ctx context.Context, in Info) error {
	if in.Consumed || !in.State.Final() {
		return nil
	}
	in.Consumed = true
	in.Gen++
	in.Owner = selfIdentity()
	// The row keeps its host: consuming is not running it. If that host writes meanwhile, this
	// write does not apply (the generation) and the agent's read is not recorded; the
	// suppression below still is.
	return r.w.submit(&op{row: &in, suppress: in.ID, from: in.Host}).wait()
}

// Wait blocks until the process ends, timeout passes or ctx is done, and returns its state. A
// Wait that returns an ended process consumes the result: its completion notification is
// suppressed (this holds even when the end and the timeout race).
func (r *Registry) Wait(ctx context.Context, id string, timeout time.Duration) (Info, error) {
	p := r.lookup(id)
	if p == nil {
		in, err := loadRow(ctx, r.db, id)
		if err == nil {
			err = r.consumeStored(ctx, in)
			in.Consumed = in.Consumed || in.State.Final()
		}
		return in, err
	}
	p.mu.Lock()
	if p.info.State.Final() {
		o := r.consumeLocked(p)
		in := p.info
		p.mu.Unlock()
		return in, waitOp(o)
	}
	p.waiters++
	p.mu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	case <-ctx.Done():
	}
	p.mu.Lock()
	p.waiters--
	var o *op
	if p.info.State.Final() {
		o = r.consumeLocked(p) // nil when finish already consumed it for us
	}
	in := p.info
	in.OutputBytes = p.ring.total
	p.mu.Unlock()
	if err := waitOp(o); err != nil {
		return in, err
	}
	if !in.State.Final() && ctx.Err() != nil {
		return in, ctx.Err()
	}
	if in.State.Final() {
		<-p.done // the end is durable before we report it
	}
	return in, nil
}

// KillOptions tune Kill.
type KillOptions struct {
	// Reason is recorded as the end reason. Default ReasonKill.
	Reason string
	// Notify keeps the completion notification. By default a kill is something the agent did,
	// so it consumes the result (no notification).
	Notify bool
}

// Kill stops a process: SIGTERM to its process group, then SIGKILL after Options.KillGrace. It
// returns when the process has ended (or ctx is done).
func (r *Registry) Kill(ctx context.Context, id string, opt KillOptions) (Info, error) {
	if opt.Reason == "" {
		opt.Reason = ReasonKill
	}
	p := r.lookup(id)
	if p == nil {
		in, err := loadRow(ctx, r.db, id)
		if err != nil {
			return in, err
		}
		if !in.State.Final() {
			return in, fmt.Errorf("%w: %s is %s and not tracked by this host", ErrNotRunning, id, in.State)
		}
		if !opt.Notify {
			err = r.consumeStored(ctx, in)
		}
		return in, err
	}
	return r.terminate(ctx, p, opt)
}

func (r *Registry) terminate(ctx context.Context, p *proc, opt KillOptions) (Info, error) {
	p.mu.Lock()
	if p.info.State.Final() {
		var o *op
		if !opt.Notify {
			o = r.consumeLocked(p)
		}
		in := p.info
		p.mu.Unlock()
		return in, waitOp(o)
	}
	if p.info.State == StateStarting {
		p.mu.Unlock()
		return Info{}, fmt.Errorf("%w: %s is still starting", ErrNotRunning, p.id)
	}
	if p.killWhy == "" {
		p.killWhy = opt.Reason
		p.info.Reason = opt.Reason // recorded while running, so a crash mid-kill still says why
	}
	if !opt.Notify {
		p.info.Consumed = true
	}
	o := r.checkpointLocked(p, nil)
	p.mu.Unlock()
	if err := o.wait(); err != nil {
		return Info{}, err
	}

	if err := r.stopGroup(ctx, p); err != nil {
		return Info{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.info, nil
}

// stopGroup sends SIGTERM to p's process group and waits until the group is empty: the leader
// has ended and so has anything it left behind (background jobs, children that ignore SIGTERM).
// Whatever is left when KillGrace has passed gets SIGKILL.
func (r *Registry) stopGroup(ctx context.Context, p *proc) error {
	p.mu.Lock()
	pgid := p.info.PID // the wrapper is the group leader
	p.mu.Unlock()
	r.signal(p, syscall.SIGTERM)
	grace := time.NewTimer(r.opt.KillGrace)
	defer grace.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	done := p.done
	for done != nil || groupExists(pgid) {
		select {
		case <-done:
			done = nil
		case <-poll.C:
		case <-grace.C:
			r.signal(p, syscall.SIGKILL) // the leader, if it still runs (checked for adopted ones)
			// Members outliving the leader: while the group has a member its id cannot be
			// reused, so signalling it reaches only them.
			if groupExists(pgid) {
				syscall.Kill(-pgid, syscall.SIGKILL)
			}
			select {
			case <-p.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			// SIGKILL is delivered asynchronously: give the members another grace period to
			// disappear (a zombie nobody reaps would keep the group, hence the bound).
			for end := time.Now().Add(r.opt.KillGrace); groupExists(pgid) && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// groupExists reports whether process group pgid has a member (a zombie counts).
func groupExists(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// signal sends sig to p's process group, unless p has ended. A re-adopted process is signalled
// only after checking that its pid still has the recorded start time.
func (r *Registry) signal(p *proc, sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.info.State.Final() || p.info.PID <= 0 {
		return
	}
	if p.info.Adopted {
		if l, _ := checkLive(p.info.PID, p.info.StartTicks); l != alive {
			return
		}
	}
	// The group id is the pid: the wrapper was started with Setpgid.
	if err := syscall.Kill(-p.info.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.log.Warn("process: signal", "id", p.id, "signal", sig, "err", err)
	}
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return "signal " + strconv.Itoa(int(s))
}

// Consumed reports whether the agent has consumed id's result (the delivery layer may check it
// before sending a completion; Queue.Confirm does the same from the queue's side).
func (r *Registry) Consumed(ctx context.Context, id string) (bool, error) {
	if p := r.lookup(id); p != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.info.Consumed, nil
	}
	in, err := loadRow(ctx, r.db, id)
	return in.Consumed, err
}
