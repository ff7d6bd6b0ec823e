package verbs

import (
	"context"
	"io/fs"
)

// The provider interfaces below are what ibv (cgo) and soft (pure Go)
// implement. The exported types (one file per object, on the shared
// machinery of lifecycle.go) own the lifecycle rules (closed state, child
// counts, ErrBusy ordering, argument checks), so a backend is only ever
// called on a live object whose children are gone: that is what keeps
// misuse from reaching libibverbs as a dangling pointer.

type provider interface {
	name() string
	devices(sysfs fs.FS) ([]DeviceInfo, error)
	open(name string, o Options) (ctxBackend, DeviceInfo, error)
}

type ctxBackend interface {
	query() (DeviceAttr, error)
	allocPD() (pdBackend, error)
	createCQ(depth int) (cqBackend, error)
	allocDM(size int) (dmBackend, error)
	// asyncEvents appends the device's pending asynchronous events to dst, each
	// acknowledged, without blocking (Type, Port, QPN).
	asyncEvents(dst []AsyncEvent) ([]AsyncEvent, error)
	// portNum is the port of the context's QPs.
	portNum() int
	close() error
}

type pdBackend interface {
	regMR(addr uintptr, length int, access Access) (mrBackend, error)
	regDMMR(dm dmBackend, offset, length int, access Access) (mrBackend, error)
	regDMABufMR(fd, offset, length int, iova uint64, access Access) (mrBackend, error)
	createQP(cfg QPConfig, send, recv cqBackend) (qpBackend, error)
	close() error
}

type mrBackend interface {
	// via names the registration path (see MR.Via).
	via() string
	lkey() uint32
	rkey() uint32
	close() error
}

type cqBackend interface {
	poll(wcs []WC) (int, error)
	// wait blocks until a completion may be available or ctx ends. It
	// may return spuriously; callers poll again.
	wait(ctx context.Context) error
	close() error
}

type dmBackend interface {
	copyTo(offset int, src []byte) error
	copyFrom(dst []byte, offset int) error
	close() error
}

type qpBackend interface {
	qpn() uint32
	info() QPInfo
	connect(remote QPInfo) error
	postSend(wrs []SendWR) error
	postRecv(wrs []RecvWR) error
	state() (QPState, error)
	path() (Path, error)
	toError() error
	close() error
}
