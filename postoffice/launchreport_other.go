//go:build !unix

package postoffice

// reportRank does nothing: the launcher runs on Unix only.
func reportRank(int) {}
