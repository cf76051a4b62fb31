package kv

import (
	"fmt"

	"github.com/elasticps/elasticps/message"
)

// PushExtents returns where each key's values are in a push of dt values: key i's are data.Vals[offs[i]:offs[i+1]]. With lens, key i has
// lens[i] elements; without, the values are split evenly over the keys. It
// is the push rule of the built-in stores, for handlers that want the same.
func PushExtents(data KVPairs, dt message.DataType) (offs []int, err error) {
	n, es := len(data.Keys), dt.Size()
	offs = make([]int, n+1)
	if len(data.Lens) > 0 {
		for i, l := range data.Lens {
			if l < 0 {
				return nil, fmt.Errorf("lens[%d]=%d is negative", i, l)
			}
			offs[i+1] = offs[i] + int(l)*es
		}
		if offs[n] != len(data.Vals) {
			return nil, fmt.Errorf("lens add up to %d bytes but vals has %d", offs[n], len(data.Vals))
		}
		return offs, nil
	}
	if n == 0 || len(data.Vals)%n != 0 || (len(data.Vals)/n)%es != 0 {
		return nil, fmt.Errorf("%d bytes of vals cannot be split evenly over %d keys of %s", len(data.Vals), n, dt)
	}
	per := len(data.Vals) / n
	for i := range offs {
		offs[i] = i * per
	}
	return offs, nil
}

// PullResponse answers a pull of req.Keys as dt values with what value
// returns for each key (its bytes, their type, and whether it has a value),
// as the built-in stores do: lens when the request carried lens or the
// values differ in length, an error for a key without a value or holding
// another type. The values are copied.
func PullResponse(dt message.DataType, req KVPairs, value func(k uint64) (val []byte, holds message.DataType, ok bool)) (KVPairs, error) {
	total, firstLen := 0, -1
	uniform := true
	vals := make([][]byte, len(req.Keys))
	for i, k := range req.Keys {
		v, holds, ok := value(k)
		if !ok {
			return KVPairs{}, fmt.Errorf("pull of key %d, which has no value (it was never pushed)", k)
		}
		if holds != dt {
			return KVPairs{}, fmt.Errorf("pull of key %d as %s, but it holds %s values", k, dt, holds)
		}
		vals[i] = v
		total += len(v)
		if firstLen < 0 {
			firstLen = len(v)
		} else if len(v) != firstLen {
			uniform = false
		}
	}
	res := KVPairs{Keys: req.Keys, Vals: alignedBytes(total)}
	if !uniform || len(req.Lens) > 0 {
		res.Lens = make([]int32, len(req.Keys))
	}
	es := dt.Size()
	off := 0
	for i, v := range vals {
		off += copy(res.Vals[off:], v)
		if res.Lens != nil {
			res.Lens[i] = int32(len(v) / es)
		}
	}
	return res, nil
}
