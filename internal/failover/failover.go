// Package failover is 'elasticps bench failover': the time from a
// server's SIGKILL to the first acknowledged push on the new primary, over
// repeated kills of a PS_REPLICAS=1 job of processes, and push throughput
// with k = 0, 1, 2 replicas against k = 0.
package failover

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/elasticps/elasticps/internal/cli"
	"github.com/elasticps/elasticps/internal/ports"
	"github.com/elasticps/elasticps/internal/stats"
)

// Config is one run of the bench.
type Config struct {
	Kills    int           // SIGKILLs measured (failover time)
	Sizes    []int         // push bytes per operation (throughput)
	Duration time.Duration // measuring time per throughput cell
	Depth    int           // pushes in flight in throughput cells
	Seed     uint64        // chooses the victims
	JSON     bool
	// SyncWorkers > 0 adds synchronous cells (PS_SYNC_MODE=bsp, k=0 and
	// k=1) with that many workers at each size (sync.go).
	SyncWorkers int
}

// Validate names the flags of 'elasticps bench failover'.
func (c *Config) Validate() error {
	switch {
	case c.Kills < 0 || (c.Kills == 0 && len(c.Sizes) == 0):
		return errors.New("bench failover: --kills must be >= 0, and something must be measured (--kills or --sizes)")
	case len(c.Sizes) > 0 && c.Duration <= 0:
		return errors.New("bench failover: --duration must be positive")
	case c.Depth < 1:
		return errors.New("bench failover: --depth must be >= 1")
	case c.SyncWorkers < 0:
		return errors.New("bench failover: --sync-workers must be >= 0 (0: no synchronous cells)")
	}
	return nil
}

// Result is what Run measures.
type Result struct {
	Kills       int          `json:"kills"`
	FailoverMS  []float64    `json:"failover_ms,omitempty"` // each kill's, in order
	P50MS       float64      `json:"failover_p50_ms,omitempty"`
	P99MS       float64      `json:"failover_p99_ms,omitempty"`
	MaxMS       float64      `json:"failover_max_ms,omitempty"`
	Stages      []Stage      `json:"stages,omitempty"`      // where the failover time goes
	ByGossip    int          `json:"by_gossip,omitempty"`   // kills memberlist declared (not the heartbeat timeout)
	ByLifeline  int          `json:"by_lifeline,omitempty"` // of those, found through the scheduler's lifeline
	Throughput  []Throughput `json:"throughput,omitempty"`
	Servers     int          `json:"servers"`
	Heartbeat   string       `json:"heartbeat"`
	GossipPorts bool         `json:"memberlist"`
}

// Throughput is one cell: replicas k at one push size.
type Throughput struct {
	Mode     string  `json:"mode"`    // asp, or bsp for the synchronous cells
	Workers  int     `json:"workers"` // workers of the job
	Replicas int     `json:"replicas"`
	Size     int     `json:"size"`
	MBps     float64 `json:"goodput_mbps"`
	VsK0     float64 `json:"vs_k0"`
}

const servers = 3

// Run measures o on local jobs of this executable and writes the table or
// JSON to out; progress lines go to stderr.
func Run(ctx context.Context, o Config, out io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this executable to start the bench's nodes: %w", err)
	}
	res := Result{Kills: o.Kills, Servers: servers, Heartbeat: "1 s / 2 s", GossipPorts: true}
	prog := cli.NewProgress(os.Stderr)
	if o.Kills > 0 {
		kills, err := measureFailovers(ctx, exe, o, prog)
		if err != nil {
			return err
		}
		var ms []float64
		for _, k := range kills {
			ms = append(ms, float64(k.acked.Sub(k.at))/1e6)
			if k.byGossip {
				res.ByGossip++
			}
			if k.byLifeline {
				res.ByLifeline++
			}
		}
		res.FailoverMS, res.Stages = ms, summarize(kills)
		sorted := slices.Sorted(slices.Values(ms))
		res.P50MS, res.P99MS = stats.Quantile(sorted, 0.5), stats.Quantile(sorted, 0.99)
		res.MaxMS = sorted[len(sorted)-1]
	}
	for _, size := range o.Sizes {
		var k0 float64
		for k := range 3 {
			prog.Finished(fmt.Sprintf("throughput: k=%d, %s pushes, %v ...", k, sizeLabel(size), o.Duration))
			mbps, err := measureThroughput(ctx, exe, o, k, size)
			if err != nil {
				return fmt.Errorf("bench failover: throughput k=%d size %d: %w", k, size, err)
			}
			if k == 0 {
				k0 = mbps
			}
			res.Throughput = append(res.Throughput, Throughput{Mode: "asp", Workers: 1, Replicas: k, Size: size, MBps: mbps, VsK0: mbps / k0})
		}
		if o.SyncWorkers > 0 {
			cells, err := syncCells(ctx, exe, o, size, prog)
			if err != nil {
				return err
			}
			res.Throughput = append(res.Throughput, cells...)
		}
	}
	prog.Done()
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	printTable(out, res, o)
	return nil
}

func printTable(w io.Writer, r Result, o Config) {
	fmt.Fprintf(w, "elasticps bench failover: %d servers, PS_ELASTIC=1, heartbeats %s, memberlist on\n\n", r.Servers, r.Heartbeat)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(r.FailoverMS) > 0 {
		fmt.Fprintf(tw, "failover (SIGKILL to first acknowledged push), k=1\tkills\tp50 ms\tp99 ms\tmax ms\t\n")
		fmt.Fprintf(tw, "\t%d\t%s\t%s\t%s\t\n\n", len(r.FailoverMS), cli.FormatNum(r.P50MS), cli.FormatNum(r.P99MS), cli.FormatNum(r.MaxMS))
	}
	if len(r.Stages) > 0 {
		fmt.Fprintf(tw, "stages (deaths declared by memberlist: %d of %d, %d through a lifeline)\tstage\tp50 ms\tp99 ms\tmax ms\t\n", r.ByGossip, len(r.FailoverMS), r.ByLifeline)
		for _, st := range r.Stages {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", st.What, st.Name, cli.FormatNum(st.P50MS), cli.FormatNum(st.P99MS), cli.FormatNum(st.MaxMS))
		}
		fmt.Fprintln(tw)
	}
	if len(r.Throughput) > 0 {
		fmt.Fprintf(tw, "push throughput (1 worker, depth %d, %v per cell)\tsize\tk\tMB/s\tvs k=0\t\n", o.Depth, o.Duration)
		for _, t := range r.Throughput {
			if t.Mode != "bsp" {
				fmt.Fprintf(tw, "\t%s\t%d\t%s\t%s\t\n", sizeLabel(t.Size), t.Replicas, cli.FormatNum(t.MBps), cli.FormatNum(t.VsK0))
			}
		}
		printSyncCells(tw, r, o)
	}
	_ = tw.Flush()
}

// node is one process of a bench job.
type node struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
}

func (n *node) output() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.out.String()
}

// job is a local job's processes and environment.
type job struct {
	exe   string
	env   []string
	nodes []*node
	lines chan string // the worker's result lines
}

func newJob(exe string, replicas int) (*job, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	env := []string{fmt.Sprintf("DMLC_NUM_SERVER=%d", servers), "DMLC_NUM_WORKER=1", "DMLC_PS_ROOT_URI=127.0.0.1",
		fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", port), "DMLC_NODE_HOST=127.0.0.1", "PS_ELASTIC=1",
		fmt.Sprintf("PS_REPLICAS=%d", replicas), "PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=2",
		"PS_CTL_ADDR=127.0.0.1:0", "PS_VERBOSE=1"}
	return &job{exe: exe, env: env, lines: make(chan string, 1024)}, nil
}

// freePort is a port with the two above it free too (memberlist's
// default is the root port + 2), below the kernel's ephemeral range: a
// server's bind(0) or a connection's source port cannot take it between
// the pick and the scheduler's bind.
func freePort() (int, error) {
	if port := ports.Free(3); port != 0 {
		return port, nil
	}
	return 0, errors.New("no free port for the bench's scheduler")
}

func (j *job) start(name string, extra []string, args ...string) (*node, error) {
	n := &node{name: name, cmd: exec.Command(j.exe, args...), done: make(chan struct{})}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DMLC_") && !strings.HasPrefix(kv, "PS_") {
			env = append(env, kv)
		}
	}
	n.cmd.Env = slices.Concat(env, j.env, extra)
	r, w := io.Pipe()
	n.cmd.Stdout, n.cmd.Stderr = w, w
	if err := n.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "ELASTICPS_FAILOVER_") {
				j.lines <- line
			}
			n.mu.Lock()
			n.out.WriteString(line + "\n")
			n.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	go func() { _ = n.cmd.Wait(); w.Close(); close(n.done) }()
	j.nodes = append(j.nodes, n)
	return n, nil
}

// saveLogs writes every node's output to a new directory and returns it.
func (j *job) saveLogs() string {
	dir, err := os.MkdirTemp("", "elasticps-failover-logs")
	if err != nil {
		return "(none: " + err.Error() + ")"
	}
	for _, n := range j.nodes {
		_ = os.WriteFile(filepath.Join(dir, n.name+".log"), []byte(n.output()), 0o644)
	}
	return dir
}

// stop kills whatever still runs.
func (j *job) stop() {
	for _, n := range j.nodes {
		_ = n.cmd.Process.Kill()
		<-n.done
	}
}

// waitFor polls until cond holds, for at most d.
func waitFor(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench failover: %s did not happen within %v", what, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// line waits for the worker's next line with tag.
func (j *job) line(ctx context.Context, tag string, d time.Duration) (string, error) {
	timeout := time.After(d)
	for {
		select {
		case l := <-j.lines:
			if strings.HasPrefix(l, tag) {
				return l[len(tag):], nil
			}
		case <-timeout:
			return "", fmt.Errorf("bench failover: the worker printed no %q within %v", strings.TrimSpace(tag), d)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// startJob starts a scheduler, the servers and one worker running p, and
// returns once the worker pushes.
func startJob(ctx context.Context, exe string, replicas int, p plan) (*job, *node, []*node, error) {
	j, err := newJob(exe, replicas)
	if err != nil {
		return nil, nil, nil, err
	}
	planJSON, _ := json.Marshal(p)
	sched, err := j.start("scheduler", []string{"DMLC_ROLE=scheduler"}, "scheduler")
	var srvs []*node
	for i := 0; err == nil && i < servers; i++ {
		var s *node
		s, err = j.start(fmt.Sprintf("server%d", i), []string{"DMLC_ROLE=server"}, "server")
		srvs = append(srvs, s)
	}
	if err == nil {
		_, err = j.start("worker", []string{"DMLC_ROLE=worker", planEnv + "=" + string(planJSON)}, "bench", NodeArg)
	}
	if err == nil {
		_, err = j.line(ctx, readyTag, time.Minute)
	}
	if err != nil {
		logs := j.saveLogs()
		j.stop()
		return nil, nil, nil, fmt.Errorf("%w; scheduler's last lines:\n%s\nthe nodes' logs are in %s", err, cli.LastLines(sched.output(), 10), logs)
	}
	return j, sched, srvs, nil
}

func measureThroughput(ctx context.Context, exe string, o Config, k, size int) (float64, error) {
	j, _, _, err := startJob(ctx, exe, k, plan{Size: size, Depth: o.Depth, Duration: o.Duration})
	if err != nil {
		return 0, err
	}
	defer j.stop()
	l, err := j.line(ctx, rateTag, o.Duration+time.Minute)
	if err != nil {
		return 0, fmt.Errorf("%w; the nodes' logs are in %s", err, j.saveLogs())
	}
	var r rate
	if err := json.Unmarshal([]byte(l), &r); err != nil || r.ElapsedNS <= 0 {
		return 0, fmt.Errorf("unreadable worker result %q", l)
	}
	return float64(r.Bytes) / (float64(r.ElapsedNS) / 1e9) / 1e6, nil
}

var (
	routeRE  = regexp.MustCompile(`\[(\d+),(\d+)\)->(\d+)\[([\d ]*)\]`)
	readyRE  = regexp.MustCompile(`msg="node is ready" role=server node="server\[id=(\d+),`)
	seededRE = regexp.MustCompile(`elastic: backup seeded"`)
)

// copies are the (interval, backup) pairs of a coordinator log line.
func copies(line string) []string {
	var cs []string
	for _, m := range routeRE.FindAllStringSubmatch(line, -1) {
		for _, b := range strings.Fields(m[4]) {
			cs = append(cs, m[1]+"/"+b)
		}
	}
	return cs
}

// holders are the servers a coordinator log line's routes give a backup
// copy to. Only those are killed, so that every kill is a failover with a
// copy to re-seed.
func holders(line string) []int {
	var ids []int
	for _, m := range routeRE.FindAllStringSubmatch(line, -1) {
		for _, f := range strings.Fields(m[4]) {
			id, _ := strconv.Atoi(f)
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

func lastLine(s, text string) string {
	i := strings.LastIndex(s, text)
	if i < 0 {
		return ""
	}
	s = s[i:]
	if e := strings.IndexByte(s, '\n'); e >= 0 {
		s = s[:e]
	}
	return s
}

// measureFailovers kills a server holding copies o.Kills times, a standby
// started before each kill, and returns each kill's time to the worker's
// first acknowledged push after it.
func measureFailovers(ctx context.Context, exe string, o Config, prog *cli.Progress) ([]kill, error) {
	stop := filepath.Join(os.TempDir(), fmt.Sprintf("elasticps-failover-%d", os.Getpid()))
	_ = os.Remove(stop)
	defer os.Remove(stop)
	j, sched, srvs, err := startJob(ctx, exe, 1, plan{Size: 4 * servers, Depth: 1, StopFile: stop})
	if err != nil {
		return nil, fmt.Errorf("bench failover: %w", err)
	}
	defer j.stop()
	fail := func(err error) ([]kill, error) {
		return nil, fmt.Errorf("%w; the nodes' logs are in %s", err, j.saveLogs())
	}
	byID := map[int]*node{}
	nodeID := func(n *node) error {
		return waitFor(ctx, 30*time.Second, n.name+" ready", func() bool {
			m := readyRE.FindStringSubmatch(n.output())
			if m != nil {
				id, _ := strconv.Atoi(m[1])
				byID[id] = n
			}
			return m != nil
		})
	}
	if err := waitFor(ctx, 30*time.Second, "the backups' placement", func() bool { return strings.Contains(sched.output(), "coord: backups placed") }); err != nil {
		return fail(err)
	}
	for _, s := range srvs {
		if err := nodeID(s); err != nil {
			return fail(err)
		}
	}
	seeded := func() int {
		n := 0
		for _, s := range byID {
			n += len(seededRE.FindAllStringIndex(s.output(), -1))
		}
		return n
	}
	// every first backup seeded
	if err := waitFor(ctx, 30*time.Second, "the first seeding", func() bool { return seeded() >= servers }); err != nil {
		return fail(err)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0))
	routes := lastLine(sched.output(), "coord: backups placed")
	var kills []kill
	for k := range o.Kills {
		sb, err := j.start(fmt.Sprintf("standby%d", k), []string{"DMLC_ROLE=server", "PS_STANDBY=1"}, "server")
		if err != nil {
			return fail(err)
		}
		if err := nodeID(sb); err != nil {
			return fail(err)
		}
		hs := holders(routes)
		if len(hs) == 0 {
			return fail(fmt.Errorf("bench failover: no routes in %q", routes))
		}
		victim := byID[hs[rng.IntN(len(hs))]]
		if victim == nil {
			return fail(fmt.Errorf("bench failover: routes %q name a server this bench did not start", routes))
		}
		failovers, seededBefore := strings.Count(sched.output(), "coord: failover"), seeded()
		// drain the old gap lines: only one after the kill counts
		for len(j.lines) > 0 {
			<-j.lines
		}
		killed := time.Now()
		if err := victim.cmd.Process.Kill(); err != nil {
			return fail(err)
		}
		<-victim.done
		kl := kill{at: killed}
		for kl.acked.IsZero() {
			l, err := j.line(ctx, gapTag, time.Minute)
			if err != nil {
				return fail(err)
			}
			var from, to int64
			if _, err := fmt.Sscanf(l, "%d %d", &from, &to); err == nil && to > killed.UnixNano() {
				kl.acked = time.Unix(0, to)
			}
		}
		took := kl.acked.Sub(killed)
		if err := waitFor(ctx, time.Minute, "the failover", func() bool { return strings.Count(sched.output(), "coord: failover") > failovers }); err != nil {
			return fail(err)
		}
		before := copies(routes)
		routes = lastLine(sched.output(), "coord: failover")
		fresh := 0
		for _, c := range copies(routes) {
			if !slices.Contains(before, c) {
				fresh++
			}
		}
		if !strings.Contains(routes, "lost=0 ") {
			return fail(fmt.Errorf("bench failover: kill %d lost an interval: %s", k+1, routes))
		}
		// back to k=1 copies: the standby (and any promoted primary's new
		// backups) seeded; at least one seeding per failover
		if err := waitFor(ctx, time.Minute, "the re-replication", func() bool { return seeded() >= seededBefore+fresh }); err != nil {
			return fail(err)
		}
		victimID := idOf(byID, victim)
		delete(byID, victimID)
		var outs []string
		for _, s := range byID {
			outs = append(outs, s.output())
		}
		readKill(&kl, victimID, sched.output(), outs)
		kills = append(kills, kl)
		prog.Finished(fmt.Sprintf("failover %d/%d: server %s killed, first acknowledged push after %s ms (%s)", k+1, o.Kills, victim.name, cli.FormatNum(float64(took)/1e6), kl.describe()))
	}
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		return nil, err
	}
	return kills, nil
}

func idOf(m map[int]*node, n *node) int {
	for id, x := range m {
		if x == n {
			return id
		}
	}
	return -1
}

// sizeLabel writes n bytes as --sizes takes them (1MB = 2^20 bytes).
func sizeLabel(n int) string {
	if n%(1<<20) == 0 {
		return strconv.Itoa(n>>20) + "MB"
	}
	return strconv.Itoa(n) + "B"
}
