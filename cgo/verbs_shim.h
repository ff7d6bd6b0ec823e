// libibverbs shims for package verbs (verbs/ibv*.go): only what cgo cannot
// call or reach directly.
//
//   - ibv_query_port is a macro over a static inline; the exported symbol of
//     the same name takes the old, shorter struct _compat_ibv_port_attr.
//   - ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq,
//     ibv_alloc_dm, ibv_reg_dm_mr, ibv_memcpy_{to,from}_dm and
//     ibv_query_device_ex are static inline dispatches through the
//     provider's ops table.
//   - struct ibv_send_wr and struct ibv_wc keep the immediate, the RDMA and
//     the atomic fields in anonymous unions, which Go sees as byte arrays.
//
// Posting and polling cross into C once per call, not once per work
// request: Go fills flat descriptors (struct ibcoll_send_desc, struct
// ibv_sge) in C memory preallocated per QP, and the shim links them into
// an ibv_send_wr chain there, so the hot path allocates nothing and rings
// one doorbell per call. Every shim returns a positive errno on failure,
// whatever convention the provider used (some return -1 and set errno,
// some return a negative errno).

// An edit of this header alone was seen to leave the old code linked: the build
// cache did not rebuild verbs for it. After editing it, change a Go file of verbs
// too, or build with -a. And no file of this name may lie in the directory the
// build runs gcc from: cgo's type probe compiles from stdin, so a quoted include
// searches there first (a backup copy in /tmp once made the probe read old
// signatures).

#ifndef IBCOLL_VERBS_SHIM_H
#define IBCOLL_VERBS_SHIM_H

// Without the headers, say what to do, and only that: the rest of this file
// is skipped so that the compiler's own errors do not bury the message.
#if defined(__has_include)
#if !__has_include(<infiniband/verbs.h>)
#error "ibcoll: libibverbs headers not found: run 'make deps' (apt-get install libibverbs-dev), or build with CGO_ENABLED=0 for a soft-only library"
#define IBCOLL_NO_VERBS_H 1
#endif
#endif
#ifndef IBCOLL_NO_VERBS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE // RTLD_DEFAULT
#endif
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <net/if.h>
#include <stdint.h>
#include <string.h>
#include <infiniband/verbs.h>

// ibcoll_errno turns a provider's failure return into a positive errno.
static inline int ibcoll_errno(int rc)
{
	if (rc >= 0)
		return rc;
	if (rc == -1 && errno > 0)
		return errno;
	return -rc;
}

static inline int ibcoll_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	return ibcoll_errno(ibv_query_port(ctx, port, attr));
}

// ibcoll_query_device_ex falls back to ibv_query_device for providers and
// kernels without the extended verb; attr->orig_attr is filled either way.
static inline int ibcoll_query_device_ex(struct ibv_context *ctx, struct ibv_device_attr_ex *attr)
{
	int rc;

	memset(attr, 0, sizeof(*attr));
	rc = ibcoll_errno(ibv_query_device_ex(ctx, NULL, attr));
	if (rc == EOPNOTSUPP || rc == ENOSYS) {
		memset(attr, 0, sizeof(*attr));
		rc = ibcoll_errno(ibv_query_device(ctx, &attr->orig_attr));
	}
	return rc;
}

// The address arrives as an integer so that Go never converts a uintptr it
// does not own into an unsafe.Pointer.
static inline struct ibv_mr *ibcoll_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t length, unsigned int access)
{
	return ibv_reg_mr(pd, (void *)addr, length, (int)access);
}

// ibcoll_lookup finds a libibverbs entry point newer than the oldest library the
// project builds against, once per process (*fn and *looked are the caller's
// statics): NULL where this library lacks it.
static inline void *ibcoll_lookup(const char *name, void **fn, int *looked)
{
	void *f = __atomic_load_n(fn, __ATOMIC_ACQUIRE);

	if (f == NULL && !__atomic_load_n(looked, __ATOMIC_ACQUIRE)) {
		f = dlsym(RTLD_DEFAULT, name);
		__atomic_store_n(fn, f, __ATOMIC_RELEASE);
		__atomic_store_n(looked, 1, __ATOMIC_RELEASE);
	}
	return f;
}

// _ibv_query_gid_table came with rdma-core 32: every valid entry of every port's
// GID table in one call (one ioctl on current kernels), where sysfs takes a file
// per slot, populated or not (rxe has 1024 per port: about 0.2 s to read in the
// emulated test VM). It is looked up at run time, as ibv_reg_dmabuf_mr below, and
// struct ibcoll_gid_entry has the layout of struct ibv_gid_entry (rdma-core's ABI,
// passed with its size), so that older headers and libraries still build and
// load; there it fails with EOPNOTSUPP and the caller reads sysfs.
struct ibcoll_gid_entry {
	uint8_t gid[16];
	uint32_t gid_index;
	uint32_t port_num;
	uint32_t gid_type; // 0 IB, 1 RoCE v1, 2 RoCE v2
	uint32_t ndev_ifindex;
};

typedef long (*ibcoll_query_gid_table_t)(struct ibv_context *, struct ibcoll_gid_entry *, size_t, uint32_t, size_t);

static inline ibcoll_query_gid_table_t ibcoll_query_gid_table_fn(void)
{
	static void *fn;
	static int looked;
	ibcoll_query_gid_table_t f;

	*(void **)(&f) = ibcoll_lookup("_ibv_query_gid_table", &fn, &looked);
	return f;
}

// ibcoll_has_gid_table reports whether this libibverbs has _ibv_query_gid_table.
static inline int ibcoll_has_gid_table(void)
{
	return ibcoll_query_gid_table_fn() != NULL;
}

// ibcoll_query_gid_table returns the number of entries filled, or a negative errno.
static inline long ibcoll_query_gid_table(struct ibv_context *ctx, struct ibcoll_gid_entry *entries, size_t max)
{
	ibcoll_query_gid_table_t f = ibcoll_query_gid_table_fn();

	if (f == NULL)
		return -EOPNOTSUPP;
	errno = 0;
	long n = f(ctx, entries, max, 0, sizeof(*entries));
	if (n == -1 && errno != 0)
		return -errno;
	return n;
}

// ibcoll_ifname names network interface ifindex into buf (IF_NAMESIZE bytes); 0
// where it fails.
static inline int ibcoll_ifname(uint32_t ifindex, char *buf)
{
	return if_indextoname(ifindex, buf) != NULL;
}

// ibv_reg_dmabuf_mr came with rdma-core 34; it is looked up at run time so
// that the library still builds and loads against an older libibverbs, where
// registration through dma-buf then fails with EOPNOTSUPP.
typedef struct ibv_mr *(*ibcoll_reg_dmabuf_mr_t)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int);

static inline struct ibv_mr *ibcoll_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd, unsigned int access)
{
	static void *fn;
	static int looked;
	ibcoll_reg_dmabuf_mr_t f;

	*(void **)(&f) = ibcoll_lookup("ibv_reg_dmabuf_mr", &fn, &looked);
	if (f == NULL) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return f(pd, offset, length, iova, fd, (int)access);
}

static inline struct ibv_dm *ibcoll_alloc_dm(struct ibv_context *ctx, size_t length, uint32_t log_align)
{
	struct ibv_alloc_dm_attr attr = {
		.length = length,
		.log_align_req = log_align,
	};

	return ibv_alloc_dm(ctx, &attr);
}

static inline struct ibv_mr *ibcoll_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *dm, uint64_t offset, size_t length, unsigned int access)
{
	return ibv_reg_dm_mr(pd, dm, offset, length, access | IBV_ACCESS_ZERO_BASED);
}

static inline int ibcoll_free_dm(struct ibv_dm *dm)
{
	return ibcoll_errno(ibv_free_dm(dm));
}

static inline int ibcoll_memcpy_to_dm(struct ibv_dm *dm, uint64_t offset, const void *src, size_t length)
{
	return ibcoll_errno(ibv_memcpy_to_dm(dm, offset, src, length));
}

static inline int ibcoll_memcpy_from_dm(void *dst, struct ibv_dm *dm, uint64_t offset, size_t length)
{
	return ibcoll_errno(ibv_memcpy_from_dm(dst, dm, offset, length));
}

// struct ibcoll_send_desc is one send work request as Go writes it: no
// unions, no pointers. Its SGEs are the next num_sge entries of the SGE
// array passed alongside. imm is in host byte order.
struct ibcoll_send_desc {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t rkey;
	uint32_t imm;
	uint32_t num_sge;
	uint32_t opcode; // enum ibv_wr_opcode
	uint32_t flags;  // IBV_SEND_*
	uint32_t pad;
};

struct ibcoll_recv_desc {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t pad;
};

// ibcoll_post_send links n descriptors into wrs[0..n) and posts the chain.
// On failure *bad is the index of the first request not posted: the ones
// before it were posted and will complete.
static inline int ibcoll_post_send(struct ibv_qp *qp, const struct ibcoll_send_desc *d, int n,
				   struct ibv_sge *sges, struct ibv_send_wr *wrs, int *bad)
{
	struct ibv_send_wr *bad_wr = NULL;
	struct ibv_sge *sge = sges;
	int i, rc;

	for (i = 0; i < n; i++) {
		struct ibv_send_wr *w = &wrs[i];

		memset(w, 0, sizeof(*w));
		w->wr_id = d[i].wr_id;
		w->next = i + 1 < n ? &wrs[i + 1] : NULL;
		w->sg_list = d[i].num_sge ? sge : NULL;
		w->num_sge = (int)d[i].num_sge;
		w->opcode = (enum ibv_wr_opcode)d[i].opcode;
		w->send_flags = d[i].flags;
		sge += d[i].num_sge;
		switch (w->opcode) {
		case IBV_WR_SEND_WITH_IMM:
			w->imm_data = htonl(d[i].imm);
			break;
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			w->imm_data = htonl(d[i].imm);
			// fallthrough
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_READ:
			w->wr.rdma.remote_addr = d[i].remote_addr;
			w->wr.rdma.rkey = d[i].rkey;
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			w->wr.atomic.remote_addr = d[i].remote_addr;
			w->wr.atomic.rkey = d[i].rkey;
			w->wr.atomic.compare_add = d[i].compare_add;
			w->wr.atomic.swap = d[i].swap;
			break;
		default:
			break;
		}
	}
	errno = 0;
	rc = ibcoll_errno(ibv_post_send(qp, wrs, &bad_wr));
	*bad = rc && bad_wr ? (int)(bad_wr - wrs) : 0;
	return rc;
}

static inline int ibcoll_post_recv(struct ibv_qp *qp, const struct ibcoll_recv_desc *d, int n,
				   struct ibv_sge *sges, struct ibv_recv_wr *wrs, int *bad)
{
	struct ibv_recv_wr *bad_wr = NULL;
	struct ibv_sge *sge = sges;
	int i, rc;

	for (i = 0; i < n; i++) {
		wrs[i].wr_id = d[i].wr_id;
		wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
		wrs[i].sg_list = d[i].num_sge ? sge : NULL;
		wrs[i].num_sge = (int)d[i].num_sge;
		sge += d[i].num_sge;
	}
	errno = 0;
	rc = ibcoll_errno(ibv_post_recv(qp, wrs, &bad_wr));
	*bad = rc && bad_wr ? (int)(bad_wr - wrs) : 0;
	return rc;
}

// struct ibcoll_wc is struct ibv_wc without the union; imm is in host byte
// order and valid when wc_flags has IBV_WC_WITH_IMM.
struct ibcoll_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm;
	uint32_t qp_num;
	uint32_t wc_flags;
	uint32_t pad;
};

// ibcoll_poll_cq polls up to n completions into scratch and flattens them
// into out. It returns the count, or a negative errno.
static inline int ibcoll_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *scratch, struct ibcoll_wc *out)
{
	int i, got;

	errno = 0;
	got = ibv_poll_cq(cq, n, scratch);
	if (got < 0) // mlx5 answers -2 (CQ_POLL_ERR), not an errno
		return errno > 0 ? -errno : -EIO;
	for (i = 0; i < got; i++) {
		out[i].wr_id = scratch[i].wr_id;
		out[i].status = scratch[i].status;
		out[i].opcode = scratch[i].opcode;
		out[i].vendor_err = scratch[i].vendor_err;
		out[i].byte_len = scratch[i].byte_len;
		out[i].imm = (scratch[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(scratch[i].imm_data) : 0;
		out[i].qp_num = scratch[i].qp_num;
		out[i].wc_flags = scratch[i].wc_flags;
	}
	return got;
}

static inline int ibcoll_req_notify_cq(struct ibv_cq *cq)
{
	errno = 0;
	return ibcoll_errno(ibv_req_notify_cq(cq, 0));
}

// ibcoll_get_async_event takes one asynchronous event from the context's
// async fd (made non-blocking at open), copies what names its object (a
// QP's number, a port), and acknowledges it at once: a QP's or CQ's destroy
// waits until every event of it was acknowledged, and the object may be gone
// after this call. It returns 0, or EAGAIN when no event is pending. The
// type comes back as libibverbs numbers it; the caller maps it.
static inline int ibcoll_get_async_event(struct ibv_context *ctx, int *type, int *port, uint32_t *qpn)
{
	struct ibv_async_event ev;

	errno = 0;
	if (ibv_get_async_event(ctx, &ev))
		return errno > 0 ? errno : EIO;
	*type = (int)ev.event_type;
	*port = 0;
	*qpn = 0;
	switch (ev.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		if (ev.element.qp)
			*qpn = ev.element.qp->qp_num;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		*port = ev.element.port_num;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
	return 0;
}

// ibcoll_get_cq_event takes one event from a non-blocking channel and
// acknowledges it at once: ibv_destroy_cq waits for every event to be
// acknowledged, so an event never outlives this call. It returns 0, or
// EAGAIN when the channel was empty.
static inline int ibcoll_get_cq_event(struct ibv_comp_channel *ch)
{
	struct ibv_cq *cq = NULL;
	void *cq_ctx = NULL;
	int rc;

	errno = 0;
	rc = ibv_get_cq_event(ch, &cq, &cq_ctx);
	if (rc)
		return errno > 0 ? errno : EIO;
	ibv_ack_cq_events(cq, 1);
	return 0;
}

#endif // IBCOLL_NO_VERBS_H
#endif // IBCOLL_VERBS_SHIM_H
