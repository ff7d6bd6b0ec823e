package verbs

import (
	"errors"
	"fmt"

	"github.com/ibcoll/ibcoll/internal/errs"

	"golang.org/x/sys/unix"
)

// Sentinel errors. Every error of this package wraps one of them (or an
// errno), so callers test with errors.Is. ErrBusy, ErrClosed, ErrNotSupported
// and ErrInvalid are the same values in every package of the module
// (coll.ErrBusy is verbs.ErrBusy).
var (
	ErrBusy         = errs.ErrBusy
	ErrClosed       = errs.ErrClosed
	ErrNotSupported = errs.ErrNotSupported
	ErrNoDevice     = errors.New("no such device")
	ErrInvalid      = errs.ErrInvalid
)

// Error is the error type of this package: the operation, a sentinel, an
// errno when the provider gave one, and a detail for humans.
type Error struct {
	Op     string     // e.g. "RegMR"
	Kind   error      // one of the sentinels, or nil
	Errno  unix.Errno // 0 when the failure did not come from the kernel/provider
	Detail string
	// Posted is, for a refused PostSend or PostRecv, how many requests at the
	// front of the list the provider took before the one it refused: those
	// will complete (or flush), so the caller must account for them as posted.
	Posted int
}

func (e *Error) Error() string {
	if e == nil {
		return "verbs: <nil *Error>"
	}
	msg := "verbs: " + e.Op
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	switch {
	case e.Errno != 0:
		msg += ": " + e.Errno.Error()
	case e.Kind != nil:
		msg += ": " + e.Kind.Error()
	}
	return msg
}

// Unwrap exposes both the sentinel and the errno to errors.Is.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Errno != 0 {
		errs = append(errs, e.Errno)
	}
	return errs
}

// PostedBefore says how many of the requests given to a PostSend or PostRecv
// that returned err were posted before the provider refused one: 0 for any
// other error, and for a post refused as a whole (argument checks, a closed or
// unconnected queue pair).
func PostedBefore(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Posted
	}
	return 0
}

func newError(op string, kind error, detail string) error {
	return &Error{Op: op, Kind: kind, Detail: detail}
}

func invalid(op, format string, args ...any) error {
	return &Error{Op: op, Kind: ErrInvalid, Detail: fmt.Sprintf(format, args...)}
}

// errnoError maps an errno from a provider to an *Error whose Kind is the
// matching sentinel, keeping the errno itself reachable.
func errnoError(op string, errno unix.Errno, detail string) error {
	return &Error{Op: op, Kind: kindOf(errno), Errno: errno, Detail: detail}
}

func kindOf(errno unix.Errno) error {
	switch errno {
	case unix.EBUSY:
		return ErrBusy
	case unix.EOPNOTSUPP, unix.ENOSYS, unix.EPROTONOSUPPORT:
		return ErrNotSupported
	case unix.EINVAL:
		return ErrInvalid
	case unix.ENODEV, unix.ENXIO:
		return ErrNoDevice
	}
	return nil
}

// CompletionError is a failed work completion as an error.
type CompletionError struct {
	Status    WCStatus
	ID        uint64
	QPN       uint32
	Op        WCOpcode
	VendorErr uint32
}

func (e *CompletionError) Error() string {
	s := fmt.Sprintf("verbs: work request %d on QP %#x completed with %s", e.ID, e.QPN, e.Status)
	if e.VendorErr != 0 {
		s += fmt.Sprintf(" (vendor syndrome %#x)", e.VendorErr)
	}
	return s
}
