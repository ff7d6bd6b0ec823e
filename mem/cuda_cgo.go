//go:build cgo

package mem

/*
#cgo CFLAGS: -I${SRCDIR}/../cgo
#cgo LDFLAGS: -ldl
#cgo noescape ibcoll_cu_pointer_type
#cgo nocallback ibcoll_cu_pointer_type
#cgo noescape ibcoll_cu_mem_alloc
#cgo nocallback ibcoll_cu_mem_alloc
#cgo noescape ibcoll_cu_stream_create
#cgo nocallback ibcoll_cu_stream_create
#cgo nocallback ibcoll_cu_memcpy
#cgo nocallback ibcoll_cu_memcpy_async
#cgo nocallback ibcoll_cu_stream_wait
#cgo nocallback ibcoll_cu_host_register
#include "cuda.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"time"
)

var cudaState struct {
	once sync.Once
	err  error
}

// cudaInit loads libcuda.so.1 and retains the primary context of the device
// UseCUDADevice chose (0 by default), once per process. The context is never released:
// buffers may outlive any one user, and the driver frees it at exit.
func cudaInit() error {
	cudaState.once.Do(func() { cudaState.err = cudaOpen() })
	return cudaState.err
}

func cudaOpen() error {
	ordinal := cudaOrdinal()
	if msg := C.ibcoll_cu_load(); msg != nil {
		return fmt.Errorf("cuda: %s: %w", C.GoString(msg), ErrNotSupported)
	}
	var (
		count C.int
		step  *C.char
	)
	rc := C.ibcoll_cu_open(C.int(ordinal), &count, &step)
	if rc == C.CUDA_ERROR_NO_DEVICE && C.GoString(step) == "cuDeviceGetCount" {
		return fmt.Errorf("cuda: device %d requested, %d present: %w", ordinal, int(count), ErrNotSupported)
	}
	if rc != C.CUDA_SUCCESS {
		return fmt.Errorf("cuda: %w: %w", cudaErr(C.GoString(step), rc), ErrNotSupported)
	}
	setCopyTurn(copyTurnMin)
	return nil
}

// CUDAAvailable reports whether libcuda loaded, initialised, and has the
// device to use.
func CUDAAvailable() bool { return cudaInit() == nil }

func cudaErr(fn string, rc C.CUresult) error {
	e := &CUDAError{Func: fn, Code: int(rc)}
	if name := C.ibcoll_cu_error_name(rc); name != nil {
		e.Name = C.GoString(name)
	}
	return e
}

func cudaAlloc(size int, managed bool) (uintptr, error) {
	if err := cudaInit(); err != nil {
		return 0, err
	}
	var p C.uintptr_t
	m, fn := C.int(0), "cuMemAlloc_v2"
	if managed {
		m, fn = 1, "cuMemAllocManaged"
	}
	if rc := C.ibcoll_cu_mem_alloc(&p, C.size_t(size), m); rc != C.CUDA_SUCCESS {
		return 0, cudaErr(fn, rc)
	}
	return uintptr(p), nil
}

func cudaFree(p uintptr) error {
	if rc := C.ibcoll_cu_mem_free(C.uintptr_t(p)); rc != C.CUDA_SUCCESS {
		return cudaErr("cuMemFree_v2", rc)
	}
	return nil
}

// cudaMemcpy relies on unified addressing: the driver tells host from device
// pointers, so one entry point serves every direction, pageable host memory
// and the sim alias included.
// hostToDev says src is host memory and dst CUDA memory: the copy asks the driver
// whether src is pageable, and bounces it if so (cgo/cuda.h). devToHost says src is
// CUDA memory and dst host memory: a copy of at least copyTurnMin bytes then takes the
// copy turn (a copy between two CUDA buffers does not: the engine moves it at device
// speed, and ranks that share the GPU would only wait for each other's launches).
func cudaMemcpy(dst, src uintptr, n int, hostToDev, devToHost bool) error {
	if err := cudaInit(); err != nil {
		return fmt.Errorf("mem: copy: %w", err)
	}
	if rc := C.ibcoll_cu_memcpy(C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n), C.size_t(smallCopyMax()), C.int64_t(spinFor(n)), cBool(hostToDev), cBool(devToHost)); rc != C.CUDA_SUCCESS {
		return fmt.Errorf("mem: copy: %w", cudaErr("cuMemcpy", rc))
	}
	return nil
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// cudaBounced counts the copies from pageable host memory that went through the
// pinned bounce buffers (cgo/cuda.h, ibcoll_cu_memcpy_bounced), for tests.
func cudaBounced() uint64 { return uint64(C.ibcoll_cu_bounced_count()) }

// cudaTurned counts the copies that took the copy turn (setCopyTurn), for tests.
func cudaTurned() uint64 { return uint64(C.ibcoll_cu_turned_count()) }

// cudaHostRegister page-locks (on) or releases (!on) n bytes of mapped host memory at p.
func cudaHostRegister(p uintptr, n int, on bool) error {
	if err := cudaInit(); err != nil {
		return err
	}
	fn, flag := "cuMemHostRegister_v2", C.int(1)
	if !on {
		fn, flag = "cuMemHostUnregister", 0
	}
	if rc := C.ibcoll_cu_host_register(C.uintptr_t(p), C.size_t(n), flag); rc != C.CUDA_SUCCESS {
		return cudaErr(fn, rc)
	}
	return nil
}

// cuStream is a C ibcoll_cu_stream: the stream, its event and its completion flag.
type cuStream struct{ h C.uintptr_t }

func (c cuStream) valid() bool { return c.h != 0 }

func cudaStreamCreate() (cuStream, error) {
	if err := cudaInit(); err != nil {
		return cuStream{}, fmt.Errorf("mem: stream: %w", err)
	}
	var c cuStream
	if rc := C.ibcoll_cu_stream_create(&c.h); rc != C.CUDA_SUCCESS {
		return cuStream{}, fmt.Errorf("mem: stream: %w", cudaErr("cuStreamCreate", rc))
	}
	return c, nil
}

func cudaStreamDestroy(c cuStream) error {
	if rc := C.ibcoll_cu_stream_destroy(c.h); rc != C.CUDA_SUCCESS {
		return fmt.Errorf("mem: stream: %w", cudaErr("cuStreamDestroy_v2", rc))
	}
	return nil
}

func cudaMemcpyAsync(c cuStream, dst, src uintptr, n int, hostToDev bool) error {
	if rc := C.ibcoll_cu_memcpy_async(C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n), c.h, C.int64_t(spinFor(n)), cBool(hostToDev)); rc != C.CUDA_SUCCESS {
		return fmt.Errorf("mem: copy async: %w", cudaErr("cuMemcpyAsync", rc))
	}
	return nil
}

// cudaMemcpy2DAsync queues rows rows of width bytes at pitch apart on both sides as one
// copy on stream c (ibcoll_cu_memcpy2d_async).
func cudaMemcpy2DAsync(c cuStream, dst, src uintptr, width, pitch, rows int, hostToDev bool) error {
	if rc := C.ibcoll_cu_memcpy2d_async(C.uintptr_t(dst), C.uintptr_t(src), C.size_t(width), C.size_t(pitch), C.size_t(rows), c.h, C.int64_t(spinFor(width*rows)), cBool(hostToDev)); rc != C.CUDA_SUCCESS {
		return fmt.Errorf("mem: copy async: %w", cudaErr("cuMemcpy2DAsync", rc))
	}
	return nil
}

// A wait for the GPU spins on the stream's completion flag for about as long as the
// copies it waits for should take, then sleeps: a wake-up from the blocking wait costs
// some 20 µs, more than a small copy, while a long copy must not burn a core that other
// ranks need. streamSpin is the spin for a small copy, copyRate the copy engine's rate
// (bytes per second) that scales it up to spinMax. Pinned memory moves at 44-55 GB/s
// on an H200 and pageable memory at 7-12 GB/s: the spin covers pinned copies.
const (
	streamSpin = 20 * time.Microsecond
	copyRate   = 20e9
	spinMax    = 500 * time.Microsecond
)

// smallCopy is the largest synchronous copy made on a stream of the thread's own
// rather than with cuMemcpy (see ibcoll_cu_memcpy).
const smallCopy = 1 << 20

// smallCopyMax is smallCopy, or what the diagnosis build set instead (smallCopyFixed).
func smallCopyMax() int {
	if smallCopyFixed >= 0 {
		return smallCopyFixed
	}
	return smallCopy
}

// spinFor is how long a wait for n bytes of copies spins before it sleeps.
func spinFor(n int) time.Duration {
	if spinFixed > 0 {
		return spinFixed
	}
	return min(streamSpin+time.Duration(float64(n)/copyRate*float64(time.Second)), spinMax)
}

// cudaStreamWait waits for the copies queued on c, queued bytes of them since the
// last wait.
func cudaStreamWait(c cuStream, queued int) error {
	if rc := C.ibcoll_cu_stream_wait(c.h, C.int64_t(spinFor(queued))); rc != C.CUDA_SUCCESS {
		return fmt.Errorf("mem: stream: %w", cudaErr("cuEventSynchronize", rc))
	}
	return nil
}

// setCopyNap makes a wait for the GPU that outlives its spin poll the stream's flag
// between naps of d instead of sleeping on the event (0: the event, the default). Only
// the diagnosis build calls it (knobs_trace.go).
func setCopyNap(d time.Duration) { C.ibcoll_cu_set_nap(C.int64_t(d.Nanoseconds())) }

// setCopyTurn sends every synchronous copy from the device to host memory of at least n
// bytes to one queue of the process (cgo/cuda.h ibcoll_cu_memcpy_turn), so that ranks sharing a GPU
// copy in turn (0: none). cudaOpen sets copyTurnMin; tests change it.
func setCopyTurn(n int) { C.ibcoll_cu_set_turn(C.size_t(n)) }

// setCUDAWaitFlag chooses how copies wait for the GPU: true (the default) through a
// stream's completion flag and, for synchronous copies, a stream per OS thread; false
// through cuMemcpy and polled events, as before. Only measurements switch it, between
// their rounds.
func setCUDAWaitFlag(on bool) {
	v := C.int(0)
	if on {
		v = 1
	}
	C.ibcoll_cu_set_wait_mode(v)
}

// cudaPointerType asks the driver about p; ok is false when CUDA is absent or
// p is memory it does not know. Pinned host memory is Host, with ok true.
func cudaPointerType(p uintptr) (Type, bool) {
	if p == 0 || cudaInit() != nil {
		return Host, false
	}
	var memtype, managed C.uint
	if rc := C.ibcoll_cu_pointer_type(C.uintptr_t(p), &memtype, &managed); rc != C.CUDA_SUCCESS {
		return Host, false
	}
	switch {
	case managed != 0:
		return CUDAManaged, true
	case memtype == C.CU_MEMORYTYPE_DEVICE || memtype == C.CU_MEMORYTYPE_ARRAY:
		return CUDA, true
	case memtype == C.CU_MEMORYTYPE_HOST:
		return Host, true // pinned: page-locked by the driver
	}
	return Host, false
}

// cudaDMABuf exports the allocation holding p; see DMABuf.
func cudaDMABuf(p uintptr) (fd int, base uintptr, size int, err error) {
	if err := cudaInit(); err != nil {
		return -1, 0, 0, err
	}
	var cfd C.int
	var cbase C.uintptr_t
	var csize C.size_t
	rc := C.ibcoll_cu_dmabuf_fd(C.uintptr_t(p), C.size_t(os.Getpagesize()), &cfd, &cbase, &csize)
	if rc != C.CUDA_SUCCESS {
		return -1, 0, 0, cudaErr("cuMemGetHandleForAddressRange", rc)
	}
	return int(cfd), uintptr(cbase), int(csize), nil
}

func cudaGDRInfo() (GPUDirectOrdering, error) {
	var ordering, options C.int
	if rc := C.ibcoll_cu_gdr_info(&ordering, &options); rc != C.CUDA_SUCCESS {
		return GPUDirectOrdering{Ordering: int(ordering), CanFlush: options&1 != 0}, cudaErr("cuDeviceGetAttribute", rc)
	}
	return GPUDirectOrdering{Ordering: int(ordering), CanFlush: options&1 != 0}, nil
}

func cudaGDRFlush() error {
	if rc := C.ibcoll_cu_gdr_flush(); rc != C.CUDA_SUCCESS {
		return cudaErr("cuFlushGPUDirectRDMAWrites", rc)
	}
	return nil
}
