package rebalance

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// server is a Server with the rates the model uses.
type server struct {
	Server
	// ghost: not in the input but owning blocks (a dead or removed node);
	// treated as draining so its blocks find a home.
	ghost bool
	// rb, rr are the rates used for prediction: the estimate's mean if
	// trusted, else the median of the trusted ones.
	rb, rr float64
	// speed is the server's rates relative to the median server, weighted
	// like the load (1 = median).
	speed float64
}

// active reports whether the server may receive blocks.
func (s *server) active() bool { return !s.Draining && !s.ghost }

// view is the inputs of one Step in canonical order (servers and blocks by
// id), so nothing depends on the order of the caller's slices.
type view struct {
	wb, wr float64
	// minSamples: estimates from fewer samples are not trusted (Config.MinSamples).
	minSamples int
	servers    []server
	index      map[int32]int // id -> position in servers
	blocks     []Block
	owner      []int // position in servers of each block's owner
	// known: at least one server has a trusted rate, so T is a real
	// utilisation and scale thresholds mean something.
	known bool
}

// checkInput rejects inputs that make a plan ambiguous.
func checkInput(blocks []Block, servers []Server) error {
	ids := make(map[int32]bool, len(servers))
	for _, s := range servers {
		if ids[s.ID] {
			return fmt.Errorf("rebalance: server %d listed twice", s.ID)
		}
		ids[s.ID] = true
	}
	bids := make(map[uint64]bool, len(blocks))
	for _, b := range blocks {
		if bids[b.ID] {
			return fmt.Errorf("rebalance: block %d listed twice", b.ID)
		}
		bids[b.ID] = true
		if b.Bytes < 0 {
			return fmt.Errorf("rebalance: block %d has %d bytes", b.ID, b.Bytes)
		}
		if !(b.Requests >= 0) || math.IsInf(float64(b.Bytes)*b.Requests, 0) {
			return fmt.Errorf("rebalance: block %d has request rate %v", b.ID, b.Requests)
		}
	}
	return nil
}

// newView builds the canonical view. Inputs must have passed checkInput
// (Predict tolerates duplicates: the first wins).
func newView(wb, wr float64, minSamples int, blocks []Block, servers []Server) *view {
	v := &view{wb: wb, wr: wr, minSamples: minSamples, index: make(map[int32]int, len(servers))}
	for _, s := range servers {
		if _, dup := v.index[s.ID]; dup {
			continue
		}
		v.index[s.ID] = -1
		v.servers = append(v.servers, server{Server: s})
	}
	for _, b := range blocks {
		if _, ok := v.index[b.Server]; !ok {
			v.index[b.Server] = -1
			v.servers = append(v.servers, server{Server: Server{ID: b.Server, Draining: true}, ghost: true})
		}
	}
	slices.SortFunc(v.servers, func(a, b server) int { return cmp.Compare(a.ID, b.ID) })
	for i := range v.servers {
		v.index[v.servers[i].ID] = i
	}
	v.blocks = slices.Clone(blocks)
	slices.SortStableFunc(v.blocks, func(a, b Block) int { return cmp.Compare(a.ID, b.ID) })
	v.owner = make([]int, len(v.blocks))
	for i, b := range v.blocks {
		v.owner[i] = v.index[b.Server]
	}
	v.rates()
	return v
}

// rates fills rb, rr and speed. Unknown rates, and rates from fewer than
// minSamples samples, take the median of the known ones: a new server is
// assumed typical until measured, which is what lets a Standby server
// attract load, and one noisy first sample does not move blocks (it makes
// the server a candidate for exploration instead). With nothing known every
// rate is 1 and the planner balances raw load.
func (v *view) rates() {
	var kb, kr []float64
	for _, s := range v.servers {
		if s.ghost {
			continue
		}
		if v.trusted(s.Capacity.Bytes) {
			kb = append(kb, s.Capacity.Bytes.Mean)
		}
		if v.trusted(s.Capacity.Requests) {
			kr = append(kr, s.Capacity.Requests.Mean)
		}
	}
	v.known = len(kb)+len(kr) > 0
	mb, mr := median(kb), median(kr)
	for i := range v.servers {
		s := &v.servers[i]
		s.rb, s.rr = mb, mr
		if v.trusted(s.Capacity.Bytes) {
			s.rb = s.Capacity.Bytes.Mean
		}
		if v.trusted(s.Capacity.Requests) {
			s.rr = s.Capacity.Requests.Mean
		}
		s.speed = v.wb*s.rb/mb + v.wr*s.rr/mr
	}
}

// trusted reports whether an estimate is used as it is.
func (v *view) trusted(e Estimate) bool { return e.known() && e.Samples >= v.minSamples }

// median of xs, 1 when empty.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 1
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// find returns the position of block id.
func (v *view) find(id uint64) (int, bool) {
	return slices.BinarySearchFunc(v.blocks, id, func(b Block, id uint64) int { return cmp.Compare(b.ID, id) })
}

// cost is the predicted utilisation block b adds to server i.
func (v *view) cost(b, i int) float64 {
	blk := &v.blocks[b]
	s := &v.servers[i]
	return v.wb*float64(blk.Bytes)*blk.Requests/s.rb + v.wr*blk.Requests/s.rr
}

// times returns the predicted utilisation of every server under owner.
func (v *view) times(owner []int) []float64 {
	t := make([]float64, len(v.servers))
	for b, i := range owner {
		t[i] += v.cost(b, i)
	}
	return t
}

// maxActive is the highest time among active servers (0 if none).
func (v *view) maxActive(t []float64) float64 {
	m := 0.0
	for i := range v.servers {
		if v.servers[i].active() && t[i] > m {
			m = t[i]
		}
	}
	return m
}

// Predict returns the predicted utilisation (T, see the package
// documentation) of every listed server under the given assignment, using
// cfg's weights and MinSamples. Blocks owned by servers not listed are left
// out. Inputs are as for Step; invalid ones give meaningless numbers. It is
// the planner's own model, exposed for the coordinator, plots and
// benchmarks.
func Predict(blocks []Block, servers []Server, cfg Config) map[int32]float64 {
	wb, wr := normWeights(cfg.BytesWeight, cfg.RequestsWeight)
	v := newView(wb, wr, cfg.MinSamples, blocks, servers)
	t := v.times(v.owner)
	out := make(map[int32]float64, len(servers))
	for i, s := range v.servers {
		if !s.ghost {
			out[s.ID] = t[i]
		}
	}
	return out
}

// Apply returns a copy of blocks with the plan's moves carried out. A move
// whose From is not the block's current owner is stale and skipped, as the
// coordinator must skip it.
func Apply(blocks []Block, p Plan) []Block {
	out := slices.Clone(blocks)
	pos := make(map[uint64]int, len(out))
	for i, b := range out {
		if _, dup := pos[b.ID]; !dup {
			pos[b.ID] = i
		}
	}
	for _, m := range p.Moves {
		if i, ok := pos[m.Block]; ok && out[i].Server == m.From {
			out[i].Server = m.To
		}
	}
	return out
}
