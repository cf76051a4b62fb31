//go:build unix

package launcher

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

const supported = true

var errUnsupported error // never returned on Unix

type signal = syscall.Signal

const (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
)

// setProcessGroup makes the child the leader of a new process group, so
// that signalling the group reaches everything it spawned, and, where the
// system can, ties the child's life to the launcher's (see dieWithParent).
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
}

func signalGroup(pgid int, sig signal) error {
	return syscall.Kill(-pgid, sig)
}

// groupAlive reports whether the process group still has members (zombies
// included). Signal 0 only checks; EPERM is treated as "not ours", since
// the launcher could not kill such a process anyway.
func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}

// describeExit words an unsuccessful exit for ProcessError.
func describeExit(st *os.ProcessState) string {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		sig := ws.Signal()
		return fmt.Sprintf("was killed by signal %d (%v)", int(sig), sig)
	}
	return fmt.Sprintf("exited with status %d", st.ExitCode())
}

// pipeID is the inode of f, which names the pipe for ReportFDEnv.
func pipeID(f *os.File) string {
	fi, err := f.Stat()
	if err != nil {
		return "0"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return strconv.FormatUint(uint64(st.Ino), 10)
	}
	return "0"
}
