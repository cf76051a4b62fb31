//go:build rdma

// libfabric backend: see fabric.h. Contexts: every operation we post gets a
// struct fi_context2 from one array, so that providers with FI_CONTEXT or
// FI_CONTEXT2 mode are served, and a completion's op_context maps back to
// an index by pointer arithmetic. The array is laid out as
// [0, max_ops) writes | [max_ops, +ring) control sends | [.., +rx) receives.

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include "fabric.h"

#define EPS_FAB_RING 64 // control sends in flight when inject cannot be used
#define EPS_FAB_MAX_IOV 8

struct epsr_fab {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	int nowait; // the CQ has no wait object: poll sleeps instead of blocking

	struct fi_context2 *ctxs;
	int max_ops, ring_base, rx_base, rx_depth;

	// One registered region holds the receive buffers and the send ring.
	uint8_t *ctrl;
	struct fid_mr *ctrl_mr;
	void *ctrl_desc;

	pthread_mutex_t ring_mu;
	uint8_t ring_busy[EPS_FAB_RING];

	uint64_t next_key; // requested keys when the provider does not pick them
	int mr_local, mr_virt, mr_prov_key, mr_endpoint;
	size_t inject;
};

static void fab_destroy(epsr_fab *f) {
	if (f->ep) fi_close(&f->ep->fid);
	if (f->ctrl_mr) fi_close(&f->ctrl_mr->fid);
	if (f->cq) fi_close(&f->cq->fid);
	if (f->av) fi_close(&f->av->fid);
	if (f->domain) fi_close(&f->domain->fid);
	if (f->fabric) fi_close(&f->fabric->fid);
	if (f->info) fi_freeinfo(f->info);
	free(f->ctxs);
	free(f->ctrl);
	pthread_mutex_destroy(&f->ring_mu);
	free(f);
}

static int fab_mr(epsr_fab *f, void *p, size_t n, uint64_t access, struct fid_mr **mr) {
	uint64_t key = __atomic_fetch_add(&f->next_key, 1, __ATOMIC_RELAXED);
	int ret = fi_mr_reg(f->domain, p, n, access, 0, key, 0, mr, NULL);
	if (ret) return ret;
	if (f->mr_endpoint) {
		ret = fi_mr_bind(*mr, &f->ep->fid, 0);
		if (!ret) ret = fi_mr_enable(*mr);
		if (ret) {
			fi_close(&(*mr)->fid);
			*mr = NULL;
		}
	}
	return ret;
}

static int post_rx(epsr_fab *f, int i) {
	return (int)fi_recv(f->ep, f->ctrl + (size_t)i * EPS_CTRL_SIZE, EPS_CTRL_SIZE, f->ctrl_desc,
			    FI_ADDR_UNSPEC, &f->ctxs[f->rx_base + i]);
}

int epsr_fab_open(const char *prov, const char *node, int rx_depth, int max_ops, int cq_size,
		 epsr_fab **out, epsr_fab_info *info, const char **what) {
	int ret;
	*out = NULL;
	epsr_fab *f = calloc(1, sizeof(*f));
	if (!f) {
		*what = "calloc";
		return -FI_ENOMEM;
	}
	pthread_mutex_init(&f->ring_mu, NULL);
	f->next_key = 1;

	struct fi_info *hints = fi_allocinfo();
	if (!hints) {
		*what = "fi_allocinfo";
		free(f);
		return -FI_ENOMEM;
	}
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA | FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE;
	// We can live with any of these modes: our contexts are fi_context2,
	// and a remote write that consumes a receive buffer is handled.
	hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	if (prov && *prov) hints->fabric_attr->prov_name = strdup(prov);
	ret = fi_getinfo(FI_VERSION(1, 9), node, NULL, node ? FI_SOURCE : 0, hints, &f->info);
	fi_freeinfo(hints);
	if (ret) {
		*what = "fi_getinfo";
		f->info = NULL;
		fab_destroy(f);
		return ret;
	}
	struct fi_info *fi = f->info;
	if (fi->domain_attr->cq_data_size < 4) {
		*what = "fi_getinfo (provider has no 4-byte remote CQ data)";
		fab_destroy(f);
		return -FI_ENOSYS;
	}
	uint64_t mrm = fi->domain_attr->mr_mode;
	f->mr_local = (mrm & FI_MR_LOCAL) != 0;
	f->mr_virt = (mrm & FI_MR_VIRT_ADDR) != 0;
	f->mr_prov_key = (mrm & FI_MR_PROV_KEY) != 0;
	f->mr_endpoint = (mrm & FI_MR_ENDPOINT) != 0;
	f->inject = fi->tx_attr->inject_size;

	if ((ret = fi_fabric(fi->fabric_attr, &f->fabric, NULL))) {
		*what = "fi_fabric";
		goto fail;
	}
	if ((ret = fi_domain(f->fabric, fi, &f->domain, NULL))) {
		*what = "fi_domain";
		goto fail;
	}
	struct fi_av_attr av_attr = {0};
	av_attr.type = fi->domain_attr->av_type == FI_AV_UNSPEC ? FI_AV_TABLE : fi->domain_attr->av_type;
	if ((ret = fi_av_open(f->domain, &av_attr, &f->av, NULL))) {
		*what = "fi_av_open";
		goto fail;
	}
	struct fi_cq_attr cq_attr = {0};
	cq_attr.size = (size_t)cq_size;
	cq_attr.format = FI_CQ_FORMAT_DATA;
	cq_attr.wait_obj = FI_WAIT_UNSPEC;
	if (fi_cq_open(f->domain, &cq_attr, &f->cq, NULL)) {
		// Not every provider can block; poll with short sleeps then.
		cq_attr.wait_obj = FI_WAIT_NONE;
		f->nowait = 1;
		if ((ret = fi_cq_open(f->domain, &cq_attr, &f->cq, NULL))) {
			*what = "fi_cq_open";
			goto fail;
		}
	}
	if ((ret = fi_endpoint(f->domain, fi, &f->ep, NULL))) {
		*what = "fi_endpoint";
		goto fail;
	}
	if ((ret = fi_ep_bind(f->ep, &f->av->fid, 0))) {
		*what = "fi_ep_bind(av)";
		goto fail;
	}
	if ((ret = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV))) {
		*what = "fi_ep_bind(cq)";
		goto fail;
	}
	if ((ret = fi_enable(f->ep))) {
		*what = "fi_enable";
		goto fail;
	}

	f->max_ops = max_ops;
	f->ring_base = max_ops;
	f->rx_base = max_ops + EPS_FAB_RING;
	f->rx_depth = rx_depth;
	f->ctxs = calloc((size_t)(f->rx_base + rx_depth), sizeof(struct fi_context2));
	f->ctrl = calloc((size_t)(rx_depth + EPS_FAB_RING), EPS_CTRL_SIZE);
	if (!f->ctxs || !f->ctrl) {
		*what = "calloc";
		ret = -FI_ENOMEM;
		goto fail;
	}
	if ((ret = fab_mr(f, f->ctrl, (size_t)(rx_depth + EPS_FAB_RING) * EPS_CTRL_SIZE, FI_SEND | FI_RECV,
			  &f->ctrl_mr))) {
		*what = "fi_mr_reg(control buffers)";
		goto fail;
	}
	f->ctrl_desc = fi_mr_desc(f->ctrl_mr);
	for (int i = 0; i < rx_depth; i++) {
		if ((ret = post_rx(f, i))) {
			*what = "fi_recv";
			goto fail;
		}
	}

	memset(info, 0, sizeof(*info));
	strncpy(info->prov, fi->fabric_attr->prov_name ? fi->fabric_attr->prov_name : "", sizeof(info->prov) - 1);
	strncpy(info->fabric, fi->fabric_attr->name ? fi->fabric_attr->name : "", sizeof(info->fabric) - 1);
	strncpy(info->domain, fi->domain_attr->name ? fi->domain_attr->name : "", sizeof(info->domain) - 1);
	info->mr_local = f->mr_local;
	info->mr_virt = f->mr_virt;
	info->mr_prov_key = f->mr_prov_key;
	info->inject = fi->tx_attr->inject_size;
	info->max_msg = fi->ep_attr->max_msg_size;
	info->iov_limit = (int)(fi->tx_attr->iov_limit < EPS_FAB_MAX_IOV ? fi->tx_attr->iov_limit : EPS_FAB_MAX_IOV);
	info->cq_data = (int)fi->domain_attr->cq_data_size;
	info->progress = (int)fi->domain_attr->data_progress;
	*out = f;
	return 0;
fail:
	fab_destroy(f);
	return ret;
}

int epsr_fab_name(epsr_fab *f, void *buf, size_t *len) { return fi_getname(&f->ep->fid, buf, len); }

int epsr_fab_av_insert(epsr_fab *f, const void *name, uint64_t *addr) {
	fi_addr_t a = FI_ADDR_NOTAVAIL;
	int n = fi_av_insert(f->av, name, 1, &a, 0, NULL);
	if (n < 0) return n;
	if (n != 1) return -FI_EADDRNOTAVAIL;
	*addr = (uint64_t)a;
	return 0;
}

int epsr_fab_av_remove(epsr_fab *f, uint64_t addr) {
	fi_addr_t a = (fi_addr_t)addr;
	return fi_av_remove(f->av, &a, 1, 0);
}

int epsr_fab_reg(epsr_fab *f, void *p, size_t n, uint64_t *mr, uint64_t *desc, uint64_t *key) {
	struct fid_mr *m = NULL;
	int ret = fab_mr(f, p, n, FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE, &m);
	if (ret) return ret;
	*mr = (uint64_t)(uintptr_t)m;
	*desc = (uint64_t)(uintptr_t)fi_mr_desc(m);
	*key = fi_mr_key(m);
	return 0;
}

int epsr_fab_dereg(uint64_t mr) {
	struct fid_mr *m = (struct fid_mr *)(uintptr_t)mr;
	return m ? fi_close(&m->fid) : 0;
}

int epsr_fab_send_ctrl(epsr_fab *f, uint64_t dest, const void *msg) {
	if (f->inject >= EPS_CTRL_SIZE) {
		return (int)fi_inject(f->ep, msg, EPS_CTRL_SIZE, (fi_addr_t)dest);
	}
	pthread_mutex_lock(&f->ring_mu);
	int i = 0;
	while (i < EPS_FAB_RING && f->ring_busy[i]) i++;
	if (i == EPS_FAB_RING) {
		pthread_mutex_unlock(&f->ring_mu);
		return -FI_EAGAIN;
	}
	f->ring_busy[i] = 1;
	pthread_mutex_unlock(&f->ring_mu);
	uint8_t *buf = f->ctrl + (size_t)(f->rx_depth + i) * EPS_CTRL_SIZE;
	memcpy(buf, msg, EPS_CTRL_SIZE);
	int ret = (int)fi_send(f->ep, buf, EPS_CTRL_SIZE, f->ctrl_desc, (fi_addr_t)dest, &f->ctxs[f->ring_base + i]);
	if (ret) {
		pthread_mutex_lock(&f->ring_mu);
		f->ring_busy[i] = 0;
		pthread_mutex_unlock(&f->ring_mu);
	}
	return ret;
}

int epsr_fab_write(epsr_fab *f, uint64_t dest, const epsr_sge *sg, int n, uint64_t raddr, uint64_t key,
		  uint32_t imm, uint64_t op) {
	struct iovec iov[EPS_FAB_MAX_IOV];
	void *desc[EPS_FAB_MAX_IOV];
	size_t total = 0;
	if (n < 1 || n > EPS_FAB_MAX_IOV || op >= (uint64_t)f->max_ops) return -FI_EINVAL;
	for (int i = 0; i < n; i++) {
		iov[i].iov_base = (void *)(uintptr_t)sg[i].addr;
		iov[i].iov_len = (size_t)sg[i].len;
		desc[i] = (void *)(uintptr_t)sg[i].desc;
		total += (size_t)sg[i].len;
	}
	struct fi_rma_iov rma = {.addr = raddr, .len = total, .key = key};
	struct fi_msg_rma msg = {
	    .msg_iov = iov,
	    .desc = desc,
	    .iov_count = (size_t)n,
	    .addr = (fi_addr_t)dest,
	    .rma_iov = &rma,
	    .rma_iov_count = 1,
	    .context = &f->ctxs[op],
	    .data = imm,
	};
	return (int)fi_writemsg(f->ep, &msg, FI_REMOTE_CQ_DATA | FI_COMPLETION);
}

// ctx_index maps an op_context back to its index, or -1 if it is not ours.
static long ctx_index(epsr_fab *f, void *ctx) {
	struct fi_context2 *c = ctx;
	if (!c || c < f->ctxs || c >= f->ctxs + f->rx_base + f->rx_depth) return -1;
	return (long)(c - f->ctxs);
}

// rx_done reposts a control receive buffer; a failure to do so is fatal.
static int rx_done(epsr_fab *f, long idx, epsr_event *ev) {
	int ret = post_rx(f, (int)(idx - f->rx_base));
	if (ret && ev) {
		memset(ev, 0, sizeof(*ev));
		ev->kind = EPS_EV_FATAL;
		ev->err = ret;
		return 1;
	}
	return 0;
}

static void ring_done(epsr_fab *f, long idx) {
	pthread_mutex_lock(&f->ring_mu);
	f->ring_busy[idx - f->ring_base] = 0;
	pthread_mutex_unlock(&f->ring_mu);
}

int epsr_fab_poll(epsr_fab *f, epsr_event *ev, int n, int timeout_ms) {
	struct fi_cq_data_entry ent[32];
	// Each entry may add a second (fatal) event: read at most n/2.
	int max = n / 2 < 32 ? n / 2 : 32;
	ssize_t r;
	if (max <= 0) return 0;
	if (timeout_ms > 0 && !f->nowait) {
		r = fi_cq_sread(f->cq, ent, (size_t)max, NULL, timeout_ms);
	} else {
		r = fi_cq_read(f->cq, ent, (size_t)max);
	}
	if (r == -FI_EAGAIN || r == -FI_EINTR || r == -FI_ETIMEDOUT) return 0;
	if (r == -FI_EAVAIL) {
		struct fi_cq_err_entry err = {0};
		if (fi_cq_readerr(f->cq, &err, 0) != 1) return 0;
		long idx = ctx_index(f, err.op_context);
		memset(ev, 0, sizeof(*ev));
		ev->err = -err.err;
		ev->prov = err.prov_errno;
		if (idx >= 0 && idx < f->max_ops) {
			ev->kind = EPS_EV_ERROR;
			ev->op = (uint64_t)idx;
			return 1;
		}
		if (idx >= f->ring_base && idx < f->rx_base) {
			ring_done(f, idx);
			return 0;
		}
		if (idx >= f->rx_base) {
			// A canceled receive (endpoint closing) is not worth a repost.
			if (err.err == FI_ECANCELED) return 0;
			return rx_done(f, idx, ev);
		}
		ev->kind = EPS_EV_FATAL;
		return 1;
	}
	if (r < 0) return (int)r;

	int out = 0;
	for (ssize_t i = 0; i < r; i++) {
		struct fi_cq_data_entry *e = &ent[i];
		long idx = ctx_index(f, e->op_context);
		epsr_event *o = &ev[out];
		if (e->flags & FI_REMOTE_CQ_DATA) {
			memset(o, 0, offsetof(epsr_event, data));
			o->kind = EPS_EV_WRITE_IMM;
			o->imm = (uint32_t)e->data;
			o->len = e->len;
			out++;
			// FI_RX_CQ_DATA providers consume a receive buffer for it.
			if (idx >= f->rx_base && rx_done(f, idx, &ev[out])) out++;
			continue;
		}
		if (idx >= f->rx_base) {
			memset(o, 0, offsetof(epsr_event, data));
			o->kind = EPS_EV_RECV;
			o->len = e->len;
			memcpy(o->data, f->ctrl + (size_t)(idx - f->rx_base) * EPS_CTRL_SIZE, EPS_CTRL_SIZE);
			out++;
			if (rx_done(f, idx, &ev[out])) out++;
			continue;
		}
		if (idx >= f->ring_base) {
			ring_done(f, idx);
			continue;
		}
		if (idx >= 0) {
			memset(o, 0, offsetof(epsr_event, data));
			o->kind = EPS_EV_DONE;
			o->op = (uint64_t)idx;
			out++;
		}
	}
	return out;
}

void epsr_fab_wake(epsr_fab *f) {
	if (!f->nowait) fi_cq_signal(f->cq);
}

void epsr_fab_shutdown(epsr_fab *f) {
	if (f->ep) fi_close(&f->ep->fid);
	f->ep = NULL;
	if (f->ctrl_mr) fi_close(&f->ctrl_mr->fid);
	f->ctrl_mr = NULL;
}

void epsr_fab_close(epsr_fab *f) { fab_destroy(f); }

const char *epsr_fab_strerror(int err) { return fi_strerror(err); }
