package rebalance

import (
	"fmt"
	"time"
)

// Block is one parameter block of the current assignment.
type Block struct {
	// ID names the block (a key, or a key-range id); unique in one Step.
	ID uint64
	// Bytes is the block's size: what a migration ships, and the payload of
	// each push or pull of it.
	Bytes int64
	// Requests is the measured rate of pushes plus pulls of this block, over
	// all workers, per second. A block with no measured requests carries no
	// predicted load: exploitation never moves it, draining still does.
	Requests float64
	// Server is the node id of the current owner.
	Server int32
	// Pinned blocks never move (not even to drain their server).
	Pinned bool
}

// Estimate is a measured rate: a mean with its uncertainty.
type Estimate struct {
	// Mean rate; <= 0, NaN or Inf means unknown. An unknown rate, or one
	// from fewer than Config.MinSamples samples, is replaced by the median
	// of the trusted ones.
	Mean float64
	// Std is the uncertainty of Mean (a standard error, same unit).
	Std float64
	// Samples is how many measurements went into Mean.
	Samples int
	// Updated is when the last measurement was taken; zero if never.
	Updated time.Time
}

// known reports whether the estimate holds a usable mean.
func (e Estimate) known() bool { return e.Samples > 0 && finite(e.Mean) && e.Mean > 0 }

// Capacity is a server's service rate while busy.
type Capacity struct {
	Bytes    Estimate // payload bytes handled per busy second
	Requests Estimate // requests handled per busy second
}

// Server is one server node as the planner sees it.
type Server struct {
	ID       int32
	Capacity Capacity
	// Standby: joined (scale-out) and holding nothing yet. It receives blocks
	// through exploitation like any server with no load; while one exists
	// the planner asks for no further scale-out.
	Standby bool
	// Draining: must be emptied (scale-in or operator request). It receives
	// nothing and its blocks leave first.
	Draining bool
	// Utilization is the measured busy fraction over the last window (0 if
	// unknown). It only vetoes a scale-in that the prediction would allow:
	// scale-in is the costly decision to get wrong.
	Utilization float64
}

// Observation is the job-level measurement of the last window.
type Observation struct {
	// Now is the end of the window (an input: the planner reads no clock).
	Now time.Time
	// IterationTime is the job's mean iteration time over the window; 0 if
	// unknown. Exploration keeps a probe only if it went down.
	IterationTime time.Duration
}

// Move sends one block from its current owner to another server.
type Move struct {
	Block    uint64
	From, To int32
}

// Kind says why a plan was made.
type Kind int

const (
	// None: nothing to do, or waiting for the previous plan to take effect.
	None Kind = iota
	// Exploit acts on the model: drain moves, balancing moves, scale
	// decisions.
	Exploit
	// Explore is a small probe move whose effect on the measured iteration
	// time decides whether it stays.
	Explore
	// Revert undoes a probe that did not improve the iteration time.
	Revert
)

// String names the kind, for logs.
func (k Kind) String() string {
	switch k {
	case None:
		return "none"
	case Exploit:
		return "exploit"
	case Explore:
		return "explore"
	case Revert:
		return "revert"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Plan is the outcome of one Step.
type Plan struct {
	Kind  Kind
	Moves []Move
	// ScaleOut is how many servers to add (0 or 1).
	ScaleOut int
	// ScaleIn lists servers to drain (mark Draining in later inputs).
	ScaleIn []int32
	// Reason says why, for logs and plots.
	Reason string
	// Before and After are the predicted utilisation of the slowest
	// non-draining server before and after Moves.
	Before, After float64
	// Err is set when the inputs were rejected (Kind is then None).
	Err error
}
