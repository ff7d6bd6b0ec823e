package collective

import (
	"fmt"

	"github.com/ibcoll/ibcoll/internal/errs"
)

// ErrInvalid is wrapped by every error of this package; the message names the argument.
var ErrInvalid = errs.ErrInvalid

// ArgError is an argument error: Msg names the argument (Args.Dst.Count, ...), so that
// a caller can prefix it with its own operation.
type ArgError struct{ Msg string }

func (e *ArgError) Error() string { return e.Msg }
func (e *ArgError) Unwrap() error { return ErrInvalid }

func invalidf(format string, args ...any) error {
	return &ArgError{fmt.Sprintf(format, args...)}
}
