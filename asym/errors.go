package asym

import (
	"errors"

	"github.com/ibcoll/ibcoll/mem"
)

var (
	// ErrInvalid is wrapped by every argument error of this package. Those errors
	// wrap mem.ErrInvalid too, so callers may test for either.
	ErrInvalid = errors.New("invalid argument")
	// ErrBusy is wrapped by the error of an operation refused while a post is in flight:
	// Close, and a CopyIn whose previous post has not completed.
	ErrBusy = errors.New("post in flight")
	// ErrClosed is wrapped by the error of an operation on a closed Stage.
	ErrClosed = errors.New("stage closed")
	// ErrInjected is wrapped by every error that Faults injected, so that tests tell an
	// injected failure from a real one.
	ErrInjected = errors.New("injected fault")
)

// argError keeps the message that names the argument exactly as written, and still
// matches ErrInvalid and mem.ErrInvalid.
type argError struct{ msg string }

func (e *argError) Error() string   { return e.msg }
func (e *argError) Unwrap() []error { return []error{ErrInvalid, mem.ErrInvalid} }
