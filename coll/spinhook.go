//go:build ibcoll_spinhook

package coll

// SetSpinPolls sets how many times a waiter polls before it blocks (spinPolls). It
// exists only in binaries built with -tags ibcoll_spinhook, for the measurement in
// docs/design.md (scripts/bench-spin.sh): no normal build has it, so it is no setting
// users can depend on. Call it before any team exists.
func SetSpinPolls(n int) {
	if n >= 0 {
		spinPolls = n
	}
}

// SpinPolls returns the current count, so that the caller can show what it ran with.
func SpinPolls() int { return spinPolls }
