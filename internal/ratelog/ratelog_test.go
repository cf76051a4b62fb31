package ratelog

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTest(buf *bytes.Buffer) (*Limiter, *clock) {
	c := &clock{t: time.Unix(1000, 0)}
	l := New(slog.New(slog.NewTextHandler(buf, nil)), 10*time.Second)
	l.now = c.now
	return l, c
}

func lines(buf *bytes.Buffer) []string {
	return strings.Split(strings.TrimSpace(buf.String()), "\n")
}

func TestOneLinePerPeerAndReasonPerInterval(t *testing.T) {
	var buf bytes.Buffer
	l, c := newTest(&buf)
	logged := 0
	for range 10000 {
		if l.Log(slog.LevelError, "ps9", "meta", "dropped a malformed message") {
			logged++
		}
	}
	assert.Equal(t, 1, logged)
	assert.True(t, l.Log(slog.LevelError, "ps9", "frames", "dropped"), "another reason has its own budget")
	assert.True(t, l.Log(slog.LevelError, "ps11", "meta", "dropped"), "another peer has its own budget")

	c.t = c.t.Add(10 * time.Second)
	require.True(t, l.Log(slog.LevelError, "ps9", "meta", "dropped a malformed message"))
	got := lines(&buf)
	require.Len(t, got, 4)
	assert.Contains(t, got[3], "peer=ps9 reason=meta suppressed=9999 interval=10s")
	assert.NotContains(t, got[0], "suppressed")
}

func TestTableStaysBoundedUnderInventedPeers(t *testing.T) {
	var buf bytes.Buffer
	l, _ := newTest(&buf)
	for i := range 5 * maxKeys {
		l.Log(slog.LevelError, fmt.Sprintf("peer%d", i), "hello", "bad hello")
	}
	assert.Equal(t, maxKeys, len(l.m))
	assert.Equal(t, maxKeys, len(lines(&buf)), "maxKeys-1 own pairs, then one line for all other peers")
	assert.Equal(t, int64(5*maxKeys-maxKeys), l.m[key{OtherPeers, "hello"}].suppressed)
}

func TestDisabledLevelIsNotCounted(t *testing.T) {
	var buf bytes.Buffer
	l, _ := newTest(&buf)
	assert.False(t, l.Log(slog.LevelDebug, "ps9", "meta", "dropped"))
	assert.Empty(t, l.m)
}
