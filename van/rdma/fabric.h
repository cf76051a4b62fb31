//go:build rdma

// libfabric backend of van/rdma: one FI_EP_RDM endpoint per transport with
// FI_MSG (rendezvous control messages) and FI_RMA (one-sided writes that
// carry remote CQ data). Every function returns 0 or a negative libfabric
// error code (-FI_E*), and for set-up failures names the failing call in
// *what, so that Go can say which call failed and why.
#ifndef ELASTICPS_RDMA_FABRIC_H
#define ELASTICPS_RDMA_FABRIC_H

#include "common.h"

typedef struct epsr_fab epsr_fab;

// epsr_fab_info describes what epsr_fab_open found.
typedef struct {
	char prov[64];
	char fabric[64];
	char domain[64];
	int mr_local;     // local buffers need a descriptor (FI_MR_LOCAL)
	int mr_virt;      // remote addresses are virtual addresses (FI_MR_VIRT_ADDR)
	int mr_prov_key;  // keys come from the provider (FI_MR_PROV_KEY)
	uint64_t inject;  // inject_size
	uint64_t max_msg; // max_msg_size
	int iov_limit;    // local segments per write
	int cq_data;      // cq_data_size in bytes
	int progress;     // data_progress (FI_PROGRESS_*)
} epsr_fab_info;

// epsr_fab_open opens the first endpoint that prov (NULL: libfabric's choice,
// which honours FI_PROVIDER) offers on node (the local address, may be
// NULL), posts rx_depth control receive buffers and prepares max_ops write
// contexts. Op ids given to epsr_fab_write must be < max_ops.
int epsr_fab_open(const char *prov, const char *node, int rx_depth, int max_ops,
		 int cq_size, epsr_fab **out, epsr_fab_info *info, const char **what);

// epsr_fab_name copies the endpoint's address (fi_getname) into buf.
int epsr_fab_name(epsr_fab *f, void *buf, size_t *len);

// epsr_fab_av_insert resolves a peer's address into *addr.
int epsr_fab_av_insert(epsr_fab *f, const void *name, uint64_t *addr);
int epsr_fab_av_remove(epsr_fab *f, uint64_t addr);

// epsr_fab_reg registers [p, p+n) for local use and remote writes. *mr is an
// opaque handle for epsr_fab_dereg, *desc the local descriptor, *key the
// remote key.
int epsr_fab_reg(epsr_fab *f, void *p, size_t n, uint64_t *mr, uint64_t *desc, uint64_t *key);
int epsr_fab_dereg(uint64_t mr);

// epsr_fab_send_ctrl sends one EPS_CTRL_SIZE control message to dest. The
// message is copied (inject or an internal ring): it may be reused at once.
// -FI_EAGAIN means no resources right now: progress and retry.
int epsr_fab_send_ctrl(epsr_fab *f, uint64_t dest, const void *msg);

// epsr_fab_write gathers sg[0..n) into one write at (raddr, key) of dest,
// with imm as remote CQ data. A completion event with op follows.
int epsr_fab_write(epsr_fab *f, uint64_t dest, const epsr_sge *sg, int n, uint64_t raddr,
		  uint64_t key, uint32_t imm, uint64_t op);

// epsr_fab_poll waits up to timeout_ms (0: do not wait) for completions and
// fills ev[0..n). It returns the number of events or a negative error.
int epsr_fab_poll(epsr_fab *f, epsr_event *ev, int n, int timeout_ms);

// epsr_fab_wake makes a concurrent epsr_fab_poll return early.
void epsr_fab_wake(epsr_fab *f);

// epsr_fab_shutdown closes the endpoint: posted operations are dropped and
// no memory is accessed any more. Only epsr_fab_dereg and epsr_fab_close may
// follow.
void epsr_fab_shutdown(epsr_fab *f);

// epsr_fab_close releases the rest; every region must be deregistered.
void epsr_fab_close(epsr_fab *f);

// epsr_fab_strerror is fi_strerror for a positive code.
const char *epsr_fab_strerror(int err);

#endif
