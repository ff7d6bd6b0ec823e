//go:build ibcoll_stagetrace

package coll

import (
	"os"
	"strconv"
	"time"
)

// In the diagnosis build (asym's stage trace), IBCOLL_X_COPYIN_POLL (µs) sets
// copyInPoll and IBCOLL_X_YIELD_EVERY sets yieldEvery, for experiments on a GPU machine.
func init() {
	if v, err := strconv.Atoi(os.Getenv("IBCOLL_X_COPYIN_POLL")); err == nil && v > 0 {
		copyInPoll = time.Duration(v) * time.Microsecond
	}
	if v, err := strconv.Atoi(os.Getenv("IBCOLL_X_YIELD_EVERY")); err == nil && v > 0 {
		yieldEvery = v
	}
}
