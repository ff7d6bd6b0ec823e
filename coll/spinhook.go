//go:build ibcoll_spinhook

package coll

import "time"

// SetSpin makes every waiter poll polls times before it blocks (spinPolls), and then
// on free cores for free more (spinFree; zero: never), in place of the defaults. It
// exists only in binaries built with -tags ibcoll_spinhook, for the measurement in
// docs/design.md (scripts/bench-spin.sh): no normal build has it, so it is no setting
// users can depend on. Call it before any team exists.
func SetSpin(polls int, free time.Duration) {
	if polls >= 0 {
		spinPolls = polls
	}
	if free >= 0 {
		spinFree, spinFreeOwnCore = free, free
	}
}

// Spin returns the current settings, so that the caller can show what it ran with.
func Spin() (polls int, free time.Duration) { return spinPolls, spinFree }
