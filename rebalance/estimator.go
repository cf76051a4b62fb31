package rebalance

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Sample is what one server handled in one measurement window.
type Sample struct {
	// At is the end of the window (an input: the Estimator reads no clock).
	At time.Time
	// Bytes is the payload handled: pushed values received plus pulled
	// values sent.
	Bytes float64
	// Requests is the number of push and pull requests handled.
	Requests float64
	// Busy is the time spent handling them (the sum of per-request handling
	// times, not the window length: capacity is the rate while busy, so an
	// idle server is not mistaken for a slow one).
	Busy time.Duration
}

// EstimatorConfig tunes an Estimator.
type EstimatorConfig struct {
	// HalfLife: a sample's weight halves every HalfLife of later samples'
	// time. Short follows a straggler sooner; long averages out noise.
	// > 0. Default 1 minute.
	HalfLife time.Duration
	// MinBusy: samples with less busy time are ignored; the rate of a
	// nearly idle window is mostly timer noise. >= 0. Default 5 ms.
	MinBusy time.Duration
}

// DefaultEstimatorConfig returns the suggested values.
func DefaultEstimatorConfig() EstimatorConfig {
	return EstimatorConfig{HalfLife: time.Minute, MinBusy: 5 * time.Millisecond}
}

func (c EstimatorConfig) validate() error {
	var errs []error
	if c.HalfLife <= 0 {
		errs = append(errs, fmt.Errorf("rebalance: HalfLife %v not > 0", c.HalfLife))
	}
	if c.MinBusy < 0 {
		errs = append(errs, fmt.Errorf("rebalance: MinBusy %v < 0", c.MinBusy))
	}
	return errors.Join(errs...)
}

// Estimator tracks one server's Capacity from measured samples, weighting
// each by 2^(-age/HalfLife) so that the estimate follows a server that
// slows down or recovers. It is pure: samples and their times are inputs.
// The zero value is not usable; call NewEstimator.
type Estimator struct {
	cfg     EstimatorConfig
	bytes   moments
	reqs    moments
	samples int
	last    time.Time
}

// moments are exponentially weighted sums of a rate: Σw, Σw·x, Σw·x², Σw².
type moments struct{ w, x, xx, ww float64 }

func (m *moments) decay(f float64) {
	m.w *= f
	m.x *= f
	m.xx *= f
	m.ww *= f * f
}

func (m *moments) add(x float64) {
	m.w++
	m.x += x
	m.xx += x * x
	m.ww++
}

// estimate is the weighted mean and its standard error. The variance uses
// the effective sample size n = (Σw)²/Σw² (Bessel-corrected), so old
// samples count less in the certainty too. With n < 2 there is no spread
// to measure: Std = Mean, which any sane MaxRelStd treats as uncertain.
func (m *moments) estimate() (mean, std float64) {
	if m.w <= 0 {
		return 0, 0
	}
	mean = m.x / m.w
	n := m.w * m.w / m.ww
	if n < 2-1e-9 {
		return mean, mean
	}
	variance := max(m.xx/m.w-mean*mean, 0) * n / (n - 1)
	return mean, math.Sqrt(variance / n)
}

// NewEstimator returns an Estimator with no samples, or cfg's errors.
func NewEstimator(cfg EstimatorConfig) (*Estimator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Estimator{cfg: cfg}, nil
}

// Add folds in a sample and reports whether it was used: samples with less
// than MinBusy busy time, or with negative or non-finite values, are not.
// A sample older than the last one is taken as simultaneous with it
// (weights never grow with age).
func (e *Estimator) Add(s Sample) bool {
	if s.Busy < e.cfg.MinBusy || s.Busy <= 0 || !(s.Bytes >= 0) || !(s.Requests >= 0) ||
		math.IsInf(s.Bytes, 0) || math.IsInf(s.Requests, 0) {
		return false
	}
	if e.samples > 0 && s.At.After(e.last) {
		f := math.Exp2(-float64(s.At.Sub(e.last)) / float64(e.cfg.HalfLife))
		e.bytes.decay(f)
		e.reqs.decay(f)
	}
	if e.samples == 0 || s.At.After(e.last) {
		e.last = s.At
	}
	busy := s.Busy.Seconds()
	e.bytes.add(s.Bytes / busy)
	e.reqs.add(s.Requests / busy)
	e.samples++
	return true
}

// Capacity returns the current estimate (zero Estimates before any sample).
func (e *Estimator) Capacity() Capacity {
	if e.samples == 0 {
		return Capacity{}
	}
	mk := func(m *moments) Estimate {
		mean, std := m.estimate()
		return Estimate{Mean: mean, Std: std, Samples: e.samples, Updated: e.last}
	}
	return Capacity{Bytes: mk(&e.bytes), Requests: mk(&e.reqs)}
}
