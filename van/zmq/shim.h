// C side of van/zmq's own libzmq binding. Go calls these shims once per
// message (not once per frame) to keep cgo transitions off the hot path.
// Definitions live in shim.c: a cgo preamble may only declare.
#ifndef ELASTICPS_ZMQ_SHIM_H
#define ELASTICPS_ZMQ_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

// eps_relnode is the release record of one zero-copy send frame. Go owns a
// pool of them in C memory; libzmq gets a pointer to one as the free-callback
// hint and eps_free pushes it onto eps_released when it is done with the
// frame's bytes.
typedef struct eps_relnode {
	struct eps_relnode *next;
	uint32_t id;
} eps_relnode;

// eps_released is the top of a lock-free stack (Treiber stack) of release
// records. eps_free pushes with a CAS; Go takes the whole stack at once with
// an atomic exchange, which is what makes the stack free of the ABA problem.
extern void *eps_released;

// eps_free is the zmq_free_fn of every zero-copy frame. It runs on a libzmq
// IO thread (or inside a zmq_msg_close on the sending thread) and must not
// call into Go: it only pushes hint onto eps_released.
void eps_free(void *data, void *hint);

// eps_frame describes one outgoing frame. node == NULL: libzmq copies the
// bytes at addr during the call (addr then points to C memory). node !=
// NULL: addr is pinned Go memory that libzmq references until it calls
// eps_free(addr, node).
//
// addr is an integer, not a pointer, on purpose: the frame table lives in C
// memory and is reused, so its slots keep the addresses of earlier frames
// long after Go unpinned and freed them. Typed as a pointer, Go's write
// barrier would hand such a stale address to the GC when the slot is next
// overwritten ("found bad pointer in Go heap"). The Pinner, not this word,
// is what keeps a frame alive.
//
// node stays a pointer (libzmq needs it as the free hint), so every slot Go
// writes must hold NULL or a release record before: eps_frames_grow zeroes
// the slots it adds, which malloc would otherwise hand over with whatever
// freed memory held (an old frame address of a closed peer's table, a
// libzmq engine's pointer into a sent frame), and Go's write barrier would
// report that as a pointer when the slot is first written.
typedef struct {
	uintptr_t addr;
	size_t len;
	eps_relnode *node;
} eps_frame;

// eps_frames_grow resizes a frame table from n to m slots (m > n), zeroing
// the new ones; NULL when out of memory (frames is then unchanged).
eps_frame *eps_frames_grow(eps_frame *frames, int n, int m);

// eps_debris mallocs n bytes, fills them with b and frees them, so that the
// next allocation of that size on this thread likely reuses them: tests use
// it to check that new frame slots do not inherit old memory.
void eps_debris(size_t n, unsigned char b);

// eps_send_result is returned by value: out-parameters would make Go
// allocate the variables they point to.
typedef struct {
	int err;       // 0, or the zmq errno of the first failure
	int failed_at; // index of the failing frame, -1 on success
	int handed;    // leading frames whose release records libzmq owns or has released
} eps_send_result;

// eps_send sends frames[0..n) as one multipart message. On failure, a frame
// whose zmq_msg_t was closed after a failed send counts as handed (closing
// released it); Go releases the records of frames at or after handed itself.
eps_send_result eps_send(void *sock, eps_frame *frames, int n);

// eps_in holds the frames of the last message received on one socket.
// msgs, data and size have cap entries.
typedef struct {
	zmq_msg_t *msgs;
	const void **data;
	size_t *size;
	int cap;
	int held;               // msgs[0..held) are initialised and must be closed
	int nframes;            // frames of the last message, including dropped ones
	uint64_t dropped_bytes; // bytes of the frames past cap
} eps_in;

eps_in *eps_in_new(int cap);
void eps_in_free(eps_in *in);

// eps_recv first closes the frames of the previous message, then receives
// one whole multipart message. Frames past cap are received and dropped
// (counted in in->nframes, their bytes in in->dropped_bytes), so that the
// socket is always left at a message boundary. It returns 0 or a zmq errno;
// with dontwait, EAGAIN instead of blocking when no message is queued.
int eps_recv(void *sock, eps_in *in, int dontwait);

// eps_in_release closes the frames held by in.
void eps_in_release(eps_in *in);

// eps_in_keep moves frame i of in into a zmq_msg_t of its own on the C heap
// (a zmq_msg_t must not move while its data is referenced, and in->msgs is
// reused by the next eps_recv), so that the frame outlives the next receive.
// in->data[i] is updated to the kept message's data. It returns NULL when
// out of memory (the frame then stays in in).
zmq_msg_t *eps_in_keep(eps_in *in, int i);

// eps_kept_close closes and frees a message eps_in_keep returned.
void eps_kept_close(zmq_msg_t *m);

// eps_tune_malloc sets glibc malloc's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD
// (see malloc.go). It returns 1 if both were set, 0 if this C library is
// not glibc or refused a value.
int eps_tune_malloc(size_t mmap_threshold, size_t trim_threshold);

// eps_mmapped_chunks allocates n bytes, touches them and frees them again,
// and returns by how many that block raised the number of chunks glibc's
// malloc held as separate mappings (mallinfo2's hblks): 1 if it was mapped
// afresh, 0 if it came from a heap; -1 if not glibc. For tests.
long eps_mmapped_chunks(size_t n);

#endif
