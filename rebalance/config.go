package rebalance

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config tunes a Planner. A step is one call of Planner.Step, that is one
// measurement window. Start from DefaultConfig and change what differs.
type Config struct {
	// MigrationBudgetBytes caps the sum of Block.Bytes over the moves of one
	// plan. Migration shares the links with training traffic, so a larger
	// budget converges in fewer plans but makes the cut-over iteration
	// slower. A block larger than the budget never moves; keep it above the
	// largest block. 0 = no cap. Default 256 MiB (two and a half ResNet-50s).
	MigrationBudgetBytes int64
	// MaxMovesPerPlan caps the moves of one plan: each costs a routing entry
	// and a transfer at the cut-over. 0 = no cap. Default 64.
	MaxMovesPerPlan int
	// Hysteresis is the minimum predicted improvement of the slowest
	// server's utilisation, as a fraction, for exploitation to act:
	// (before-after)/before > Hysteresis, judged on the plan without the
	// per-plan caps. Lower chases noise in the estimates; higher leaves more
	// imbalance. In [0, 1). Default 0.05.
	Hysteresis float64
	// Cooldown: for this many steps after a plan moves a block away from a
	// server, exploitation and exploration will not move it back there (a
	// Revert or a drain may). It stops flip-flopping when the estimates
	// lag the moves. Default 10.
	Cooldown int
	// ApplyTimeout is how many steps the planner waits for a plan's moves to
	// show in the inputs before it assumes the plan was dropped and plans
	// afresh. >= 1. Default 5.
	ApplyTimeout int
	// SettleSteps is how many steps after a probe is seen applied the
	// planner waits before judging it by IterationTime: the window in which
	// the cut-over happened mixes old and new. >= 0. Default 1.
	SettleSteps int
	// ExploreEvery is the minimum number of steps between probes, and the
	// warm-up before the first. 0 = never explore. Default 10.
	ExploreEvery int
	// ExploreFraction is the size of a probe as a fraction of the predicted
	// load of the server it takes from. Bigger probes give a clearer signal
	// and cost more when they are wrong. In (0, 1]. Default 0.1.
	ExploreFraction float64
	// MinSamples: an estimate from fewer measurements is uncertain and its
	// server worth a probe. Default 3.
	MinSamples int
	// MaxRelStd: an estimate whose Std/Mean exceeds this is uncertain.
	// > 0. Default 0.2.
	MaxRelStd float64
	// ReprobeAfter is how long after a probe (or after being seen slow) a
	// server may be probed again, and how old an estimate may get before it
	// counts as uncertain. It bounds how long a recovered straggler stays
	// unused. > 0. Default 5 minutes.
	ReprobeAfter time.Duration
	// SlowRatio: a server whose speed (its rates relative to the median
	// server's) is below this is recorded as slow, and re-probed every
	// ReprobeAfter until it is not. In (0, 1]. Default 0.75.
	SlowRatio float64
	// ScaleOutThreshold: ask for one more server when even the balanced
	// plan predicts the slowest server's utilisation above this. > 0.
	// Default 0.85 (queueing delay grows fast above it).
	ScaleOutThreshold float64
	// ScaleInThreshold: drain a server when every server's predicted and
	// measured utilisation is below this and the rest would stay below
	// ScaleOutThreshold·(1-Hysteresis). In [0, ScaleOutThreshold); 0 = never
	// scale in. Default 0.3.
	ScaleInThreshold float64
	// ScaleCooldown is the minimum number of steps between scale decisions,
	// the warm-up before the first, and how long a request stays pending
	// (not repeated) while the cluster has not changed. >= 1. Default 20.
	ScaleCooldown int
	// MinServers and MaxServers bound the number of non-draining servers
	// scale decisions aim for. MinServers >= 1; MaxServers 0 = no bound,
	// else >= MinServers. Defaults 1 and 0.
	MinServers, MaxServers int
	// BytesWeight and RequestsWeight split a server's busy time between the
	// bytes it moves and the requests it handles (see the package
	// documentation). >= 0, not both 0; validate scales them to sum 1.
	// Defaults 0.75 and 0.25 (our choice: summing large tensors dominates a
	// parameter server's time, per-message cost the rest).
	BytesWeight, RequestsWeight float64
}

// DefaultConfig returns the suggested values, each explained on its field.
func DefaultConfig() Config {
	return Config{
		MigrationBudgetBytes: 256 << 20,
		MaxMovesPerPlan:      64,
		Hysteresis:           0.05,
		Cooldown:             10,
		ApplyTimeout:         5,
		SettleSteps:          1,
		ExploreEvery:         10,
		ExploreFraction:      0.1,
		MinSamples:           3,
		MaxRelStd:            0.2,
		ReprobeAfter:         5 * time.Minute,
		SlowRatio:            0.75,
		ScaleOutThreshold:    0.85,
		ScaleInThreshold:     0.3,
		ScaleCooldown:        20,
		MinServers:           1,
		MaxServers:           0,
		BytesWeight:          0.75,
		RequestsWeight:       0.25,
	}
}

// validate rejects bad values and combinations and normalises the weights.
func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("rebalance: "+format, args...)) }
	if c.MigrationBudgetBytes < 0 {
		bad("MigrationBudgetBytes %d < 0", c.MigrationBudgetBytes)
	}
	if c.MaxMovesPerPlan < 0 {
		bad("MaxMovesPerPlan %d < 0", c.MaxMovesPerPlan)
	}
	if !(c.Hysteresis >= 0 && c.Hysteresis < 1) {
		bad("Hysteresis %v not in [0, 1)", c.Hysteresis)
	}
	if c.Cooldown < 0 {
		bad("Cooldown %d < 0", c.Cooldown)
	}
	if c.ApplyTimeout < 1 {
		bad("ApplyTimeout %d < 1", c.ApplyTimeout)
	}
	if c.SettleSteps < 0 {
		bad("SettleSteps %d < 0", c.SettleSteps)
	}
	if c.ExploreEvery < 0 {
		bad("ExploreEvery %d < 0", c.ExploreEvery)
	}
	if !(c.ExploreFraction > 0 && c.ExploreFraction <= 1) {
		bad("ExploreFraction %v not in (0, 1]", c.ExploreFraction)
	}
	if c.MinSamples < 0 {
		bad("MinSamples %d < 0", c.MinSamples)
	}
	if !(c.MaxRelStd > 0) || math.IsInf(c.MaxRelStd, 0) {
		bad("MaxRelStd %v not > 0", c.MaxRelStd)
	}
	if c.ReprobeAfter <= 0 {
		bad("ReprobeAfter %v not > 0", c.ReprobeAfter)
	}
	if !(c.SlowRatio > 0 && c.SlowRatio <= 1) {
		bad("SlowRatio %v not in (0, 1]", c.SlowRatio)
	}
	if !(c.ScaleOutThreshold > 0) || math.IsInf(c.ScaleOutThreshold, 0) {
		bad("ScaleOutThreshold %v not > 0", c.ScaleOutThreshold)
	}
	if !(c.ScaleInThreshold >= 0 && c.ScaleInThreshold < c.ScaleOutThreshold) {
		bad("ScaleInThreshold %v not in [0, ScaleOutThreshold %v)", c.ScaleInThreshold, c.ScaleOutThreshold)
	}
	if c.ScaleCooldown < 1 {
		bad("ScaleCooldown %d < 1", c.ScaleCooldown)
	}
	if c.MinServers < 1 {
		bad("MinServers %d < 1", c.MinServers)
	}
	if c.MaxServers != 0 && c.MaxServers < c.MinServers {
		bad("MaxServers %d < MinServers %d", c.MaxServers, c.MinServers)
	}
	if !(c.BytesWeight >= 0) || !(c.RequestsWeight >= 0) || !finite(c.BytesWeight) || !finite(c.RequestsWeight) ||
		c.BytesWeight+c.RequestsWeight == 0 {
		bad("BytesWeight %v, RequestsWeight %v: want >= 0 and not both 0", c.BytesWeight, c.RequestsWeight)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	c.BytesWeight, c.RequestsWeight = normWeights(c.BytesWeight, c.RequestsWeight)
	return nil
}

// normWeights scales the weights to sum 1, falling back to the defaults for
// unusable values (Predict takes a Config that was never validated).
func normWeights(wb, wr float64) (float64, float64) {
	if !(wb >= 0) || !(wr >= 0) || !finite(wb) || !finite(wr) || wb+wr == 0 {
		d := DefaultConfig()
		wb, wr = d.BytesWeight, d.RequestsWeight
	}
	s := wb + wr
	return wb / s, wr / s
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
