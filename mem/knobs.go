package mem

import "time"

// Settings that only the diagnosis build changes (knobs_trace.go); every other build
// keeps these values.

// spinFixed, when not zero, replaces the estimate of how long a wait for the GPU spins
// before it sleeps (spinFor, cgo builds), for every wait. Only the diagnosis build sets
// it (knobs_trace.go), to see whether waiters that outlive their spin and sleep on the
// event are what delays concurrent copies.
var spinFixed time.Duration

// copyTurnMin: every synchronous copy from the device to host memory of at least this
// many bytes goes to one queue of the process (cgo/cuda.h ibcoll_cu_memcpy_turn), so that ranks of one
// process that share a GPU copy in turn and the first is done after one copy's time,
// instead of all sharing the copy engine and ending together (docs/design.md, "Where a
// 1 MiB gather cuda,cuda's time goes"). 0 turns it off; the diagnosis build takes it
// from IBCOLL_X_COPY_TURN (knobs_trace.go), to compare.
var copyTurnMin = 256 << 10

// smallCopyFixed, when not negative, replaces smallCopy (cgo builds): 0 sends every
// synchronous copy to the legacy stream, one after another across the process. Only the
// diagnosis build sets it (knobs_trace.go), to see whether eight ranks' copies that
// share the copy engine at once and end together cost more than copies in turn.
var smallCopyFixed = -1
