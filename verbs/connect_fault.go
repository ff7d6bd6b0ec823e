package verbs

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// failConnect makes the next Connect on any provider fail at its last step (ibv: the
// move to RTS, after the move to RTR succeeded), once. Only tests set it
// (export_test.go): nothing else makes a real device refuse that step on demand, and a
// Connect that failed there must leave the QP ready for a retry.
var failConnect atomic.Bool

func connectFault(op string) error {
	if failConnect.CompareAndSwap(true, false) {
		return &Error{Op: op, Kind: ErrInjected, Errno: unix.EINVAL, Detail: "injected failure of the last step (test hook)"}
	}
	return nil
}
