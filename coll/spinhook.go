//go:build ibcoll_spinhook

package coll

// SetSpinPolls makes every waiter poll n times before it blocks (spinPolls and
// spinPollsFree alike), in place of the default that spins longer while the cores
// are not oversubscribed. It exists only in binaries built with -tags
// ibcoll_spinhook, for the measurement in docs/design.md (scripts/bench-spin.sh): no
// normal build has it, so it is no setting users can depend on. Call it before any
// team exists.
func SetSpinPolls(n int) {
	if n >= 0 {
		spinPolls, spinPollsFree = n, n
	}
}

// SpinPolls returns the current counts (oversubscribed, free cores), so that the
// caller can show what it ran with.
func SpinPolls() (busy, free int) { return spinPolls, spinPollsFree }
