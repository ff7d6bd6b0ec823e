//go:build ibcoll_spinhook

package coll

import (
	"fmt"
	"os"
	"strconv"
)

// A measurement hook, compiled only with -tags ibcoll_spinhook (scripts/bench-spin.sh):
// IBCOLL_SPIN_POLLS sets spinPolls, so that one binary can compare spin counts side by
// side without a public setting. It says on stderr what it set, so that a run that
// meant to vary the count and did not is seen.
func init() {
	v := os.Getenv("IBCOLL_SPIN_POLLS")
	if v == "" {
		fmt.Fprintf(os.Stderr, "coll: spinhook: IBCOLL_SPIN_POLLS unset, spinPolls %d (the default)\n", spinPolls)
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		fmt.Fprintf(os.Stderr, "coll: spinhook: IBCOLL_SPIN_POLLS=%q: want a count >= 0\n", v)
		os.Exit(2)
	}
	spinPolls = n
	fmt.Fprintf(os.Stderr, "coll: spinhook: spinPolls %d (IBCOLL_SPIN_POLLS)\n", spinPolls)
}
