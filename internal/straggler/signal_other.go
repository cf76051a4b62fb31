//go:build !unix

package straggler

// dumpNodes does nothing on this system (see the unix version).
func dumpNodes() {}
