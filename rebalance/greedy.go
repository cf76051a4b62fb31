package rebalance

import (
	"cmp"
	"fmt"
	"slices"
)

// limits are the per-plan caps; 0 means none.
type limits struct {
	moves  int
	budget int64
}

// sim is a tentative assignment being built into a plan. Moves collapse: a
// block moved twice counts once, from its original owner to its final one,
// and a block moved back home costs nothing. So a plan's From is always the
// owner in the input, and the end state is what applying the plan gives.
type sim struct {
	v     *view
	owner []int
	on    [][]int // blocks on each server, by position
	t     []float64
	held  []int64 // bytes on each server, to spread blocks of equal cost
	order []int   // blocks in the order they first moved
	moved []bool
	// nMoves and bytes are the net moves and their bytes so far.
	nMoves int
	bytes  int64
	// back reports whether moving block b to server i would undo a recent
	// move (Config.Cooldown); nil allows every move.
	back func(b, i int) bool
}

func newSim(v *view, back func(b, i int) bool) *sim {
	s := &sim{
		v:     v,
		owner: slices.Clone(v.owner),
		on:    make([][]int, len(v.servers)),
		t:     v.times(v.owner),
		held:  make([]int64, len(v.servers)),
		moved: make([]bool, len(v.blocks)),
		back:  back,
	}
	for b, i := range s.owner {
		s.on[i] = append(s.on[i], b)
		s.held[i] += v.blocks[b].Bytes
	}
	return s
}

// affordable reports whether moving b once more fits the limits.
func (s *sim) affordable(b int, lim limits) bool {
	if s.owner[b] != s.v.owner[b] {
		return true // already in the plan: moving it again costs nothing
	}
	if lim.moves > 0 && s.nMoves+1 > lim.moves {
		return false
	}
	return lim.budget == 0 || s.bytes+s.v.blocks[b].Bytes <= lim.budget
}

func (s *sim) move(b, to int) {
	from, home := s.owner[b], s.v.owner[b]
	bytes := s.v.blocks[b].Bytes
	s.t[from] -= s.v.cost(b, from)
	s.t[to] += s.v.cost(b, to)
	s.held[from] -= bytes
	s.held[to] += bytes
	i := slices.Index(s.on[from], b)
	s.on[from] = slices.Delete(s.on[from], i, i+1)
	s.on[to] = append(s.on[to], b)
	s.owner[b] = to
	switch {
	case from == home:
		s.nMoves++
		s.bytes += bytes
	case to == home:
		s.nMoves--
		s.bytes -= bytes
	}
	if !s.moved[b] {
		s.moved[b] = true
		s.order = append(s.order, b)
	}
}

// moves lists the net moves in the order blocks first moved.
func (s *sim) moves() []Move {
	var ms []Move
	for _, b := range s.order {
		if s.owner[b] != s.v.owner[b] {
			ms = append(ms, Move{
				Block: s.v.blocks[b].ID,
				From:  s.v.servers[s.v.owner[b]].ID,
				To:    s.v.servers[s.owner[b]].ID,
			})
		}
	}
	return ms
}

// max is the predicted time of the slowest active server, recomputed from
// scratch so that rounding in the incremental sums never reaches a Plan.
func (s *sim) max() float64 { return s.v.maxActive(s.v.times(s.owner)) }

// target picks where block b goes: the active server other than skip where
// it ends with the lowest predicted time; ties go to the server holding
// fewer bytes (so blocks without load still spread), then the lower id.
// It returns -1 if none qualifies.
func (s *sim) target(b, skip int, cooldown bool) int {
	best := -1
	var bt float64
	for i := range s.v.servers {
		if i == skip || !s.v.servers[i].active() || (cooldown && s.back != nil && s.back(b, i)) {
			continue
		}
		ti := s.t[i] + s.v.cost(b, i)
		if best < 0 || ti < bt || (ti == bt && s.held[i] < s.held[best]) {
			best, bt = i, ti
		}
	}
	return best
}

// drain moves the movable blocks of draining servers, biggest first, each
// to the active server where it ends lowest (best-fit descending for scale
// in). It ignores Cooldown: a draining server must be emptied. It returns
// notes on blocks that could not leave.
func (s *sim) drain(lim limits) []string {
	var notes []string
	for d := range s.v.servers {
		if s.v.servers[d].active() || len(s.on[d]) == 0 {
			continue
		}
		blocks := slices.Clone(s.on[d])
		slices.SortFunc(blocks, func(a, b int) int {
			return cmp.Or(
				cmp.Compare(s.v.cost(b, d), s.v.cost(a, d)),
				cmp.Compare(s.v.blocks[b].Bytes, s.v.blocks[a].Bytes),
				cmp.Compare(s.v.blocks[a].ID, s.v.blocks[b].ID))
		})
		pinned, over := 0, 0
		for _, b := range blocks {
			switch {
			case s.v.blocks[b].Pinned:
				pinned++
				continue
			case !s.affordable(b, lim):
				over++
				continue
			}
			to := s.target(b, d, false)
			if to < 0 {
				return append(notes, "no server can receive blocks")
			}
			s.move(b, to)
		}
		if pinned > 0 {
			notes = append(notes, fmt.Sprintf("%d pinned blocks keep server %d from draining", pinned, s.v.servers[d].ID))
		}
		if over > 0 && s.nMoves == 0 {
			notes = append(notes, fmt.Sprintf("%d blocks of server %d exceed MigrationBudgetBytes", over, s.v.servers[d].ID))
		}
	}
	return notes
}

// balance is exploitation: best-fit descending from the slowest active
// server. Each round takes the server with the highest predicted time m,
// and tries its blocks in best-fit order (those whose cost fits the excess
// of m over the average, largest first, then the rest, smallest first); the
// first block whose move to its target leaves the target strictly below m's
// old time is moved. Every move so lowers the pair's maximum and never
// raises the overall one, and the sorted vector of times decreases, so the
// loop ends; the cap on rounds only bounds pathological inputs. It stops
// when no block of the slowest server can improve it.
func (s *sim) balance(lim limits) {
	var act []int
	for i := range s.v.servers {
		if s.v.servers[i].active() {
			act = append(act, i)
		}
	}
	if len(act) < 2 {
		return
	}
	for range 4*len(s.v.blocks) + 16 {
		m, sum := act[0], 0.0
		for _, i := range act {
			sum += s.t[i]
			if s.t[i] > s.t[m] {
				m = i
			}
		}
		tm := s.t[m]
		excess := tm - sum/float64(len(act))
		if tm <= 0 || excess <= 1e-12*tm {
			return
		}
		var fit, rest []int
		for _, b := range s.on[m] {
			c := s.v.cost(b, m)
			switch {
			case s.v.blocks[b].Pinned || c <= 0:
			case c <= excess:
				fit = append(fit, b)
			default:
				rest = append(rest, b)
			}
		}
		byCost := func(desc bool) func(a, b int) int {
			return func(a, b int) int {
				c := cmp.Compare(s.v.cost(a, m), s.v.cost(b, m))
				if desc {
					c = -c
				}
				return cmp.Or(c, cmp.Compare(s.v.blocks[a].ID, s.v.blocks[b].ID))
			}
		}
		slices.SortFunc(fit, byCost(true))
		slices.SortFunc(rest, byCost(false))
		done := true
		for _, b := range append(fit, rest...) {
			if !s.affordable(b, lim) {
				continue
			}
			to := s.target(b, m, true)
			if to >= 0 && s.t[to]+s.v.cost(b, to) < tm*(1-1e-9) {
				s.move(b, to)
				done = false
				break
			}
		}
		if done {
			return
		}
	}
}
