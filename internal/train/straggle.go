package train

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Straggle is FluentPS's straggler injection: after each iteration, the
// workers whose rank is a multiple of Every sleep a Gaussian N(Mean, SD)
// (clipped at zero).
type Straggle struct {
	Every  int     `json:"every"` // 0: no injection
	MeanMS float64 `json:"mean_ms"`
	SDMS   float64 `json:"sd_ms"`
}

// NewStraggle checks and builds the injection of --straggle-every d,
// --straggle-mean and --straggle-sd (milliseconds).
func NewStraggle(every int, meanMS, sdMS float64) (Straggle, error) {
	switch {
	case every < 0:
		return Straggle{}, fmt.Errorf("--straggle-every %d: want 0 (none) or d >= 1 (ranks with rank %% d == 0 sleep)", every)
	case meanMS < 0 || sdMS < 0:
		return Straggle{}, fmt.Errorf("--straggle-mean %g and --straggle-sd %g: want milliseconds >= 0", meanMS, sdMS)
	case every > 0 && meanMS == 0 && sdMS == 0:
		return Straggle{}, fmt.Errorf("--straggle-every %d without --straggle-mean: give the sleep's mean (ms)", every)
	}
	return Straggle{Every: every, MeanMS: meanMS, SDMS: sdMS}, nil
}

// Applies tells whether worker rank sleeps after its iterations.
func (s Straggle) Applies(rank int) bool { return s.Every > 0 && rank%s.Every == 0 }

// Delay draws one sleep for worker rank (zero for the others).
func (s Straggle) Delay(rank int, r *rand.Rand) time.Duration {
	if !s.Applies(rank) {
		return 0
	}
	ms := s.MeanMS + r.NormFloat64()*s.SDMS
	return max(0, time.Duration(ms*float64(time.Millisecond)))
}

// The CPU straggler is a cgroup v1 cpu controller group with a CFS quota:
// the slow worker process moves itself in, and the kernel gives it Share
// of one CPU.
const (
	cgroupCPURoot = "/sys/fs/cgroup/cpu"
	cfsPeriodUS   = 100000
)

// CPUGroup is a child cgroup of the cpu controller with a quota.
type CPUGroup struct {
	Dir   string  `json:"dir"`
	Share float64 `json:"share"` // of one CPU
}

// NewCPUGroup creates a cgroup under root (cgroupCPURoot when "") that
// limits its processes to share of one CPU, for the flag that asked for
// it (--cpu-straggler, --slow-server). It needs root and the cgroup v1 cpu
// controller; the error says which is missing.
func NewCPUGroup(root string, share float64, flag string) (*CPUGroup, error) {
	if !(share > 0 && share <= 1) {
		return nil, fmt.Errorf("%s: CPU share %g: want a fraction of one CPU in (0, 1]", flag, share)
	}
	if root == "" {
		root = cgroupCPURoot
	}
	if _, err := os.Stat(filepath.Join(root, "cpu.cfs_quota_us")); err != nil {
		return nil, fmt.Errorf("%s: no cgroup v1 cpu controller at %s (%v): mount it (mount -t cgroup -o cpu cgroup %s) or run without %s", flag, root, err, root, flag)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%s: creating a cgroup needs root: run as root or without %s", flag, flag)
	}
	dir := filepath.Join(root, fmt.Sprintf("elasticps-train-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	g := &CPUGroup{Dir: dir, Share: share}
	quota := max(1000, int(share*cfsPeriodUS)) // the kernel's minimum is 1 ms
	if err := g.write("cpu.cfs_period_us", strconv.Itoa(cfsPeriodUS)); err != nil {
		_ = g.Remove()
		return nil, err
	}
	if err := g.write("cpu.cfs_quota_us", strconv.Itoa(quota)); err != nil {
		_ = g.Remove()
		return nil, err
	}
	return g, nil
}

func (g *CPUGroup) write(file, v string) error {
	if err := os.WriteFile(filepath.Join(g.Dir, file), []byte(v), 0o644); err != nil {
		return fmt.Errorf("CPU straggler: %w", err)
	}
	return nil
}

// Join moves process pid into the group.
func (g *CPUGroup) Join(pid int) error { return g.write("cgroup.procs", strconv.Itoa(pid)) }

// Procs lists the processes in the group.
func (g *CPUGroup) Procs() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(g.Dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// Remove deletes the group; processes still in it go back to the root
// group first (a cgroup with members cannot be removed).
func (g *CPUGroup) Remove() error {
	if pids, err := g.Procs(); err == nil {
		for _, p := range pids {
			_ = os.WriteFile(filepath.Join(filepath.Dir(g.Dir), "cgroup.procs"), []byte(strconv.Itoa(p)), 0o644)
		}
	}
	if err := os.Remove(g.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("CPU straggler: removing %s: %w", g.Dir, err)
	}
	return nil
}
