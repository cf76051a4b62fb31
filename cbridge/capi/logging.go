package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/elasticps/elasticps/internal/logfmt"
)

// The bridge's logs, the node's and those of the program's C++ LOG lines
// (ps_log), take the format of the elasticps command's nodes, so that the
// Go and C++ nodes of one job log alike.
func init() { slog.SetDefault(logfmt.New(os.Stderr, slog.LevelInfo)) }

// logCPP logs a C++ LOG line on the node's logger (which names the
// node's role) or, before there is a node, the default one.
func logCPP(severity int, file string, line int, msg string) {
	l := slog.Default()
	node.mu.Lock()
	if node.po != nil {
		l = node.po.Logger()
	}
	node.mu.Unlock()
	logfmt.LogCPP(l, logfmt.Severity(severity), filepath.Base(file)+":"+strconv.Itoa(line), msg)
}
