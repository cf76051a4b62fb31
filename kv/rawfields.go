package kv

import "github.com/elasticps/elasticps/message"

// The BytePS fork's RawMeta has fields dmlc's Meta lacks (message.RawFields:
// all of them on PS_WIRE=bytedance, key, addr, val_len and option on the
// dmlc wire as extension fields). Its KVWorker fills val_len (and addr,
// its buffer's address) in every request, and its KVServer hands key, addr,
// val_len and option to the request handler (KVMeta) and echoes them in the
// response. Its ZeroMQ van reads none of them; a fork server's handler may.
// elasticps does the same, except that Addr stays 0: only the fork's RDMA
// vans use it (as the target of remote writes), a Go heap address means
// nothing to another process, and it would leak the layout of this one.

// requestRaw is what the fork's KVWorker sends in a request's RawMeta for
// vals (the span's values, nil for a pull) of type dt: val_len counts
// elements, as its SArray<Val>::size() does.
func requestRaw(dt message.DataType, vals []byte) message.RawFields {
	var r message.RawFields
	if n := dt.Size(); n > 0 {
		r.ValLen = int32(len(vals) / n)
	}
	return r
}

// pullRaw is what the fork's KVWorker sends in the RawMeta of a pull
// request for n of op o's keys: val_len is that request's share of the
// destination (its elements divided evenly among the keys, as its slicer
// cuts a pull's vals), 0 when the destination is to be allocated. Servers
// may size their answer by it; the fork's stress test insists it is set.
func pullRaw(o *op, n int) message.RawFields {
	var r message.RawFields
	if o.dst == nil || len(o.keys) == 0 || o.esize <= 0 {
		return r
	}
	perKey := o.dst.size() / o.esize / len(o.keys)
	r.ValLen = int32(perKey * n)
	return r
}

// echoRaw is what the fork's KVServer echoes of request fields r in its
// response.
func echoRaw(r message.RawFields) message.RawFields {
	return message.RawFields{Key: r.Key, Addr: r.Addr, ValLen: r.ValLen, Option: r.Option}
}
