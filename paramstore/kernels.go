package paramstore

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/elasticps/elasticps/message"
)

// littleEndian: the kernels read wire bytes as host elements.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// alignedBytes allocates n zero bytes on an 8-byte boundary, so that views
// of any element type are possible.
func alignedBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), n)
}

// view is b (8-byte aligned) as elements of T.
func view[T any](b []byte) []T {
	var zero T
	n := len(b) / int(unsafe.Sizeof(zero))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

func addTo[T integer | float32 | float64](dst, src []byte) {
	d, s := view[T](dst), view[T](src)
	for i := range d {
		d[i] += s[i]
	}
}

// sumInto adds src to dst element-wise as values of dt (both aligned, of
// equal length). Two's-complement addition is the same for signed and
// unsigned integers, so integers are added by width; Char and Other as
// bytes, as kv.DefaultHandler does.
func sumInto(dt message.DataType, dst, src []byte) {
	switch dt {
	case message.Float:
		addTo[float32](dst, src)
	case message.Double:
		addTo[float64](dst, src)
	default:
		switch dt.Size() {
		case 1:
			addTo[uint8](dst, src)
		case 2:
			addTo[uint16](dst, src)
		case 4:
			addTo[uint32](dst, src)
		case 8:
			addTo[uint64](dst, src)
		}
	}
}

// updateFloat applies gradient gb, scaled by scale, to e with cfg's
// optimizer. Coefficients are rounded to F once; the loops allocate
// nothing (the optimizer's buffers are allocated on a key's first update).
func updateFloat[F float32 | float64](cfg *Config, e *entry, gb []byte, scale float64) {
	w, g := view[F](e.val), view[F](gb)
	sc, wd, lr := F(scale), F(cfg.WeightDecay), F(cfg.LR)
	switch cfg.Optimizer {
	case None:
		if scale == 1 {
			for i := range w {
				w[i] += g[i]
			}
			return
		}
		for i := range w {
			w[i] += sc * g[i]
		}
	case SGD:
		for i := range w {
			w[i] -= lr * (sc*g[i] + wd*w[i])
		}
	case Momentum:
		if e.m == nil {
			e.m = alignedBytes(len(e.val))
		}
		v, mu := view[F](e.m), F(cfg.Momentum)
		for i := range w {
			v[i] = mu*v[i] + (sc*g[i] + wd*w[i])
			w[i] -= lr * v[i]
		}
	case Adam:
		if e.m == nil {
			e.m = alignedBytes(len(e.val))
		}
		if e.v == nil {
			e.v = alignedBytes(len(e.val))
		}
		e.step++
		t := float64(e.step)
		m, v := view[F](e.m), view[F](e.v)
		b1, b2, eps := F(cfg.Beta1), F(cfg.Beta2), F(cfg.Epsilon)
		c1 := F(1 / (1 - math.Pow(cfg.Beta1, t))) // bias corrections
		c2 := F(1 / (1 - math.Pow(cfg.Beta2, t)))
		for i := range w {
			gi := sc*g[i] + wd*w[i]
			m[i] = b1*m[i] + (1-b1)*gi
			v[i] = b2*v[i] + (1-b2)*gi*gi
			w[i] -= lr * (m[i] * c1) / (F(math.Sqrt(float64(v[i]*c2))) + eps)
		}
	}
}
