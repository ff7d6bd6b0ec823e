package mem

import "time"

// Settings that only the diagnosis build changes (knobs_trace.go); every other build
// keeps these values.

// spinFixed, when not zero, replaces the estimate of how long a wait for the GPU spins
// before it sleeps (spinFor, cgo builds), for every wait. Only the diagnosis build sets
// it (knobs_trace.go), to see whether waiters that outlive their spin and sleep on the
// event are what delays concurrent copies.
var spinFixed time.Duration

// smallCopyFixed, when not negative, replaces smallCopy (cgo builds): 0 sends every
// synchronous copy to the legacy stream, one after another across the process. Only the
// diagnosis build sets it (knobs_trace.go), to see whether eight ranks' copies that
// share the copy engine at once and end together cost more than copies in turn.
var smallCopyFixed = -1
