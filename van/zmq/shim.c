#include "shim.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>

void *eps_released = NULL;

// Go preempts goroutines with signals (SIGURG), which interrupt blocking
// libzmq calls with EINTR even though nothing is wrong; every blocking call
// is retried here, in one place, so Go never sees EINTR.
static int send_retry(void *sock, const void *buf, size_t len, int flags) {
	int rc;
	while ((rc = zmq_send(sock, buf, len, flags)) < 0 && zmq_errno() == EINTR) {
	}
	return rc;
}

static int msg_send_retry(zmq_msg_t *msg, void *sock, int flags) {
	int rc;
	while ((rc = zmq_msg_send(msg, sock, flags)) < 0 && zmq_errno() == EINTR) {
	}
	return rc;
}

static int msg_recv_retry(zmq_msg_t *msg, void *sock, int flags) {
	int rc;
	while ((rc = zmq_msg_recv(msg, sock, flags)) < 0 && zmq_errno() == EINTR) {
	}
	return rc;
}

void eps_free(void *data, void *hint) {
	(void)data;
	eps_relnode *n = (eps_relnode *)hint;
	eps_relnode *head = __atomic_load_n((eps_relnode **)&eps_released, __ATOMIC_RELAXED);
	do {
		n->next = head;
	} while (!__atomic_compare_exchange_n((eps_relnode **)&eps_released, &head, n, 1,
	                                      __ATOMIC_RELEASE, __ATOMIC_RELAXED));
}

eps_frame *eps_frames_grow(eps_frame *frames, int n, int m) {
	eps_frame *p = realloc(frames, (size_t)m * sizeof(eps_frame));
	if (p != NULL) {
		memset(p + n, 0, (size_t)(m - n) * sizeof(eps_frame));
	}
	return p;
}

void eps_debris(size_t n, unsigned char b) {
	void *p = malloc(n);
	if (p != NULL) {
		memset(p, b, n);
		free(p);
	}
}

eps_send_result eps_send(void *sock, eps_frame *frames, int n) {
	eps_send_result res = {0, -1, n};
	for (int i = 0; i < n; i++) {
		int flags = i < n - 1 ? ZMQ_SNDMORE : 0;
		eps_frame *f = &frames[i];
		if (f->node == NULL) {
			if (send_retry(sock, (const void *)f->addr, f->len, flags) < 0) {
				res.err = zmq_errno();
				res.failed_at = i;
				res.handed = i + 1; // nothing to release for a copied frame
				return res;
			}
			continue;
		}
		zmq_msg_t msg;
		if (zmq_msg_init_data(&msg, (void *)f->addr, f->len, eps_free, f->node) != 0) {
			// Only fails on allocation failure; libzmq did not take the
			// buffer, so Go releases this record itself.
			res.err = zmq_errno();
			res.failed_at = i;
			res.handed = i;
			return res;
		}
		if (msg_send_retry(&msg, sock, flags) < 0) {
			res.err = zmq_errno();
			zmq_msg_close(&msg); // calls eps_free: the record is released
			res.failed_at = i;
			res.handed = i + 1;
			return res;
		}
	}
	return res;
}

eps_in *eps_in_new(int cap) {
	eps_in *in = calloc(1, sizeof(eps_in));
	if (in == NULL) {
		return NULL;
	}
	in->msgs = calloc((size_t)cap, sizeof(zmq_msg_t));
	in->data = calloc((size_t)cap, sizeof(void *));
	in->size = calloc((size_t)cap, sizeof(size_t));
	if (in->msgs == NULL || in->data == NULL || in->size == NULL) {
		eps_in_free(in);
		return NULL;
	}
	in->cap = cap;
	return in;
}

void eps_in_release(eps_in *in) {
	for (int i = 0; i < in->held; i++) {
		zmq_msg_close(&in->msgs[i]);
	}
	in->held = 0;
}

void eps_in_free(eps_in *in) {
	if (in == NULL) {
		return;
	}
	eps_in_release(in);
	free(in->msgs);
	free(in->data);
	free(in->size);
	free(in);
}

int eps_recv(void *sock, eps_in *in, int dontwait) {
	eps_in_release(in);
	in->nframes = 0;
	in->dropped_bytes = 0;
	int n = 0;
	for (;;) {
		int more;
		if (n < in->cap) {
			zmq_msg_t *m = &in->msgs[n];
			zmq_msg_init(m);
			// Only the first frame can be missing: libzmq queues a
			// multipart message whole.
			int flags = n == 0 && dontwait ? ZMQ_DONTWAIT : 0;
			if (msg_recv_retry(m, sock, flags) < 0) {
				int err = zmq_errno();
				zmq_msg_close(m);
				eps_in_release(in);
				return err;
			}
			in->held = n + 1;
			in->data[n] = zmq_msg_data(m);
			in->size[n] = zmq_msg_size(m);
			more = zmq_msg_more(m);
		} else {
			zmq_msg_t m;
			zmq_msg_init(&m);
			if (msg_recv_retry(&m, sock, 0) < 0) {
				int err = zmq_errno();
				zmq_msg_close(&m);
				eps_in_release(in);
				return err;
			}
			in->dropped_bytes += zmq_msg_size(&m);
			more = zmq_msg_more(&m);
			zmq_msg_close(&m);
		}
		n++;
		if (!more) {
			break;
		}
	}
	in->nframes = n;
	return 0;
}

zmq_msg_t *eps_in_keep(eps_in *in, int i) {
	zmq_msg_t *m = malloc(sizeof(zmq_msg_t));
	if (m == NULL) {
		return NULL;
	}
	zmq_msg_init(m);
	if (zmq_msg_move(m, &in->msgs[i]) != 0) {
		zmq_msg_close(m);
		free(m);
		return NULL;
	}
	// The source is now an empty message, closed as usual with the rest.
	in->data[i] = zmq_msg_data(m);
	return m;
}

void eps_kept_close(zmq_msg_t *m) {
	zmq_msg_close(m);
	free(m);
}

int eps_tune_malloc(size_t mmap_threshold, size_t trim_threshold) {
#ifdef __GLIBC__
	return mallopt(M_MMAP_THRESHOLD, (int)mmap_threshold) == 1 &&
	       mallopt(M_TRIM_THRESHOLD, (int)trim_threshold) == 1;
#else
	(void)mmap_threshold;
	(void)trim_threshold;
	return 0;
#endif
}

long eps_mmapped_chunks(size_t n) {
#ifdef __GLIBC__
	size_t before = mallinfo2().hblks;
	char *p = malloc(n);
	if (p == NULL) {
		return -1;
	}
	memset(p, 1, n);
	size_t during = mallinfo2().hblks;
	free(p);
	return (long)during - (long)before;
#else
	(void)n;
	return -1;
#endif
}
