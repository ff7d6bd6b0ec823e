//go:build ibcoll_spinhook

package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/ibcoll/ibcoll/coll"
)

// A measurement build (-tags ibcoll_spinhook, scripts/bench-spin.sh): IBCOLL_SPIN_POLLS
// sets coll's spin count before anything runs ("auto", or unset, keeps the default,
// which depends on whether the cores are oversubscribed), and stderr says what the
// run used, so that a run that meant to vary it and did not is seen.
func init() {
	if v := os.Getenv("IBCOLL_SPIN_POLLS"); v != "" && v != "auto" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "ibcoll-perf: IBCOLL_SPIN_POLLS=%q: want a count >= 0\n", v)
			os.Exit(exitUsage)
		}
		coll.SetSpinPolls(n)
	}
	busy, free := coll.SpinPolls()
	if busy == free {
		fmt.Fprintf(os.Stderr, "ibcoll-perf: spinhook build: spinPolls %d\n", busy)
	} else {
		fmt.Fprintf(os.Stderr, "ibcoll-perf: spinhook build: spinPolls auto (%d oversubscribed, %d on free cores)\n", busy, free)
	}
}
