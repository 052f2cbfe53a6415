package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// toolCallRec is one call a fakeTools received.
type toolCallRec struct {
	Method  string
	Req     SpawnRequest
	ID      string
	Offset  int64
	Limit   int
	Timeout time.Duration
}

// fakeTools records calls and answers from canned results. It is safe for concurrent use.
type fakeTools struct {
	mu    sync.Mutex
	calls []toolCallRec

	spawn   SpawnResult
	list    []ProcessInfo
	info    ProcessInfo // Poll, Wait, Kill
	log     LogChunk
	err     error         // returned by every method when set
	waiting chan struct{} // closed when Wait is entered; Wait then blocks until ctx is done
}

func (f *fakeTools) record(c toolCallRec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	return f.err
}

func (f *fakeTools) Calls() []toolCallRec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]toolCallRec(nil), f.calls...)
}

func (f *fakeTools) methods() []string {
	var m []string
	for _, c := range f.Calls() {
		m = append(m, c.Method)
	}
	return m
}

func (f *fakeTools) Spawn(ctx context.Context, req SpawnRequest) (SpawnResult, error) {
	if err := f.record(toolCallRec{Method: "Spawn", Req: req}); err != nil {
		return SpawnResult{}, err
	}
	return f.spawn, nil
}

func (f *fakeTools) List(ctx context.Context) ([]ProcessInfo, error) {
	if err := f.record(toolCallRec{Method: "List"}); err != nil {
		return nil, err
	}
	return append([]ProcessInfo(nil), f.list...), nil
}

func (f *fakeTools) Poll(ctx context.Context, id string) (ProcessInfo, error) {
	if err := f.record(toolCallRec{Method: "Poll", ID: id}); err != nil {
		return ProcessInfo{}, err
	}
	return f.info, nil
}

func (f *fakeTools) Log(ctx context.Context, id string, offset int64, limit int) (LogChunk, error) {
	if err := f.record(toolCallRec{Method: "Log", ID: id, Offset: offset, Limit: limit}); err != nil {
		return LogChunk{}, err
	}
	return f.log, nil
}

func (f *fakeTools) Wait(ctx context.Context, id string, timeout time.Duration) (ProcessInfo, error) {
	if err := f.record(toolCallRec{Method: "Wait", ID: id, Timeout: timeout}); err != nil {
		return ProcessInfo{}, err
	}
	if f.waiting != nil {
		close(f.waiting)
		<-ctx.Done()
		return ProcessInfo{}, ctx.Err()
	}
	return f.info, nil
}

func (f *fakeTools) Kill(ctx context.Context, id string) (ProcessInfo, error) {
	if err := f.record(toolCallRec{Method: "Kill", ID: id}); err != nil {
		return ProcessInfo{}, err
	}
	return f.info, nil
}

func intp(n int) *int { return &n }

// shellTools is a small real Tools: it runs sh -c commands as children of the test, each in its
// own process group, and keeps their output in memory.
type shellTools struct {
	mu    sync.Mutex
	n     int
	procs map[string]*shellProc
}

type shellProc struct {
	mu   sync.Mutex
	info ProcessInfo
	out  bytes.Buffer
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *shellProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *shellProc) snapshot() (ProcessInfo, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.info, p.out.String()
}

func newShellTools(t *testing.T) *shellTools {
	s := &shellTools{procs: map[string]*shellProc{}}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, p := range s.procs {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return s
}

func (s *shellTools) Spawn(ctx context.Context, req SpawnRequest) (SpawnResult, error) {
	s.mu.Lock()
	s.n++
	id := fmt.Sprintf("proc_%012x", s.n)
	p := &shellProc{done: make(chan struct{})}
	p.info = ProcessInfo{ID: id, Command: req.Command, State: StateRunning, StartedAt: time.Now(),
		NotifyOnComplete: req.NotifyOnComplete, WatchPatterns: req.WatchPatterns}
	p.cmd = exec.Command("sh", "-c", req.Command)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		s.mu.Unlock()
		return SpawnResult{}, err
	}
	s.procs[id] = p
	s.mu.Unlock()
	go func() {
		err := p.cmd.Wait()
		p.mu.Lock()
		p.info.EndedAt = time.Now()
		var ee *exec.ExitError
		switch {
		case err == nil:
			p.info.State, p.info.ExitCode = StateExited, intp(0)
		case errors.As(err, &ee) && ee.ExitCode() >= 0:
			p.info.State, p.info.ExitCode = StateExited, intp(ee.ExitCode())
		default:
			p.info.State, p.info.Signal = StateKilled, "SIGKILL"
		}
		p.mu.Unlock()
		close(p.done)
	}()
	if req.Background {
		return SpawnResult{ID: id, State: StateRunning}, nil
	}
	timer := time.NewTimer(req.Timeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		_, _ = s.Kill(ctx, id)
	case <-ctx.Done():
		_, _ = s.Kill(context.Background(), id)
		return SpawnResult{}, ctx.Err()
	}
	info, out := p.snapshot()
	return SpawnResult{ID: id, State: info.State, ExitCode: info.ExitCode, Output: out}, nil
}

func (s *shellTools) get(id string) (*shellProc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.procs[id]
	if p == nil {
		return nil, errors.New("no such process " + id)
	}
	return p, nil
}

func (s *shellTools) List(ctx context.Context) ([]ProcessInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ProcessInfo
	for _, p := range s.procs {
		info, _ := p.snapshot()
		out = append(out, info)
	}
	return out, nil
}

func (s *shellTools) Poll(ctx context.Context, id string) (ProcessInfo, error) {
	p, err := s.get(id)
	if err != nil {
		return ProcessInfo{}, err
	}
	info, out := p.snapshot()
	info.Output = out
	return info, nil
}

func (s *shellTools) Log(ctx context.Context, id string, offset int64, limit int) (LogChunk, error) {
	p, err := s.get(id)
	if err != nil {
		return LogChunk{}, err
	}
	info, out := p.snapshot()
	total := int64(len(out))
	if offset < 0 {
		offset = max(0, total-int64(limit))
	}
	offset = min(offset, total)
	end := min(total, offset+int64(limit))
	return LogChunk{Text: out[offset:end], Offset: offset, Next: end, Total: total, Ended: info.Ended()}, nil
}

func (s *shellTools) Wait(ctx context.Context, id string, timeout time.Duration) (ProcessInfo, error) {
	p, err := s.get(id)
	if err != nil {
		return ProcessInfo{}, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
	case <-ctx.Done():
		return ProcessInfo{}, ctx.Err()
	}
	info, _ := p.snapshot()
	return info, nil
}

func (s *shellTools) Kill(ctx context.Context, id string) (ProcessInfo, error) {
	p, err := s.get(id)
	if err != nil {
		return ProcessInfo{}, err
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-ctx.Done():
		return ProcessInfo{}, ctx.Err()
	}
	info, _ := p.snapshot()
	return info, nil
}
