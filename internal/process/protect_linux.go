//go:build linux

package process

import "golang.org/x/sys/unix"

// ProtectHost keeps background processes out of the host's memory and environment: it makes the
// calling process non-dumpable (prctl PR_SET_DUMPABLE 0). The kernel then gives the host's
// /proc/<pid> entries to root and refuses processes of the same user, background processes
// included, access to its environ, mem, maps and fd entries, and ptrace attach; no core dump
// is written. A process with CAP_SYS_PTRACE (a background process of a host that runs as root)
// is not stopped by it: run the host as an unprivileged user. The setting is per process and
// lasts until exec; the host's own children start dumpable, which does not matter, they hold no
// secrets (the variables the configuration references are removed from their environment).
func ProtectHost() error { return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
