package process

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// procStat is what the registry needs from /proc/<pid>/stat.
type procStat struct {
	state      byte   // field 3: R, S, D, Z, …
	pgid       int    // field 5
	startTicks uint64 // field 22: start time after boot, in clock ticks
}

// errNoProcess reports that /proc has no entry for the pid.
var errNoProcess = errors.New("no such process")

// readProcStat parses /proc/<pid>/stat. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from the last ')'.
func readProcStat(pid int) (procStat, error) {
	if pid <= 0 {
		return procStat{}, errNoProcess
	}
	// A raw open/read into a stack buffer: Recover reads this for every checkpoint, and
	// os.ReadFile's extra fstat and allocation double the cost.
	fd, err := syscall.Open("/proc/"+strconv.Itoa(pid)+"/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESRCH) {
			return procStat{}, errNoProcess
		}
		return procStat{}, err
	}
	defer syscall.Close(fd)
	var buf [1024]byte // a stat line is a few hundred bytes (the command name is at most 16)
	n, err := syscall.Read(fd, buf[:])
	if err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return procStat{}, errNoProcess
		}
		return procStat{}, err
	}
	return parseProcStat(buf[:n])
}

func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("process: malformed stat %q", b)
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("process: short stat %q", b)
	}
	pgid, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return procStat{}, fmt.Errorf("process: stat pgrp: %w", err)
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("process: stat starttime: %w", err)
	}
	return procStat{state: f[0][0], pgid: pgid, startTicks: start}, nil
}

// liveness is the verdict on a checkpointed (pid, start time) pair.
type liveness int

const (
	alive    liveness = iota // same process, still running
	gone                     // no such pid, or a zombie: it has exited
	recycled                 // the pid now belongs to a different process
)

// checkLive tells whether pid is still the process that started at startTicks. A start time of 0
// (never recorded) cannot be verified and counts as recycled, so such a pid is never adopted or
// signalled.
func checkLive(pid int, startTicks uint64) (liveness, error) {
	st, err := readProcStat(pid)
	if errors.Is(err, errNoProcess) {
		return gone, nil
	}
	if err != nil {
		return gone, err
	}
	if startTicks == 0 || st.startTicks != startTicks {
		return recycled, nil
	}
	if st.state == 'Z' || st.state == 'X' {
		return gone, nil
	}
	return alive, nil
}

// Running reports whether pid is still the process that started at startTicks (as the
// processes table records them): alive, not exited, its pid not reused.
func Running(pid int, startTicks uint64) bool {
	l, err := checkLive(pid, startTicks)
	return err == nil && l == alive
}

var selfIdentity = sync.OnceValue(func() string {
	pid := os.Getpid()
	st, err := readProcStat(pid)
	if err != nil {
		return strconv.Itoa(pid) + ":0"
	}
	return strconv.Itoa(pid) + ":" + strconv.FormatUint(st.startTicks, 10)
})

// ownerAliveElsewhere reports whether a writer identity "pid:starttime" names a live process other than
// this one.
func ownerAliveElsewhere(owner string) bool {
	if owner == "" || owner == selfIdentity() {
		return false
	}
	i := strings.IndexByte(owner, ':')
	if i < 0 {
		return false
	}
	pid, err1 := strconv.Atoi(owner[:i])
	ticks, err2 := strconv.ParseUint(owner[i+1:], 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	l, err := checkLive(pid, ticks)
	return err == nil && l == alive
}

// findSpawned looks through /proc for the wrappers of the given process ids: group leaders
// whose environment carries HERMES_PROCESS_ID=<id>. Recover uses it for checkpoints left in
// "starting" (the host stopped between starting a process and recording its pid). Processes
// of other users are unreadable and skipped.
func findSpawned(ids map[string]bool) map[string]spawnedProc {
	found := map[string]spawnedProc{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return found
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || st.pgid != pid || st.state == 'Z' {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			id, ok := bytes.CutPrefix(kv, []byte("HERMES_PROCESS_ID="))
			if !ok || !ids[string(id)] {
				continue
			}
			if prev, dup := found[string(id)]; !dup || st.startTicks < prev.startTicks {
				found[string(id)] = spawnedProc{pid: pid, startTicks: st.startTicks}
			}
		}
	}
	return found
}

type spawnedProc struct {
	pid        int
	startTicks uint64
}
