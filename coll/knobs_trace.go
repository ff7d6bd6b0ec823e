//go:build ibcoll_stagetrace

package coll

import (
	"time"

	"github.com/ibcoll/ibcoll/internal/xknob"
)

// In the diagnosis build (asym's stage trace), IBCOLL_X_COPYIN_POLL (µs) sets
// copyInPoll and IBCOLL_X_YIELD_EVERY sets yieldEvery, for experiments on a GPU machine.
func init() {
	if v, ok := xknob.Int("IBCOLL_X_COPYIN_POLL", 1); ok {
		copyInPoll = time.Duration(v) * time.Microsecond
	}
	if v, ok := xknob.Int("IBCOLL_X_YIELD_EVERY", 1); ok {
		yieldEvery = v
	}
}
