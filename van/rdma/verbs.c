//go:build rdma

// ibverbs backend: see verbs.h. Work request ids: a receive's wr_id is the
// address of its epsr_vrecv (8-byte aligned) with bit 0 set; a write's is
// op << 2; an inline control send's is 2 (its completion is dropped).

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include "verbs.h"

#define WR_CTRL 2u

typedef struct {
	epsr_vlink *link;
	int i;
} epsr_vrecv;

struct epsr_vlink {
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	uint8_t *rbuf;
	struct ibv_mr *rmr;
	epsr_vrecv *recvs;
	int rx_depth;
	epsr_vlink *next; // all links, freed at close
};

struct epsr_verbs {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen;
	struct ibv_context **devs; // rdma_get_devices
	int wake_fd, cm_wake_fd;
	int send_depth, rx_depth;
	pthread_mutex_t mu; // guards links
	epsr_vlink *links;
};

int epsr_verbs_devices(char *names, int n) {
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list) return 0;
	for (int i = 0; i < num && i < n; i++) {
		strncpy(names + 64 * i, ibv_get_device_name(list[i]), 63);
	}
	ibv_free_device_list(list);
	return num;
}

static int set_nonblock(int fd) {
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -errno : (fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0);
}

int epsr_verbs_open(const char *dev, int cq_size, int send_depth, int rx_depth, epsr_verbs **out,
		   const char **what, char *devname) {
	int num = 0;
	*out = NULL;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (list) ibv_free_device_list(list);
	if (num == 0) {
		*what = "ibv_get_device_list";
		return -EPS_VERBS_ENODEV;
	}
	epsr_verbs *v = calloc(1, sizeof(*v));
	if (!v) {
		*what = "calloc";
		return -ENOMEM;
	}
	pthread_mutex_init(&v->mu, NULL);
	v->wake_fd = v->cm_wake_fd = -1;
	v->send_depth = send_depth;
	v->rx_depth = rx_depth;
	int ret = 0;
	// The contexts of rdma_get_devices are the ones rdma_cm ids use, so a
	// PD made on one serves the QPs of connections on that device.
	v->devs = rdma_get_devices(&num);
	if (!v->devs || num == 0) {
		*what = "rdma_get_devices";
		ret = -EPS_VERBS_ENODEV;
		goto fail;
	}
	for (int i = 0; i < num; i++) {
		if (!dev || !*dev || strcmp(ibv_get_device_name(v->devs[i]->device), dev) == 0) {
			v->ctx = v->devs[i];
			break;
		}
	}
	if (!v->ctx) {
		*what = "rdma_get_devices (no device of that name)";
		ret = -ENODEV;
		goto fail;
	}
	strncpy(devname, ibv_get_device_name(v->ctx->device), 63);
	if (!(v->pd = ibv_alloc_pd(v->ctx))) {
		*what = "ibv_alloc_pd";
		ret = -errno;
		goto fail;
	}
	if (!(v->cc = ibv_create_comp_channel(v->ctx))) {
		*what = "ibv_create_comp_channel";
		ret = -errno;
		goto fail;
	}
	if ((ret = set_nonblock(v->cc->fd))) {
		*what = "fcntl(completion channel)";
		goto fail;
	}
	if (!(v->cq = ibv_create_cq(v->ctx, cq_size, NULL, v->cc, 0))) {
		*what = "ibv_create_cq";
		ret = -errno;
		goto fail;
	}
	if ((ret = -ibv_req_notify_cq(v->cq, 0))) {
		*what = "ibv_req_notify_cq";
		goto fail;
	}
	if (!(v->ch = rdma_create_event_channel())) {
		*what = "rdma_create_event_channel";
		ret = -errno;
		goto fail;
	}
	if ((ret = set_nonblock(v->ch->fd))) {
		*what = "fcntl(event channel)";
		goto fail;
	}
	if ((v->wake_fd = eventfd(0, EFD_NONBLOCK)) < 0 || (v->cm_wake_fd = eventfd(0, EFD_NONBLOCK)) < 0) {
		*what = "eventfd";
		ret = -errno;
		goto fail;
	}
	*out = v;
	return 0;
fail:
	if (ret == 0) ret = -EIO;
	epsr_verbs_close(v);
	return ret;
}

static int resolve(const char *host, int port, struct sockaddr_storage *out) {
	struct addrinfo hints = {0}, *res = NULL;
	char svc[16];
	hints.ai_family = AF_UNSPEC;
	hints.ai_flags = AI_PASSIVE;
	snprintf(svc, sizeof(svc), "%d", port);
	int ret = getaddrinfo(host && *host ? host : NULL, svc, &hints, &res);
	if (ret) return -EADDRNOTAVAIL;
	memcpy(out, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

int epsr_verbs_listen(epsr_verbs *v, const char *host, int port, int *bound, const char **what) {
	struct sockaddr_storage sa;
	int ret;
	if ((ret = resolve(host, port, &sa))) {
		*what = "getaddrinfo";
		return ret;
	}
	struct rdma_cm_id *id = NULL;
	if (rdma_create_id(v->ch, &id, NULL, RDMA_PS_TCP)) {
		*what = "rdma_create_id";
		return -errno;
	}
	if (rdma_bind_addr(id, (struct sockaddr *)&sa)) {
		ret = -errno;
		*what = "rdma_bind_addr";
		rdma_destroy_id(id);
		return ret;
	}
	if (rdma_listen(id, 128)) {
		ret = -errno;
		*what = "rdma_listen";
		rdma_destroy_id(id);
		return ret;
	}
	v->listen = id;
	*bound = ntohs(rdma_get_src_port(id));
	return 0;
}

static epsr_vlink *new_link(epsr_verbs *v) {
	epsr_vlink *l = calloc(1, sizeof(*l));
	if (!l) return NULL;
	pthread_mutex_lock(&v->mu);
	l->next = v->links;
	v->links = l;
	pthread_mutex_unlock(&v->mu);
	return l;
}

int epsr_verbs_cm_wait(epsr_verbs *v, epsr_cm_event *ev, int timeout_ms) {
	struct rdma_cm_event *e = NULL;
	if (rdma_get_cm_event(v->ch, &e)) {
		if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
		struct pollfd fds[2] = {{v->ch->fd, POLLIN, 0}, {v->cm_wake_fd, POLLIN, 0}};
		int n = poll(fds, 2, timeout_ms);
		if (n < 0) return errno == EINTR ? 0 : -errno;
		if (fds[1].revents) {
			uint64_t x;
			if (read(v->cm_wake_fd, &x, sizeof(x)) < 0) { /* drained */ }
		}
		if (!fds[0].revents) return 0;
		if (rdma_get_cm_event(v->ch, &e)) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
	}
	memset(ev, 0, sizeof(*ev));
	ev->status = e->status;
	strncpy(ev->name, rdma_event_str(e->event), sizeof(ev->name) - 1);
	const void *priv = e->param.conn.private_data;
	int plen = e->param.conn.private_data_len;
	switch (e->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST: {
		epsr_vlink *l = new_link(v);
		if (!l) {
			rdma_reject(e->id, NULL, 0);
			rdma_ack_cm_event(e);
			return 0;
		}
		l->id = e->id;
		e->id->context = l;
		ev->type = EPS_CM_CONNECT_REQUEST;
		ev->link = l;
		break;
	}
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		ev->type = EPS_CM_ADDR_RESOLVED;
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		ev->type = EPS_CM_ROUTE_RESOLVED;
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		ev->type = EPS_CM_ESTABLISHED;
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
		ev->type = EPS_CM_FAILED;
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		ev->type = EPS_CM_DISCONNECTED;
		break;
	default:
		ev->type = EPS_CM_OTHER;
	}
	if (ev->type != EPS_CM_CONNECT_REQUEST) ev->link = e->id->context;
	if (priv && plen > 0) {
		ev->priv_len = plen < (int)sizeof(ev->priv) ? plen : (int)sizeof(ev->priv);
		memcpy(ev->priv, priv, (size_t)ev->priv_len);
	}
	rdma_ack_cm_event(e);
	return 1;
}

int epsr_verbs_connect(epsr_verbs *v, const char *src, const char *host, int port, epsr_vlink **out,
		      const char **what) {
	struct sockaddr_storage dst, srcsa;
	int ret;
	*out = NULL;
	if ((ret = resolve(host, port, &dst))) {
		*what = "getaddrinfo";
		return ret;
	}
	if (src && *src && (ret = resolve(src, 0, &srcsa))) {
		*what = "getaddrinfo(source)";
		return ret;
	}
	epsr_vlink *l = new_link(v);
	if (!l) {
		*what = "calloc";
		return -ENOMEM;
	}
	if (rdma_create_id(v->ch, &l->id, l, RDMA_PS_TCP)) {
		*what = "rdma_create_id";
		l->id = NULL;
		return -errno;
	}
	if (rdma_resolve_addr(l->id, src && *src ? (struct sockaddr *)&srcsa : NULL, (struct sockaddr *)&dst, 1000)) {
		ret = -errno;
		*what = "rdma_resolve_addr";
		rdma_destroy_id(l->id);
		l->id = NULL;
		return ret;
	}
	*out = l;
	return 0;
}

int epsr_verbs_resolve_route(epsr_vlink *l) { return rdma_resolve_route(l->id, 1000) ? -errno : 0; }

static int post_recv(epsr_vlink *l, int i) {
	struct ibv_sge sge = {
	    .addr = (uint64_t)(uintptr_t)(l->rbuf + (size_t)i * EPS_CTRL_SIZE), .length = EPS_CTRL_SIZE, .lkey = l->rmr->lkey};
	struct ibv_recv_wr wr = {.wr_id = (uint64_t)(uintptr_t)&l->recvs[i] | 1u, .sg_list = &sge, .num_sge = 1}, *bad;
	return -ibv_post_recv(l->qp, &wr, &bad);
}

// setup_qp creates l's QP on the transport's PD and CQ and posts its
// receive buffers.
static int setup_qp(epsr_verbs *v, epsr_vlink *l, const char **what) {
	if (l->id->verbs != v->ctx) {
		*what = "rdma_cm (connection arrived on another RDMA device than the one chosen)";
		return -EXDEV;
	}
	struct ibv_qp_init_attr attr = {0};
	attr.send_cq = v->cq;
	attr.recv_cq = v->cq;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 1;
	attr.cap.max_send_wr = (uint32_t)(v->send_depth + 64); // writes + control sends
	attr.cap.max_recv_wr = (uint32_t)v->rx_depth;
	attr.cap.max_send_sge = 4;
	attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = EPS_CTRL_SIZE;
	if (rdma_create_qp(l->id, v->pd, &attr)) {
		*what = "rdma_create_qp";
		return -errno;
	}
	l->qp = l->id->qp;
	l->rx_depth = v->rx_depth;
	l->rbuf = calloc((size_t)v->rx_depth, EPS_CTRL_SIZE);
	l->recvs = calloc((size_t)v->rx_depth, sizeof(epsr_vrecv));
	if (!l->rbuf || !l->recvs) {
		*what = "calloc";
		return -ENOMEM;
	}
	if (!(l->rmr = ibv_reg_mr(v->pd, l->rbuf, (size_t)v->rx_depth * EPS_CTRL_SIZE, IBV_ACCESS_LOCAL_WRITE))) {
		*what = "ibv_reg_mr";
		return -errno;
	}
	for (int i = 0; i < v->rx_depth; i++) {
		l->recvs[i].link = l;
		l->recvs[i].i = i;
		int ret = post_recv(l, i);
		if (ret) {
			*what = "ibv_post_recv";
			return ret;
		}
	}
	return 0;
}

static void conn_param(struct rdma_conn_param *p, const void *hello, int len) {
	memset(p, 0, sizeof(*p));
	p->private_data = hello;
	p->private_data_len = (uint8_t)len;
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->retry_count = 7;
	p->rnr_retry_count = 7; // infinite: a receiver short of buffers only delays
}

int epsr_verbs_establish(epsr_verbs *v, epsr_vlink *l, const void *hello, int len, const char **what) {
	int ret = setup_qp(v, l, what);
	if (ret) return ret;
	struct rdma_conn_param p;
	conn_param(&p, hello, len);
	if (rdma_connect(l->id, &p)) {
		*what = "rdma_connect";
		return -errno;
	}
	return 0;
}

int epsr_verbs_accept(epsr_verbs *v, epsr_vlink *l, const void *hello, int len, const char **what) {
	int ret = setup_qp(v, l, what);
	if (ret) return ret;
	struct rdma_conn_param p;
	conn_param(&p, hello, len);
	if (rdma_accept(l->id, &p)) {
		*what = "rdma_accept";
		return -errno;
	}
	return 0;
}

void epsr_verbs_reject(epsr_vlink *l) {
	if (l->id) rdma_reject(l->id, NULL, 0);
}

void epsr_verbs_disconnect(epsr_vlink *l) {
	if (l->id) rdma_disconnect(l->id);
}

void epsr_verbs_destroy_link(epsr_verbs *v, epsr_vlink *l) {
	(void)v;
	if (l->qp) rdma_destroy_qp(l->id);
	l->qp = NULL;
	if (l->rmr) ibv_dereg_mr(l->rmr);
	l->rmr = NULL;
	if (l->id) rdma_destroy_id(l->id);
	l->id = NULL;
}

int epsr_verbs_reg(epsr_verbs *v, void *p, size_t n, uint64_t *mr, uint64_t *lkey, uint64_t *rkey) {
	struct ibv_mr *m = ibv_reg_mr(v->pd, p, n, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!m) return -errno;
	*mr = (uint64_t)(uintptr_t)m;
	*lkey = m->lkey;
	*rkey = m->rkey;
	return 0;
}

int epsr_verbs_dereg(uint64_t mr) { return mr ? -ibv_dereg_mr((struct ibv_mr *)(uintptr_t)mr) : 0; }

int epsr_verbs_send_ctrl(epsr_vlink *l, const void *msg) {
	if (!l->qp) return -ENOTCONN;
	struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)msg, .length = EPS_CTRL_SIZE, .lkey = 0};
	struct ibv_send_wr wr = {0}, *bad;
	wr.wr_id = WR_CTRL;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
	return -ibv_post_send(l->qp, &wr, &bad);
}

int epsr_verbs_write(epsr_vlink *l, const epsr_sge *sg, int n, uint64_t raddr, uint64_t rkey, uint32_t imm,
		    uint64_t op) {
	if (!l->qp) return -ENOTCONN;
	struct ibv_sge s[4];
	if (n < 1 || n > 4) return -EINVAL;
	for (int i = 0; i < n; i++) {
		s[i].addr = sg[i].addr;
		s[i].length = (uint32_t)sg[i].len;
		s[i].lkey = (uint32_t)sg[i].desc;
	}
	struct ibv_send_wr wr = {0}, *bad;
	wr.wr_id = op << 2;
	wr.sg_list = s;
	wr.num_sge = n;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = (uint32_t)rkey;
	int ret = ibv_post_send(l->qp, &wr, &bad);
	return ret == ENOMEM ? -EAGAIN : -ret; // a full send queue
}

// drain moves completions into ev; each may add one event.
static int drain(epsr_verbs *v, epsr_event *ev, int n) {
	struct ibv_wc wc[32];
	int max = n < 32 ? n : 32;
	int got = ibv_poll_cq(v->cq, max, wc);
	if (got < 0) return -EIO;
	int out = 0;
	for (int i = 0; i < got; i++) {
		struct ibv_wc *w = &wc[i];
		epsr_event *o = &ev[out];
		memset(o, 0, offsetof(epsr_event, data));
		if (w->wr_id & 1u) {
			epsr_vrecv *r = (epsr_vrecv *)(uintptr_t)(w->wr_id & ~(uint64_t)1);
			epsr_vlink *l = r->link;
			if (w->status != IBV_WC_SUCCESS) continue; // flushed: the QP is going
			o->link = (uint64_t)(uintptr_t)l;
			if (w->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
				o->kind = EPS_EV_WRITE_IMM;
				o->imm = ntohl(w->imm_data);
				o->len = w->byte_len;
			} else {
				o->kind = EPS_EV_RECV;
				o->len = w->byte_len;
				memcpy(o->data, l->rbuf + (size_t)r->i * EPS_CTRL_SIZE, EPS_CTRL_SIZE);
			}
			out++;
			if (l->qp && post_recv(l, r->i)) {
				o = &ev[out < n ? out : n - 1];
				memset(o, 0, offsetof(epsr_event, data));
				o->kind = EPS_EV_FATAL;
				o->err = -EIO;
				if (out < n) out++;
			}
			continue;
		}
		if (w->wr_id == WR_CTRL) {
			if (w->status != IBV_WC_SUCCESS && w->status != IBV_WC_WR_FLUSH_ERR) {
				o->kind = EPS_EV_FATAL;
				o->err = (int32_t)w->status;
				o->prov = (int32_t)w->vendor_err;
				out++;
			}
			continue;
		}
		o->op = w->wr_id >> 2;
		if (w->status == IBV_WC_SUCCESS) {
			o->kind = EPS_EV_DONE;
		} else {
			o->kind = EPS_EV_ERROR;
			o->err = (int32_t)w->status;
			o->prov = (int32_t)w->vendor_err;
		}
		out++;
	}
	return out;
}

int epsr_verbs_poll(epsr_verbs *v, epsr_event *ev, int n, int timeout_ms) {
	// Leave room for a fatal event after each completion.
	int half = n / 2;
	int out = drain(v, ev, half);
	if (out != 0 || timeout_ms <= 0) return out;
	struct pollfd fds[2] = {{v->cc->fd, POLLIN, 0}, {v->wake_fd, POLLIN, 0}};
	int r = poll(fds, 2, timeout_ms);
	if (r < 0 && errno != EINTR) return -errno;
	if (fds[1].revents) {
		uint64_t x;
		if (read(v->wake_fd, &x, sizeof(x)) < 0) { /* drained */ }
	}
	if (fds[0].revents) {
		struct ibv_cq *cq;
		void *ctx;
		if (ibv_get_cq_event(v->cc, &cq, &ctx) == 0) {
			ibv_ack_cq_events(cq, 1);
		}
	}
	// Re-arm before draining, so that nothing completing after the drain
	// goes unnoticed by the next poll.
	ibv_req_notify_cq(v->cq, 0);
	return drain(v, ev, half);
}

void epsr_verbs_wake(epsr_verbs *v) {
	uint64_t one = 1;
	if (write(v->wake_fd, &one, sizeof(one)) < 0) { /* already pending */ }
	if (write(v->cm_wake_fd, &one, sizeof(one)) < 0) { /* already pending */ }
}

void epsr_verbs_shutdown(epsr_verbs *v) {
	pthread_mutex_lock(&v->mu);
	for (epsr_vlink *l = v->links; l; l = l->next) {
		if (l->id && l->qp) rdma_disconnect(l->id);
		epsr_verbs_destroy_link(v, l);
	}
	pthread_mutex_unlock(&v->mu);
	if (v->listen) rdma_destroy_id(v->listen);
	v->listen = NULL;
}

void epsr_verbs_close(epsr_verbs *v) {
	if (!v) return;
	epsr_verbs_shutdown(v);
	pthread_mutex_lock(&v->mu);
	epsr_vlink *l = v->links;
	v->links = NULL;
	pthread_mutex_unlock(&v->mu);
	while (l) {
		epsr_vlink *next = l->next;
		free(l->rbuf);
		free(l->recvs);
		free(l);
		l = next;
	}
	if (v->cq) ibv_destroy_cq(v->cq);
	if (v->cc) ibv_destroy_comp_channel(v->cc);
	if (v->pd) ibv_dealloc_pd(v->pd);
	if (v->ch) rdma_destroy_event_channel(v->ch);
	if (v->devs) rdma_free_devices(v->devs);
	if (v->wake_fd >= 0) close(v->wake_fd);
	if (v->cm_wake_fd >= 0) close(v->cm_wake_fd);
	pthread_mutex_destroy(&v->mu);
	free(v);
}

const char *epsr_verbs_wc_status(int status) { return ibv_wc_status_str((enum ibv_wc_status)status); }
