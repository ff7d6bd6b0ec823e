package coll

import (
	"errors"
	"fmt"

	"github.com/ibcoll/ibcoll/internal/errs"
)

// Sentinel errors. The errors of this package's own checks and of the collectives wrap
// one of them, so callers test with errors.Is. ErrInvalid, ErrBusy, ErrClosed,
// ErrNotSupported and ErrInjected are the same values in every package of the module
// (verbs, mem, asym, ...): an error a lower layer made matches them after coll wrapped
// it. Some lower-layer errors wrap none of them and keep their own cause: NewContext on
// a device that is not there wraps verbs.ErrNoDevice, Context.AllocDM on a full pool
// dm.ErrExhausted (and ENOMEM).
var (
	// ErrInvalid is wrapped by every argument error; the message names the argument.
	ErrInvalid = errs.ErrInvalid
	// ErrPeerFailed is wrapped by the error a rank returns when another rank of the team
	// failed the same collective. The error is a *PeerError naming the rank and the cause.
	ErrPeerFailed = errors.New("peer failed")
	// ErrTeamBroken is wrapped by every call on a team whose transport can no longer be
	// trusted (a queue pair went to the error state, or a peer did not acknowledge an
	// abort in time). Such a team only closes.
	ErrTeamBroken = errors.New("team broken")
	// ErrBusy is wrapped by Close of a request in flight, of a team or context with
	// live children, or of a context with DM buffers from AllocDM still open; by Post of
	// a request in flight; by InitInto into a request still open; and by Init or
	// InitInto of the collective a multiple of 16384 after one of the team that is still
	// open (the transport tells collectives apart by the low 14 bits of their sequence
	// number).
	ErrBusy = errs.ErrBusy
	// ErrClosed is wrapped by calls on a closed context, team or request.
	ErrClosed = errs.ErrClosed
	// ErrNotSupported is wrapped by requests that no TL implements.
	ErrNotSupported = errs.ErrNotSupported
	// ErrTimeout is wrapped, together with context.DeadlineExceeded, by the error of a
	// collective that did not finish before its deadline.
	ErrTimeout = errors.New("collective timed out")
	// ErrInjected marks failures made by Config.Faults, in whichever layer they were
	// made.
	ErrInjected = errs.ErrInjected
	// ErrMismatch is wrapped by the error of a collective that the ranks initialized
	// with arguments that disagree (Type, Root, DType, Op, the counts every rank knows,
	// the algorithm), on every rank: the rank that found it by its own error, the
	// others by a *PeerError whose Mismatch is set. The message names both sides,
	// e.g. both roots.
	ErrMismatch = errs.ErrMismatch
)

// PeerError is the error of a collective that failed on another rank. Rank is the rank
// where the failure started, Seq the team sequence number of the collective (its place
// in the order of Init calls, counting from 0), Post the post of a persistent request
// (counting from 1; 0 when the news is the team's, not one collective's: a process
// that died, a link that failed), and Cause the failure as it was described. A failed
// link names the peer it led to, the cause the rank that saw it. Broken says the team
// is broken. Mismatch says the failure is a
// disagreement between ranks' arguments (see ErrMismatch).
type PeerError struct {
	Rank     int
	Seq      uint64
	Post     uint32
	Cause    string
	Broken   bool
	Mismatch bool
}

func (e *PeerError) Error() string {
	s := fmt.Sprintf("coll: collective #%d (post %d) failed on rank %d: %s", e.Seq, e.Post, e.Rank, e.Cause)
	if e.Post == 0 {
		// No collective's: the team's news (a death, a failed link).
		s = fmt.Sprintf("coll: the team failed on rank %d: %s", e.Rank, e.Cause)
	}
	if e.Broken {
		s += " (team broken)"
	}
	return s
}

// Unwrap makes errors.Is(err, ErrPeerFailed) true, ErrTeamBroken when Broken and
// ErrMismatch when Mismatch.
func (e *PeerError) Unwrap() []error {
	errs := []error{ErrPeerFailed}
	if e.Broken {
		errs = append(errs, ErrTeamBroken)
	}
	if e.Mismatch {
		errs = append(errs, ErrMismatch)
	}
	return errs
}

// argError is an argument error: it names the argument and wraps ErrInvalid.
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }
func (e *argError) Unwrap() error { return ErrInvalid }

func invalid(op, format string, args ...any) error {
	return &argError{"coll: " + op + ": " + fmt.Sprintf(format, args...)}
}

// opError prefixes err with the operation and the collective, keeping it reachable.
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string { return "coll: " + e.op + ": " + e.err.Error() }
func (e *opError) Unwrap() error { return e.err }

// timeoutError is a collective's own deadline: it matches ErrTimeout and the context
// error that ended it (context.DeadlineExceeded, or context.Canceled on cancellation).
type timeoutError struct {
	msg string
	ctx error
}

func (e *timeoutError) Error() string { return e.msg }
func (e *timeoutError) Unwrap() []error {
	if errors.Is(e.ctx, errCanceled) {
		return []error{e.ctx}
	}
	return []error{ErrTimeout, e.ctx}
}

// brokenError marks err as breaking the team.
type brokenError struct{ err error }

func (e *brokenError) Error() string   { return "coll: team broken: " + e.err.Error() }
func (e *brokenError) Unwrap() []error { return []error{ErrTeamBroken, e.err} }

// wrapArg prefixes an argument error of package collective with the operation, keeping
// its message (which names the argument) and ErrInvalid.
func wrapArg(op string, err error) error {
	if err == nil {
		return nil
	}
	return &argError{"coll: " + op + ": " + err.Error()}
}
