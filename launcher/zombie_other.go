//go:build unix && !linux

package launcher

// anyRunning cannot tell zombies from running processes without /proc, so
// it assumes the worst; the grace period still bounds the wait.
func anyRunning([]int) bool { return true }
