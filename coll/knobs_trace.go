//go:build ibcoll_stagetrace

package coll

import (
	"os"
	"strconv"
	"time"
)

// In the diagnosis build (asym's stage trace), IBCOLL_X_COPYIN_POLL (µs) sets
// copyInPoll, for experiments on a GPU machine.
func init() {
	if v, err := strconv.Atoi(os.Getenv("IBCOLL_X_COPYIN_POLL")); err == nil && v > 0 {
		copyInPoll = time.Duration(v) * time.Microsecond
	}
}
