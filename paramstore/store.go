// Package paramstore is the built-in training server store: a kv
// ServerHandler that keeps the parameters of a model and updates them with
// the gradients workers push, with a server-side optimizer (SGD, momentum,
// Adam) whose state is kept per key. It is what `elasticps server` runs.
//
// The first push of a key initializes it: the pushed data become its value
// (the worker's init, as MXNet's kvstore.init). Every later push of the key
// is a gradient. With Optimizer None and Aggregate Sum the store behaves
// exactly as kv.DefaultHandler (gradients are summed into the value).
//
// Under PS_ELASTIC=1 a Store is the server's elastic.Migrator: a key range
// that moves carries its optimizer state (momentum buffers, Adam moments
// and step counts, open round accumulators) with its values.
package paramstore

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"unsafe"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
)

// Store is the training store; install it with srv.SetRequestHandler(s.Handle)
// (or kv.ServerOptions{Handler: s.Handle}). It is safe for concurrent use.
//
//   - Push: with lens, key i carries lens[i] elements; without, the values
//     are split evenly over the keys. A key repeated in one request is one
//     push per occurrence. A push is applied entirely or not at all: an
//     invalid one gets an error response and changes nothing.
//   - Pull: returns the request's keys and their current values (a round
//     still open does not show), with lens when the request carried lens or
//     the values differ in length. A key never pushed is an error.
//   - Optimizers work on FLOAT and DOUBLE values; other types can only be
//     summed (Optimizer None, Aggregate Sum), as kv.DefaultHandler does.
type Store struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	keys    map[uint64]*entry
	scratch []byte // an aligned copy of a misaligned gradient; mu held
}

// entry is one key (block) and its optimizer state. Every buffer is 8-byte
// aligned and as long as val.
type entry struct {
	dt      message.DataType
	val     []byte
	m       []byte // Momentum's velocity, Adam's first moment; nil until needed
	v       []byte // Adam's second moment
	acc     []byte // the open round's gradient sum (valid while pending > 0)
	pending uint32 // gradients in acc
	step    uint64 // Adam's t: the updates applied to this key
}

// New returns an empty store, or the error of cfg.Validate.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !littleEndian {
		return nil, errors.New("paramstore: needs a little-endian host (the wire format is little-endian)")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Store{cfg: cfg, log: log, keys: map[uint64]*entry{}}, nil
}

// Config returns the store's configuration.
func (s *Store) Config() Config { return s.cfg }

// Handle is the kv.ServerHandler: it answers every request exactly once,
// before it returns.
func (s *Store) Handle(meta kv.ReqMeta, data kv.KVPairs, srv *kv.Server) {
	res, err := s.apply(meta, data)
	if err != nil {
		err = srv.ResponseError(meta, err)
	} else {
		err = srv.Response(meta, res)
	}
	if err != nil {
		s.log.Error("paramstore: cannot respond", "to", meta.Sender, "err", err)
	}
}

// Value returns a copy of the current value of key and its type.
func (s *Store) Value(key uint64) ([]byte, message.DataType, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.keys[key]
	if !ok {
		return nil, 0, false
	}
	return append([]byte(nil), e.val...), e.dt, true
}

// Len returns the number of stored keys.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

func (s *Store) apply(meta kv.ReqMeta, data kv.KVPairs) (kv.KVPairs, error) {
	n := len(data.Keys)
	s.mu.Lock()
	defer s.mu.Unlock()
	if meta.Push && n > 0 {
		if err := s.push(meta.DataType, data); err != nil {
			return kv.KVPairs{}, err
		}
	}
	if !meta.Pull || n == 0 {
		return kv.KVPairs{}, nil
	}
	return s.pull(meta.DataType, data)
}

// pull answers with the values of data.Keys; s.mu is held.
func (s *Store) pull(dt message.DataType, data kv.KVPairs) (kv.KVPairs, error) {
	total, firstLen := 0, -1
	uniform := true
	for _, k := range data.Keys {
		e, ok := s.keys[k]
		if !ok {
			return kv.KVPairs{}, fmt.Errorf("pull of key %d, which has no value (it was never pushed)", k)
		}
		if e.dt != dt {
			return kv.KVPairs{}, fmt.Errorf("pull of key %d as %s, but it holds %s values", k, dt, e.dt)
		}
		total += len(e.val)
		if firstLen < 0 {
			firstLen = len(e.val)
		} else if len(e.val) != firstLen {
			uniform = false
		}
	}
	res := kv.KVPairs{Keys: data.Keys, Vals: alignedBytes(total)}
	if !uniform || len(data.Lens) > 0 {
		res.Lens = make([]int32, len(data.Keys))
	}
	es := dt.Size()
	off := 0
	for i, k := range data.Keys {
		e := s.keys[k]
		off += copy(res.Vals[off:], e.val)
		if res.Lens != nil {
			res.Lens[i] = int32(len(e.val) / es)
		}
	}
	return res, nil
}

// push validates the whole request, then applies it; s.mu is held.
func (s *Store) push(dt message.DataType, data kv.KVPairs) error {
	n := len(data.Keys)
	es := dt.Size()
	// extent(i) is the byte range of key i's values.
	var offs []int
	per := 0
	if len(data.Lens) > 0 {
		offs = make([]int, n+1)
		for i, l := range data.Lens {
			if l < 0 {
				return fmt.Errorf("lens[%d]=%d is negative", i, l)
			}
			offs[i+1] = offs[i] + int(l)*es
		}
		if offs[n] != len(data.Vals) {
			return fmt.Errorf("lens add up to %d bytes but vals has %d", offs[n], len(data.Vals))
		}
	} else {
		if len(data.Vals)%n != 0 || (len(data.Vals)/n)%es != 0 {
			return fmt.Errorf("%d bytes of vals cannot be split evenly over %d keys of %s", len(data.Vals), n, dt)
		}
		per = len(data.Vals) / n
	}
	extent := func(i int) (int, int) {
		if offs != nil {
			return offs[i], offs[i+1]
		}
		return i * per, (i + 1) * per
	}
	// Validate first so that a bad key leaves the store untouched. newLen
	// remembers keys first seen in this request (rare: only initial pushes).
	var newLen map[uint64]int
	gradients := false
	for i, k := range data.Keys {
		a, b := extent(i)
		if e, ok := s.keys[k]; ok {
			if e.dt != dt || len(e.val) != b-a {
				return fmt.Errorf("push of %d bytes of %s to key %d, which holds %d bytes of %s", b-a, dt, k, len(e.val), e.dt)
			}
			gradients = true
			continue
		}
		if err := s.canStore(dt); err != nil {
			return fmt.Errorf("initial push of key %d: %w", k, err)
		}
		if newLen == nil {
			newLen = map[uint64]int{}
		}
		if l, seen := newLen[k]; seen {
			if l != b-a {
				return fmt.Errorf("key %d appears twice in the push with %d and %d bytes", k, l, b-a)
			}
			gradients = true
		}
		newLen[k] = b - a
	}
	var g grad
	if gradients {
		var err error
		if g, err = s.gradParams(); err != nil {
			return err
		}
	}
	for i, k := range data.Keys {
		a, b := extent(i)
		if e, ok := s.keys[k]; ok {
			s.gradient(e, data.Vals[a:b], g)
			continue
		}
		val := alignedBytes(b - a)
		copy(val, data.Vals[a:b])
		s.keys[k] = &entry{dt: dt, val: val}
	}
	return nil
}

// canStore tells whether the store can keep (and later update) values of
// type dt.
func (s *Store) canStore(dt message.DataType) error {
	if dt == message.Float || dt == message.Double {
		return nil
	}
	if s.cfg.Optimizer != None {
		return fmt.Errorf("optimizer %s works on FLOAT and DOUBLE values, not %s", s.cfg.Optimizer, dt)
	}
	if s.cfg.Aggregate == Mean {
		return fmt.Errorf("mean aggregation works on FLOAT and DOUBLE values, not %s (use sum)", dt)
	}
	if dt < message.Char || dt > message.Other {
		return fmt.Errorf("cannot sum values of type %s", dt)
	}
	return nil
}

// grad is what a push's gradients are applied with, read once per push.
type grad struct {
	round int     // RoundSize(), 0 without rounds
	scale float64 // 1, or 1/Workers() for Mean
}

func (s *Store) gradParams() (grad, error) {
	g := grad{scale: 1}
	if s.cfg.RoundSize != nil {
		g.round = s.cfg.RoundSize()
		if g.round < 0 {
			return grad{}, fmt.Errorf("the round size is %d; it must be >= 0 (0 applies every push at once)", g.round)
		}
	}
	if s.cfg.Aggregate == Mean {
		w := s.cfg.Workers()
		if w <= 0 {
			return grad{}, fmt.Errorf("mean aggregation divides by the number of workers, which is %d now", w)
		}
		g.scale = 1 / float64(w)
	}
	return g, nil
}

// gradient applies one pushed gradient to e, or adds it to e's open round;
// s.mu is held.
func (s *Store) gradient(e *entry, gb []byte, g grad) {
	gb = s.aligned(gb)
	if g.round > 0 || e.pending > 0 {
		if e.pending == 0 {
			if e.acc == nil {
				e.acc = alignedBytes(len(e.val))
			}
			copy(e.acc, gb)
		} else {
			sumInto(e.dt, e.acc, gb)
		}
		e.pending++
		if g.round > 0 && int(e.pending) < g.round {
			return
		}
		gb, e.pending = e.acc, 0
	}
	s.update(e, gb, g.scale)
}

// aligned returns b, or a copy of it in s.scratch if b is not 8-byte
// aligned (the kernels read it as typed elements).
func (s *Store) aligned(b []byte) []byte {
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 == 0 {
		return b
	}
	if cap(s.scratch) < len(b) {
		s.scratch = alignedBytes(len(b))
	}
	s.scratch = s.scratch[:len(b)]
	copy(s.scratch, b)
	return s.scratch
}

// update applies gradient gb (aligned, as long as e.val) to e.
func (s *Store) update(e *entry, gb []byte, scale float64) {
	switch e.dt {
	case message.Float:
		updateFloat[float32](&s.cfg, e, gb, scale)
	case message.Double:
		updateFloat[float64](&s.cfg, e, gb, scale)
	default:
		sumInto(e.dt, e.val, gb) // integers: canStore allowed only None with Sum
	}
}
