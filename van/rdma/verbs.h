//go:build rdma

// ibverbs backend of van/rdma: RC queue pairs set up by librdmacm, one
// protection domain and one completion queue (with a completion channel)
// per transport, on the device chosen by the Go side. Functions return 0 or
// a negative errno and name the failing call in *what where useful.
#ifndef ELASTICPS_RDMA_VERBS_H
#define ELASTICPS_RDMA_VERBS_H

#include "common.h"

typedef struct epsr_verbs epsr_verbs;
typedef struct epsr_vlink epsr_vlink;

#define EPS_VERBS_ENODEV 100000 // no RDMA device (not an errno)

// epsr_verbs_devices returns the number of RDMA devices and copies the name
// of the first n into names (each 64 bytes).
int epsr_verbs_devices(char *names, int n);

// epsr_verbs_open opens device dev (NULL: the first one), creates the PD, the
// completion channel and CQ, and the rdma_cm event channel.
int epsr_verbs_open(const char *dev, int cq_size, int send_depth, int rx_depth, epsr_verbs **out,
		   const char **what, char *devname);

// epsr_verbs_listen binds an rdma_cm listener to host:port (port 0: any)
// and returns the bound port in *bound.
int epsr_verbs_listen(epsr_verbs *v, const char *host, int port, int *bound, const char **what);

// Connection manager events, as reported by epsr_verbs_cm_wait.
enum {
	EPS_CM_CONNECT_REQUEST = 1, // .link is a new passive link; .priv the dialler's hello
	EPS_CM_ADDR_RESOLVED,
	EPS_CM_ROUTE_RESOLVED,
	EPS_CM_ESTABLISHED, // .priv holds the acceptor's hello on the active side
	EPS_CM_FAILED,      // address/route resolution, unreachable, rejected or connect error
	EPS_CM_DISCONNECTED,
	EPS_CM_OTHER,
};

typedef struct {
	int type;
	int status;
	epsr_vlink *link;
	int priv_len;
	uint8_t priv[64];
	char name[32]; // rdma_event_str
} epsr_cm_event;

// epsr_verbs_cm_wait waits up to timeout_ms for one connection event.
// It returns 1 with *ev filled, 0 on timeout, or a negative errno.
int epsr_verbs_cm_wait(epsr_verbs *v, epsr_cm_event *ev, int timeout_ms);

// epsr_verbs_connect starts an active connection: address resolution of
// host:port from src (may be NULL). Events follow on the link.
int epsr_verbs_connect(epsr_verbs *v, const char *src, const char *host, int port, epsr_vlink **out,
		      const char **what);
int epsr_verbs_resolve_route(epsr_vlink *l);

// epsr_verbs_establish (active side, after ROUTE_RESOLVED) and
// epsr_verbs_accept (passive side, after CONNECT_REQUEST) create the QP,
// post the receive buffers and send hello as private data.
int epsr_verbs_establish(epsr_verbs *v, epsr_vlink *l, const void *hello, int len, const char **what);
int epsr_verbs_accept(epsr_verbs *v, epsr_vlink *l, const void *hello, int len, const char **what);
void epsr_verbs_reject(epsr_vlink *l);

// epsr_verbs_disconnect starts a disconnect; epsr_verbs_destroy_link
// releases the QP and id (the memory stays until epsr_verbs_close, as
// flushed completions may still name it).
void epsr_verbs_disconnect(epsr_vlink *l);
void epsr_verbs_destroy_link(epsr_verbs *v, epsr_vlink *l);

int epsr_verbs_reg(epsr_verbs *v, void *p, size_t n, uint64_t *mr, uint64_t *lkey, uint64_t *rkey);
int epsr_verbs_dereg(uint64_t mr);

// epsr_verbs_send_ctrl sends EPS_CTRL_SIZE bytes inline on l.
int epsr_verbs_send_ctrl(epsr_vlink *l, const void *msg);

// epsr_verbs_write posts RDMA_WRITE_WITH_IMM gathering sg into (raddr, rkey).
int epsr_verbs_write(epsr_vlink *l, const epsr_sge *sg, int n, uint64_t raddr, uint64_t rkey, uint32_t imm,
		    uint64_t op);

int epsr_verbs_poll(epsr_verbs *v, epsr_event *ev, int n, int timeout_ms);
void epsr_verbs_wake(epsr_verbs *v);

// epsr_verbs_shutdown destroys every QP and id; epsr_verbs_close the rest.
void epsr_verbs_shutdown(epsr_verbs *v);
void epsr_verbs_close(epsr_verbs *v);

const char *epsr_verbs_wc_status(int status);

#endif
