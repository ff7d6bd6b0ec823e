//go:build ibcoll_spinhook

package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/ibcoll/ibcoll/coll"
)

// A measurement build (-tags ibcoll_spinhook, scripts/bench-spin.sh): IBCOLL_SPIN_POLLS
// sets coll's spin count before anything runs, with no spinning on free cores after
// it unless IBCOLL_SPIN_FREE (a duration) says how long ("auto", or both unset, keeps
// the defaults), and stderr says what the run used, so that a run that meant to vary
// it and did not is seen.
func init() {
	polls, free := -1, time.Duration(-1)
	if v := os.Getenv("IBCOLL_SPIN_POLLS"); v != "" && v != "auto" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "ibcoll-perf: IBCOLL_SPIN_POLLS=%q: want a count >= 0 or auto\n", v)
			os.Exit(exitUsage)
		}
		polls, free = n, 0
	}
	if v := os.Getenv("IBCOLL_SPIN_FREE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			fmt.Fprintf(os.Stderr, "ibcoll-perf: IBCOLL_SPIN_FREE=%q: want a duration >= 0\n", v)
			os.Exit(exitUsage)
		}
		free = d
	}
	coll.SetSpin(polls, free)
	p, f := coll.Spin()
	if os.Getenv("IBCOLL_SPIN_POLLS") == "auto" || (os.Getenv("IBCOLL_SPIN_POLLS") == "" && os.Getenv("IBCOLL_SPIN_FREE") == "") {
		fmt.Fprintf(os.Stderr, "ibcoll-perf: spinhook build: spinPolls auto (%d, then %v on free cores)\n", p, f)
	} else if f == 0 {
		fmt.Fprintf(os.Stderr, "ibcoll-perf: spinhook build: spinPolls %d\n", p)
	} else {
		fmt.Fprintf(os.Stderr, "ibcoll-perf: spinhook build: spinPolls %d, then %v on free cores\n", p, f)
	}
}
