package process

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Output path: the child writes stdout and stderr straight into its log file (opened O_APPEND),
// never into a pipe held by the host. The host reads the file from its last offset into the
// ring buffer, at every poll tick and whenever someone asks (Poll, Log, the end). So output
// survives a host restart, a host crash cannot kill a chatty child with SIGPIPE, and a
// re-adopted process is read exactly like one we started.

const (
	readChunk    = 32 << 10
	maxDrainStep = 1 << 20 // per drain call, so one spewing process cannot hold its lock for long
	maxLineScan  = 4 << 10 // longest line fragment kept for watch matching
	watchLines   = 20      // lines of context in a watch_match event
	watchChars   = 2000
)

var chunkPool = sync.Pool{New: func() any { b := make([]byte, readChunk); return &b }}

// drainLocked reads new output from p's log file into its ring, at most maxDrainStep bytes, and
// reports whether more may be waiting. When match is set and p is running with watch patterns,
// complete lines are matched and events submitted. p.mu must be held.
func (r *Registry) drainLocked(p *proc, match bool) (more bool) {
	if p.logf == nil {
		return false
	}
	bp := chunkPool.Get().(*[]byte)
	defer chunkPool.Put(bp)
	buf := *bp
	var events []queuedEvent
	for read := 0; read < maxDrainStep; {
		n, err := readLog(p.logf, p.logPath, buf, p.readOff)
		if n > 0 {
			chunk := buf[:n]
			base := p.readOff
			p.ring.write(chunk)
			p.readOff += int64(n)
			read += n
			if match && p.info.State == StateRunning && len(p.info.WatchPatterns) > 0 && !p.info.WatchDisabled {
				events = r.scanLocked(p, chunk, base, events)
			}
		}
		if err != nil || n < len(buf) {
			if err != nil && !errors.Is(err, io.EOF) {
				if p.readErr == nil {
					r.log.Warn("process: read output; retried", "id", p.id, "err", err)
				}
				p.readErr = err
			} else {
				p.readErr = nil
			}
			more = false
			break
		}
		more = true
	}
	if len(events) > 0 {
		r.checkpointLocked(p, events) // watch counters and flags change with the events
	}
	r.trimLogLocked(p)
	return more
}

// trimLogLocked keeps a log file's disk use bounded: when more than 2×LogBytes lie between the
// punched prefix and what has been read, the older part (all but the last LogBytes, in whole
// blocks) is deallocated with FALLOC_FL_PUNCH_HOLE. The file keeps its size and offsets, so the
// child's O_APPEND writes and every reader's offsets are unaffected; a punched range reads as
// zeros, which readLogFile skips. p.mu must be held.
func (r *Registry) trimLogLocked(p *proc) {
	keep := r.opt.LogBytes
	if keep <= 0 || p.punched < 0 || p.readOff-p.punched < 2*keep {
		return
	}
	to := (p.readOff - keep) &^ (logBlock - 1)
	err := unix.Fallocate(int(p.logf.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, p.punched, to-p.punched)
	if err != nil {
		r.log.Warn("process: cannot bound log file size; it will grow", "id", p.id, "err", err)
		p.punched = -1
		return
	}
	p.punched = to
}

const logBlock = 4096

// dataStart is the first offset of f that holds data (after any punched prefix).
func dataStart(f *os.File, size int64) int64 {
	off, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA)
	if err != nil { // ENXIO: no data at all; other errors: assume none punched
		if errors.Is(err, unix.ENXIO) {
			return size
		}
		return 0
	}
	return off
}

// scanLocked matches the complete lines of chunk (which starts at logical offset base) against
// p's watch patterns and appends the resulting events.
func (r *Registry) scanLocked(p *proc, chunk []byte, base int64, events []queuedEvent) []queuedEvent {
	for len(chunk) > 0 && !p.info.WatchDisabled {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			room := maxLineScan - len(p.partial)
			if room > len(chunk) {
				room = len(chunk)
			}
			p.partial = append(p.partial, chunk[:room]...)
			return events
		}
		line := chunk[:i]
		if len(p.partial) > 0 {
			room := maxLineScan - len(p.partial)
			if room > len(line) {
				room = len(line)
			}
			line = append(p.partial, line[:room]...)
			p.partial = p.partial[:0]
		}
		end := base + int64(i) + 1
		for _, pat := range p.info.WatchPatterns {
			if pat != "" && bytes.Contains(line, []byte(pat)) {
				events = r.matchLocked(p, pat, end, events)
				break
			}
		}
		chunk = chunk[i+1:]
		base = end
	}
	if p.info.WatchDisabled {
		p.partial = nil
	}
	return events
}

// matchLocked applies the per-process limiter and the global breaker to one match whose line
// ends at logical offset end.
func (r *Registry) matchLocked(p *proc, pattern string, end int64, events []queuedEvent) []queuedEvent {
	now := r.now()
	if ev := r.brk.release(now); ev != nil {
		events = append(events, queuedEvent{ev: *ev, state: qPending})
	}
	if r.brk.blocked(now) {
		return events
	}
	switch p.watch.offer(now) {
	case suppressMatch:
		return events
	case disableWatch:
		return append(events, r.disableWatchLocked(p, now, fmt.Sprintf(
			"%d consecutive %s windows had suppressed matches", watchMaxStrikes, watchWindow)))
	}
	ok, tripped := r.brk.admit(now, tripOrigin{id: p.id, command: p.info.Command, stamp: p.info.Stamp, startedAt: p.info.StartedAt})
	if tripped != nil {
		events = append(events, queuedEvent{ev: *tripped, state: qPending})
	}
	if !ok {
		return events
	}
	suppressed, capped := p.watch.deliver(now)
	p.info.WatchMatches = p.watch.delivered
	out, cut := p.ring.tail(end, watchChars, watchLines)
	events = append(events, queuedEvent{state: qPending, ev: Event{
		Kind: EventWatchMatch, ProcID: p.id, Command: p.info.Command, Stamp: p.info.Stamp,
		StartedAt: p.info.StartedAt, At: now, Pattern: pattern, Suppressed: suppressed,
		Output: out, OutputCut: cut,
	}})
	if capped {
		events = append(events, r.disableWatchLocked(p, now, fmt.Sprintf("%d matches reached", watchMaxLifetime)))
	}
	return events
}

// disableWatchLocked turns watching off for p; notify-on-complete takes over.
func (r *Registry) disableWatchLocked(p *proc, now time.Time, why string) queuedEvent {
	p.info.WatchDisabled = true
	p.info.NotifyOnComplete = true
	return queuedEvent{state: qPending, ev: Event{
		Kind: EventWatchDisabled, ProcID: p.id, Command: p.info.Command, Stamp: p.info.Stamp,
		StartedAt: p.info.StartedAt, At: now, Notify: true,
		Message: "Watch patterns disabled for " + p.id + " (" + why + "); you will be notified when it completes.",
	}}
}

// fileTail returns the line-safe tail of a log file of an ended or foreign process, and its size.
// A log file that does not exist has no output; err is any other failure to read it (the tail
// then lacks what the file holds).
func fileTail(path string, chars int) (tail string, cut bool, size int64, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, 0, nil
	}
	if err != nil {
		return "", false, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", false, 0, err
	}
	size = fi.Size()
	from := max(size-int64(chars+1)*4, 0)
	if start := dataStart(f, size); from < start {
		from = start
	}
	b := make([]byte, size-from)
	n, err := readLog(f, path, b, from)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", false, size, err
	}
	tail, cut = cutTail(b[:n], from > 0, chars, 0)
	return tail, cut, size, nil
}

// readLog reads a log file at off: f.ReadAt, through the tests' fault hook.
func readLog(f *os.File, path string, b []byte, off int64) (int, error) {
	if hook := testHookReadLog.Load(); hook != nil {
		if err := (*hook)(path); err != nil {
			return 0, err
		}
	}
	return f.ReadAt(b, off)
}

// testHookReadLog, when set by a test, runs before every read of a log file; an error it returns
// is the read's error (an I/O error of the disk). Atomic: goroutines of earlier tests' processes
// may still read a log file while a test sets it.
var testHookReadLog atomic.Pointer[func(path string) error]

// restoreLocked reads into p's ring what its log file holds beyond what the ring got, after a read
// of the log file failed (p.readErr): the file is opened again by its path, so it works after the
// end too, when the host's own handle is closed. On success p.readErr is cleared. p.mu must be
// held.
func (r *Registry) restoreLocked(p *proc) {
	if p.readErr == nil {
		return
	}
	f, err := os.Open(p.logPath)
	if err != nil {
		p.readErr = err
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		p.readErr = err
		return
	}
	size := fi.Size()
	from := p.readOff
	if size-from > int64(p.ring.max) { // more than the ring holds: keep its last part
		from = size - int64(p.ring.max)
		if start := dataStart(f, size); from < start {
			from = start
		}
		p.ring = newRing(p.ring.max)
		p.ring.total = from
		p.partial = nil // the lines in between are not matched
	}
	b := make([]byte, max(size-from, 0))
	n, err := readLog(f, p.logPath, b, from)
	if err != nil && !errors.Is(err, io.EOF) {
		p.readErr = err
		return
	}
	p.ring.write(b[:n])
	p.readOff = from + int64(n)
	p.readErr = nil
	r.log.Info("process: output read again from the log file after a read error", "id", p.id, "bytes", n)
}

// readLogFile reads up to limit bytes of a log file from offset (negative: the last limit bytes).
func readLogFile(path string, offset int64, limit int) (LogChunk, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return LogChunk{}, nil // no output recorded (pruned, or never created)
	}
	if err != nil {
		return LogChunk{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return LogChunk{}, err
	}
	total := fi.Size()
	off := resolveOffset(offset, limit, total)
	if off > total {
		off = total
	}
	if start := dataStart(f, total); off < start { // the start was punched out
		off = start
	}
	n := total - off
	if n > int64(limit) {
		n = int64(limit)
	}
	b := make([]byte, n)
	got, err := f.ReadAt(b, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return LogChunk{}, err
	}
	return LogChunk{Data: b[:got], Offset: off, Next: off + int64(got), Total: total}, nil
}

// readExitFile returns the status the wrapper recorded, if it did.
func readExitFile(path string) (*int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	c, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, false
	}
	return &c, true
}

// refill loads the end of an existing log file into a fresh ring (a re-adopted process) and
// returns the file opened for further reading (and punching).
func refill(path string, ring *ring) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	size := fi.Size()
	from := max(size-int64(ring.max), dataStart(f, size))
	if from < 0 {
		from = 0
	}
	b := make([]byte, size-from)
	n, err := f.ReadAt(b, from)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, 0, err
	}
	ring.total = from
	ring.write(b[:n])
	return f, from + int64(n), nil
}
