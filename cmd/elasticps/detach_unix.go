//go:build unix

package main

import "syscall"

// detached starts a child in a session of its own, so it outlives ctl and
// a Ctrl-C of ctl's terminal.
func detached() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }
