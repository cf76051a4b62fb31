package kv

import (
	"errors"
	"fmt"
	"slices"

	"github.com/elasticps/elasticps/routing"
)

// Part is the share of one operation that a Slicer gives one server: the
// keys (with their values and optional lens, for a push) sent to the
// server of rank Server (an index into Postoffice.ServerKeyRanges).
type Part struct {
	Server int
	Keys   []uint64
	Vals   []byte
	Lens   []int32
}

// Slicer decides which server gets which part of an operation
// (ps::KVWorker::set_slicer): given the operation's keys, values (nil for
// a pull) and lens, and the job's server key ranges, it returns one Part
// per server that gets anything. A part's arrays are sent by reference, as
// the operation's own are. The parts of a pull (or push-pull) must share
// the operation's keys out exactly once each, each part's keys in request
// order; the pulled values are then assembled in request key order
// whichever server held them. A push's parts may be anything (a key sent
// to two servers is stored twice).
//
// A slicer needs ps-lite's static key ranges: SetSlicer and Options.Parts
// are refused in an elastic job (PS_ELASTIC=1), whose routing table moves
// ranges between servers and re-slices requests a server redirects.
type Slicer func(keys []uint64, vals []byte, lens []int32, ranges []routing.Range) ([]Part, error)

// errElasticSlicer refuses custom slicing where the routing table owns
// the ranges.
var errElasticSlicer = errors.New("kv: a custom slicer needs ps-lite's static key ranges, but this worker routes by an elastic routing table (PS_ELASTIC=1), which moves ranges between servers: drop the slicer or run without PS_ELASTIC")

// SetSlicer makes s slice every later operation of the worker; nil
// restores slicing by the server key ranges. It fails in an elastic job.
func (w *Worker) SetSlicer(s Slicer) error {
	if s != nil && !w.staticRoutes() {
		return errElasticSlicer
	}
	w.slicerMu.Lock()
	w.slicer = s
	w.slicerMu.Unlock()
	return nil
}

// SlicerAllowed reports why the worker cannot slice its own requests
// (SetSlicer, Options.Parts), or nil when it can.
func (w *Worker) SlicerAllowed() error {
	if !w.staticRoutes() {
		return errElasticSlicer
	}
	return nil
}

func (w *Worker) staticRoutes() bool {
	_, ok := w.router.(staticRouter)
	return ok
}

// customParts returns the operation's explicit parts (Options.Parts, else
// the worker's slicer's), or nil to slice by ranges.
func (w *Worker) customParts(keys []uint64, vals []byte, lens []int32, opts *Options) ([]Part, error) {
	if opts.Parts != nil {
		if !w.staticRoutes() {
			return nil, errElasticSlicer
		}
		return opts.Parts, nil
	}
	w.slicerMu.Lock()
	s := w.slicer
	w.slicerMu.Unlock()
	if s == nil {
		return nil, nil
	}
	parts, err := s(keys, vals, lens, slices.Clone(w.ranges))
	if err != nil {
		return nil, fmt.Errorf("kv: the slicer failed: %w", err)
	}
	if parts == nil {
		parts = []Part{}
	}
	return parts, nil
}

// partSpans checks a slicer's parts and turns them into spans (one per
// non-empty part). For a pull it also records, in o.partPos, where each
// part's keys are in the request.
func (w *Worker) partSpans(o *op, parts []Part, spans []span) ([]span, error) {
	routes := w.table.Current()
	seen := make(map[int]bool, len(parts))
	var used []bool
	if o.pull {
		used = make([]bool, len(o.keys))
		o.partPos = make([][]int, len(parts))
	}
	for i, p := range parts {
		if p.Server < 0 || p.Server >= len(w.ranges) || p.Server >= len(routes.Intervals) {
			return nil, fmt.Errorf("kv: slicer part %d is for server %d, but the job has servers 0 to %d", i, p.Server, len(w.ranges)-1)
		}
		if seen[p.Server] {
			return nil, fmt.Errorf("kv: the slicer gave server %d two parts; give each server at most one", p.Server)
		}
		seen[p.Server] = true
		if len(p.Keys) == 0 {
			continue
		}
		if o.push {
			if err := checkRequest(true, p.Keys, p.Vals, p.Lens, o.esize); err != nil {
				return nil, fmt.Errorf("kv: slicer part %d (server %d): %w", i, p.Server, err)
			}
		}
		if o.pull {
			pos, err := partPositions(o.keys, p.Keys, used)
			if err != nil {
				return nil, fmt.Errorf("kv: slicer part %d (server %d): %w", i, p.Server, err)
			}
			o.partPos[i] = pos
		}
		spans = append(spans, span{part: i, node: routes.Intervals[p.Server].Dest(0), routeEpoch: routes.Epoch})
	}
	if o.pull {
		if j := slices.Index(used, false); j >= 0 {
			return nil, fmt.Errorf("kv: the slicer sent request key %d (position %d) to no server; a pull's parts must cover every key", o.keys[j], j)
		}
	}
	o.parts = parts
	return spans, nil
}

// partPositions finds a part's keys in the (sorted) request keys, each at
// the first position not taken yet, in order; used marks taken positions.
func partPositions(req, keys []uint64, used []bool) ([]int, error) {
	pos := make([]int, len(keys))
	last := -1
	for j, k := range keys {
		p, _ := slices.BinarySearch(req, k)
		for p < len(req) && req[p] == k && (used[p] || p <= last) {
			p++
		}
		if p == len(req) || req[p] != k {
			return nil, fmt.Errorf("key %d is not in the request, is in another part already, or is out of request order", k)
		}
		used[p], pos[j], last = true, p, p
	}
	return pos, nil
}

// assembleParts is assemble for an operation sliced by parts: each
// server's reply must hold exactly the keys of its part; the values are
// written in request key order.
func (o *op) assembleParts() error {
	type place struct{ r, off, n int }
	at := make([]place, len(o.keys))
	done := make([]bool, len(o.parts))
	for ri, r := range o.replies {
		pi := slices.IndexFunc(o.spans, func(s span) bool { return s.node == r.from })
		if pi < 0 {
			return fmt.Errorf("kv: pull reply from server %d, which was not asked", r.from)
		}
		part := o.spans[pi].part
		if done[part] {
			return fmt.Errorf("kv: server %d answered twice", r.from)
		}
		done[part] = true
		if !slices.Equal(r.keys, o.parts[part].Keys) {
			return fmt.Errorf("kv: pull reply from server %d has %d keys, not the %d keys the slicer sent it", r.from, len(r.keys), len(o.parts[part].Keys))
		}
		per := 0
		if r.lens == nil && len(r.keys) > 0 {
			n := len(r.vals) / o.esize
			if n%len(r.keys) != 0 {
				return fmt.Errorf("kv: pull reply from server %d has no lens and its %d values cannot be split evenly over %d keys", r.from, n, len(r.keys))
			}
			per = n / len(r.keys)
		}
		off := 0
		for j, p := range o.partPos[part] {
			n := per
			if r.lens != nil {
				n = int(r.lens[j])
			}
			if n < 0 || off+n*o.esize > len(r.vals) {
				return fmt.Errorf("kv: pull reply from server %d: its lens need more values than it sent", r.from)
			}
			at[p] = place{r: ri, off: off, n: n * o.esize}
			off += n * o.esize
		}
	}
	for i := range o.spans {
		if !done[o.spans[i].part] {
			return fmt.Errorf("kv: pull: server %d returned nothing for its part", o.spans[i].node)
		}
	}
	total := 0
	for _, a := range at {
		total += a.n
	}
	var lensDst []int32
	if o.lens != nil {
		if len(*o.lens) != 0 && len(*o.lens) != len(o.keys) {
			return fmt.Errorf("kv: pull lens destination has %d entries for %d keys", len(*o.lens), len(o.keys))
		}
		if len(*o.lens) == 0 {
			*o.lens = make([]int32, len(o.keys))
		}
		lensDst = *o.lens
	}
	buf, err := o.dst.buffer(total)
	if err != nil {
		return err
	}
	off := 0
	for i, a := range at {
		off += copy(buf[off:], o.replies[a.r].vals[a.off:a.off+a.n])
		if lensDst != nil {
			lensDst[i] = int32(a.n / o.esize)
		}
	}
	if !littleEndian && o.dst.hostOrder() {
		swapElements(buf, o.esize)
	}
	return nil
}
