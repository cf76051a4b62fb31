package tcp

import "github.com/elasticps/elasticps/van/internal/bufpool"

// directReadMin is the frame size from which the read loop reads a frame
// straight into its own pooled buffer instead of through the connection's
// read buffer. Below it, one read syscall usually brings in whole messages
// and copying them out is cheaper than a syscall per frame.
const directReadMin = bufpool.Min

func getBuf(n int) []byte { return bufpool.Get(n) }

func putBuf(b []byte) { bufpool.Put(b) }
