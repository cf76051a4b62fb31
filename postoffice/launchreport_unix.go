//go:build unix

package postoffice

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// launcherFDEnv is launcher.ReportFDEnv ("FD:INODE"): `elasticps local`
// hands every process a pipe to report what the launcher cannot see, here
// the node's rank, which it then shows in the process's output prefix. The
// name is repeated rather than imported: the launcher is no dependency of a
// node.
const launcherFDEnv = "ELASTICPS_LAUNCHER_FD"

var launcherPipe struct {
	once sync.Once
	f    *os.File // nil: not started by the launcher, or not its pipe
}

// reportRank tells the launcher that started this process, if any, the
// rank the scheduler assigned. The variable is removed so that programs
// this one starts do not inherit it, and the descriptor is written only if
// it is the very pipe the launcher named.
func reportRank(rank int) {
	launcherPipe.once.Do(func() {
		v, ok := os.LookupEnv(launcherFDEnv)
		if !ok {
			return
		}
		_ = os.Unsetenv(launcherFDEnv)
		fdStr, inoStr, _ := strings.Cut(v, ":")
		fd, err1 := strconv.Atoi(fdStr)
		ino, err2 := strconv.ParseUint(inoStr, 10, 64)
		var st syscall.Stat_t
		if err1 != nil || err2 != nil || fd < 3 || syscall.Fstat(fd, &st) != nil ||
			st.Mode&syscall.S_IFMT != syscall.S_IFIFO || uint64(st.Ino) != ino {
			return
		}
		syscall.CloseOnExec(fd)
		launcherPipe.f = os.NewFile(uintptr(fd), "elasticps-launcher")
	})
	if f := launcherPipe.f; f != nil {
		// Best effort: a launcher that stopped reading only loses the
		// prefix.
		_, _ = fmt.Fprintf(f, "rank %d\n", rank)
	}
}
