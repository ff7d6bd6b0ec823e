//go:build cgo

package verbs

/*
#cgo CFLAGS: -I${SRCDIR}/../cgo
#include "verbs_shim.h"
*/
import "C"

import "golang.org/x/sys/unix"

// ibvEventTypes maps libibverbs' event numbers to AsyncEventType.
var ibvEventTypes = map[C.int]AsyncEventType{
	C.IBV_EVENT_CQ_ERR: EventCQErr, C.IBV_EVENT_QP_FATAL: EventQPFatal, C.IBV_EVENT_QP_REQ_ERR: EventQPReqErr,
	C.IBV_EVENT_QP_ACCESS_ERR: EventQPAccessErr, C.IBV_EVENT_COMM_EST: EventCommEst,
	C.IBV_EVENT_SQ_DRAINED: EventSQDrained, C.IBV_EVENT_PATH_MIG: EventPathMig,
	C.IBV_EVENT_PATH_MIG_ERR: EventPathMigErr, C.IBV_EVENT_DEVICE_FATAL: EventDeviceFatal,
	C.IBV_EVENT_PORT_ACTIVE: EventPortActive, C.IBV_EVENT_PORT_ERR: EventPortErr,
	C.IBV_EVENT_LID_CHANGE: EventLIDChange, C.IBV_EVENT_PKEY_CHANGE: EventPKeyChange,
	C.IBV_EVENT_SM_CHANGE: EventSMChange, C.IBV_EVENT_SRQ_ERR: EventSRQErr,
	C.IBV_EVENT_SRQ_LIMIT_REACHED: EventSRQLimitReached, C.IBV_EVENT_QP_LAST_WQE_REACHED: EventQPLastWQEReached,
	C.IBV_EVENT_CLIENT_REREGISTER: EventClientReregister, C.IBV_EVENT_GID_CHANGE: EventGIDChange,
	C.IBV_EVENT_WQ_FATAL: EventWQFatal,
}

// nonBlockingEvents makes the context's async fd non-blocking, so that asyncEvents
// returns when no event is pending.
func (c *ibvContext) nonBlockingEvents() error {
	if err := unix.SetNonblock(int(c.ctx.async_fd), true); err != nil {
		return errnoError("Open", errnoOf(err, unix.EIO), "making the async event fd of "+c.name+" non-blocking")
	}
	return nil
}

func (c *ibvContext) asyncEvents(dst []AsyncEvent) ([]AsyncEvent, error) {
	for {
		var typ, port C.int
		var qpn C.uint32_t
		rc := C.ibcoll_get_async_event(c.ctx, &typ, &port, &qpn)
		if rc == C.int(unix.EAGAIN) {
			return dst, nil
		}
		if rc != 0 {
			return dst, errnoError("Events", unix.Errno(rc), "ibv_get_async_event "+c.name)
		}
		t, ok := ibvEventTypes[typ]
		if !ok {
			t = EventOther
		}
		dst = append(dst, AsyncEvent{Type: t, Port: int(port), QPN: uint32(qpn)})
	}
}

func (c *ibvContext) portNum() int { return c.port }
