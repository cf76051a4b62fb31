package paramstore

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
)

// Aggregate is how the gradients of one key are combined before the
// optimizer sees them.
type Aggregate int

const (
	// Sum applies each gradient (or a round's sum) as it is.
	Sum Aggregate = iota
	// Mean divides each gradient (or a round's sum) by Config.Workers().
	Mean
)

var aggregateNames = []string{Sum: "sum", Mean: "mean"}

func (a Aggregate) String() string {
	if a >= 0 && int(a) < len(aggregateNames) {
		return aggregateNames[a]
	}
	return fmt.Sprintf("Aggregate(%d)", int(a))
}

// ParseAggregate reads a flag value: "sum" or "mean".
func ParseAggregate(s string) (Aggregate, error) {
	i, err := parseName(s, "aggregation", aggregateNames)
	return Aggregate(i), err
}

// Optimizer is the update a gradient makes to a key's value.
type Optimizer int

const (
	// None adds the gradient to the value element-wise (kv.DefaultHandler's
	// sum store), for every data type.
	None Optimizer = iota
	// SGD: w -= LR*g.
	SGD
	// Momentum (heavy ball): v = Momentum*v + g; w -= LR*v.
	Momentum
	// Adam (Kingma and Ba) with bias correction and a step count per key:
	// m = Beta1*m + (1-Beta1)*g; v = Beta2*v + (1-Beta2)*g*g;
	// w -= LR * (m/(1-Beta1^t)) / (sqrt(v/(1-Beta2^t)) + Epsilon).
	Adam
)

var optimizerNames = []string{None: "none", SGD: "sgd", Momentum: "momentum", Adam: "adam"}

func (o Optimizer) String() string {
	if o >= 0 && int(o) < len(optimizerNames) {
		return optimizerNames[o]
	}
	return fmt.Sprintf("Optimizer(%d)", int(o))
}

// ParseOptimizer reads a flag value: "none", "sgd", "momentum" or "adam".
func ParseOptimizer(s string) (Optimizer, error) {
	i, err := parseName(s, "optimizer", optimizerNames)
	return Optimizer(i), err
}

func parseName(s, what string, names []string) (int, error) {
	for i, n := range names {
		if strings.EqualFold(strings.TrimSpace(s), n) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("unknown %s %q: use one of %s", what, s, strings.Join(names, ", "))
}

// Config configures a Store. The zero Config is kv.DefaultHandler's sum
// store; DefaultConfig fills in the usual hyper-parameters.
type Config struct {
	// Aggregate: Sum (default) or Mean. Mean needs Workers.
	Aggregate Aggregate
	// Optimizer: None (default) keeps the sum store's behaviour.
	Optimizer Optimizer
	// LR is the learning rate of SGD, Momentum and Adam; > 0 (0.01 is a
	// usual start for SGD, 0.001 for Adam).
	LR float64
	// Momentum is mu of the Momentum optimizer, in [0, 1); 0.9 is usual.
	Momentum float64
	// Beta1 and Beta2 are Adam's decay rates of its first and second moment
	// estimates, each in [0, 1); 0.9 and 0.999 are usual.
	Beta1, Beta2 float64
	// Epsilon keeps Adam's step finite where the second moment is 0; > 0,
	// 1e-8 is usual.
	Epsilon float64
	// WeightDecay adds WeightDecay*w to every gradient before the update
	// (L2 regularisation, as MXNet's optimizers do); >= 0, and 0 with
	// Optimizer None.
	WeightDecay float64
	// Workers returns N, the number of workers, for Mean; it is called when
	// a gradient is applied, so it may follow the job's membership.
	Workers func() int
	// RoundSize, when set and > 0, makes a key's gradients accumulate until
	// RoundSize of them arrived; their sum is then applied once (MXNet's
	// dist_sync). 0 or nil applies each push at once (dist_async). It is
	// called on every gradient push, so it may follow the membership; a
	// round completes on the push that brings it to RoundSize() or beyond.
	RoundSize func() int
	// Logger receives what cannot be told to a worker (a response that
	// could not be sent); slog.Default() when nil.
	Logger *slog.Logger
}

// DefaultConfig is the sum store with the usual hyper-parameters in place,
// so that choosing an optimizer is one field: LR 0.01, Momentum 0.9, Beta1
// 0.9, Beta2 0.999, Epsilon 1e-8.
func DefaultConfig() Config {
	return Config{LR: 0.01, Momentum: 0.9, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8}
}

// Validate reports the first setting that cannot work, naming the field and
// the values allowed.
func (c Config) Validate() error {
	if c.Aggregate < Sum || c.Aggregate > Mean {
		return fmt.Errorf("paramstore: aggregation %v: use Sum or Mean", c.Aggregate)
	}
	if c.Optimizer < None || c.Optimizer > Adam {
		return fmt.Errorf("paramstore: optimizer %v: use None, SGD, Momentum or Adam", c.Optimizer)
	}
	if c.Aggregate == Mean && c.Workers == nil {
		return errors.New("paramstore: Mean aggregation needs Config.Workers (the number of workers to divide by)")
	}
	if !finite(c.WeightDecay) || c.WeightDecay < 0 {
		return fmt.Errorf("paramstore: weight decay %v: it must be >= 0", c.WeightDecay)
	}
	if c.Optimizer == None {
		if c.WeightDecay != 0 {
			return errors.New("paramstore: weight decay needs an optimizer (sgd, momentum or adam); optimizer none only sums")
		}
		return nil
	}
	if !finite(c.LR) || c.LR <= 0 {
		return fmt.Errorf("paramstore: learning rate %v for %s: it must be > 0 (0.01 is a usual start)", c.LR, c.Optimizer)
	}
	switch c.Optimizer {
	case Momentum:
		if !unitInterval(c.Momentum) {
			return fmt.Errorf("paramstore: momentum %v: it must be in [0, 1) (0.9 is usual)", c.Momentum)
		}
	case Adam:
		if !unitInterval(c.Beta1) {
			return fmt.Errorf("paramstore: Adam beta1 %v: it must be in [0, 1) (0.9 is usual)", c.Beta1)
		}
		if !unitInterval(c.Beta2) {
			return fmt.Errorf("paramstore: Adam beta2 %v: it must be in [0, 1) (0.999 is usual)", c.Beta2)
		}
		if !finite(c.Epsilon) || c.Epsilon <= 0 {
			return fmt.Errorf("paramstore: Adam epsilon %v: it must be > 0 (1e-8 is usual)", c.Epsilon)
		}
	}
	return nil
}

func finite(x float64) bool       { return !math.IsNaN(x) && !math.IsInf(x, 0) }
func unitInterval(x float64) bool { return finite(x) && x >= 0 && x < 1 }
