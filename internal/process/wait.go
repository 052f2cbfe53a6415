package process

import (
	"os"
	"os/exec"

	"golang.org/x/sys/unix"
)

// waitChild reaps cmd. A goroutine blocked in cmd.Wait holds an OS thread (waitid is a blocking
// system call), which with a thousand background processes means a thousand threads. So it first
// waits for the exit on a pidfd through the runtime's network poller, which parks the goroutine
// without a thread, and only then calls cmd.Wait, which returns at once. Where pidfds are not
// available it falls back to a plain cmd.Wait.
func waitChild(cmd *exec.Cmd) error {
	waitExitPollable(cmd.Process.Pid)
	return cmd.Wait()
}

// waitExitPollable blocks until pid (a child not yet reaped, so its pid cannot be reused) has
// exited, without reaping it. It returns early, having waited for nothing, if a pidfd cannot be
// used.
func waitExitPollable(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// Read calls the function, and while it returns false waits for the pidfd to become readable,
	// which happens when the process exits. WNOWAIT leaves the zombie for cmd.Wait.
	_ = rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if err != nil {
			return true // not waitable this way: let cmd.Wait handle it
		}
		return info.Signo != 0 // Linux zeroes info when nothing is waitable yet
	})
}
