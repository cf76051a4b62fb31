//go:build !unix

package main

// stragDumpNodes does nothing on this system (see the unix version).
func stragDumpNodes() {}
