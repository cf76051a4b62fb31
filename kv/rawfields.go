package kv

import "github.com/elasticps/elasticps/message"

// The BytePS fork's RawMeta has fields dmlc's Meta lacks (message.RawFields,
// carried only on PS_WIRE=bytedance). Its KVWorker fills val_len (and addr,
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

// echoRaw is what the fork's KVServer echoes of request fields r in its
// response.
func echoRaw(r message.RawFields) message.RawFields {
	return message.RawFields{Key: r.Key, Addr: r.Addr, ValLen: r.ValLen, Option: r.Option}
}
