// Package syncctl is a server's synchronization controller: for each key
// the server holds, it decides when a worker's push is applied and when its
// pull is answered, in one of four modes.
//
// It is IO-free, like package scheduler: requests and membership changes
// go in (Admit, Join, Leave), decisions come out (run now, or parked, and
// the IDs of parked requests that may run now). It has no clock, no sockets
// and no goroutines; its only randomness is Config.Rand. The caller (kv's
// sync gate) parks and runs the requests it is told to; every parked
// request is handed back exactly once: released, on Leave of its worker, by
// Export of its keys, or at Close.
//
// A worker's clock for a key is the number of pushes of that key it made,
// or the iteration it states (Request.Iteration), so an unchanged
// application gets synchronization from the server alone. t_min is the
// least clock of the key over the worker set (the joined nodes; a node
// none of whose customers touched the key yet counts at the t_min it joined
// at, so a late joiner never drags t_min back). A pull is for the
// iteration of its worker's clock; its gap is that minus t_min.
//
//   - ASP: everything runs at once (ps-lite's behaviour).
//   - BSP: a pull runs when its gap is <= 0, that is once every worker
//     pushed its round. A push of round i waits while another worker that
//     pushed round i-1 has not pulled it yet, so that pull sees exactly
//     round i-1; a released push runs before the pulls that depend on it.
//   - SSP(s): a pull runs when its gap is <= s. Pushes never wait.
//   - Fluent(s, p), FluentPS: pushes never wait; a pull runs unless its gap
//     is >= s and its worker is the fastest on the key, and then it is held
//     with probability p (constant, or 1/(1+e^(s-gap)) with Sigmoid). A
//     held pull is answered at the key's next t_min advance, whatever its
//     gap is then, together with every other pull held on that key; it is
//     never looked at otherwise. Staleness must be >= 1.
//
// A request with several keys runs when every key allows it. Under Fluent
// a pull request meets one pause decision (a server's pull of its shard,
// as in FluentPS), taken at its key with the largest gap among those where
// the worker is the fastest; that key's next t_min advance releases it.
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
