package membership

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
)

// childSeedEnv makes TestChildMember a member in its own process (started
// by startChild) that joins through the seed it names.
const childSeedEnv = "MEMBERSHIP_TEST_CHILD_SEED"

// jobTimings are the timings elasticps jobs run with.
func jobTimings(cfg Config) Config {
	cfg.ProbeInterval, cfg.ProbeTimeout, cfg.SuspicionMult = FastProbeInterval, FastProbeTimeout, FastSuspicionMult
	return cfg
}

// TestChildMember is not a test: it is the member process of the tests
// below. It runs until killed or until its stdin closes.
func TestChildMember(t *testing.T) {
	seed := os.Getenv(childSeedEnv)
	if seed == "" {
		t.Skip("the member process of TestKilledMemberFailsPausedDoesNot")
	}
	cfg := jobTimings(DefaultConfig())
	cfg.NodeName, cfg.BindAddr, cfg.Local, cfg.Seeds = "server-child", "127.0.0.1", true, []string{seed}
	m, err := Start(cfg)
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("JOINED", m.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// startChild runs TestChildMember in a new process joining through seed
// and returns it once it joined.
func startChild(t *testing.T, seed string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildMember$")
	cmd.Env = append(os.Environ(), childSeedEnv+"="+seed)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "JOINED "), "the member process says %q", line)
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return cmd
}

// TestKilledMemberFailsPausedDoesNot: with the timings of elasticps jobs, a
// member process stopped (SIGSTOP) a few times for as long as a long GC
// pause is only suspected, never reported failed; killed with SIGKILL it
// is reported failed by every other member.
//
// It does not run in parallel: other members' load in this process (the
// race detector's, on a shared machine) is not what it is about.
func TestKilledMemberFailsPausedDoesNot(t *testing.T) {
	sched, s1, s2 := cluster(t, jobTimings)
	child := startChild(t, sched.m.Addr())
	for _, n := range []node{sched, s1, s2} {
		// The seed took the join itself; the others hear of it by gossip,
		// whose few packets a loaded host may drop, or else by memberlist's
		// push/pull sync, every 15 s on loopback.
		testutil.WaitFor(t, joinSpreadWithin, func() bool { return n.rec.has(Join, "server-child") },
			func() string { return fmt.Sprintf("%s saw no join of the member process:\n%s", n.m.Name(), n.rec) })
	}

	for range 3 {
		require.NoError(t, child.Process.Signal(syscall.SIGSTOP))
		time.Sleep(pause) // the pause itself, not a wait for something
		require.NoError(t, child.Process.Signal(syscall.SIGCONT))
		time.Sleep(time.Second) // the member runs between pauses
	}
	// Suspicions raised during the last pause end by now: refuted, or
	// (wrongly) a failure.
	time.Sleep(time.Duration(FastSuspicionMult+2) * FastProbeInterval)
	for _, n := range []node{sched, s1, s2} {
		for _, never := range []string{"scheduler", "server-8", "server-10"} {
			if n.rec.has(Fail, never) {
				// Those were never paused: the host starved every member,
				// so it cannot tell whether a 100 ms pause is survived.
				t.Skipf("the host is too loaded to judge: %s, never paused, was declared failed too:\n%s", never, n.rec)
			}
		}
	}
	for _, n := range []node{sched, s1, s2} {
		assert.False(t, n.rec.has(Fail, "server-child"), "%s took a pause of %v for a failure:\n%s", n.m.Name(), pause, n.rec)
		assert.Contains(t, names(n.m.Members()), "server-child", n.m.Name())
	}

	require.NoError(t, child.Process.Kill())
	for _, n := range []node{sched, s1, s2} {
		testutil.WaitFor(t, failWithin, func() bool { return n.rec.has(Fail, "server-child") },
			func() string { return fmt.Sprintf("%s saw no failure of the killed member:\n%s", n.m.Name(), n.rec) })
	}
	assert.Equal(t, []string{"scheduler", "server-10", "server-8"}, names(sched.m.Members()))
}

// joinSpreadWithin bounds how long a member waits to hear of a new one:
// two of memberlist's push/pull periods on loopback (DefaultLocalConfig's
// 15 s) and some.
const joinSpreadWithin = 40 * time.Second

// pause is how long TestKilledMemberFailsPausedDoesNot stops the member
// process: a long stop-the-world pause (Go's are well under a millisecond;
// other runtimes' and an overloaded host's reach this).
const pause = 100 * time.Millisecond
