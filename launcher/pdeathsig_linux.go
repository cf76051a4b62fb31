package launcher

import "syscall"

// dieWithParent has the kernel SIGKILL the child when the launcher dies
// (PR_SET_PDEATHSIG), however it dies: a launcher killed with SIGKILL runs
// no teardown, and its children would otherwise run on under PID 1 waiting
// for peers that are gone. The signal is tied to the OS thread that forked
// the child; Go only retires threads of goroutines that exit while locked
// to them, which the launcher never does.
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }
