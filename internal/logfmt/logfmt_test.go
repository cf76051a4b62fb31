package logfmt

import (
	"bytes"
	"log/slog"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
)

// C++ lines and Go lines share one format: millisecond times, the level
// (FATAL for LOG(FATAL)), the message and the source.
func TestFormat(t *testing.T) {
	var b bytes.Buffer
	l := New(&b, slog.LevelInfo).With("role", "worker")
	l.Info("scheduler up", "id", 1)
	LogCPP(l, Warning, "kv_app.h:214", "KVWorker::set_slicer is not supported")
	LogCPP(l, Fatal, "t.cc:5", "Check failed: (1) == (2)")
	LogCPP(l, Severity(7), "t.cc:6", "unknown severities log as INFO")
	l.Debug("not at the default level")
	lines := regexp.MustCompile(`(?m)^time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\S* (.*)$`).FindAllStringSubmatch(b.String(), -1)
	var rest []string
	for _, m := range lines {
		rest = append(rest, m[1])
	}
	assert.Equal(t, []string{
		`level=INFO msg="scheduler up" role=worker id=1`,
		`level=WARN msg="KVWorker::set_slicer is not supported" role=worker src=kv_app.h:214`,
		`level=FATAL msg="Check failed: (1) == (2)" role=worker src=t.cc:5`,
		`level=INFO msg="unknown severities log as INFO" role=worker src=t.cc:6`,
	}, rest, b.String())
}
