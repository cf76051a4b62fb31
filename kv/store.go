package kv

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/elasticps/elasticps/message"
)

// DefaultHandler is ps-lite's KVServerDefaultHandle generalised: a store
// that sums pushes element-wise per key and returns the stored values on
// pulls, for any numeric DataType and for values of any length.
//
//   - Push: with lens, key i carries lens[i] elements; without, the values
//     are split evenly over the keys. The first push of a key stores its
//     value; later pushes must have the same type and length and are added.
//     A key repeated in one request is added once per occurrence. A push
//     is applied entirely or not at all.
//   - Pull: returns the request's keys and their stored values, with lens
//     when the request carried lens or the values differ in length. A key
//     that was never pushed makes the pull fail (an error response) rather
//     than returning zeros.
//   - Every request is answered, with an error response when it is invalid.
//
// Integer sums wrap around; Char and Other are summed as bytes. It is safe
// for concurrent use.
type DefaultHandler struct {
	mu    sync.Mutex
	store map[uint64]*storedValue
}

type storedValue struct {
	dt  message.DataType
	val []byte // 8-byte aligned, little-endian elements
}

// NewDefaultHandler returns an empty store; install it with
// srv.SetRequestHandler(h.Handle).
func NewDefaultHandler() *DefaultHandler {
	return &DefaultHandler{store: map[uint64]*storedValue{}}
}

// Handle is the ServerHandler.
func (h *DefaultHandler) Handle(meta ReqMeta, data KVPairs, srv *Server) {
	res, err := h.apply(meta, data)
	if err != nil {
		err = srv.ResponseError(meta, err)
	} else {
		err = srv.Response(meta, res)
	}
	if err != nil {
		srv.po.Logger().Error("kv: default handler cannot respond", "to", meta.Sender, "err", err)
	}
}

// Value returns a copy of the stored value of key and its type.
func (h *DefaultHandler) Value(key uint64) ([]byte, message.DataType, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.store[key]
	if !ok {
		return nil, 0, false
	}
	return append([]byte(nil), v.val...), v.dt, true
}

// Len returns the number of stored keys.
func (h *DefaultHandler) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.store)
}

func (h *DefaultHandler) apply(meta ReqMeta, data KVPairs) (KVPairs, error) {
	n := len(data.Keys)
	h.mu.Lock()
	defer h.mu.Unlock()
	if meta.Push && n > 0 {
		if err := h.push(meta.DataType, data); err != nil {
			return KVPairs{}, err
		}
	}
	if !meta.Pull || n == 0 {
		return KVPairs{}, nil
	}
	return PullResponse(meta.DataType, data, func(k uint64) ([]byte, message.DataType, bool) {
		v, ok := h.store[k]
		if !ok {
			return nil, 0, false
		}
		return v.val, v.dt, true
	})
}

// push validates the whole request, then applies it; h.mu is held.
func (h *DefaultHandler) push(dt message.DataType, data KVPairs) error {
	add := adderFor(dt)
	if add == nil {
		return fmt.Errorf("cannot sum values of type %s", dt)
	}
	offs, err := PushExtents(data, dt)
	if err != nil {
		return err
	}
	// Validate first so that a bad key leaves the store untouched. newLen
	// remembers keys first seen in this request (rare: only initial pushes).
	var newLen map[uint64]int
	for i, k := range data.Keys {
		a, b := offs[i], offs[i+1]
		if v, ok := h.store[k]; ok {
			if v.dt != dt || len(v.val) != b-a {
				return fmt.Errorf("push of %d bytes of %s to key %d, which holds %d bytes of %s", b-a, dt, k, len(v.val), v.dt)
			}
			continue
		}
		if newLen == nil {
			newLen = map[uint64]int{}
		}
		if l, seen := newLen[k]; seen && l != b-a {
			return fmt.Errorf("key %d appears twice in the push with %d and %d bytes", k, l, b-a)
		}
		newLen[k] = b - a
	}
	for i, k := range data.Keys {
		a, b := offs[i], offs[i+1]
		if v, ok := h.store[k]; ok {
			add(v.val, data.Vals[a:b])
			continue
		}
		val := alignedBytes(b - a)
		copy(val, data.Vals[a:b])
		h.store[k] = &storedValue{dt: dt, val: val}
	}
	return nil
}

// adderFor returns dst += src element-wise for dt. Two's-complement addition
// is the same for signed and unsigned integers, so integers are added by
// width.
func adderFor(dt message.DataType) func(dst, src []byte) {
	switch dt {
	case message.Char, message.Int8, message.Uint8, message.Other:
		return addTo[uint8]
	case message.Int16, message.Uint16:
		return addTo[uint16]
	case message.Int32, message.Uint32:
		return addTo[uint32]
	case message.Int64, message.Uint64:
		return addTo[uint64]
	case message.Float:
		return addTo[float32]
	case message.Double:
		return addTo[float64]
	}
	return nil
}

// addTo adds src to dst element-wise; dst is 8-byte aligned, src may not be.
func addTo[T Number](dst, src []byte) {
	var zero T
	size := int(unsafe.Sizeof(zero))
	n := len(dst) / size
	if n == 0 {
		return
	}
	if littleEndian && uintptr(unsafe.Pointer(unsafe.SliceData(src)))%unsafe.Alignof(zero) == 0 {
		d := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(dst))), n)
		s := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(src))), n)
		for i := range d {
			d[i] += s[i]
		}
		return
	}
	for i := 0; i < n*size; i += size {
		storeLE(dst[i:], loadLE[T](dst[i:])+loadLE[T](src[i:]))
	}
}
