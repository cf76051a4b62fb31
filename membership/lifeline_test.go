package membership

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
)

// slowProbes makes memberlist's own detection take minutes (a probe every
// 30 s, then 6 intervals of suspicion), so that a failure reported within
// failWithin was found through a lifeline.
func slowProbes(cfg Config) Config {
	cfg.ProbeInterval, cfg.ProbeTimeout, cfg.SuspicionMult = 30*time.Second, FastProbeTimeout, 6
	return cfg
}

// decisions records the Suspect outcomes of a member.
type decisions struct {
	mu  sync.Mutex
	got map[string][]bool
}

func (d *decisions) add(name string, failed bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got[name] = append(d.got[name], failed)
}

func (d *decisions) of(name string) []bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]bool(nil), d.got[name]...)
}

// lifelineCluster is cluster with slow probes and a seed that accepts
// lifelines and records its Suspect decisions.
func lifelineCluster(t *testing.T) (sched, s1, s2 node, d *decisions) {
	d = &decisions{got: map[string][]bool{}}
	sched, s1, s2 = cluster(t, func(c Config) Config {
		c = slowProbes(c)
		if c.NodeName == "scheduler" {
			c.Lifelines, c.suspected = true, d.add
		}
		return c
	})
	for _, n := range []node{s1, s2} {
		testutil.WaitFor(t, convergeWithin, func() bool { return n.m.holdsLifelines() == 1 },
			func() string { return fmt.Sprintf("%s holds %d lifelines", n.m.Name(), n.m.holdsLifelines()) })
	}
	return sched, s1, s2, d
}

// holdsLifelines counts the lifelines this member dialed and holds.
func (m *Member) holdsLifelines() int {
	m.lines.mu.Lock()
	defer m.lines.mu.Unlock()
	return len(m.lines.dialed)
}

// TestKilledMemberFailsByItsLifeline: a member process killed with SIGKILL
// is reported failed through its lifeline, long before memberlist's probes
// (minutes here) would, and memberlist's own report later is not repeated.
func TestKilledMemberFailsByItsLifeline(t *testing.T) {
	t.Parallel()
	d := &decisions{got: map[string][]bool{}}
	cfg := slowProbes(testConfig(t, "scheduler"))
	cfg.Lifelines, cfg.suspected = true, d.add
	cfg.Meta = meta(t, 1, "scheduler")
	sched := start(t, cfg)
	child := startChild(t, sched.m.Addr())
	testutil.WaitFor(t, convergeWithin, func() bool { return sched.rec.has(Join, "server-child") },
		func() string { return "no join of the member process:\n" + sched.rec.String() })
	testutil.WaitFor(t, convergeWithin, func() bool { return sched.m.acceptsLifelines() == 1 },
		func() string { return fmt.Sprintf("the seed holds %d lifelines", sched.m.acceptsLifelines()) })

	require.NoError(t, child.Process.Kill())
	testutil.WaitFor(t, failWithin, func() bool { return sched.rec.has(Fail, "server-child") },
		func() string { return "no failure of the killed member:\n" + sched.rec.String() })
	assert.Equal(t, []bool{true}, d.of("server-child"))
	assert.Equal(t, []string{"scheduler"}, names(sched.m.Members()))
}

// acceptsLifelines counts the lifelines open at this member whose peer
// said its name.
func (m *Member) acceptsLifelines() int {
	m.lines.mu.Lock()
	defer m.lines.mu.Unlock()
	n := 0
	for _, name := range m.lines.conns {
		if name != "" {
			n++
		}
	}
	return n
}

// TestBrokenLifelineOfALiveMember: a lifeline that breaks while its member
// runs (here: closed by the member) is only a hint; the member answers the
// probes and is not reported failed. Nor is a member that is suspected
// while it lives.
func TestBrokenLifelineOfALiveMember(t *testing.T) {
	t.Parallel()
	sched, s1, s2, d := lifelineCluster(t)

	s1.m.lines.mu.Lock()
	for c := range s1.m.lines.conns {
		c.Close()
	}
	s1.m.lines.mu.Unlock()
	sched.m.Suspect("server-10")
	for _, name := range []string{"server-8", "server-10"} {
		testutil.WaitFor(t, failWithin, func() bool { return len(d.of(name)) > 0 },
			func() string { return "the suspicion of " + name + " is not decided" })
		assert.Equal(t, []bool{false}, d.of(name), name)
	}
	assert.False(t, sched.rec.has(Fail, "server-8"), sched.rec.String())
	assert.False(t, sched.rec.has(Fail, "server-10"), sched.rec.String())
	assert.Equal(t, []string{"scheduler", "server-10", "server-8"}, names(sched.m.Members()))
	_ = s2
}

// TestLifelineOfALeavingMember: a member that leaves closes its lifeline;
// that is a Leave, never a Fail.
func TestLifelineOfALeavingMember(t *testing.T) {
	t.Parallel()
	sched, s1, _, d := lifelineCluster(t)

	require.NoError(t, s1.m.Leave(5*time.Second))
	require.NoError(t, s1.m.Shutdown())
	testutil.WaitFor(t, convergeWithin, func() bool { return sched.rec.has(Leave, "server-8") },
		func() string { return "no leave:\n" + sched.rec.String() })
	// The broken lifeline's suspicion is decided without a failure.
	testutil.WaitFor(t, failWithin, func() bool { return len(d.of("server-8")) > 0 },
		func() string { return "the suspicion of server-8 is not decided" })
	assert.Equal(t, []bool{false}, d.of("server-8"))
	assert.False(t, sched.rec.has(Fail, "server-8"), sched.rec.String())
}
