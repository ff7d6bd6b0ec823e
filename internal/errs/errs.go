// Package errs holds the sentinel errors that every package of the module wraps. Each
// public package re-exports the ones it returns (verbs.ErrBusy, mem.ErrInvalid,
// coll.ErrInvalid, ...), and they are the same values, so a caller tests any error of
// any layer with errors.Is against whichever name it has at hand: an error a lower
// layer made stays recognisable after a higher one wrapped it.
package errs

import "errors"

var (
	// ErrInvalid: an argument is out of its domain; the message names it.
	ErrInvalid = errors.New("invalid argument")
	// ErrBusy: a resource is still in use (children alive, work in flight).
	ErrBusy = errors.New("busy")
	// ErrClosed: the object was closed.
	ErrClosed = errors.New("closed")
	// ErrNotSupported: the device, memory type or build lacks the feature.
	ErrNotSupported = errors.New("not supported")
	// ErrInjected: a failure made on purpose by a fault injector.
	ErrInjected = errors.New("injected fault")
	// ErrMismatch: ranks of a team initialized one collective with arguments that
	// disagree (type, root, datatype, operator, counts or algorithm). The transport
	// finds some of it on the wire and coll the rest, so both wrap the one value.
	ErrMismatch = errors.New("collective mismatch")
)
