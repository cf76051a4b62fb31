package kv

import (
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"

	"github.com/elasticps/elasticps/message"
)

// Number is the set of element types that travel as KV values. Each maps to
// one message.DataType (see DataTypeOf).
type Number interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

// littleEndian is true on every platform ps-lite runs on. On a big-endian
// host the views below fall back to converting copies, because the wire
// format is little-endian (ps-lite sends host memory, i.e. x86 order).
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// DataTypeOf returns the ps-lite data type tag of T, as ps::GetDataType<T>
// does (so int8 is INT8; C++ char, which has no Go counterpart, is OTHER).
func DataTypeOf[T Number]() message.DataType {
	// Classify by size, signedness and integrality so that named types
	// (~float32, ...) map like their underlying type.
	var one T = 1
	var half = one / 2 // 0 for integers, 0.5 for floats
	var zero T
	minusOne := zero - one
	isFloat := half != 0
	signed := minusOne < zero
	switch unsafe.Sizeof(one) {
	case 1:
		if signed {
			return message.Int8
		}
		return message.Uint8
	case 2:
		if signed {
			return message.Int16
		}
		return message.Uint16
	case 4:
		if isFloat {
			return message.Float
		}
		if signed {
			return message.Int32
		}
		return message.Uint32
	}
	if isFloat {
		return message.Double
	}
	if signed {
		return message.Int64
	}
	return message.Uint64
}

// AsBytes returns s as its little-endian wire bytes. On little-endian hosts
// this is a view of s (no copy): the caller must not modify s while the bytes
// are in use, e.g. until the request that carries them has completed.
func AsBytes[T Number](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	size := int(unsafe.Sizeof(s[0]))
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*size)
	}
	out := make([]byte, len(s)*size)
	for i, v := range s {
		storeLE(out[i*size:], v)
	}
	return out
}

// FromBytes interprets b as little-endian elements of T. When b is suitably
// aligned on a little-endian host the result is a view of b (no copy), so
// it aliases b; otherwise it is a converted copy. It fails if len(b) is not a
// multiple of the element size.
func FromBytes[T Number](b []byte) ([]T, error) {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if len(b)%size != 0 {
		return nil, fmt.Errorf("kv: %d bytes is not a whole number of %d-byte elements", len(b), size)
	}
	n := len(b) / size
	if n == 0 {
		return nil, nil
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if littleEndian && uintptr(p)%unsafe.Alignof(zero) == 0 {
		return unsafe.Slice((*T)(p), n), nil
	}
	out := make([]T, n)
	for i := range out {
		out[i] = loadLE[T](b[i*size:])
	}
	return out, nil
}

// KeysToBytes encodes keys as the UINT64 little-endian keys frame (a view on
// little-endian hosts).
func KeysToBytes(keys []uint64) []byte { return AsBytes(keys) }

// BytesToKeys decodes a keys frame (a view when aligned).
func BytesToKeys(b []byte) ([]uint64, error) { return FromBytes[uint64](b) }

// LensToBytes encodes lens as the INT32 little-endian lens frame (a view on
// little-endian hosts).
func LensToBytes(lens []int32) []byte { return AsBytes(lens) }

// BytesToLens decodes a lens frame (a view when aligned).
func BytesToLens(b []byte) ([]int32, error) { return FromBytes[int32](b) }

// loadLE reads one little-endian T from the front of b (len(b) >= size).
func loadLE[T Number](b []byte) T {
	var v T
	p := unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v))
	copy(p, b)
	if !littleEndian {
		slices.Reverse(p)
	}
	return v
}

// storeLE writes v little-endian to the front of b.
func storeLE[T Number](b []byte, v T) {
	p := unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v))
	n := copy(b, p)
	if !littleEndian {
		slices.Reverse(b[:n])
	}
}

// alignedBytes allocates n bytes on an 8-byte boundary, so views of any
// element type are possible (consumers cast value buffers to typed
// pointers; ps-lite's reference builds deliver 8-byte aligned data).
func alignedBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), n)
}
