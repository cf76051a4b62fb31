package membership

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
)

// Bounds for require.Eventually. They are generous because -race on a
// two-core machine slows gossip; the test ends as soon as the condition
// holds, so a fast machine does not pay them.
const (
	// convergeWithin is longer than the push/pull interval of
	// memberlist's Local config (15 s): a join whose gossip a loaded
	// machine lost (broadcasts are sent a few times only) reaches every
	// member with the next full state sync.
	convergeWithin = 20 * time.Second
	// With the fast probe settings of fastProbes, failure detection is about
	// 0.2 s probe + 0.1 s timeout + 0.6-3.6 s suspicion.
	failWithin = 20 * time.Second
	poll       = 20 * time.Millisecond
)

// recorder keeps the events one member saw.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) add(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) find(k Kind, name string) (Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Kind == k && e.Name == name {
			return e, true
		}
	}
	return Event{}, false
}

func (r *recorder) has(k Kind, name string) bool {
	_, ok := r.find(k, name)
	return ok
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.events {
		fmt.Fprintf(&b, "%s %s %s %q\n", e.Kind, e.Name, e.Addr, e.Meta)
	}
	return b.String()
}

type node struct {
	m   *Member
	rec *recorder
}

// testConfig is a member on loopback, any port, with memberlist's local
// timings and logs captured for a failing test.
func testConfig(t *testing.T, name string, seeds ...string) Config {
	t.Helper()
	// memberlist's goroutines may outlive the test, where t.Log would panic.
	logs := &testutil.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", name, logs.String())
		}
	})
	cfg := DefaultConfig()
	cfg.NodeName = name
	cfg.BindAddr = "127.0.0.1"
	cfg.Seeds = seeds
	cfg.Local = true
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return cfg
}

func fastProbes(cfg Config) Config {
	cfg.ProbeInterval = 200 * time.Millisecond
	cfg.ProbeTimeout = 100 * time.Millisecond
	return cfg
}

func start(t *testing.T, cfg Config) node {
	t.Helper()
	rec := &recorder{}
	cfg.Events = rec.add
	m, err := Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Shutdown() })
	return node{m: m, rec: rec}
}

func meta(t *testing.T, id int32, role string) []byte {
	t.Helper()
	b, err := EncodeMeta(NodeMeta{ID: id, Role: role, Addr: fmt.Sprintf("127.0.0.1:%d", 9000+id)})
	require.NoError(t, err)
	return b
}

func names(infos []Info) []string {
	var out []string
	for _, i := range infos {
		out = append(out, i.Name)
	}
	return out
}

// cluster starts a scheduler-like seed and two servers joining through it,
// and waits until every member sees all three.
func cluster(t *testing.T, tune func(Config) Config) (sched, s1, s2 node) {
	t.Helper()
	if tune == nil {
		tune = func(c Config) Config { return c }
	}
	cfg := tune(testConfig(t, "scheduler"))
	cfg.Meta = meta(t, 1, "scheduler")
	sched = start(t, cfg)
	cfg = tune(testConfig(t, "server-8", sched.m.Addr()))
	cfg.Meta = meta(t, 8, "server")
	s1 = start(t, cfg)
	cfg = tune(testConfig(t, "server-10", sched.m.Addr()))
	cfg.Meta = meta(t, 10, "server")
	s2 = start(t, cfg)
	all := []string{"scheduler", "server-10", "server-8"}
	for _, n := range []node{sched, s1, s2} {
		testutil.WaitFor(t, convergeWithin, func() bool { return assert.ObjectsAreEqual(all, names(n.m.Members())) },
			func() string { return fmt.Sprintf("%s sees %v", n.m.Name(), names(n.m.Members())) })
	}
	return sched, s1, s2
}

func TestJoinThroughSeed(t *testing.T) {
	t.Parallel()
	sched, s1, s2 := cluster(t, nil)

	assert.True(t, strings.HasPrefix(sched.m.Addr(), "127.0.0.1:"), sched.m.Addr())
	assert.NotEqual(t, "127.0.0.1:0", sched.m.Addr())

	// Every member reported its own Join, and the others' Joins, with Meta.
	for _, n := range []node{sched, s1, s2} {
		for _, other := range []node{sched, s1, s2} {
			require.Eventually(t, func() bool { return n.rec.has(Join, other.m.Name()) },
				convergeWithin, poll, "%s saw no join of %s:\n%s", n.m.Name(), other.m.Name(), n.rec)
		}
	}
	e, _ := sched.rec.find(Join, "server-10")
	assert.Equal(t, s2.m.Addr(), e.Addr)
	got, err := DecodeMeta(e.Meta)
	require.NoError(t, err)
	assert.Equal(t, NodeMeta{ID: 10, Role: "server", Addr: "127.0.0.1:9010"}, got)

	// Meta round trip through gossip, as seen by a member that did not
	// join through the owner.
	for _, info := range s1.m.Members() {
		got, err := DecodeMeta(info.Meta)
		require.NoError(t, err)
		switch info.Name {
		case "scheduler":
			assert.Equal(t, NodeMeta{ID: 1, Role: "scheduler", Addr: "127.0.0.1:9001"}, got)
			assert.Equal(t, sched.m.Addr(), info.Addr)
		case "server-10":
			assert.Equal(t, int32(10), got.ID)
			assert.Equal(t, s2.m.Addr(), info.Addr)
		case "server-8":
			assert.Equal(t, int32(8), got.ID)
		}
	}
}

func TestLeaveIsReportedAsLeave(t *testing.T) {
	t.Parallel()
	sched, s1, s2 := cluster(t, nil)

	require.NoError(t, s2.m.Leave(5*time.Second))
	for _, n := range []node{sched, s1} {
		require.Eventually(t, func() bool { return n.rec.has(Leave, "server-10") },
			convergeWithin, poll, "%s saw no leave:\n%s", n.m.Name(), n.rec)
		assert.False(t, n.rec.has(Fail, "server-10"), "a leave is not a failure")
		assert.Equal(t, []string{"scheduler", "server-8"}, names(n.m.Members()))
	}
	require.NoError(t, s2.m.Shutdown())
	assert.ErrorIs(t, s2.m.Leave(time.Second), ErrShutdown)
}

// TestLeaveWithAnUnreachablePeer: a member leaves while another has just
// crashed and cannot acknowledge; Leave still completes within its timeout
// and the members that acknowledged report Leave, while the crash is still
// reported as Fail.
func TestLeaveWithAnUnreachablePeer(t *testing.T) {
	t.Parallel()
	sched, s1, s2 := cluster(t, fastProbes)

	require.NoError(t, s1.m.Shutdown())
	require.NoError(t, s2.m.Leave(2*time.Second))
	require.Eventually(t, func() bool { return sched.rec.has(Leave, "server-10") },
		convergeWithin, poll, "no leave:\n%s", sched.rec)
	assert.False(t, sched.rec.has(Fail, "server-10"))
	require.Eventually(t, func() bool { return sched.rec.has(Fail, "server-8") },
		failWithin, poll, "no failure:\n%s", sched.rec)
}

func TestShutdownIsReportedAsFail(t *testing.T) {
	t.Parallel()
	sched, s1, s2 := cluster(t, fastProbes)

	require.NoError(t, s1.m.Shutdown()) // abrupt: no leave message
	for _, n := range []node{sched, s2} {
		require.Eventually(t, func() bool { return n.rec.has(Fail, "server-8") },
			failWithin, poll, "%s saw no failure:\n%s", n.m.Name(), n.rec)
		assert.False(t, n.rec.has(Leave, "server-8"))
		e, _ := n.rec.find(Fail, "server-8")
		got, err := DecodeMeta(e.Meta)
		require.NoError(t, err)
		assert.Equal(t, int32(8), got.ID, "a Fail carries the ps node id")
	}
	assert.Equal(t, []string{"scheduler", "server-10"}, names(sched.m.Members()))
}

func TestSetMetaIsReportedAsUpdate(t *testing.T) {
	t.Parallel()
	sched, s1, _ := cluster(t, nil)

	newMeta := meta(t, 9, "server")
	require.NoError(t, s1.m.SetMeta(newMeta, 5*time.Second))
	require.Eventually(t, func() bool {
		e, ok := sched.rec.find(Update, "server-8")
		return ok && bytes.Equal(e.Meta, newMeta)
	}, convergeWithin, poll, "no update:\n%s", sched.rec)
	for _, info := range sched.m.Members() {
		if info.Name == "server-8" {
			assert.Equal(t, newMeta, info.Meta)
		}
	}
	assert.ErrorContains(t, s1.m.SetMeta(make([]byte, MetaMaxSize+1), time.Second), "limit")
}

func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestBadSeed(t *testing.T) {
	t.Parallel()
	addr := closedPort(t)
	cfg := testConfig(t, "lonely", addr)
	_, err := Start(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cannot join the cluster through "+addr)
	assert.Contains(t, err.Error(), "lonely")

	// The failed member released its port and goroutines: a new member can
	// start at once, and is alone.
	n := start(t, testConfig(t, "lonely"))
	assert.Equal(t, []string{"lonely"}, names(n.m.Members()))

	// One reachable seed is enough.
	cfg = testConfig(t, "joiner", closedPort(t), n.m.Addr())
	j := start(t, cfg)
	require.Eventually(t, func() bool { return len(j.m.Members()) == 2 }, convergeWithin, poll)
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"no name", func(c *Config) { c.NodeName = "" }, "NodeName is empty"},
		{"seed without port", func(c *Config) { c.Seeds = []string{"127.0.0.1"} }, `seed "127.0.0.1" is not host:port`},
		{"seed with bad port", func(c *Config) { c.Seeds = []string{"127.0.0.1:0"} }, `seed "127.0.0.1:0"`},
		{"bind is a name", func(c *Config) { c.BindAddr = "localhost" }, `BindAddr "localhost"`},
		{"bad advertise", func(c *Config) { c.AdvertiseAddr = "x" }, `AdvertiseAddr "x"`},
		{"port out of range", func(c *Config) { c.BindPort = 70000 }, "BindPort 70000"},
		{"meta too large", func(c *Config) { c.Meta = make([]byte, MetaMaxSize+1) }, "Meta is 513 bytes"},
		{"timeout above interval", func(c *Config) { c.ProbeInterval = 100 * time.Millisecond }, "ProbeTimeout 200ms must be shorter"},
		{"negative", func(c *Config) { c.SuspicionMult = -1 }, "must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "x")
			tc.modify(&cfg)
			_, err := Start(cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	// A taken port is reported with the address.
	n := start(t, testConfig(t, "first"))
	_, port, err := net.SplitHostPort(n.m.Addr())
	require.NoError(t, err)
	cfg := testConfig(t, "second")
	fmt.Sscan(port, &cfg.BindPort)
	_, err = Start(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "127.0.0.1:"+port)
}

func TestClusterLabelSeparatesJobs(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "job1-scheduler")
	cfg.ClusterLabel = "job1"
	sched := start(t, cfg)
	cfg = testConfig(t, "job2-server", sched.m.Addr())
	cfg.ClusterLabel = "job2"
	_, err := Start(cfg)
	require.Error(t, err, "a member of another job must not join")
	assert.Contains(t, err.Error(), sched.m.Addr())

	cfg = testConfig(t, "job1-server", sched.m.Addr())
	cfg.ClusterLabel = "job1"
	s := start(t, cfg)
	require.Eventually(t, func() bool { return len(sched.m.Members()) == 2 }, convergeWithin, poll)
	assert.Len(t, s.m.Members(), 2)
}

// TestEventsMayCallMembers checks that Events may call back into the
// Member (it runs on our goroutine, not inside memberlist's node lock) and
// that no event arrives after Shutdown returns.
func TestEventsMayCallMembers(t *testing.T) {
	t.Parallel()
	var self atomic.Pointer[Member]
	var sawJoin atomic.Bool
	var afterShutdown atomic.Bool
	var calls atomic.Int32
	cfg := testConfig(t, "watcher")
	cfg.Events = func(e Event) {
		assert.False(t, afterShutdown.Load(), "event %v after Shutdown returned", e)
		calls.Add(1)
		if m := self.Load(); m != nil && e.Kind == Join && e.Name == "other" {
			_ = m.Members()
			sawJoin.Store(true)
		}
	}
	m, err := Start(cfg)
	require.NoError(t, err)
	self.Store(m)
	other := start(t, testConfig(t, "other", m.Addr()))
	require.Eventually(t, sawJoin.Load, convergeWithin, poll)
	require.NoError(t, other.m.Shutdown())
	require.NoError(t, m.Shutdown())
	afterShutdown.Store(true)
	require.NoError(t, m.Shutdown(), "idempotent")
	assert.ErrorIs(t, m.SetMeta(nil, 0), ErrShutdown)
	assert.GreaterOrEqual(t, calls.Load(), int32(2), "own join and other's join")
}

func TestParseLogLine(t *testing.T) {
	tests := []struct {
		line  string
		level slog.Level
		msg   string
	}{
		{"[DEBUG] memberlist: Stream connection from=127.0.0.1:5\n", slog.LevelDebug, "Stream connection from=127.0.0.1:5"},
		{"[TRACE] memberlist: x\n", slog.LevelDebug, "x"},
		{"[INFO] memberlist: Marking a as failed\n", slog.LevelInfo, "Marking a as failed"},
		{"[WARN] memberlist: Was able to connect\n", slog.LevelWarn, "Was able to connect"},
		{"[ERR] memberlist: Failed to send ping\n", slog.LevelError, "Failed to send ping"},
		{"[ERROR] memberlist: y\r\n", slog.LevelError, "y"},
		{"[ERR] Failed to shutdown transport\n", slog.LevelError, "Failed to shutdown transport"},
		{"no prefix at all\n", slog.LevelInfo, "no prefix at all"},
		{"[odd] bracket\n", slog.LevelInfo, "[odd] bracket"},
		{"", slog.LevelInfo, ""},
	}
	for _, tc := range tests {
		level, msg := parseLogLine([]byte(tc.line))
		assert.Equal(t, tc.level, level, tc.line)
		assert.Equal(t, tc.msg, msg, tc.line)
	}
}

// TestClosedSocketErrorsAfterShutdownAreDebug: memberlist's gossip ticker
// may send on the socket Shutdown just closed, and logs it as [ERR]; once
// Shutdown began that line is demoted to DEBUG, while the same line before
// it, and any other error after it, stays an error.
func TestClosedSocketErrorsAfterShutdownAreDebug(t *testing.T) {
	logs := &bytes.Buffer{}
	var closing atomic.Bool
	w := &logWriter{log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), closing: &closing}
	closedLine := "[ERR] memberlist: Failed to send gossip to 127.0.0.1:1: write udp 127.0.0.1:2->127.0.0.1:1: use of closed network connection\n"
	otherLine := "[ERR] memberlist: Failed to send gossip to 127.0.0.1:1: write udp: connection refused\n"

	_, _ = w.Write([]byte(closedLine))
	assert.Contains(t, logs.String(), "level=ERROR", "a closed socket before Shutdown is an error")
	logs.Reset()

	closing.Store(true)
	_, _ = w.Write([]byte(closedLine))
	assert.Contains(t, logs.String(), "level=DEBUG msg=\"Failed to send gossip")
	assert.NotContains(t, logs.String(), "level=ERROR")
	logs.Reset()
	_, _ = w.Write([]byte(otherLine))
	assert.Contains(t, logs.String(), "level=ERROR", "other errors during Shutdown stay errors")
}

// TestMemberlistLogsReachSlog checks the adapter end to end: memberlist's
// own lines arrive as slog records at the mapped level, tagged with the
// member and component.
func TestMemberlistLogsReachSlog(t *testing.T) {
	t.Parallel()
	logs := &testutil.SyncBuffer{}
	cfg := testConfig(t, "logged")
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	start(t, cfg)
	// memberlist logs the dynamic port it bound at DEBUG.
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "level=DEBUG msg=\"Using dynamic bind port")
	}, convergeWithin, poll, logs.String())
	assert.Contains(t, logs.String(), "member=logged component=memberlist")
	assert.NotContains(t, logs.String(), "[DEBUG]")

	// At INFO, debug lines are dropped.
	quiet := &testutil.SyncBuffer{}
	cfg = testConfig(t, "quiet")
	cfg.Logger = slog.New(slog.NewTextHandler(quiet, &slog.HandlerOptions{Level: slog.LevelInfo}))
	start(t, cfg)
	assert.NotContains(t, quiet.String(), "Using dynamic bind port")
}

func TestMetaCodec(t *testing.T) {
	in := NodeMeta{ID: 9, Role: "server", Addr: "10.0.0.2:9001"}
	b, err := EncodeMeta(in)
	require.NoError(t, err)
	assert.JSONEq(t, `{"id":9,"role":"server","addr":"10.0.0.2:9001"}`, string(b))
	out, err := DecodeMeta(b)
	require.NoError(t, err)
	assert.Equal(t, in, out)
	out, err = DecodeMeta([]byte(`{"id":1,"role":"scheduler","future":true}`))
	require.NoError(t, err, "unknown fields are ignored")
	assert.Equal(t, NodeMeta{ID: 1, Role: "scheduler"}, out)
	_, err = DecodeMeta([]byte("garbage"))
	assert.ErrorContains(t, err, "garbage")
	_, err = EncodeMeta(NodeMeta{Addr: strings.Repeat("x", MetaMaxSize)})
	assert.ErrorContains(t, err, "limit")
	assert.Equal(t, "fail", Fail.String())
	assert.Equal(t, "Kind(0)", Kind(0).String())
}
