//go:build linux

package launcher

import (
	"os"
	"slices"
	"strconv"
	"strings"
)

// anyRunning reports whether a non-zombie process belongs to one of the
// process groups. Linux has no call for "members of a group", so it scans
// /proc. That is only done for groups whose leader has already exited,
// i.e. when there are strays, so normal jobs never pay for it.
func anyRunning(pgids []int) bool {
	d, err := os.Open("/proc")
	if err != nil {
		return true // cannot tell: assume running, the grace period bounds the wait
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return true
	}
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		stat, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // exited since the directory was read
		}
		// "pid (comm) state ppid pgrp ...": comm may contain spaces and
		// parentheses, so parse from the last ')'.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if pgrp, err := strconv.Atoi(f[2]); err == nil && slices.Contains(pgids, pgrp) {
			return true
		}
	}
	return false
}
