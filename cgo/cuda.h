// CUDA driver API, loaded at run time with dlopen so that nothing in the build
// depends on a CUDA installation. Written from the driver API's documented ABI
// (the enum values below are part of that ABI and never change between
// releases); no NVIDIA header is used.
//
// Include this header from exactly one cgo file (mem/cuda_cgo.go): the function
// table and the retained context are static, so a second translation unit
// would get its own, never-loaded copy.
//
// Go never holds a CUDA handle as a C pointer: streams, events and device
// pointers cross as uintptr_t, which the Go garbage collector does not
// inspect.

// An edit of this header alone was seen to leave the old code linked: the build
// cache did not rebuild mem for it. After editing it, change a Go file of mem
// too, or build with -a. And no file of this name may lie in the directory the
// build runs gcc from: cgo's type probe compiles from stdin, so a quoted include
// searches there first (a backup copy in /tmp once made the probe read old
// signatures).

#ifndef IBCOLL_CUDA_H
#define IBCOLL_CUDA_H

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult; // enum cudaError_enum; 0 is CUDA_SUCCESS
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; // CUdeviceptr_v2 on LP64
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef int CUpointer_attribute;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_DEINITIALIZED = 4,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_NOT_SUPPORTED = 801,
};

enum {
	CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2, // unsigned int: CUmemorytype
	CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,  // unsigned int used as a boolean
};

enum {
	CU_MEMORYTYPE_HOST = 1,
	CU_MEMORYTYPE_DEVICE = 2,
	CU_MEMORYTYPE_ARRAY = 3,
	CU_MEMORYTYPE_UNIFIED = 4,
};

enum { CU_MEM_ATTACH_GLOBAL = 0x1 };
enum { CU_MEMHOSTREGISTER_PORTABLE = 0x1 };
enum { CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 0x1 };
enum { CU_STREAM_NON_BLOCKING = 0x1 };
enum { CU_EVENT_BLOCKING_SYNC = 0x1, CU_EVENT_DISABLE_TIMING = 0x2 };

typedef CUresult (*ibcoll_cuInit_t)(unsigned int flags);
typedef CUresult (*ibcoll_cuDeviceGetCount_t)(int *count);
typedef CUresult (*ibcoll_cuDeviceGet_t)(CUdevice *dev, int ordinal);
typedef CUresult (*ibcoll_cuDevicePrimaryCtxRetain_t)(CUcontext *ctx, CUdevice dev);
typedef CUresult (*ibcoll_cuCtxSetCurrent_t)(CUcontext ctx);
typedef CUresult (*ibcoll_cuMemAlloc_t)(CUdeviceptr *dptr, size_t bytesize);
typedef CUresult (*ibcoll_cuMemAllocManaged_t)(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
typedef CUresult (*ibcoll_cuMemFree_t)(CUdeviceptr dptr);
typedef CUresult (*ibcoll_cuMemcpy_t)(CUdeviceptr dst, CUdeviceptr src, size_t n);
typedef CUresult (*ibcoll_cuMemcpyAsync_t)(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
typedef CUresult (*ibcoll_cuStreamCreate_t)(CUstream *s, unsigned int flags);
typedef CUresult (*ibcoll_cuStreamSynchronize_t)(CUstream s);
typedef CUresult (*ibcoll_cuStreamDestroy_t)(CUstream s);
typedef CUresult (*ibcoll_cuEventCreate_t)(CUevent *e, unsigned int flags);
typedef CUresult (*ibcoll_cuEventRecord_t)(CUevent e, CUstream s);
typedef CUresult (*ibcoll_cuEventQuery_t)(CUevent e);
typedef CUresult (*ibcoll_cuEventSynchronize_t)(CUevent e);
typedef CUresult (*ibcoll_cuEventDestroy_t)(CUevent e);
typedef CUresult (*ibcoll_cuPointerGetAttribute_t)(void *data, CUpointer_attribute attr, CUdeviceptr ptr);
typedef CUresult (*ibcoll_cuGetErrorName_t)(CUresult rc, const char **name);
typedef CUresult (*ibcoll_cuMemHostRegister_t)(void *p, size_t bytesize, unsigned int flags);
typedef CUresult (*ibcoll_cuMemHostUnregister_t)(void *p);
typedef CUresult (*ibcoll_cuMemGetAddressRange_t)(CUdeviceptr *base, size_t *size, CUdeviceptr p);
typedef CUresult (*ibcoll_cuMemGetHandleForAddressRange_t)(void *handle, CUdeviceptr p, size_t size, int type, unsigned long long flags);
typedef CUresult (*ibcoll_cuStreamWriteValue32_t)(CUstream s, CUdeviceptr addr, uint32_t value, unsigned int flags);
typedef CUresult (*ibcoll_cuMemAllocHost_t)(void **pp, size_t bytesize);
typedef CUresult (*ibcoll_cuMemFreeHost_t)(void *p);
typedef CUresult (*ibcoll_cuDeviceGetAttribute_t)(int *value, int attrib, CUdevice dev);
typedef CUresult (*ibcoll_cuFlushGPUDirectRDMAWrites_t)(int target, int scope);
// CUDA_MEMCPY2D's layout (the driver API's ABI, unchanged since CUDA 3.2 on LP64).
typedef struct {
	size_t srcXInBytes, srcY;
	int srcMemoryType;
	const void *srcHost;
	CUdeviceptr srcDevice;
	void *srcArray;
	size_t srcPitch;
	size_t dstXInBytes, dstY;
	int dstMemoryType;
	void *dstHost;
	CUdeviceptr dstDevice;
	void *dstArray;
	size_t dstPitch;
	size_t WidthInBytes, Height;
} ibcoll_cu_memcpy2d_desc;
typedef CUresult (*ibcoll_cuMemcpy2DAsync_t)(const ibcoll_cu_memcpy2d_desc *m, CUstream s);

static struct {
	ibcoll_cuInit_t cuInit;
	ibcoll_cuDeviceGetCount_t cuDeviceGetCount;
	ibcoll_cuDeviceGet_t cuDeviceGet;
	ibcoll_cuDevicePrimaryCtxRetain_t cuDevicePrimaryCtxRetain;
	ibcoll_cuCtxSetCurrent_t cuCtxSetCurrent;
	ibcoll_cuMemAlloc_t cuMemAlloc;
	ibcoll_cuMemAllocManaged_t cuMemAllocManaged;
	ibcoll_cuMemFree_t cuMemFree;
	ibcoll_cuMemcpy_t cuMemcpy;
	ibcoll_cuMemcpyAsync_t cuMemcpyAsync;
	ibcoll_cuStreamCreate_t cuStreamCreate;
	ibcoll_cuStreamSynchronize_t cuStreamSynchronize;
	ibcoll_cuStreamDestroy_t cuStreamDestroy;
	ibcoll_cuEventCreate_t cuEventCreate;
	ibcoll_cuEventRecord_t cuEventRecord;
	ibcoll_cuEventQuery_t cuEventQuery;
	ibcoll_cuEventSynchronize_t cuEventSynchronize;
	ibcoll_cuEventDestroy_t cuEventDestroy;
	ibcoll_cuPointerGetAttribute_t cuPointerGetAttribute;
	ibcoll_cuGetErrorName_t cuGetErrorName;
	ibcoll_cuMemHostRegister_t cuMemHostRegister;
	ibcoll_cuMemHostUnregister_t cuMemHostUnregister;
	// Optional: NULL on drivers older than CUDA 11.7, which export no dma-buf.
	ibcoll_cuMemGetAddressRange_t cuMemGetAddressRange;
	ibcoll_cuMemGetHandleForAddressRange_t cuMemGetHandleForAddressRange;
	// Optional: without them a stream's wait polls its event (see ibcoll_cu_stream).
	ibcoll_cuStreamWriteValue32_t cuStreamWriteValue32;
	ibcoll_cuMemAllocHost_t cuMemAllocHost;
	ibcoll_cuMemFreeHost_t cuMemFreeHost;
	// Optional: without it a copy of rows is one copy per row (ibcoll_cu_memcpy2d_async).
	ibcoll_cuMemcpy2DAsync_t cuMemcpy2DAsync;
	// Optional (CUDA 11.3 on): without them, GPUDirect writes are taken as ordered
	// for the owner, as drivers before the attribute existed promised nothing else.
	ibcoll_cuDeviceGetAttribute_t cuDeviceGetAttribute;
	ibcoll_cuFlushGPUDirectRDMAWrites_t cuFlushGPUDirectRDMAWrites;
} ibcoll_cu;

// The primary context of the chosen device, retained once for the life of the
// process: it is shared with any CUDA runtime user in the same process, so
// buffers allocated by either are visible to both.
static CUcontext ibcoll_cu_ctx;
static CUdevice ibcoll_cu_dev;

static char ibcoll_cu_loaderr[512];

// ibcoll_cu_load fills the table. It returns NULL on success, or a message
// that stays valid until the next call (the loader runs once, under sync.Once).
static const char *ibcoll_cu_load(void) {
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(ibcoll_cu_loaderr, sizeof ibcoll_cu_loaderr, "%s", e ? e : "dlopen libcuda.so.1 failed");
		return ibcoll_cu_loaderr;
	}
	// Several entry points exist under a _v2 name since CUDA 3.2 / 4.0
	// (64-bit CUdeviceptr, stream semantics); the unsuffixed symbols keep the
	// old ABI and must not be used.
#define IBCOLL_CU_SYM(field, name)                                                                   \
	do {                                                                                         \
		*(void **)(&ibcoll_cu.field) = dlsym(h, name);                                       \
		if (ibcoll_cu.field == NULL) {                                                       \
			snprintf(ibcoll_cu_loaderr, sizeof ibcoll_cu_loaderr, "libcuda.so.1 lacks %s", name); \
			dlclose(h);                                                                  \
			return ibcoll_cu_loaderr;                                                    \
		}                                                                                    \
	} while (0)
	IBCOLL_CU_SYM(cuInit, "cuInit");
	IBCOLL_CU_SYM(cuDeviceGetCount, "cuDeviceGetCount");
	IBCOLL_CU_SYM(cuDeviceGet, "cuDeviceGet");
	IBCOLL_CU_SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	IBCOLL_CU_SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
	IBCOLL_CU_SYM(cuMemAlloc, "cuMemAlloc_v2");
	IBCOLL_CU_SYM(cuMemAllocManaged, "cuMemAllocManaged");
	IBCOLL_CU_SYM(cuMemFree, "cuMemFree_v2");
	IBCOLL_CU_SYM(cuMemcpy, "cuMemcpy");
	IBCOLL_CU_SYM(cuMemcpyAsync, "cuMemcpyAsync");
	IBCOLL_CU_SYM(cuStreamCreate, "cuStreamCreate");
	IBCOLL_CU_SYM(cuStreamSynchronize, "cuStreamSynchronize");
	IBCOLL_CU_SYM(cuStreamDestroy, "cuStreamDestroy_v2");
	IBCOLL_CU_SYM(cuEventCreate, "cuEventCreate");
	IBCOLL_CU_SYM(cuEventRecord, "cuEventRecord");
	IBCOLL_CU_SYM(cuEventQuery, "cuEventQuery");
	IBCOLL_CU_SYM(cuEventSynchronize, "cuEventSynchronize");
	IBCOLL_CU_SYM(cuEventDestroy, "cuEventDestroy_v2");
	IBCOLL_CU_SYM(cuPointerGetAttribute, "cuPointerGetAttribute");
	IBCOLL_CU_SYM(cuGetErrorName, "cuGetErrorName");
	IBCOLL_CU_SYM(cuMemHostRegister, "cuMemHostRegister_v2");
	IBCOLL_CU_SYM(cuMemHostUnregister, "cuMemHostUnregister");
#undef IBCOLL_CU_SYM
	*(void **)(&ibcoll_cu.cuMemGetAddressRange) = dlsym(h, "cuMemGetAddressRange_v2");
	*(void **)(&ibcoll_cu.cuMemGetHandleForAddressRange) = dlsym(h, "cuMemGetHandleForAddressRange");
	*(void **)(&ibcoll_cu.cuStreamWriteValue32) = dlsym(h, "cuStreamWriteValue32_v2");
	if (ibcoll_cu.cuStreamWriteValue32 == NULL)
		*(void **)(&ibcoll_cu.cuStreamWriteValue32) = dlsym(h, "cuStreamWriteValue32");
	*(void **)(&ibcoll_cu.cuMemAllocHost) = dlsym(h, "cuMemAllocHost_v2");
	*(void **)(&ibcoll_cu.cuMemFreeHost) = dlsym(h, "cuMemFreeHost");
	*(void **)(&ibcoll_cu.cuMemcpy2DAsync) = dlsym(h, "cuMemcpy2DAsync_v2");
	*(void **)(&ibcoll_cu.cuDeviceGetAttribute) = dlsym(h, "cuDeviceGetAttribute");
	*(void **)(&ibcoll_cu.cuFlushGPUDirectRDMAWrites) = dlsym(h, "cuFlushGPUDirectRDMAWrites");
	return NULL;
}

// ibcoll_cu_open initialises the driver and retains the primary context of
// device ordinal. *step names the call that failed.
static CUresult ibcoll_cu_open(int ordinal, int *count, const char **step) {
	CUresult rc;
	CUdevice dev;
	*step = "cuInit";
	if ((rc = ibcoll_cu.cuInit(0)) != CUDA_SUCCESS)
		return rc;
	*step = "cuDeviceGetCount";
	if ((rc = ibcoll_cu.cuDeviceGetCount(count)) != CUDA_SUCCESS)
		return rc;
	if (*count <= ordinal)
		return CUDA_ERROR_NO_DEVICE;
	*step = "cuDeviceGet";
	if ((rc = ibcoll_cu.cuDeviceGet(&dev, ordinal)) != CUDA_SUCCESS)
		return rc;
	ibcoll_cu_dev = dev;
	*step = "cuDevicePrimaryCtxRetain";
	if ((rc = ibcoll_cu.cuDevicePrimaryCtxRetain(&ibcoll_cu_ctx, dev)) != CUDA_SUCCESS)
		return rc;
	*step = "cuCtxSetCurrent";
	return ibcoll_cu.cuCtxSetCurrent(ibcoll_cu_ctx);
}

// Every shim below makes the context current before its call. The current
// context is per OS thread, and a goroutine may run on a different thread at
// each cgo call; doing both inside one C call keeps them on the same thread
// without runtime.LockOSThread, and cuCtxSetCurrent is a thread-local store.

static const char *ibcoll_cu_error_name(CUresult rc) {
	const char *name = NULL;
	if (ibcoll_cu.cuGetErrorName == NULL || ibcoll_cu.cuGetErrorName(rc, &name) != CUDA_SUCCESS)
		return NULL;
	return name;
}

// CUdevice_attribute values and the flush's arguments (cuda.h, CUDA 11.3 on).
enum {
	IBCOLL_CU_ATTR_GDR_FLUSH_WRITES_OPTIONS = 117, // bitmask: 1 host (cuFlushGPUDirectRDMAWrites), 2 memops
	IBCOLL_CU_ATTR_GDR_WRITES_ORDERING = 118,      // 0 none, 100 owner, 200 all devices
	IBCOLL_CU_FLUSH_TARGET_CURRENT_CTX = 0,
	IBCOLL_CU_FLUSH_TO_OWNER = 100,
};

// ibcoll_cu_gdr_info reads how the device orders GPUDirect RDMA writes for the
// GPU's own consumers and whether the host can flush them. A driver without the
// attribute (before CUDA 11.3: CUDA_ERROR_INVALID_VALUE) reports ordering -1 and
// no flush.
static CUresult ibcoll_cu_gdr_info(int *ordering, int *options) {
	*ordering = -1;
	*options = 0;
	if (ibcoll_cu.cuDeviceGetAttribute == NULL)
		return CUDA_SUCCESS;
	CUresult rc = ibcoll_cu.cuDeviceGetAttribute(ordering, IBCOLL_CU_ATTR_GDR_WRITES_ORDERING, ibcoll_cu_dev);
	if (rc != CUDA_SUCCESS) {
		*ordering = -1;
		return rc == CUDA_ERROR_INVALID_VALUE ? CUDA_SUCCESS : rc;
	}
	rc = ibcoll_cu.cuDeviceGetAttribute(options, IBCOLL_CU_ATTR_GDR_FLUSH_WRITES_OPTIONS, ibcoll_cu_dev);
	if (rc != CUDA_SUCCESS)
		*options = 0;
	if (ibcoll_cu.cuFlushGPUDirectRDMAWrites == NULL)
		*options &= ~1;
	return rc;
}

// ibcoll_cu_gdr_flush makes the GPUDirect RDMA writes that the NIC completed
// visible to work on the GPU that owns the memory (cuFlushGPUDirectRDMAWrites).
static CUresult ibcoll_cu_gdr_flush(void) {
	if (ibcoll_cu.cuFlushGPUDirectRDMAWrites == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult rc = ibcoll_cu.cuCtxSetCurrent(ibcoll_cu_ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	return ibcoll_cu.cuFlushGPUDirectRDMAWrites(IBCOLL_CU_FLUSH_TARGET_CURRENT_CTX, IBCOLL_CU_FLUSH_TO_OWNER);
}

static CUresult ibcoll_cu_mem_alloc(uintptr_t *p, size_t n, int managed) {
	CUdeviceptr d = 0;
	CUresult rc = ibcoll_cu.cuCtxSetCurrent(ibcoll_cu_ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = managed ? ibcoll_cu.cuMemAllocManaged(&d, n, CU_MEM_ATTACH_GLOBAL) : ibcoll_cu.cuMemAlloc(&d, n);
	*p = (uintptr_t)d;
	return rc;
}

static CUresult ibcoll_cu_mem_free(uintptr_t p) {
	CUresult rc = ibcoll_cu.cuCtxSetCurrent(ibcoll_cu_ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	return ibcoll_cu.cuMemFree((CUdeviceptr)p);
}

// ibcoll_cu_host_register page-locks host memory that is already mapped, so that
// the copy engine moves it by DMA instead of through the driver's own bounce
// buffers; PORTABLE makes it pinned for every context, not only ours.
static CUresult ibcoll_cu_host_register(uintptr_t p, size_t n, int on) {
	CUresult rc = ibcoll_cu.cuCtxSetCurrent(ibcoll_cu_ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (on)
		return ibcoll_cu.cuMemHostRegister((void *)p, n, CU_MEMHOSTREGISTER_PORTABLE);
	return ibcoll_cu.cuMemHostUnregister((void *)p);
}

// ibcoll_cu_dmabuf_fd exports the device allocation holding p as a dma-buf
// file descriptor, for ibv_reg_dmabuf_mr: the kernel path to GPUDirect RDMA
// that needs no peer-memory module. The driver exports whole pages only, so
// the range runs from the allocation's base, rounded down to a page, to its
// end, rounded up; *base is the device address the descriptor starts at.
static CUresult ibcoll_cu_dmabuf_fd(uintptr_t p, size_t page, int *fd, uintptr_t *base, size_t *size) {
	CUdeviceptr b = 0;
	size_t n = 0, end;
	CUresult rc;
	if (ibcoll_cu.cuMemGetHandleForAddressRange == NULL || ibcoll_cu.cuMemGetAddressRange == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	rc = ibcoll_cu.cuCtxSetCurrent(ibcoll_cu_ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = ibcoll_cu.cuMemGetAddressRange(&b, &n, (CUdeviceptr)p);
	if (rc != CUDA_SUCCESS)
		return rc;
	end = (size_t)b + n;
	b &= ~(CUdeviceptr)(page - 1);
	end = (end + page - 1) & ~(page - 1);
	*base = (uintptr_t)b;
	*size = end - (size_t)b;
	return ibcoll_cu.cuMemGetHandleForAddressRange(fd, b, *size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
}

// ibcoll_cu_stream is a stream of copies and how its waiter learns that they are
// done. The waiter first spins on flag, a word of pinned host memory that the stream
// itself writes (cuStreamWriteValue32) after the copies queued before it: reading it
// takes no driver call, so waiters do not contend for the driver's lock with the
// copies that other ranks of the process are issuing (polling cuEventQuery did, and
// with 8 ranks on one GPU it made each rank's small copies several times slower).
// Past the spin it sleeps on the event. Without stream memory operations (an old
// driver, or a device that refuses them) flag is NULL and the spin polls the event.
typedef struct {
	CUstream s;
	CUevent e;
	volatile uint32_t *flag;
	uint32_t seq;
} ibcoll_cu_stream;

// ibcoll_cu_wait_mode: 1 (the default) spins on the flag where there is one, 0
// always polls the event (the measurements' baseline).
static int ibcoll_cu_wait_mode = 1;

static void ibcoll_cu_set_wait_mode(int m) { ibcoll_cu_wait_mode = m; }

// ibcoll_cu_nap_ns: 0 (the default) sleeps on the event once a wait outlives its spin;
// more makes the wait poll the flag between naps of that many nanoseconds instead, for
// up to ibcoll_cu_nap_max_ns, before it sleeps on the event (a failed copy never writes
// the flag). Only the diagnosis build sets it, to see whether the event's wake-ups are
// what delays copies that eight ranks make at once.
static int64_t ibcoll_cu_nap_ns = 0;
static const int64_t ibcoll_cu_nap_max_ns = 10 * 1000 * 1000;

static void ibcoll_cu_set_nap(int64_t ns) { ibcoll_cu_nap_ns = ns; }

static inline int64_t ibcoll_cu_now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void ibcoll_cu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

// ibcoll_cu_stream_init makes a stream, blocking (CU_STREAM_DEFAULT: ordered after
// work that the program queued on the legacy default stream, as cuMemcpy was) or
// not, an event that puts its waiter to sleep instead of spinning (ranks share few
// cores, and a spinning waiter starves them), and the flag where it can. The
// context must be current.
static CUresult ibcoll_cu_stream_init(ibcoll_cu_stream *c, int blocking) {
	CUresult rc;
	void *f = NULL;
	c->s = NULL;
	c->e = NULL;
	c->flag = NULL;
	c->seq = 0;
	if ((rc = ibcoll_cu.cuStreamCreate(&c->s, blocking ? 0 : CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
		return rc;
	if ((rc = ibcoll_cu.cuEventCreate(&c->e, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
		ibcoll_cu.cuStreamDestroy(c->s);
		return rc;
	}
	if (ibcoll_cu.cuStreamWriteValue32 != NULL && ibcoll_cu.cuMemAllocHost != NULL && ibcoll_cu.cuMemFreeHost != NULL &&
	    ibcoll_cu.cuMemAllocHost(&f, 64) == CUDA_SUCCESS) {
		c->flag = (volatile uint32_t *)f;
		*c->flag = 0;
	}
	return CUDA_SUCCESS;
}

static CUresult ibcoll_cu_stream_fini(ibcoll_cu_stream *c) {
	CUresult rce = ibcoll_cu.cuEventDestroy(c->e);
	CUresult rc = ibcoll_cu.cuStreamDestroy(c->s);
	if (c->flag != NULL)
		ibcoll_cu.cuMemFreeHost((void *)c->flag);
	return rc != CUDA_SUCCESS ? rc : rce;
}

// ibcoll_cu_flag_spin spins until flag reaches want (the flag counts up, so a value at or
// past want means so) or the clock passes deadline; it reports whether flag got there.
static int ibcoll_cu_flag_spin(volatile uint32_t *flag, uint32_t want, int64_t deadline) {
	for (int i = 0;; i++) {
		if ((int32_t)(*flag - want) >= 0)
			return 1;
		ibcoll_cu_relax();
		if ((i & 63) == 63 && ibcoll_cu_now() >= deadline)
			return 0;
	}
}

// ibcoll_cu_stream_sync blocks until all work queued on c so far is done. It spins
// for up to spin_ns first (small copies finish within microseconds, and waking from
// the event's blocking wait costs more than that), then sleeps, so that a long copy
// does not burn a core that other ranks need. The context must be current.
static CUresult ibcoll_cu_stream_sync(ibcoll_cu_stream *c, int64_t spin_ns) {
	CUresult rc;
	int64_t deadline = ibcoll_cu_now() + spin_ns;
	if (c->flag != NULL && ibcoll_cu_wait_mode == 1) {
		// Waiters of one stream may race: the flag counts up, and a value at or past
		// the one this wait asked for means its copies are done.
		uint32_t want = __atomic_add_fetch(&c->seq, 1, __ATOMIC_RELAXED);
		if (ibcoll_cu.cuStreamWriteValue32(c->s, (CUdeviceptr)(uintptr_t)c->flag, want, 0) == CUDA_SUCCESS) {
			if (ibcoll_cu_flag_spin(c->flag, want, deadline))
				return CUDA_SUCCESS;
			if (ibcoll_cu_nap_ns > 0) {
				struct timespec nap = {ibcoll_cu_nap_ns / 1000000000, ibcoll_cu_nap_ns % 1000000000};
				for (int64_t until = ibcoll_cu_now() + ibcoll_cu_nap_max_ns; ibcoll_cu_now() < until;) {
					if ((int32_t)(*c->flag - want) >= 0)
						return CUDA_SUCCESS;
					nanosleep(&nap, NULL);
				}
			}
		} else {
			// The device refuses stream memory operations: poll the event from now on.
			ibcoll_cu.cuMemFreeHost((void *)c->flag);
			c->flag = NULL;
		}
	}
	// The event path reports the error of a failed copy, which leaves the flag
	// unwritten.
	if ((rc = ibcoll_cu.cuEventRecord(c->e, c->s)) != CUDA_SUCCESS)
		return rc;
	while (ibcoll_cu_now() < deadline) {
		rc = ibcoll_cu.cuEventQuery(c->e);
		if (rc != CUDA_ERROR_NOT_READY)
			return rc;
	}
	return ibcoll_cu.cuEventSynchronize(c->e);
}

static CUresult ibcoll_cu_stream_create(uintptr_t *h) {
	ibcoll_cu_stream *c;
	CUresult rc = ibcoll_cu.cuCtxSetCurrent(ibcoll_cu_ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((c = malloc(sizeof *c)) == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if ((rc = ibcoll_cu_stream_init(c, 0)) != CUDA_SUCCESS) {
		free(c);
		return rc;
	}
	*h = (uintptr_t)c;
	return CUDA_SUCCESS;
}

static CUresult ibcoll_cu_stream_destroy(uintptr_t h) {
	ibcoll_cu_stream *c = (ibcoll_cu_stream *)h;
	CUresult rc = ibcoll_cu.cuCtxSetCurrent(ibcoll_cu_ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = ibcoll_cu_stream_fini(c);
	free(c);
	return rc;
}

static CUresult ibcoll_cu_stream_wait(uintptr_t h, int64_t spin_ns) {
	CUresult rc = ibcoll_cu.cuCtxSetCurrent(ibcoll_cu_ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	return ibcoll_cu_stream_sync((ibcoll_cu_stream *)h, spin_ns);
}



// ibcoll_cu_memcpy is a synchronous copy. cuMemcpy runs on the legacy default stream,
// one queue for the whole process: ranks of one process that share a GPU wait for
// each other's small copies there, each costing a driver call and a wake-up. A copy of
// up to small_max bytes runs on a blocking stream of the OS thread's own instead (made
// at its first copy, never destroyed: the Go runtime keeps its threads, and a stream
// per thread that ever copied is the bound), waited for through its flag; a blocking
// stream is still ordered after work the program queued on the legacy stream, as
// cuMemcpy was. Larger copies are bound by the copy engine, not by calls, and keep
// cuMemcpy: run one after another, the first ranks' data can go on the wire while
// later ones copy, which concurrent copies that all end together would spoil (8 ranks
// of 4 MiB gathers were 10-20% slower that way on an H200). Where the stream cannot be
// made, cuMemcpy serves. spin_ns as for ibcoll_cu_stream_sync.
static __thread ibcoll_cu_stream ibcoll_cu_tls;
static __thread int ibcoll_cu_tls_state; // 0 not made, 1 made, -1 failed

// ibcoll_cu_memcpy_done is a copy in the legacy stream's order, as cuMemcpy's, that
// returns only once the copy is done. From pageable host memory to the device,
// cuMemcpy returns as soon as the bytes are in the driver's staging buffer, before
// their DMA to the device ends, and work that a non-blocking stream runs next is not
// ordered after it: a later copy out of the destination on such a stream read the
// old bytes of its tail (the H200 device machine, driver 580: TestCUDACopyAsyncMatrix's
// 1 MiB device-to-device copy, 6 runs in 6). Waiting for an event of the legacy stream
// after cuMemcpy was not enough there either (4 runs in 20): that DMA is not the
// legacy stream's work. So the copy is queued on the legacy stream (cuMemcpyAsync on
// stream 0, whose DMA is that stream's work by definition), and this waits for the
// legacy stream up to it: on an event of the OS thread's stream where there is one
// (other ranks' later copies need not end too), else for the whole legacy stream.
static CUresult ibcoll_cu_memcpy_done(uintptr_t dst, uintptr_t src, size_t n) {
	CUresult rc = ibcoll_cu.cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, (CUstream)0);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (ibcoll_cu_tls_state == 1) {
		if ((rc = ibcoll_cu.cuEventRecord(ibcoll_cu_tls.e, (CUstream)0)) != CUDA_SUCCESS)
			return rc;
		return ibcoll_cu.cuEventSynchronize(ibcoll_cu_tls.e);
	}
	return ibcoll_cu.cuStreamSynchronize((CUstream)0);
}

// ibcoll_cu_pageable reports whether p is host memory the driver does not know:
// neither allocated by it nor registered with it.
static int ibcoll_cu_pageable(uintptr_t p) {
	unsigned int t = 0;
	return ibcoll_cu.cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p) == CUDA_ERROR_INVALID_VALUE;
}

// A copy from pageable host memory to memory the driver knows goes through two pinned
// bounce buffers of the OS thread's own (made at its first such copy, never freed, as
// the thread's stream): the CPU fills one while the copy engine drains the other, and
// each drain is a stream-ordered copy from pinned memory, whose end an event reports
// for certain. From pageable memory itself, cuMemcpy and cuMemcpyAsync return once the
// bytes are in the driver's own staging buffer, and the DMA from there was seen to end
// after the call and after waits on the legacy stream and its events: a copy on a
// non-blocking stream that came next read the old bytes of the destination's tail
// (TestCUDACopyAsyncMatrix on the H200 machine, driver 580: 6 runs in 6 with cuMemcpy,
// 4 in 20 with an event after it, 1 in 20 with cuMemcpyAsync on the legacy stream).
// ibcoll_cu_bounced counts the copies that took this path, for tests. Each OS thread
// that ever made such a copy keeps 2 MiB of pinned memory and two events until the
// process ends (a thread that exits leaks them; the Go runtime rarely ends threads).
enum { IBCOLL_CU_BOUNCE = 1 << 20 };
static __thread struct {
	void *buf[2];
	CUevent ev[2];
	int state; // 0 not made, 1 made, -1 failed
} ibcoll_cu_bounce;
static uint64_t ibcoll_cu_bounced;

static int ibcoll_cu_bounce_ready(void) {
	if (ibcoll_cu_bounce.state != 0)
		return ibcoll_cu_bounce.state == 1;
	ibcoll_cu_bounce.state = -1;
	if (ibcoll_cu.cuMemAllocHost == NULL || ibcoll_cu.cuMemFreeHost == NULL)
		return 0;
	for (int i = 0; i < 2; i++) {
		if (ibcoll_cu.cuMemAllocHost(&ibcoll_cu_bounce.buf[i], IBCOLL_CU_BOUNCE) != CUDA_SUCCESS) {
			ibcoll_cu_bounce.buf[i] = NULL;
			goto fail;
		}
		if (ibcoll_cu.cuEventCreate(&ibcoll_cu_bounce.ev[i], CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
			ibcoll_cu_bounce.ev[i] = NULL;
			goto fail;
		}
	}
	ibcoll_cu_bounce.state = 1;
	return 1;
fail:
	for (int i = 0; i < 2; i++) {
		if (ibcoll_cu_bounce.ev[i] != NULL)
			ibcoll_cu.cuEventDestroy(ibcoll_cu_bounce.ev[i]);
		if (ibcoll_cu_bounce.buf[i] != NULL)
			ibcoll_cu.cuMemFreeHost(ibcoll_cu_bounce.buf[i]);
		ibcoll_cu_bounce.ev[i] = NULL;
		ibcoll_cu_bounce.buf[i] = NULL;
	}
	return 0;
}

// ibcoll_cu_memcpy_bounced copies n bytes from pageable src to dst through the bounce
// buffers on stream s, and returns once the last chunk, and so every chunk and all
// earlier work of s, is done (spinning up to spin_ns, then sleeping): the buffers are
// free again when it returns. After a failed call with chunks queued, it waits for
// the stream, so that no chunk of it still reads a buffer that the next call fills.
static CUresult ibcoll_cu_memcpy_bounced(uintptr_t dst, uintptr_t src, size_t n, CUstream s, int64_t spin_ns) {
	int used[2] = {0, 0}, h = 0;
	CUresult rc = CUDA_SUCCESS;
	__atomic_add_fetch(&ibcoll_cu_bounced, 1, __ATOMIC_RELAXED);
	for (size_t off = 0; off < n; off += IBCOLL_CU_BOUNCE, h ^= 1) {
		size_t m = n - off < IBCOLL_CU_BOUNCE ? n - off : IBCOLL_CU_BOUNCE;
		if (used[h] && (rc = ibcoll_cu.cuEventSynchronize(ibcoll_cu_bounce.ev[h])) != CUDA_SUCCESS)
			goto fail;
		memcpy(ibcoll_cu_bounce.buf[h], (const char *)src + off, m);
		if ((rc = ibcoll_cu.cuMemcpyAsync((CUdeviceptr)(dst + off), (CUdeviceptr)(uintptr_t)ibcoll_cu_bounce.buf[h], m, s)) != CUDA_SUCCESS)
			goto fail;
		if ((rc = ibcoll_cu.cuEventRecord(ibcoll_cu_bounce.ev[h], s)) != CUDA_SUCCESS)
			goto fail;
		used[h] = 1;
	}
	CUevent last = ibcoll_cu_bounce.ev[h ^ 1];
	int64_t deadline = ibcoll_cu_now() + spin_ns;
	while (ibcoll_cu_now() < deadline) {
		rc = ibcoll_cu.cuEventQuery(last);
		if (rc != CUDA_ERROR_NOT_READY)
			return rc;
		ibcoll_cu_relax();
	}
	return ibcoll_cu.cuEventSynchronize(last);
fail:
	if (used[0] || used[1])
		ibcoll_cu.cuStreamSynchronize(s);
	return rc;
}

// ibcoll_cu_memcpy_async queues a copy on stream h. One from pageable host memory goes
// through the bounce buffers on that stream, after its earlier work, and so returns
// only once it is done (the driver's own staging of pageable memory is not reliably
// the stream's work: see above). host_to_dev as for ibcoll_cu_memcpy.
static CUresult ibcoll_cu_memcpy_async(uintptr_t dst, uintptr_t src, size_t n, uintptr_t h, int64_t spin_ns, int host_to_dev) {
	CUresult rc = ibcoll_cu.cuCtxSetCurrent(ibcoll_cu_ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	CUstream s = ((ibcoll_cu_stream *)h)->s;
	if (host_to_dev && n > 0 && ibcoll_cu_pageable(src) && ibcoll_cu_bounce_ready())
		return ibcoll_cu_memcpy_bounced(dst, src, n, s, spin_ns);
	return ibcoll_cu.cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, s);
}

// ibcoll_cu_memcpy2d_async queues the copy of rows rows of width bytes, row r from
// src + r*pitch to dst + r*pitch, on stream h as one cuMemcpy2DAsync: the copy engine
// runs it as one copy of all the rows' bytes, and it is one driver call instead of rows
// (docs/design.md, "Session 31"). Where either side is pageable host memory, the pitch
// is beyond what the driver takes, or the driver lacks the entry point, each row is
// queued as ibcoll_cu_memcpy_async queues a copy.
static CUresult ibcoll_cu_memcpy2d_async(uintptr_t dst, uintptr_t src, size_t width, size_t pitch, size_t rows, uintptr_t h, int64_t spin_ns, int host_to_dev) {
	CUresult rc = ibcoll_cu.cuCtxSetCurrent(ibcoll_cu_ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (ibcoll_cu.cuMemcpy2DAsync == NULL || pitch > 0x7fffffff || ibcoll_cu_pageable(src) || ibcoll_cu_pageable(dst)) {
		for (size_t r = 0; r < rows; r++)
			if ((rc = ibcoll_cu_memcpy_async(dst + r * pitch, src + r * pitch, width, h, spin_ns, host_to_dev)) != CUDA_SUCCESS)
				return rc;
		return CUDA_SUCCESS;
	}
	ibcoll_cu_memcpy2d_desc m;
	memset(&m, 0, sizeof m);
	m.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
	m.srcDevice = (CUdeviceptr)src;
	m.srcPitch = pitch;
	m.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
	m.dstDevice = (CUdeviceptr)dst;
	m.dstPitch = pitch;
	m.WidthInBytes = width;
	m.Height = rows;
	return ibcoll_cu.cuMemcpy2DAsync(&m, ((ibcoll_cu_stream *)h)->s);
}

static uint64_t ibcoll_cu_bounced_count(void) { return __atomic_load_n(&ibcoll_cu_bounced, __ATOMIC_RELAXED); }

// ibcoll_cu_turn is one queue of the whole process for the synchronous copies from the
// device to host memory of at least ibcoll_cu_turn_min bytes (0: none take it; mem sets
// it when it opens the driver, from copyTurnMin). Ranks of one process that share a GPU
// then copy in turn, the first done after one copy's time, instead of sharing the copy
// engine at once and all ending together. A blocking stream: ordered after the legacy
// stream's work, as cuMemcpy is. The lock keeps each copy and its flag value in the
// same order on the stream, so that the flag only counts up. A waiter spins for its own
// copy's time and that of the bytes queued ahead of it (ibcoll_cu_turn_pending, at 20
// bytes per ns as mem's spinFor estimates), then sleeps on the event.
static ibcoll_cu_stream ibcoll_cu_turn;
static int ibcoll_cu_turn_state; // 0 not made, 1 made, -1 failed
static size_t ibcoll_cu_turn_min;
static int64_t ibcoll_cu_turn_pending;
static uint64_t ibcoll_cu_turned; // copies queued on the turn, for tests
static pthread_mutex_t ibcoll_cu_turn_mu = PTHREAD_MUTEX_INITIALIZER;

static void ibcoll_cu_set_turn(size_t n) { ibcoll_cu_turn_min = n; }

static uint64_t ibcoll_cu_turned_count(void) {
	pthread_mutex_lock(&ibcoll_cu_turn_mu);
	uint64_t n = ibcoll_cu_turned;
	pthread_mutex_unlock(&ibcoll_cu_turn_mu);
	return n;
}

static CUresult ibcoll_cu_memcpy_turn(uintptr_t dst, uintptr_t src, size_t n, int64_t spin_ns) {
	CUresult rc;
	uint32_t want = 0;
	int64_t ahead;
	int flagged = 0; // the flag write was queued after the copy
	pthread_mutex_lock(&ibcoll_cu_turn_mu);
	if (ibcoll_cu_turn_state == 0) {
		ibcoll_cu_turn_state = -1;
		if (ibcoll_cu_stream_init(&ibcoll_cu_turn, 1) == CUDA_SUCCESS) {
			if (ibcoll_cu_turn.flag != NULL)
				ibcoll_cu_turn_state = 1;
			else
				ibcoll_cu_stream_fini(&ibcoll_cu_turn);
		}
	}
	if (ibcoll_cu_turn_state != 1) {
		pthread_mutex_unlock(&ibcoll_cu_turn_mu);
		return ibcoll_cu_memcpy_done(dst, src, n);
	}
	ahead = ibcoll_cu_turn_pending;
	rc = ibcoll_cu.cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, ibcoll_cu_turn.s);
	if (rc == CUDA_SUCCESS) {
		want = ++ibcoll_cu_turn.seq;
		flagged = ibcoll_cu.cuStreamWriteValue32(ibcoll_cu_turn.s, (CUdeviceptr)(uintptr_t)ibcoll_cu_turn.flag, want, 0) == CUDA_SUCCESS;
		ibcoll_cu_turn_pending += (int64_t)n;
		ibcoll_cu_turned++;
	}
	pthread_mutex_unlock(&ibcoll_cu_turn_mu);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!flagged || !ibcoll_cu_flag_spin(ibcoll_cu_turn.flag, want, ibcoll_cu_now() + spin_ns + ahead / 20)) {
		// The event, recorded now, follows this copy (and perhaps later ones), and
		// reports the error of a failed copy, which leaves the flag unwritten.
		pthread_mutex_lock(&ibcoll_cu_turn_mu);
		rc = ibcoll_cu.cuEventRecord(ibcoll_cu_turn.e, ibcoll_cu_turn.s);
		pthread_mutex_unlock(&ibcoll_cu_turn_mu);
		if (rc == CUDA_SUCCESS)
			rc = ibcoll_cu.cuEventSynchronize(ibcoll_cu_turn.e);
	}
	pthread_mutex_lock(&ibcoll_cu_turn_mu);
	ibcoll_cu_turn_pending -= (int64_t)n;
	pthread_mutex_unlock(&ibcoll_cu_turn_mu);
	return rc;
}

// host_to_dev says src is host memory and dst CUDA memory (the caller knows the
// types): only then is src asked whether it is pageable. dev_to_host says src is CUDA
// memory and dst host memory: only such a copy takes the copy turn.
static CUresult ibcoll_cu_memcpy(uintptr_t dst, uintptr_t src, size_t n, size_t small_max, int64_t spin_ns, int host_to_dev, int dev_to_host) {
	CUresult rc = ibcoll_cu.cuCtxSetCurrent(ibcoll_cu_ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	// On the thread's blocking stream where it has one (ordered after the legacy
	// stream's work, as cuMemcpy is), else on the legacy stream.
	if (host_to_dev && n > 0 && ibcoll_cu_pageable(src) && ibcoll_cu_bounce_ready())
		return ibcoll_cu_memcpy_bounced(dst, src, n, ibcoll_cu_tls_state == 1 ? ibcoll_cu_tls.s : (CUstream)0, spin_ns);
	if (ibcoll_cu_turn_min > 0 && dev_to_host && n >= ibcoll_cu_turn_min && ibcoll_cu_wait_mode == 1)
		return ibcoll_cu_memcpy_turn(dst, src, n, spin_ns);
	if (n > small_max)
		return ibcoll_cu_memcpy_done(dst, src, n);
	if (ibcoll_cu_tls_state == 0 && ibcoll_cu_wait_mode == 1)
		ibcoll_cu_tls_state = ibcoll_cu_stream_init(&ibcoll_cu_tls, 1) == CUDA_SUCCESS ? 1 : -1;
	if (ibcoll_cu_tls_state != 1 || ibcoll_cu_wait_mode != 1)
		return ibcoll_cu_memcpy_done(dst, src, n);
	if ((rc = ibcoll_cu.cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, ibcoll_cu_tls.s)) != CUDA_SUCCESS)
		return rc;
	return ibcoll_cu_stream_sync(&ibcoll_cu_tls, spin_ns);
}

// ibcoll_cu_pointer_type reports CUmemorytype and whether p is managed.
// CUDA_ERROR_INVALID_VALUE means p is not memory that CUDA knows.
static CUresult ibcoll_cu_pointer_type(uintptr_t p, unsigned int *memtype, unsigned int *managed) {
	CUresult rc = ibcoll_cu.cuCtxSetCurrent(ibcoll_cu_ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	*memtype = 0;
	*managed = 0;
	if ((rc = ibcoll_cu.cuPointerGetAttribute(memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p)) != CUDA_SUCCESS)
		return rc;
	return ibcoll_cu.cuPointerGetAttribute(managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, (CUdeviceptr)p);
}

#endif
