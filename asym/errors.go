package asym

import "github.com/ibcoll/ibcoll/internal/errs"

var (
	// ErrInvalid is wrapped by every argument error of this package (it is
	// mem.ErrInvalid and coll.ErrInvalid too).
	ErrInvalid = errs.ErrInvalid
	// ErrBusy is wrapped by the error of an operation refused while a post is in flight:
	// Close, and a CopyIn whose previous post has not completed.
	ErrBusy = errs.ErrBusy
	// ErrClosed is wrapped by the error of an operation on a closed Stage.
	ErrClosed = errs.ErrClosed
	// ErrInjected is wrapped by every error that Faults injected, so that tests tell an
	// injected failure from a real one.
	ErrInjected = errs.ErrInjected
)

// argError keeps the message that names the argument exactly as written, and matches
// ErrInvalid (which is mem.ErrInvalid and coll.ErrInvalid too).
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }
func (e *argError) Unwrap() error { return ErrInvalid }
