package postoffice_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/van"
	zmq4 "github.com/pebbe/zmq4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lineCounter is a slog.Handler that counts the records at Warn or above
// (what a flood could make a node write) and keeps the first few.
type lineCounter struct {
	n     atomic.Int64
	mu    sync.Mutex
	first []string
}

func (c *lineCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (c *lineCounter) Handle(_ context.Context, r slog.Record) error {
	if c.n.Add(1) <= 20 {
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
		c.mu.Lock()
		c.first = append(c.first, b.String())
		c.mu.Unlock()
	}
	return nil
}
func (c *lineCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *lineCounter) WithGroup(string) slog.Handler      { return c }

// vmRSS is this process's resident set size in bytes (/proc/self/status).
func vmRSS(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Skip("no VmRSS in /proc/self/status")
	return 0
}

// Flood test limits: small enough that a few seconds of flooding would
// overrun them many times over.
const (
	floodMaxMessage = 8 << 20
	floodMaxPending = 4 << 20
	floodFor        = 6 * time.Second // per van at least: many times the limits, in 2 × 6 s
	// floodCap is how long a van's flood may go on past floodFor while
	// its refusals are still too few (flooders slowed by a loaded
	// machine); a flood that is still short of them then fails.
	floodCap = 120 * time.Second
	// floodRSSBound is how much the process may grow while flooded: the
	// limits above (parked bytes, one message in flight per connection)
	// and libzmq's and the runtime's slack, far from the 600 MB an
	// unbounded node reached (twice that under the race detector).
	floodRSSBound = raceScale * 256 << 20
)

// A stranger floods the server of a running 1-server 1-worker job with
// garbage, oversized frames, too many frames and pushes for a customer
// that does not exist, as fast as it can: the job's exact sums hold, the
// process's RSS stays within floodRSSBound, the refusal counters say what
// was dropped, and the log holds a few lines per peer and reason per
// postoffice.LogInterval, not one per frame.
func TestFloodedServerKeepsServing(t *testing.T) {
	if testing.Short() {
		t.Skip("floods for seconds")
	}
	for _, kind := range []string{"zmq", "tcp"} {
		t.Run(kind, func(t *testing.T) { testFlood(t, kind) })
	}
}

func testFlood(t *testing.T, kind string) {
	lines := &lineCounter{}
	j := jobtest.Start(t, jobtest.Options{Servers: 1, Workers: 1, Van: kind, Configure: func(c *postoffice.Config) {
		if c.Role == message.RoleServer {
			c.Logger = slog.New(lines)
			c.Limits.MaxMessageBytes = floodMaxMessage
			c.Limits.MaxPendingBytes = floodMaxPending
		}
	}})
	srvNode, wkNode := j.Servers[0], j.Workers[0]
	srv, err := kv.NewServerWith(srvNode, 0, kv.ServerOptions{Handler: kv.NewDefaultHandler().Handle})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	w, err := kv.NewWorker(wkNode, 0, 0)
	require.NoError(t, err)
	t.Cleanup(w.Close)

	before := vmRSS(t)
	stop := make(chan struct{})
	var stopOnce sync.Once
	// The flooders are processes of their own, so that their buffers do
	// not count in this process's RSS, which is the job's.
	var floods []*exec.Cmd
	end := func() {
		stopOnce.Do(func() {
			close(stop)
			for _, c := range floods {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		})
	}
	t.Cleanup(end) // also when a check fails
	addr := srvNode.MyNode()
	for i := range 2 {
		c := exec.Command(os.Args[0], "-test.run=^TestFloodHelper$")
		c.Env = append(os.Environ(), floodEnv+"="+fmt.Sprintf("%s %s %d %d", kind, addr.Hostname, addr.Port, 99+2*i))
		require.NoError(t, c.Start())
		floods = append(floods, c)
	}
	var peak atomic.Int64
	peak.Store(before)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				if r := vmRSS(t); r > peak.Load() {
					peak.Store(r)
				}
			}
		}
	}()

	// The job trains through the flood: each round pushes integer-valued
	// floats and pulls back the exact running sum.
	keys := []uint64{1, 2, 3}
	sum := make([]float32, len(keys))
	// The job trains for floodFor at least, and on until the server has
	// refused every kind of flood message and more than 200 in all, for
	// floodCap at most: on a loaded machine the flooders may get little
	// CPU in the first seconds.
	started := time.Now()
	minEnd, capEnd := started.Add(floodFor), started.Add(floodCap)
	rounds := 0
	for now := time.Now(); now.Before(capEnd) && (now.Before(minEnd) || !floodRefused(srvNode.LimitRefusals(), kind)); now = time.Now() {
		g := []float32{1, float32(rounds), 2}
		for i := range sum {
			sum[i] += g[i]
		}
		ts, err := kv.Push(w, keys, g, nil, kv.Options{})
		require.NoError(t, err)
		require.NoError(t, w.Wait(ts))
		var got []float32
		ts, err = kv.Pull(w, keys, &got, nil, kv.Options{})
		require.NoError(t, err)
		require.NoError(t, w.Wait(ts))
		require.Equal(t, sum, got, "round %d", rounds)
		rounds++
	}
	flooded := time.Since(started)
	end()
	<-sampled

	ref := srvNode.LimitRefusals()
	grown := peak.Load() - before
	t.Logf("%s: %d rounds in %v; RSS %d MiB before, peak %d MiB (+%d MiB, bound +%d MiB); %d log lines; refusals %v",
		kind, rounds, flooded.Round(time.Millisecond), before>>20, peak.Load()>>20, grown>>20, floodRSSBound>>20, lines.n.Load(), ref)
	assert.Positive(t, rounds)
	assert.Less(t, grown, int64(floodRSSBound), "RSS grew by %d MiB under the flood", grown>>20)
	assert.Positive(t, ref[van.ReasonMalformed], "garbage meta")
	assert.Positive(t, ref[van.ReasonMeta], "oversized meta")
	assert.Positive(t, ref[van.ReasonFrames], "too many frames")
	assert.Positive(t, ref[van.ReasonPending], "parked pushes beyond PS_MAX_PENDING_BYTES")
	if kind == "zmq" {
		assert.Positive(t, ref[van.ReasonSize], "messages beyond PS_MAX_MESSAGE_BYTES")
	}
	var refused int64
	for _, n := range ref {
		refused += n
	}
	assert.Greater(t, refused, int64(200), "a flood is many refusals")
	// Two flooders × at most 5 reasons × one line per LogInterval (as
	// many intervals as started while flooded), plus a few lines of the
	// job.
	maxLines := int64(2*5*(int(flooded/postoffice.LogInterval)+1) + 10)
	lines.mu.Lock()
	first := strings.Join(lines.first, "\n")
	lines.mu.Unlock()
	assert.LessOrEqual(t, lines.n.Load(), maxLines, "log lines; the first:\n%s", first)
}

// floodRefused reports whether ref, a flooded server's refusals, holds
// every reason testFlood checks and more than 200 refusals in all.
func floodRefused(ref map[string]int64, kind string) bool {
	reasons := []string{van.ReasonMalformed, van.ReasonMeta, van.ReasonFrames, van.ReasonPending}
	if kind == "zmq" {
		reasons = append(reasons, van.ReasonSize)
	}
	var refused int64
	for _, n := range ref {
		refused += n
	}
	for _, r := range reasons {
		if ref[r] == 0 {
			return false
		}
	}
	return refused > 200
}

// Buffers of the flood messages, shared: the flooder sends as fast as it
// can, not allocates.
var (
	bigMeta   = make([]byte, 1<<20+1)
	halfLimit = make([]byte, floodMaxMessage/2+1)
	oneMiB    = make([]byte, 1<<20)
	oneByte   = []byte{1}
)

// garbage returns flood message i and whether the tcp van cuts the
// connection off for it: mostly metas that do not decode and messages of
// 20 data frames (PS_MAX_FRAMES), and one in 10 each a meta above 1 MiB
// (PS_MAX_META_BYTES), a message above floodMaxMessage, and a well-formed
// 1 MiB push for app 7, which has no customer and is parked within
// PS_MAX_PENDING_BYTES.
func garbage(i int) ([][]byte, bool) {
	switch i % 10 {
	case 1:
		return [][]byte{bigMeta}, true
	case 3:
		m := message.Meta{AppID: 7, CustomerID: 7, Request: true, Push: true, DataType: []message.DataType{message.Uint8, message.Uint8}}
		return [][]byte{message.EncodeMeta(&m), halfLimit, halfLimit}, true
	case 5:
		m := message.Meta{AppID: 7, CustomerID: 7, Request: true, Push: true, Timestamp: int32(i), DataType: []message.DataType{message.Uint8}}
		return [][]byte{message.EncodeMeta(&m), oneMiB}, false
	case 0, 2, 4:
		m := message.Meta{AppID: 0, Request: true, Push: true, Timestamp: int32(i)}
		f := [][]byte{message.EncodeMeta(&m)}
		for range 20 {
			f = append(f, oneByte)
		}
		return f, true
	default:
		return [][]byte{{0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3}}, false
	}
}

// floodEnv makes TestFloodHelper a flooder: "kind host port id".
const floodEnv = "ELASTICPS_FLOOD_HELPER"

// TestFloodHelper is the flooder process of TestFloodedServerKeepsServing;
// it does nothing in a normal run.
func TestFloodHelper(t *testing.T) {
	v := os.Getenv(floodEnv)
	if v == "" {
		t.Skip("the flooder process of TestFloodedServerKeepsServing")
	}
	var kind, host string
	var port, id int
	_, err := fmt.Sscanf(v, "%s %s %d %d", &kind, &host, &port, &id)
	require.NoError(t, err)
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	if kind == "zmq" {
		floodZMQ(addr, id)
	}
	floodTCP(addr, id)
}

// floodZMQ sends garbage to addr from a raw DEALER claiming id, until
// killed.
func floodZMQ(addr string, id int) {
	s, err := zmq4.NewSocket(zmq4.DEALER)
	if err != nil {
		return
	}
	_ = s.SetLinger(0)
	_ = s.SetSndhwm(10)
	_ = s.SetIdentity(fmt.Sprintf("ps%d", id))
	if s.Connect("tcp://"+addr) != nil {
		return
	}
	for i := 0; ; i++ {
		f, _ := garbage(i)
		parts := make([]any, len(f))
		for j := range f {
			parts[j] = f[j]
		}
		_, _ = s.SendMessage(parts...)
	}
}

// floodTCP sends garbage to addr over the tcp van's framing, as node id,
// redialling after each message the server cuts the connection off for,
// until killed.
func floodTCP(addr string, id int) {
	hello := []byte{'E', 'P', 'S', 'V', 1, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(hello[8:], uint32(id))
	for i := 0; ; {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			time.Sleep(10 * time.Millisecond) // the listener is gone: the test is ending
			continue
		}
		_, err = c.Write(hello)
		for err == nil {
			f, fatal := garbage(i)
			i++
			hdr := binary.LittleEndian.AppendUint32(nil, uint32(len(f)))
			for _, b := range f {
				hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(b)))
			}
			bufs := net.Buffers(append([][]byte{hdr}, f...))
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err = bufs.WriteTo(c); fatal {
				break
			}
		}
		c.Close()
	}
}

// An ADD_NODE that would take the scheduler past PS_MAX_NODES is refused
// and counted; the job is not disturbed.
func TestSchedulerRefusesNodesBeyondMaxNodes(t *testing.T) {
	j := jobtest.Start(t, jobtest.Options{Servers: 1, Workers: 1, Van: "zmq", Configure: func(c *postoffice.Config) {
		if c.Role == message.RoleScheduler {
			c.Limits.MaxNodes = 3 // the scheduler, the server and the worker
		}
	}})
	s, err := zmq4.NewSocket(zmq4.DEALER) // no identity: anonymous, as a registering node
	require.NoError(t, err)
	defer s.Close()
	_ = s.SetLinger(0)
	sched := j.Scheduler.MyNode()
	require.NoError(t, s.Connect(fmt.Sprintf("tcp://%s:%d", sched.Hostname, sched.Port)))
	m := message.Meta{Control: message.Control{Cmd: message.CmdAddNode,
		Nodes: []message.Node{{ID: message.Empty, Role: message.RoleWorker, Hostname: "127.0.0.1", Port: 1}}}}
	_, err = s.SendBytes(message.EncodeMeta(&m), 0)
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, func() bool { return j.Scheduler.LimitRefusals()[postoffice.ReasonNodes] == 1 },
		func() string { return fmt.Sprintf("refusals %v", j.Scheduler.LimitRefusals()) })
	jobtest.Barrier(t, j.All(), message.AllGroup)
}
