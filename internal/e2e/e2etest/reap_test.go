package e2etest

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// A process left running in a data directory (in its own process group, as the registry starts
// them) is killed, its group too; one elsewhere is left alone.
func TestReapChildren(t *testing.T) {
	data, other := t.TempDir(), t.TempDir()
	work := filepath.Join(data, "work", "k")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(dir string) *exec.Cmd {
		cmd := exec.Command("/bin/sh", "-c", "sleep 60 & wait")
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	in, out := start(work), start(other)
	defer syscall.Kill(-out.Process.Pid, syscall.SIGKILL)
	done := make(chan error, 1)
	go func() { done <- in.Wait() }()
	ReapChildren(data)
	if err := <-done; err == nil {
		t.Fatal("the process in the data directory exited by itself?")
	}
	if err := out.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the process elsewhere was killed: %v", err)
	}
}
