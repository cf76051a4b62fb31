// Package logfmt is the log format of every node of a job, whether the
// elasticps command runs it or a C++ program through the bridge (whose
// LOG(...) lines come here too): slog's text format on stderr, times to
// the millisecond, level INFO unless asked otherwise, and FATAL for what
// C++ code logs before it throws or aborts.
package logfmt

import (
	"context"
	"io"
	"log/slog"
)

// LevelFatal is the level of C++ LOG(FATAL) and failed CHECKs.
const LevelFatal = slog.LevelError + 4

// New returns a logger writing to w in the nodes' format, at level and
// above.
func New(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(NewHandler(w, level))
}

// NewHandler is New's handler, for callers that wrap it.
func NewHandler(w io.Writer, level slog.Leveler) slog.Handler {
	return slog.NewTextHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.LevelKey && len(groups) == 0 {
			if l, ok := a.Value.Any().(slog.Level); ok && l == LevelFatal {
				return slog.String(slog.LevelKey, "FATAL")
			}
		}
		return a
	}})
}

// Severity is a C++ LOG severity, as the bridge's dmlc/logging.h numbers
// them.
type Severity int

// The C++ severities.
const (
	Info Severity = iota
	Warning
	Error
	Fatal
)

// Level maps s to a slog level.
func (s Severity) Level() slog.Level {
	switch s {
	case Warning:
		return slog.LevelWarn
	case Error:
		return slog.LevelError
	case Fatal:
		return LevelFatal
	}
	return slog.LevelInfo
}

// LogCPP logs one C++ LOG line, msg from src (file:line), on l.
func LogCPP(l *slog.Logger, s Severity, src, msg string) {
	l.Log(context.Background(), s.Level(), msg, "src", src)
}
