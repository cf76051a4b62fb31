package zmq

import "github.com/elasticps/elasticps/van/internal/bufpool"

// directReadMin is the frame size from which Recv copies a frame into its
// own pooled buffer rather than into the message's shared allocation: from
// there on, allocating (and zeroing, and collecting) a fresh buffer per
// message costs more than the copy itself.
const directReadMin = bufpool.Min

func getBuf(n int) []byte { return bufpool.Get(n) }

func putBuf(b []byte) { bufpool.Put(b) }
