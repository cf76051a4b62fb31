// Package rebalance is the PSLD planner: from measured per-server load and
// capacity estimates and the current block-to-server assignment it decides
// which parameter blocks move where, and when to add or drain a server.
//
// It does no IO and reads no clock. Time arrives as Observation.Now and
// every decision comes back as a Plan value, so the scheduler's coordinator
// and the tests drive it deterministically (the style of etcd's raft).
// There is no randomness: the same inputs and the same Planner state give
// the same Plan, whatever the order of the input slices.
//
// # Model
//
// A block is the unit that moves: a tensor, or a slice of a big tensor with
// its own key. It carries its size (Block.Bytes: what a migration ships and
// what each push or pull of it carries) and its measured request rate
// (Block.Requests, pushes plus pulls per second, over all workers).
//
// A server's capacity is its service rate while busy, in two dimensions:
// bytes/s and requests/s (Capacity), each a mean with an uncertainty
// (Estimate), usually maintained by an Estimator from measured handling
// time. The predicted utilisation of server s holding blocks B is
//
//	T(s) = Σ_{b∈B} BytesWeight·Bytes_b·Requests_b/BytesRate(s) + RequestsWeight·Requests_b/RequestRate(s)
//
// in seconds of work per second. The weights sum to 1, so when the rates
// were measured on the server's current load (Estimator: rate = handled /
// busy time) T(s) reproduces its measured busy fraction. They say how a
// change of load is valued: a tiny block costs little in bytes but a full
// request. T is also the predicted completion time of one iteration's work
// on s, relative to the others, and the slowest server (max T) is the
// straggler PSLD removes.
//
// # What Step decides, in order
//
//  1. While the previous plan is not yet reflected in the inputs (its blocks
//     still on their From server), nothing: one reconfiguration at a time.
//     After an Explore plan has taken effect and settled, keep it if the
//     measured iteration time improved, else Revert.
//  2. Drain: blocks on Draining servers (and on servers not in the input)
//     go, biggest first, to the server with the lowest predicted time.
//  3. Exploit: best-fit descending from the slowest server to the one
//     where the block ends lowest, acting only if the unlimited version of
//     the plan lowers the predicted maximum by more than Hysteresis; the
//     plan itself is cut to MaxMovesPerPlan and MigrationBudgetBytes.
//  4. Scale: ScaleOut when even the balanced plan leaves the slowest server
//     above ScaleOutThreshold; ScaleIn of the least useful server when every
//     server is below ScaleInThreshold and the others could absorb its load.
//  5. Explore: when nothing else is to be done, every ExploreEvery steps,
//     a small probe move towards a server whose estimate is uncertain or
//     that was slow ReprobeAfter ago.
//
// # Contract with the caller (the scheduler's coordinator)
//
// Call Step once per measurement window, at its end, with the current
// routing (every block with its owner), the servers' estimates and the job's
// iteration time measured over that window. Carry out the plan: Moves at a
// cut-over iteration (all of them, or none); ScaleOut by starting servers
// that join as Standby; ScaleIn by marking those servers Draining in the
// following inputs, and removing each once it holds no block. Apply gives
// the assignment after a plan.
package rebalance
