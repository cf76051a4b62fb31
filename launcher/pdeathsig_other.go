//go:build unix && !linux

package launcher

import "syscall"

// dieWithParent does nothing: only Linux can tie a child's life to its
// parent's. A launcher that is killed with SIGKILL leaves its children
// running there; every other ending tears the job down.
func dieWithParent(*syscall.SysProcAttr) {}
