//go:build rdma

// Types shared by van/rdma's two C backends (libfabric in fabric.c, ibverbs
// in verbs.c). Go sees the same structs through cgo. Definitions of
// functions live in the .c files: a cgo preamble may only declare.
#ifndef ELASTICPS_RDMA_COMMON_H
#define ELASTICPS_RDMA_COMMON_H

#include <stddef.h>
#include <stdint.h>

// EPS_CTRL_SIZE is the fixed size of a two-sided control message
// (rendezvous start/reply). Both backends post receive buffers of this size.
#define EPS_CTRL_SIZE 64

// Event kinds reported by the poll functions.
enum {
	EPS_EV_DONE = 1,      // a write posted with op id .op completed locally
	EPS_EV_ERROR = 2,     // a write posted with op id .op failed; .err holds the code
	EPS_EV_RECV = 3,      // a control message arrived; .data holds it
	EPS_EV_WRITE_IMM = 4, // a remote write with immediate data .imm landed here
	EPS_EV_FATAL = 5,     // a completion queue error not tied to one of our ops
};

typedef struct {
	uint64_t op;   // op id given to the write call (DONE, ERROR)
	uint64_t len;  // bytes received (RECV, WRITE_IMM)
	uint32_t kind; // EPS_EV_*
	uint32_t imm;  // immediate data (WRITE_IMM), host byte order
	int32_t err;   // backend error code (ERROR, FATAL): -fi_errno or ibv_wc_status
	int32_t prov;  // provider-specific error, for the message
	uint64_t link; // verbs: link handle the event arrived on; fabric: 0
	uint8_t data[EPS_CTRL_SIZE];
} epsr_event;

// epsr_sge is one local segment of a gathered write. desc is the backend's
// local key for the memory (fabric: fi_mr_desc pointer, or 0; verbs: lkey).
typedef struct {
	uint64_t addr;
	uint64_t len;
	uint64_t desc;
} epsr_sge;

// epsr_alloc returns page-aligned memory for registration, or NULL.
void *epsr_alloc(size_t n);
void epsr_free(void *p);

#endif
