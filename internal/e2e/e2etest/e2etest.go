// Package e2etest runs the real hermes-host binary for tests: it builds the binaries once per
// test process, fills a plugins directory with the first-party plugins (built from source by
// sdk/wasmbuild), starts `hermes-host serve` and waits until it serves, and calls the admin
// listener with the token the host wrote. internal/e2e and internal/sim share it.
package e2etest

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// FirstParty are the first-party plugins a default installation serves.
var FirstParty = []string{"cron", "discord", "echo", "slack", "telegram", "yuanbao"}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// Root is the module's root directory (where go.mod is), found upward from the working
// directory of the test.
func Root(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			tb.Fatalf("no go.mod above %s", dir)
		}
	}
}

// Binary builds the hermes-host and hermes-conformance binaries once per test process (into
// one temporary directory, where `hermes-host conformance` finds its sibling) and returns the
// path of hermes-host. Call Cleanup from TestMain to remove them.
func Binary(tb testing.TB) string {
	tb.Helper()
	root := Root(tb)
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "hermes-e2e-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "hermes-host")
		for _, cmd := range []string{"hermes-host", "hermes-conformance"} {
			c := exec.Command("go", "build", "-o", filepath.Join(binDir, cmd), "./cmd/"+cmd)
			c.Dir = root
			if out, err := c.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("go build %s: %w\n%s", cmd, err, out)
				return
			}
		}
	})
	if binErr != nil {
		tb.Fatalf("building hermes-host: %v", binErr)
	}
	return binPath
}

// Cleanup removes the binaries Binary built (call it from TestMain after m.Run).
func Cleanup() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// Plugins returns a fresh plugins directory holding the named first-party plugins (all of
// FirstParty when none is named): each test gets its own, since tests add and replace plugins.
func Plugins(tb testing.TB, names ...string) string {
	tb.Helper()
	if len(names) == 0 {
		names = FirstParty
	}
	root := Root(tb)
	dir := filepath.Join(tb.TempDir(), "plugins")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, name := range names {
		wasmbuild.CopyTo(tb, filepath.Join(root, "plugins", name), filepath.Join(dir, name+".wasm"))
	}
	return dir
}

// Host is one running `hermes-host serve` process.
type Host struct {
	Bin, Plugins, Data string
	Args               []string // the arguments after serve's own (--config …)
	Addr               string   // the public listener (webhooks)
	Admin              string   // the admin listener
	PID                int

	mu      sync.Mutex // guards cmd, done and stopped: a host may be paused or stopped while it restarts
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has been waited for
	stopped *sync.Once
	// Log, if set, receives every line the host writes to stderr.
	Log func(line string)
}

// Serve runs `hermes-host serve` on loopback with a random port for each listener, the given
// data and plugins directories and extra arguments, and returns once it logs that it is
// serving (plugins loaded, listeners open). It is killed when the test ends. An error means it
// exited first (its last lines of output are in the error).
func Serve(bin, plugins, data string, extra ...string) (*Host, error) {
	h := New(bin, plugins, data, extra...)
	return h, h.Start()
}

// New prepares a host without starting it (set Log, then Start).
func New(bin, plugins, data string, extra ...string) *Host {
	return &Host{Bin: bin, Plugins: plugins, Data: data, Args: extra}
}

// MustServe is Serve for tests: it fails tb on error and stops the host at tb's cleanup.
func MustServe(tb testing.TB, bin, plugins, data string, extra ...string) *Host {
	tb.Helper()
	h, err := Serve(bin, plugins, data, extra...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		h.Stop()
		ReapChildren(data)
	})
	return h
}

// ReapChildren kills the background processes a killed host left running in data (their
// working directories are under it, <data_dir>/work): they outlive a SIGKILL on purpose, for
// the next start to adopt, but at a test's end one still running would write its exit file
// into the data directory while the test removes it. It waits up to 10 s for them to go.
func ReapChildren(data string) {
	root, err := filepath.EvalSymlinks(data)
	if err != nil {
		return
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		entries, _ := os.ReadDir("/proc")
		left := 0
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
			if err != nil || (cwd != root && !strings.HasPrefix(cwd, root+string(filepath.Separator))) {
				continue
			}
			left++
			if pgid, err := syscall.Getpgid(pid); err == nil && pgid > 1 {
				syscall.Kill(-pgid, syscall.SIGKILL)
			}
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if left == 0 {
			return
		}
	}
}

// CacheEnv names the compilation cache every host a test starts shares when it is set (make test
// sets it): the plugins are compiled once, not once per data directory.
const CacheEnv = "HERMES_COMPILATION_CACHE"

// Start starts the host (again, after Stop or Kill9, on the same directories and arguments:
// Addr, Admin and PID change) and returns once it serves. With CacheEnv set, the host's
// compilation cache is that directory, unless the host's arguments name one.
func (h *Host) Start() error {
	logf := h.Log
	args := []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--data-dir", h.Data, "--plugins", h.Plugins}
	if c := os.Getenv(CacheEnv); c != "" && !slices.ContainsFunc(h.Args, func(a string) bool {
		return a == "--compilation-cache" || strings.HasPrefix(a, "--compilation-cache=")
	}) {
		args = append(args, "--compilation-cache", c)
	}
	args = append(args, h.Args...)
	cmd := exec.Command(h.Bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	h.mu.Lock()
	h.cmd, h.PID, h.done, h.stopped = cmd, cmd.Process.Pid, done, &sync.Once{}
	h.mu.Unlock()
	const marker = "msg=\"hermes-host serving\" addr="
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var last []string
	for sc.Scan() {
		line := sc.Text()
		if logf != nil {
			logf(line)
		}
		last = append(last, line)
		if len(last) > 20 {
			last = last[1:]
		}
		i := strings.Index(line, marker)
		if i < 0 {
			continue
		}
		h.Addr = strings.Fields(line[i+len(marker):])[0]
		if j := strings.Index(line, " admin="); j >= 0 {
			h.Admin = strings.Fields(line[j+len(" admin="):])[0]
		}
		go func() {
			for sc.Scan() {
				if logf != nil {
					logf(sc.Text())
				}
			}
			cmd.Wait()
			close(done)
		}()
		return nil
	}
	cmd.Process.Kill()
	cmd.Wait()
	close(done)
	return fmt.Errorf("serve exited before serving:\n%s", strings.Join(last, "\n"))
}

// Stop kills the process (SIGKILL) and waits for it; it does nothing after the first call
// for the same start.
func (h *Host) Stop() {
	h.mu.Lock()
	cmd, done, once := h.cmd, h.done, h.stopped
	h.mu.Unlock()
	if cmd == nil {
		return
	}
	once.Do(func() {
		cmd.Process.Signal(syscall.SIGCONT) // a paused host cannot die until it runs again
		cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	})
}

// Kill9 kills the host without warning (SIGKILL), as a crash would, and waits until it is gone.
func (h *Host) Kill9() { h.Stop() }

// Pause stops the process (SIGSTOP): it keeps its sockets and database connections but does
// nothing, as a host stalled by its machine does.
func (h *Host) Pause() error { return h.signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (h *Host) Resume() error { return h.signal(syscall.SIGCONT) }

func (h *Host) signal(sig syscall.Signal) error {
	h.mu.Lock()
	cmd := h.cmd
	h.mu.Unlock()
	if cmd == nil {
		return os.ErrProcessDone
	}
	return cmd.Process.Signal(sig)
}

// Signal sends sig to the host's process (SIGTERM: the host drains and exits).
func (h *Host) Signal(sig syscall.Signal) error { return h.signal(sig) }

// Wait waits up to timeout for the process to end by itself and returns its exit code (-1 when
// a signal killed it); ok is false if it is still running after timeout.
func (h *Host) Wait(timeout time.Duration) (code int, ok bool) {
	h.mu.Lock()
	cmd, done := h.cmd, h.done
	h.mu.Unlock()
	if cmd == nil {
		return 0, false
	}
	select {
	case <-done:
		return cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

// Exited reports whether the process has ended.
func (h *Host) Exited() bool {
	h.mu.Lock()
	done := h.done
	h.mu.Unlock()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Token is the admin token the host wrote into its data directory.
func (h *Host) Token() (string, error) {
	b, err := os.ReadFile(filepath.Join(h.Data, "admin.token"))
	return strings.TrimSpace(string(b)), err
}

// AdminRequest calls the admin listener at addr with the token in data's admin.token, decodes a
// JSON answer into v (a *string gets the raw body; nil: ignored) and returns the status.
func AdminRequest(tb testing.TB, method, addr, data, path, body string, v any) int {
	tb.Helper()
	code, err := Admin(method, addr, data, path, body, v)
	if err != nil {
		tb.Fatal(err)
	}
	return code
}

// Admin is AdminRequest returning its error instead of failing a test.
func Admin(method, addr, data, path, body string, v any) (int, error) {
	token, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if raw, ok := v.(*string); ok {
		*raw = string(b)
	} else if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %w: %s", method, path, err, b)
		}
	}
	return resp.StatusCode, nil
}

// LostButRunning counts the processes recorded lost with their host (host_lost) that still run
// (a host paused, not dead, reconciles them when they end): a world with one is not settled.
// db is the hosts' database.
func LostButRunning(db *sql.DB) (int, error) {
	rows, err := db.Query(`SELECT pid, start_ticks FROM processes WHERE state = 'lost' AND reason = 'host_lost'`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var pid int
		var ticks uint64
		if err := rows.Scan(&pid, &ticks); err != nil {
			return 0, err
		}
		if process.Running(pid, ticks) {
			n++
		}
	}
	return n, rows.Err()
}
