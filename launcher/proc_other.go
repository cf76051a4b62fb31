//go:build !unix

package launcher

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// The launcher relies on Unix process groups to kill a job's grandchildren;
// ps-lite itself only runs on Unix, so other systems get a clear error
// rather than a launcher that leaks processes.
const supported = false

var errUnsupported = errors.New("launcher: local jobs need a Unix system (process groups); run them on Linux or macOS")

type signal int

const (
	sigTerm signal = iota
	sigKill
)

func setProcessGroup(*exec.Cmd) {}

func signalGroup(int, signal) error { return errUnsupported }

func groupAlive(int) bool { return false }

func describeExit(st *os.ProcessState) string {
	return fmt.Sprintf("exited with status %d", st.ExitCode())
}

func anyRunning([]int) bool { return false }

func pipeID(*os.File) string { return "0" }
