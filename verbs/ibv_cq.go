//go:build cgo

package verbs

/*
#cgo CFLAGS: -I${SRCDIR}/../cgo
#cgo LDFLAGS: -libverbs
#include <stdlib.h>
#include "verbs_shim.h"
*/
import "C"

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cqPollBatch bounds the C scratch of a CQ: Poll drains a larger request
// in rounds of this many completions.
const cqPollBatch = 64

// cqWaitSlice is how long one blocking poll(2) on the completion channel
// lasts before Wait checks its context again. It bounds how late a
// cancellation is noticed; it does not delay completions, which wake the
// poll at once.
const cqWaitSlice = 10 * time.Millisecond

// ibvCQ is a completion queue with its own completion channel.
//
// Waiting follows the only race-free pattern the verbs allow, split over
// two calls to wait: the first one arms the CQ (ibv_req_notify_cq) and
// returns at once, because a completion that arrived before the CQ was
// armed raises no event and only a poll can find it; the next one, if the
// caller's poll came back empty, blocks on the channel's fd. A caller that
// loops "poll; if empty, wait" therefore never sleeps on a completion that
// is already there.
type ibvCQ struct {
	c  *ibvContext
	cq *C.struct_ibv_cq
	ch *C.struct_ibv_comp_channel
	fd int32

	// pollMu guards the scratch arrays: Poll may run concurrently.
	pollMu  sync.Mutex
	scratch *C.struct_ibv_wc
	flat    []C.struct_ibcoll_wc // C memory, cqPollBatch entries
	batch   int

	// waitMu orders arming against consuming events, so that armed is
	// true exactly while the CQ is armed and its event not yet taken.
	waitMu sync.Mutex
	armed  bool
	// events counts events taken, so that a waiter whose event another
	// waiter took returns instead of sleeping on a disarmed CQ.
	events atomic.Uint64
}

// cAlloc allocates n zeroed elements of T in C memory. The slice points
// at C memory and is released with cFree.
func cAlloc[T any](n int) ([]T, bool) {
	var zero T
	p := C.calloc(C.size_t(max(n, 1)), C.size_t(unsafe.Sizeof(zero)))
	if p == nil {
		return nil, false
	}
	return unsafe.Slice((*T)(p), max(n, 1)), true
}

func cFree[T any](s []T) {
	if cap(s) > 0 {
		C.free(unsafe.Pointer(unsafe.SliceData(s)))
	}
}

// createCQ wraps ibv_create_comp_channel(3) and ibv_create_cq(3).
func (c *ibvContext) createCQ(depth int) (cqBackend, error) {
	ch, err := C.ibv_create_comp_channel(c.ctx)
	if ch == nil {
		return nil, errnoError("CreateCQ", errnoOf(err, unix.ENOMEM), "ibv_create_comp_channel")
	}
	// Non-blocking, so that taking an event another waiter already took
	// answers EAGAIN instead of sleeping in read(2) out of ctx's reach.
	if err := unix.SetNonblock(int(ch.fd), true); err != nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, errnoError("CreateCQ", errnoOf(err, unix.EINVAL), "completion channel O_NONBLOCK")
	}
	cq, err := C.ibv_create_cq(c.ctx, C.int(depth), nil, ch, 0)
	if cq == nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, errnoError("CreateCQ", errnoOf(err, unix.ENOMEM), "ibv_create_cq")
	}
	q := &ibvCQ{c: c, cq: cq, ch: ch, fd: int32(ch.fd), batch: min(depth, cqPollBatch)}
	scratch, ok1 := cAlloc[C.struct_ibv_wc](q.batch)
	flat, ok2 := cAlloc[C.struct_ibcoll_wc](q.batch)
	if !ok1 || !ok2 {
		cFree(scratch)
		cFree(flat)
		C.ibv_destroy_cq(cq)
		C.ibv_destroy_comp_channel(ch)
		return nil, errnoError("CreateCQ", unix.ENOMEM, "completion scratch")
	}
	q.scratch, q.flat = unsafe.SliceData(scratch), flat
	return q, nil
}

// poll wraps ibv_poll_cq(3). It allocates nothing: completions land in C
// scratch and are converted into wcs.
func (q *ibvCQ) poll(wcs []WC) (int, error) {
	q.pollMu.Lock()
	defer q.pollMu.Unlock()
	total := 0
	for total < len(wcs) {
		n := min(q.batch, len(wcs)-total)
		got := int(C.ibcoll_poll_cq(q.cq, C.int(n), q.scratch, unsafe.SliceData(q.flat)))
		if got < 0 {
			return total, errnoError("Poll", unix.Errno(-got), "ibv_poll_cq")
		}
		for i := range got {
			f := &q.flat[i]
			wcs[total+i] = WC{
				ID:        uint64(f.wr_id),
				Status:    WCStatus(f.status),
				Op:        wcOpcode(f.opcode),
				Bytes:     uint32(f.byte_len),
				Imm:       uint32(f.imm),
				HasImm:    f.wc_flags&C.IBV_WC_WITH_IMM != 0,
				QPN:       uint32(f.qp_num),
				VendorErr: uint32(f.vendor_err),
			}
		}
		total += got
		if got < n {
			break
		}
	}
	return total, nil
}

// wcOpcode maps enum ibv_wc_opcode. A failed completion's opcode is
// undefined in the verbs spec; providers that leave garbage there get 0.
func wcOpcode(op C.uint32_t) WCOpcode {
	switch op {
	case C.IBV_WC_SEND:
		return WCSend
	case C.IBV_WC_RDMA_WRITE:
		return WCRDMAWrite
	case C.IBV_WC_RDMA_READ:
		return WCRDMARead
	case C.IBV_WC_COMP_SWAP:
		return WCCompSwap
	case C.IBV_WC_FETCH_ADD:
		return WCFetchAdd
	case C.IBV_WC_RECV:
		return WCRecv
	case C.IBV_WC_RECV_RDMA_WITH_IMM:
		return WCRecvRDMAWithImm
	}
	return 0
}

// wait arms the CQ, or blocks on its completion channel when it is armed
// already; see ibvCQ. It returns nil whenever the caller should poll
// again, including spuriously, and ctx.Err() when ctx ends first.
func (q *ibvCQ) wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.waitMu.Lock()
	if !q.armed {
		rc := C.ibcoll_req_notify_cq(q.cq)
		if rc == 0 {
			q.armed = true
		}
		q.waitMu.Unlock()
		if rc != 0 {
			return errnoError("Wait", unix.Errno(rc), "ibv_req_notify_cq")
		}
		return nil
	}
	seen := q.events.Load()
	q.waitMu.Unlock()

	fds := [1]unix.PollFd{{Fd: q.fd, Events: unix.POLLIN}}
	for {
		slice := cqWaitSlice
		if dl, ok := ctx.Deadline(); ok {
			slice = min(slice, max(time.Until(dl), time.Millisecond))
		}
		n, err := unix.Poll(fds[:], int(slice/time.Millisecond))
		if err != nil && err != unix.EINTR {
			return errnoError("Wait", errnoOf(err, unix.EIO), "poll on the completion channel")
		}
		if n > 0 {
			q.waitMu.Lock()
			rc := C.ibcoll_get_cq_event(q.ch)
			if rc == 0 {
				q.armed = false
				q.events.Add(1)
			}
			q.waitMu.Unlock()
			if rc != 0 && unix.Errno(rc) != unix.EAGAIN {
				return errnoError("Wait", unix.Errno(rc), "ibv_get_cq_event")
			}
			return nil
		}
		if q.events.Load() != seen {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
	}
}

// close wraps ibv_destroy_cq(3) and ibv_destroy_comp_channel(3). Every
// event was acknowledged when it was taken, so ibv_destroy_cq cannot wait
// for acknowledgements forever. Each step is done once, so that a retry
// after a failure resumes where it stopped.
func (q *ibvCQ) close() error {
	if q.cq != nil {
		if rc, err := C.ibv_destroy_cq(q.cq); rc != 0 {
			return errnoError("CQ.Close", rcErrno(rc, err), "ibv_destroy_cq")
		}
		q.cq = nil
	}
	if q.ch != nil {
		if rc, err := C.ibv_destroy_comp_channel(q.ch); rc != 0 {
			return errnoError("CQ.Close", rcErrno(rc, err), "ibv_destroy_comp_channel")
		}
		q.ch = nil
	}
	q.free()
	return nil
}

func (q *ibvCQ) free() {
	if q.scratch != nil {
		cFree(unsafe.Slice(q.scratch, q.batch))
	}
	cFree(q.flat)
	q.scratch, q.flat = nil, nil
}
