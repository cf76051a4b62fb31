// Package syncctl is a server's synchronization controller: for each key
// the server holds, it decides when a worker's push is applied and when its
// pull is answered, in one of four modes — ASP (never wait, ps-lite's
// behaviour), BSP, SSP with a staleness bound, and FluentPS (lazy pull
// execution with probabilistic pause).
//
// It is IO-free, like package scheduler: requests and membership changes
// go in, decisions come out. It has no clock, no sockets and no goroutines;
// its only randomness is Config.Rand. The caller (kv's sync gate) parks and
// re-admits the requests it is told to.
//
// A worker's iteration for a key is the number of pushes of that key it
// has made (or the iteration it states, Request.Iteration), so an unchanged
// application gets synchronization from the server alone.
package syncctl

import "fmt"

// Mode is a synchronization model.
type Mode uint8

const (
	ASP    Mode = iota // never wait
	BSP                // a pull for iteration t waits until every worker pushed t
	SSP                // a worker more than Staleness iterations ahead of the slowest waits
	Fluent             // FluentPS: only the fastest worker, at gap >= Staleness, with probability p
)

var modeNames = [...]string{ASP: "asp", BSP: "bsp", SSP: "ssp", Fluent: "fluent"}

func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", m)
}

// ParseMode reads a PS_SYNC_MODE value.
func ParseMode(s string) (Mode, error) {
	for m, n := range modeNames {
		if n == s {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("unknown sync mode %q: use asp, bsp, ssp or fluent", s)
}

// Config selects a mode and its parameters.
type Config struct {
	Mode Mode
	// Staleness is s: SSP's bound and FluentPS's pause threshold.
	Staleness int64
	// PauseProb is FluentPS's constant pause probability p in [0, 1]
	// (ignored when Sigmoid).
	PauseProb float64
	// Sigmoid makes FluentPS's p = 1/(1+e^(s-gap)).
	Sigmoid bool
	// Rand returns uniform numbers in [0, 1); FluentPS draws from it once
	// per pause decision. Required for Fluent.
	Rand func() float64
}

// Worker identifies one pushing party: a worker node's customer.
type Worker struct{ Node, Customer int32 }

// Request is one push or pull a server received, as far as
// synchronization is concerned.
type Request struct {
	ID         uint64 // the caller's handle, given back when a parked request may run
	Worker     Worker
	Push, Pull bool     // a push-pull is gated as a push
	Keys       []uint64 // ascending
	// Iteration is the iteration the worker states (message field 19);
	// 0 means: count it from the worker's pushes.
	Iteration int64
}

// Stats counts the controller's decisions.
type Stats struct {
	Requests      int64 // requests admitted
	DelayedPulls  int64 // pulls parked at least once
	DelayedPushes int64 // pushes parked (BSP only)
	Parked        int   // requests parked now
	Releases      int64 // release events (a t_min advance that let parked requests run)
	Pauses        int64 // FluentPS: pause decisions that held a pull
}
