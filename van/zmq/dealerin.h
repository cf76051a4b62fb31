// C side of the receive path on DEALER sockets (dealerin.go): the BytePS
// fork's servers answer a worker on the worker's own connection.
#ifndef ELASTICPS_ZMQ_DEALERIN_H
#define ELASTICPS_ZMQ_DEALERIN_H

#include "shim.h"

// eps_forward_result is returned by value (see eps_send_result).
typedef struct {
	int err;       // 0, or the zmq errno that stopped it (EAGAIN is not an error)
	int forwarded; // whole messages moved to dst
	int dropped;   // whole messages dropped: frame 0 was not expect
} eps_forward_result;

// eps_forward moves every message queued on the DEALER src to dst without
// blocking on src and without copying: [identity, meta, data...], the
// layout of a message received on a ROUTER. A message whose first frame is
// not expect (expect_len bytes) is received whole and dropped.
eps_forward_result eps_forward(void *src, void *dst, const char *expect, size_t expect_len);

// eps_recv_either is eps_recv on whichever of a and b has a message, trying
// first (0: a, 1: b) first; without dontwait it waits for either.
int eps_recv_either(void *a, void *b, eps_in *in, int dontwait, int first);

// eps_wait_fd waits up to timeout_ms for fd (a socket's ZMQ_FD) to become
// readable; it returns poll's result.
int eps_wait_fd(int fd, int timeout_ms);

#endif
