// See dealerin.h.
#include <errno.h>
#include <poll.h>
#include <string.h>

#include "dealerin.h"

static int recv_retry(zmq_msg_t *m, void *sock, int flags) {
	for (;;) {
		int rc = zmq_msg_recv(m, sock, flags);
		if (rc >= 0 || zmq_errno() != EINTR) {
			return rc;
		}
	}
}

static int send_retry(zmq_msg_t *m, void *sock, int flags) {
	for (;;) {
		int rc = zmq_msg_send(m, sock, flags);
		if (rc >= 0 || zmq_errno() != EINTR) {
			return rc;
		}
	}
}

eps_forward_result eps_forward(void *src, void *dst, const char *expect, size_t expect_len) {
	eps_forward_result r = {0, 0, 0};
	for (;;) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (recv_retry(&m, src, ZMQ_DONTWAIT) < 0) {
			int err = zmq_errno();
			zmq_msg_close(&m);
			if (err != EAGAIN) {
				r.err = err;
			}
			return r;
		}
		int keep = zmq_msg_size(&m) == expect_len && memcmp(zmq_msg_data(&m), expect, expect_len) == 0;
		// libzmq queues a multipart message whole: the rest is there.
		for (;;) {
			int more = zmq_msg_more(&m);
			if (keep) {
				if (send_retry(&m, dst, more ? ZMQ_SNDMORE : 0) < 0) {
					// dst is an inproc PUSH without a high-water mark: only
					// termination gets here. The rest of src's message is
					// left behind, which nobody reads again.
					r.err = zmq_errno();
					zmq_msg_close(&m);
					return r;
				}
			}
			zmq_msg_close(&m);
			if (!more) {
				break;
			}
			zmq_msg_init(&m);
			if (recv_retry(&m, src, 0) < 0) {
				r.err = zmq_errno();
				zmq_msg_close(&m);
				return r;
			}
		}
		if (keep) {
			r.forwarded++;
		} else {
			r.dropped++;
		}
	}
}

int eps_recv_either(void *a, void *b, eps_in *in, int dontwait, int first) {
	void *s0 = first ? b : a, *s1 = first ? a : b;
	for (;;) {
		int rc = eps_recv(s0, in, 1);
		if (rc != EAGAIN) {
			return rc;
		}
		rc = eps_recv(s1, in, 1);
		if (rc != EAGAIN || dontwait) {
			return rc;
		}
		zmq_pollitem_t items[2] = {{s0, 0, ZMQ_POLLIN, 0}, {s1, 0, ZMQ_POLLIN, 0}};
		if (zmq_poll(items, 2, -1) < 0 && zmq_errno() != EINTR) {
			return zmq_errno();
		}
	}
}

int eps_wait_fd(int fd, int timeout_ms) {
	struct pollfd p = {fd, POLLIN, 0};
	return poll(&p, 1, timeout_ms);
}
