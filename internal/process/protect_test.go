package process_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/process"
	"github.com/hermes-host/hermes-host/internal/store"
)

// The secret-reading test runs a host (this test binary, re-executed) that holds a secret in
// its environment and starts a background process through a real Registry; the background
// process tries to read the host's /proc/<pid>/environ.
const (
	envSecretHost    = "HERMES_SECRETTEST_DIR"     // set: act as the host on this data directory
	envSecretProtect = "HERMES_SECRETTEST_PROTECT" // "1": call ProtectHost first, as the gateway does
	envSecret        = "HERMES_SECRETTEST_TOKEN"   // the secret in the host's environment
)

// secretHostFromEnv runs the host half when envSecretHost is set.
func secretHostFromEnv() (int, bool) {
	dir := os.Getenv(envSecretHost)
	if dir == "" {
		return 0, false
	}
	if os.Getenv(envSecretProtect) == "1" {
		if err := process.ProtectHost(); err != nil {
			fmt.Println("protect:", err)
			return 2, true
		}
	}
	ctx := context.Background()
	db, err := store.Open(filepath.Join(dir, "hermes.db"), store.Options{})
	if err != nil {
		fmt.Println(err)
		return 2, true
	}
	defer db.Close()
	r, err := process.New(ctx, db, process.Options{DataDir: dir, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		fmt.Println(err)
		return 2, true
	}
	defer r.Close()
	host := os.Getpid()
	res, err := r.Spawn(ctx, process.SpawnRequest{Command: fmt.Sprintf(
		"id -u; tr '\\0' '\\n' < /proc/%d/environ; echo environ-rc=$?; head -c 64 /proc/%d/mem >/dev/null; echo mem-rc=$?", host, host)})
	if err != nil {
		fmt.Println(err)
		return 2, true
	}
	if _, err := r.Wait(ctx, res.ID, 30*time.Second); err != nil {
		fmt.Println(err)
		return 2, true
	}
	log, err := r.Log(ctx, res.ID, 0, 1<<20)
	if err != nil {
		fmt.Println(err)
		return 2, true
	}
	os.Stdout.Write(log.Data)
	return 0, true
}

// TestChildCannotReadHostSecrets: a background process cannot read a secret from the host's
// /proc/<pid>/environ once the host called ProtectHost, and could before (the control run, so
// the test can fail). Host and background process run as one unprivileged user: as root, the
// test runs both as nobody (root would pass any /proc check with CAP_SYS_PTRACE).
func TestChildCannotReadHostSecrets(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy of this binary and data directories that the unprivileged user can reach.
	base, err := os.MkdirTemp("", "hermes-secret-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	bin := filepath.Join(base, "host.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	const secret = "s3cr3t-telegram-token-0123456789"
	var cred *syscall.Credential
	user := "the test's own user"
	if os.Getuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
		user = "nobody (65534), since the test runs as root"
	}
	run := func(protect string) string {
		dir := filepath.Join(base, "data-"+protect)
		os.Mkdir(dir, 0o700)
		if cred != nil {
			os.Chown(dir, int(cred.Uid), int(cred.Gid))
		}
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = []string{"PATH=/usr/bin:/bin", envSecretHost + "=" + dir, envSecretProtect + "=" + protect, envSecret + "=" + secret}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("host (protect=%s) as %s: %v\n%s", protect, user, err, out)
		}
		return string(out)
	}
	control := run("0")
	if !strings.Contains(control, secret) {
		t.Skipf("without protection the background process could not read the host's environ either "+
			"(this machine restricts /proc further); output:\n%s", control)
	}
	protected := run("1")
	if strings.Contains(protected, secret) || !strings.Contains(protected, "environ-rc=1") || strings.Contains(protected, "mem-rc=0") {
		t.Fatalf("a background process read the protected host's environment or memory:\n%s", protected)
	}
	t.Logf("ran as %s; protected host, background process saw:\n%s", user, protected)
}
